"""A compacted ledger: what compaction kept of a topic, in its order, under its positions.

Each entry is one kept entry of the topic with the position it has there, framed as
Pulsar's ``RawMessageImpl`` frames it: ``id_size:u32 | MessageIdData | size:u32 | entry``.
Readers that read compacted find the first kept entry at or after their position by binary
search over the ledger, one entry read per step; a reader going on from where its last
read ended skips the search.
"""

from __future__ import annotations

import logging
import struct

from google.protobuf.message import DecodeError

from stripemq.bookie.client.reader import ReadHandle
from stripemq.errors import InvalidEntryError
from stripemq.managed_ledger.managed_ledger import Entry
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

__all__ = ["CompactedLedger", "decode_kept", "encode_kept"]

_U32 = struct.Struct(">I")
_PROBE_CACHE = 4096  # positions of probed entries kept between searches


def encode_kept(position: Position, data: bytes) -> bytes:
    """One compacted-ledger entry: the kept entry ``data`` and its topic position."""
    raw_id = pb.MessageIdData(ledgerId=position.ledger_id, entryId=position.entry_id)
    ident = raw_id.SerializeToString()
    return b"".join((_U32.pack(len(ident)), ident, _U32.pack(len(data)), data))


def decode_kept(raw: bytes) -> Entry:
    """The kept entry and its topic position; ``InvalidEntryError`` if ``raw`` is not
    one (a ledger that is not a compacted ledger, or damage)."""
    view = memoryview(raw)
    if len(view) < 4:
        raise InvalidEntryError("compacted entry shorter than its id size")
    (id_size,) = _U32.unpack_from(view, 0)
    if 8 + id_size > len(view):
        raise InvalidEntryError(f"compacted entry id of {id_size} bytes runs past the entry")
    message_id = pb.MessageIdData()
    try:
        message_id.ParseFromString(bytes(view[4 : 4 + id_size]))
    except (DecodeError, RuntimeError) as exc:
        raise InvalidEntryError(f"unreadable compacted entry id: {exc}") from None
    if not message_id.IsInitialized():
        raise InvalidEntryError("compacted entry id lacks its ledger or entry")
    (size,) = _U32.unpack_from(view, 4 + id_size)
    start = 8 + id_size
    if start + size != len(view):
        raise InvalidEntryError(f"compacted entry declares {size} bytes, holds {len(view) - start}")
    try:
        position = Position(message_id.ledgerId, message_id.entryId)
    except ValueError as exc:
        raise InvalidEntryError(f"compacted entry id: {exc}") from None
    return Entry(position, bytes(view[start:]))


class CompactedLedger:
    """A closed compacted ledger opened for reading, and the horizon it was made up to
    (the last topic position compaction read: later entries are read from the topic)."""

    def __init__(self, reader: ReadHandle, horizon: Position) -> None:
        self.reader = reader
        self.horizon = horizon
        self.entries = reader.last_add_confirmed + 1
        # The first and last kept entries' positions (``open`` looks them up).
        self.first: Position | None = None
        self.last: Position | None = None
        self._probed: dict[int, Position] = {}
        self._resume: tuple[Position, int] | None = None  # (next position, its index)

    @classmethod
    async def open(cls, reader: ReadHandle, horizon: Position) -> CompactedLedger:
        """The compacted ledger ``reader`` reads, with its first and last kept entries
        looked up."""
        compacted = cls(reader, horizon)
        if compacted.entries:
            compacted.first = await compacted._position_at(0)
            compacted.last = await compacted._position_at(compacted.entries - 1)
        return compacted

    @property
    def ledger_id(self) -> int:
        return self.reader.ledger_id

    @property
    def size(self) -> int:
        """Bytes of the ledger (its entries as written)."""
        return self.reader.metadata.length

    async def read_from(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` kept entries at or after ``start`` (and at or before the
        horizon), in order; none once ``start`` is past the last kept entry."""
        if start > self.horizon or self.entries == 0 or max_entries <= 0:
            return []
        if self._resume is not None and self._resume[0] == start:
            index = self._resume[1]
        else:
            index = await self._first_index_at(start)
        if index >= self.entries:
            return []
        last = min(self.entries - 1, index + max_entries - 1)
        entries = await self.read_range(index, last)
        if entries:
            self._resume = (entries[-1].position.next(), last + 1)
        return entries

    async def last_entry(self) -> Entry | None:
        """The last kept entry; ``None`` if compaction kept nothing."""
        if self.entries == 0:
            return None
        (entry,) = await self.read_range(self.entries - 1, self.entries - 1)
        return entry

    async def read_range(self, first: int, last: int) -> list[Entry]:
        """Kept entries ``first..last`` by their index in this ledger."""
        found = await self.reader.read_entries(first, last)
        entries = [decode_kept(e.data) for e in found]
        for e, entry in zip(found, entries, strict=True):
            self._remember(e.entry_id, entry.position)
        return entries

    async def _first_index_at(self, start: Position) -> int:
        lo, hi = 0, self.entries
        while lo < hi:
            mid = (lo + hi) // 2
            if await self._position_at(mid) < start:
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def _position_at(self, index: int) -> Position:
        position = self._probed.get(index)
        if position is None:
            (entry,) = await self.read_range(index, index)
            position = entry.position
        return position

    def _remember(self, index: int, position: Position) -> None:
        if len(self._probed) >= _PROBE_CACHE:
            self._probed.clear()
        self._probed[index] = position
