"""Ledger metadata: the record every client, bookie GC and auto-recovery agree on (sans-IO).

Stored as JSON under the ledger's hierarchical path and only ever changed by compare-and-set,
so a writer, a recovering reader and a replication worker cannot overwrite each other.
"""

from __future__ import annotations

import bisect
import enum
import hashlib
import json
from dataclasses import dataclass, field, replace

from stripemq.clock import now_ms
from stripemq.errors import InvalidEntryError

FORMAT_VERSION = 1
DIGEST_TYPE = "CRC32C"


class LedgerState(enum.Enum):
    """A ledger's state in its metadata, which every client agrees on (a bookie's own record
    of a ledger is ``bookie.storage.engine.LedgerDescriptor``; a writer's handle has its
    ``HandleLifecycle``)."""

    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


def master_key_for(password: bytes) -> bytes:
    """The key bookies bind a ledger to; derived from the password, never the password."""
    return hashlib.sha256(b"stripemq-ledger:" + password).digest()


@dataclass(frozen=True)
class LedgerMetadata:
    """One ledger's metadata. ``ensembles`` maps a fragment's first entry id to its bookies."""

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ensembles: dict[int, tuple[str, ...]]
    password_hash: str  # hex of the master key: lets auto-recovery re-add entries
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: str = DIGEST_TYPE
    ctime_ms: int = field(default_factory=now_ms)
    custom_metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        e, qw, qa = self.ensemble_size, self.write_quorum_size, self.ack_quorum_size
        if not 1 <= qa <= qw <= e:
            raise ValueError(f"need 1 <= ack quorum <= write quorum <= ensemble, got {e}/{qw}/{qa}")
        if not self.ensembles or min(self.ensembles) != 0:
            raise ValueError("ensembles must start with a fragment at entry 0")
        for first, bookies in self.ensembles.items():
            if len(bookies) != e or len(set(bookies)) != e:
                raise ValueError(f"fragment at {first} needs {e} distinct bookies: {bookies}")

    # ----------------------------------------------------------------- queries

    @property
    def master_key(self) -> bytes:
        return bytes.fromhex(self.password_hash)

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    def fragment_starts(self) -> list[int]:
        return sorted(self.ensembles)

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The bookies of the fragment holding ``entry_id``."""
        starts = self.fragment_starts()
        return self.ensembles[starts[bisect.bisect_right(starts, entry_id) - 1]]

    @property
    def current_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[max(self.ensembles)]

    def write_set(self, entry_id: int) -> list[int]:
        """Indexes into the ensemble of the bookies holding ``entry_id``: striping."""
        return write_set(entry_id, self.ensemble_size, self.write_quorum_size)

    def write_set_bookies(self, entry_id: int) -> list[str]:
        ensemble = self.ensemble_at(entry_id)
        return [ensemble[i] for i in self.write_set(entry_id)]

    def fragments(self) -> list[Fragment]:
        """Each fragment with its entry range; the last one ends at ``last_entry_id``.

        For a ledger that is not closed the last fragment's end is unknown (``None``).
        """
        starts = self.fragment_starts()
        result = []
        for i, first in enumerate(starts):
            if i + 1 < len(starts):
                last: int | None = starts[i + 1] - 1
            else:
                last = self.last_entry_id if self.is_closed else None
            result.append(Fragment(first, last, self.ensembles[first]))
        return result

    def bookies(self) -> set[str]:
        return {b for ensemble in self.ensembles.values() for b in ensemble}

    # ----------------------------------------------------------------- changes

    def with_ensemble(
        self, first_entry_id: int, ensemble: list[str] | tuple[str, ...]
    ) -> LedgerMetadata:
        """A new fragment from ``first_entry_id`` on (later fragments, never used, dropped)."""
        if first_entry_id < 0:
            raise ValueError("fragment start must be >= 0")
        ensembles = {k: v for k, v in self.ensembles.items() if k < first_entry_id}
        ensembles[first_entry_id] = tuple(ensemble)
        return replace(self, ensembles=ensembles)

    def with_replaced_bookie(self, first_entry_id: int, old: str, new: str) -> LedgerMetadata:
        """The same fragment with ``old`` swapped for ``new`` (auto-recovery)."""
        bookies = tuple(new if b == old else b for b in self.ensembles[first_entry_id])
        ensembles = dict(self.ensembles)
        ensembles[first_entry_id] = bookies
        return replace(self, ensembles=ensembles)

    def in_recovery(self) -> LedgerMetadata:
        return replace(self, state=LedgerState.IN_RECOVERY)

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        # Fragments that start past the last entry hold nothing; keep metadata minimal.
        ensembles = {k: v for k, v in self.ensembles.items() if k <= max(last_entry_id, 0)}
        return replace(
            self,
            state=LedgerState.CLOSED,
            last_entry_id=last_entry_id,
            length=length,
            ensembles=ensembles,
        )

    # ----------------------------------------------------------------- codec

    def encode(self) -> bytes:
        doc = {
            "format": FORMAT_VERSION,
            "state": self.state.value,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "ensemble_size": self.ensemble_size,
            "write_quorum_size": self.write_quorum_size,
            "ack_quorum_size": self.ack_quorum_size,
            "ensembles": {str(k): list(v) for k, v in sorted(self.ensembles.items())},
            "digest_type": self.digest_type,
            "password_hash": self.password_hash,
            "ctime_ms": self.ctime_ms,
            "custom_metadata": self.custom_metadata,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LedgerMetadata:
        try:
            doc = json.loads(raw)
            if doc.get("format") != FORMAT_VERSION:
                raise ValueError(f"unknown ledger metadata format {doc.get('format')!r}")
            return cls(
                ensemble_size=int(doc["ensemble_size"]),
                write_quorum_size=int(doc["write_quorum_size"]),
                ack_quorum_size=int(doc["ack_quorum_size"]),
                ensembles={int(k): tuple(v) for k, v in doc["ensembles"].items()},
                password_hash=str(doc["password_hash"]),
                state=LedgerState(doc["state"]),
                last_entry_id=int(doc["last_entry_id"]),
                length=int(doc["length"]),
                digest_type=str(doc["digest_type"]),
                ctime_ms=int(doc["ctime_ms"]),
                custom_metadata={str(k): str(v) for k, v in doc["custom_metadata"].items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidEntryError(f"malformed ledger metadata: {exc}") from exc


@dataclass(frozen=True)
class Fragment:
    """A run of entries written to one ensemble; ``last_entry_id`` None while still open."""

    first_entry_id: int
    last_entry_id: int | None
    ensemble: tuple[str, ...]

    def is_empty(self) -> bool:
        return self.last_entry_id is not None and self.last_entry_id < self.first_entry_id


def write_set(entry_id: int, ensemble_size: int, write_quorum_size: int) -> list[int]:
    """Round-robin striping: entry ``e`` goes to ensemble slots ``(e + i) % E``, ``i < Qw``."""
    return [(entry_id + i) % ensemble_size for i in range(write_quorum_size)]


def stored_on(entry_id: int, bookie_index: int, ensemble_size: int, write_quorum_size: int) -> bool:
    """Whether ensemble slot ``bookie_index`` holds ``entry_id``."""
    return (bookie_index - entry_id) % ensemble_size < write_quorum_size
