"""The ledgers of a managed ledger, in order, with how many entries each holds.

Cursors need the chain to move between ledgers (the entry after the last one of a ledger is
the first of the next non-empty ledger) and to count their backlog; the managed ledger keeps
it up to date as it appends, rolls over and trims. Plain data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sortedcontainers import SortedDict

from stripemq.managed_ledger.position import Position


@dataclass
class LedgerInfo:
    """One ledger of the chain: entries and bytes confirmed in it, and when it was created."""

    ledger_id: int
    entries: int = 0
    size: int = 0
    created_ms: int = 0
    closed: bool = False
    closed_ms: int = 0

    def to_json(self) -> dict[str, int | bool]:
        """The ledger's record in the managed ledger's metadata node."""
        return {
            "ledger_id": self.ledger_id,
            "entries": self.entries,
            "size": self.size,
            "created_ms": self.created_ms,
            "closed": self.closed,
            "closed_ms": self.closed_ms,
        }

    @classmethod
    def from_json(cls, raw: dict[str, int | bool]) -> LedgerInfo:
        return cls(
            ledger_id=int(raw["ledger_id"]),
            entries=int(raw.get("entries", 0)),
            size=int(raw.get("size", 0)),
            created_ms=int(raw.get("created_ms", 0)),
            closed=bool(raw.get("closed", False)),
            closed_ms=int(raw.get("closed_ms", 0)),
        )


class LedgerChain:
    """Ordered ``LedgerInfo``\\ s; the last one is the ledger being written."""

    def __init__(self, ledgers: Iterable[LedgerInfo] = ()) -> None:
        self._ledgers: SortedDict = SortedDict()
        for info in ledgers:
            self.add(info)

    # ------------------------------------------------------------------ structure

    def add(self, info: LedgerInfo) -> None:
        if self._ledgers and info.ledger_id <= self._ledgers.keys()[-1]:
            raise ValueError(f"ledger {info.ledger_id} is not after the last of the chain")
        self._ledgers[info.ledger_id] = info

    def put_back(self, infos: Iterable[LedgerInfo]) -> None:
        """Re-insert ledgers removed a moment ago (a trim whose metadata write failed)."""
        for info in infos:
            self._ledgers[info.ledger_id] = info

    def remove(self, ledger_id: int) -> LedgerInfo:
        return self._ledgers.pop(ledger_id)

    def get(self, ledger_id: int) -> LedgerInfo | None:
        return self._ledgers.get(ledger_id)

    def __contains__(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def __iter__(self) -> Iterator[LedgerInfo]:
        return iter(self._ledgers.values())

    def __len__(self) -> int:
        return len(self._ledgers)

    @property
    def first_ledger_id(self) -> int | None:
        return self._ledgers.keys()[0] if self._ledgers else None

    @property
    def last_ledger_id(self) -> int | None:
        return self._ledgers.keys()[-1] if self._ledgers else None

    @property
    def entries(self) -> int:
        return sum(info.entries for info in self._ledgers.values())

    @property
    def size(self) -> int:
        return sum(info.size for info in self._ledgers.values())

    # ------------------------------------------------------------------ positions

    def exists(self, position: Position) -> bool:
        """Whether the entry at ``position`` is written and confirmed."""
        info = self._ledgers.get(position.ledger_id)
        return info is not None and 0 <= position.entry_id < info.entries

    def first_position(self) -> Position:
        """The oldest entry (or, with none, where the next one will go)."""
        if not self._ledgers:
            return Position(-1, -1)
        return self.next_valid(Position(self._ledgers.keys()[0], -1))

    def last_confirmed(self) -> Position:
        """The newest entry, or ``(first ledger, -1)`` when the chain holds none."""
        for ledger_id in reversed(self._ledgers.keys()):
            info = self._ledgers[ledger_id]
            if info.entries:
                return Position(ledger_id, info.entries - 1)
        first = self.first_ledger_id
        return Position(first if first is not None else -1, -1)

    def nth_entry(self, n: int, *, from_end: bool = False) -> Position | None:
        """The ``n``-th entry (1-based) from the oldest, or with ``from_end`` from the
        newest; ``None`` when the chain holds fewer than ``n``."""
        if n < 1:
            raise ValueError(f"entry number {n} is not 1 or more")
        ledgers = reversed(self._ledgers.values()) if from_end else iter(self._ledgers.values())
        for info in ledgers:
            if n <= info.entries:
                return Position(info.ledger_id, info.entries - n if from_end else n - 1)
            n -= info.entries
        return None

    def write_position(self) -> Position:
        """Where the next entry will be: just after the last confirmed one."""
        return self.next_valid(self.last_confirmed())

    def next_valid(self, position: Position) -> Position:
        """The first entry after ``position``, stepping over ledger ends and empty ledgers.

        Past the newest entry this is the write position (in the last ledger).
        """
        info = self._ledgers.get(position.ledger_id)
        if info is not None and position.entry_id + 1 < info.entries:
            return Position(position.ledger_id, position.entry_id + 1)
        keys = self._ledgers.keys()
        for i in range(self._ledgers.bisect_right(position.ledger_id), len(keys)):
            if self._ledgers[keys[i]].entries:
                return Position(keys[i], 0)
        last = self._ledgers.get(self.last_ledger_id) if self._ledgers else None
        if last is None:
            return Position(-1, -1)
        if position.ledger_id > last.ledger_id:
            return Position(position.ledger_id, position.entry_id + 1)
        return Position(last.ledger_id, last.entries)

    def entries_after(self, position: Position) -> int:
        """How many entries lie after ``position``."""
        total = 0
        for ledger_id in self._ledgers.irange(minimum=position.ledger_id):
            info = self._ledgers[ledger_id]
            if ledger_id == position.ledger_id:
                total += max(0, info.entries - (position.entry_id + 1))
            else:
                total += info.entries
        return total

    def entries_between(self, first: Position, last: Position) -> int:
        """How many entries lie in ``[first, last]``."""
        if last < first:
            return 0
        return self.entries_after(Position(first.ledger_id, first.entry_id - 1)) - (
            self.entries_after(last)
        )

    def size_after(self, position: Position) -> int:
        """Bytes of the entries after ``position``: whole ledgers exactly, the ledger holding
        ``position`` pro rata by entries (Pulsar's estimated backlog size)."""
        total = 0
        for ledger_id in self._ledgers.irange(minimum=position.ledger_id):
            info = self._ledgers[ledger_id]
            if ledger_id != position.ledger_id:
                total += info.size
            elif info.entries:
                remaining = max(0, info.entries - (position.entry_id + 1))
                total += info.size * remaining // info.entries
        return total
