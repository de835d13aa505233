"""The ledgers this bookie has garbage-collected, kept on disk so they stay dead.

Ledger ids are never reused, so a ledger dropped by garbage collection (deleted from the
metadata store) can never legitimately receive another entry. Remembering it closes a hole
BookKeeper leaves open: without it, a writer that was fenced out before the ledger was
deleted would find a fresh, unfenced ledger after GC and have its adds acknowledged, then
thrown away by the next GC round.

File ``deleted-ledgers``: magic ``SMDL``, u16 version, u32 range count, then ``(first, last)``
u64 pairs (inclusive, sorted, disjoint), then a CRC32C over everything before it.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from pathlib import Path

import crc32c

from stripemq.bookie.storage.files import write_atomically
from stripemq.errors import BookieError

FILE_NAME = "deleted-ledgers"
_MAGIC = b"SMDL"
_VERSION = 1
_HEAD = struct.Struct(">4sHI")
_RANGE = struct.Struct(">QQ")
_CRC = struct.Struct(">I")


class DeletedLedgers:
    """A set of ledger ids held as sorted, disjoint, inclusive ranges (ids come in runs).

    Never changed in place: ``union`` builds a new one, so a thread may build it while the
    event loop keeps reading the old.
    """

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []
        for first, last in sorted(ranges):
            self._append(first, last)

    def __contains__(self, ledger_id: int) -> bool:
        i = bisect.bisect_right(self._firsts, ledger_id) - 1
        return i >= 0 and ledger_id <= self._lasts[i]

    def __len__(self) -> int:
        return sum(last - first + 1 for first, last in self.ranges())

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._firsts, self._lasts, strict=True))

    def union(self, ledger_ids: Iterable[int]) -> DeletedLedgers:
        """A new set with ``ledger_ids`` added (this one is left as it is for its readers)."""
        return DeletedLedgers(self.ranges() + [(i, i) for i in ledger_ids])

    def _append(self, first: int, last: int) -> None:
        if self._lasts and first <= self._lasts[-1] + 1:
            self._lasts[-1] = max(self._lasts[-1], last)
        else:
            self._firsts.append(first)
            self._lasts.append(last)

    def encode(self) -> bytes:
        body = _HEAD.pack(_MAGIC, _VERSION, len(self._firsts)) + b"".join(
            _RANGE.pack(first, last) for first, last in self.ranges()
        )
        return body + _CRC.pack(crc32c.crc32c(body))

    @classmethod
    def decode(cls, raw: bytes) -> DeletedLedgers:
        """Parse the file; a damaged one is an error (guessing could revive a dead ledger)."""
        if len(raw) < _HEAD.size + _CRC.size:
            raise BookieError(f"{FILE_NAME} is truncated")
        body = raw[: -_CRC.size]
        if crc32c.crc32c(body) != _CRC.unpack_from(raw, len(body))[0]:
            raise BookieError(f"{FILE_NAME} fails its checksum")
        magic, version, count = _HEAD.unpack_from(body, 0)
        if magic != _MAGIC or version != _VERSION:
            raise BookieError(f"{FILE_NAME} has magic {magic!r} version {version}; not ours")
        if len(body) != _HEAD.size + count * _RANGE.size:
            raise BookieError(f"{FILE_NAME} holds {len(body)} bytes for {count} ranges")
        return cls(_RANGE.unpack_from(body, _HEAD.size + i * _RANGE.size) for i in range(count))

    @classmethod
    def load(cls, directory: Path) -> DeletedLedgers:
        path = directory / FILE_NAME
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls()
        return cls.decode(raw)

    def save(self, directory: Path) -> None:
        """Durably replace the file (blocking)."""
        write_atomically(directory / FILE_NAME, self.encode())
