"""What a subscription has acknowledged: the decisions of a cursor, without any I/O.

Every entry up to the mark-delete position is acknowledged; beyond it, individually
acknowledged entries are held as ranges ("holes" in the backlog) and partially acknowledged
batch entries as bit sets. The mark-delete position moves over holes as soon as they touch
it, so the hole set only ever holds what lies beyond the first unacknowledged entry.
``ManagedCursor`` persists this state; tests drive it directly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from bitarray import bitarray

from stripemq.errors import InvalidCursorPositionError
from stripemq.managed_ledger.cursor.batch_acks import BatchAcks
from stripemq.managed_ledger.cursor.range_set import RangeSet
from stripemq.managed_ledger.ledger_chain import LedgerChain
from stripemq.managed_ledger.position import ENTRY_BITS, ENTRY_MASK, Position, position_key

log = logging.getLogger(__name__)

# Holes and batch bits are persisted in segments of 2**12 entries of one ledger, so that a
# snapshot rewrites only the segments acknowledged in since the previous one.
SEGMENT_BITS = 12


def segment_of(position: Position) -> int:
    return position_key(position) >> SEGMENT_BITS


@dataclass
class BatchAck:
    """Acknowledge messages ``indexes`` of a batch entry holding ``size`` messages."""

    indexes: list[int]
    size: int


@dataclass
class CursorState:
    """Mark-delete position, read position, holes and batch bits of one cursor."""

    name: str
    chain: LedgerChain
    mark_delete: Position
    read_position: Position = field(default=Position(-1, -1))
    holes: RangeSet = field(default_factory=RangeSet)
    batches: BatchAcks = field(default_factory=BatchAcks)
    properties: dict[str, int] = field(default_factory=dict)
    # Segments where holes or batch bits beyond the mark-delete position changed since the
    # last snapshot was taken.
    dirty_segments: set[int] = field(default_factory=set)
    # A reset moved the mark-delete position back: holes a snapshot still holds behind the
    # old position would come back to life, so the next snapshot writes every segment.
    needs_full_snapshot: bool = False
    acks_since_snapshot: int = 0

    def __post_init__(self) -> None:
        if self.read_position < self.chain.next_valid(self.mark_delete):
            self.read_position = self.chain.next_valid(self.mark_delete)

    # ------------------------------------------------------------------ queries

    def is_acked(self, position: Position) -> bool:
        """Whether the whole entry is acknowledged (a partial batch is not)."""
        return position <= self.mark_delete or position in self.holes

    def ack_set(self, position: Position) -> bitarray | None:
        """The unacknowledged messages of a partially acknowledged batch entry."""
        return self.batches.get(position)

    @property
    def backlog(self) -> int:
        """Entries after the mark-delete position not yet (wholly) acknowledged."""
        return self.chain.entries_after(self.mark_delete) - self.holes.count

    def memory_bytes(self) -> int:
        """Bytes the holes and batch bits hold."""
        return self.holes.memory_bytes() + self.batches.memory_bytes()

    @property
    def holes_count(self) -> int:
        """Ranges of individually acknowledged entries beyond the mark-delete position."""
        return len(self.holes)

    def first_unacked_from(self, position: Position) -> Position:
        """``position``, or the first entry after it that is not acknowledged."""
        if position <= self.mark_delete:
            position = self.chain.next_valid(self.mark_delete)
        while True:
            found = self.holes.range_containing(position)
            if found is None:
                return position
            last_acked = Position(found[1].ledger_id, found[1].entry_id - 1)
            if found[1].entry_id == 0:  # the range ran to the very end of its ledger
                last_acked = Position(found[0].ledger_id, ENTRY_MASK)
            position = self.chain.next_valid(last_acked)

    # ------------------------------------------------------------------ acknowledgements

    def ack(self, positions: Iterable[Position]) -> int:
        """Acknowledge whole entries individually; returns how many became acknowledged.

        Positions at or before the mark-delete position are ignored (already acked); a
        position the ledger chain does not hold raises ``InvalidCursorPositionError`` and
        nothing of the call is applied.
        """
        fresh = [p for p in positions if p > self.mark_delete]
        for position in fresh:
            self._check_exists(position)
        done = 0
        for position in fresh:
            if position in self.holes:
                continue
            self.acks_since_snapshot += 1
            self.dirty_segments.add(segment_of(position))
            self.batches.discard(position)
            self.holes.add(position)
            done += 1
        self._advance_mark_delete()
        return done

    def ack_range(self, first: Position, last: Position) -> None:
        """Acknowledge every entry the chain holds from ``first`` through ``last`` (what
        compaction left out, for a subscription reading compacted), as ranges: one per
        ledger, however many entries."""
        first = max(first, self.chain.next_valid(self.mark_delete))
        for info in self.chain:
            if info.ledger_id < first.ledger_id or not info.entries:
                continue
            if info.ledger_id > last.ledger_id:
                break
            low = first.entry_id if info.ledger_id == first.ledger_id else 0
            high = info.entries - 1
            if info.ledger_id == last.ledger_id:
                high = min(high, last.entry_id)
            if low > high:
                continue
            start, end = Position(info.ledger_id, low), Position(info.ledger_id, high + 1)
            self.holes.add_range(start, end)
            last_segment = segment_of(Position(info.ledger_id, high))
            self.dirty_segments.update(range(segment_of(start), last_segment + 1))
            for position, _bits in list(self.batches.in_range(start, end)):
                if position < end:
                    self.batches.discard(position)
            self.acks_since_snapshot += 1
        self._advance_mark_delete()

    def ack_batch(self, position: Position, batch: BatchAck) -> bool:
        """Acknowledge some messages of a batch entry; ``True`` once the whole entry is."""
        if self.is_acked(position):
            return True
        self._check_exists(position)
        self.acks_since_snapshot += 1
        self.dirty_segments.add(segment_of(position))
        if not self.batches.ack(position, batch.indexes, batch.size):
            return False
        self.holes.add(position)
        self._advance_mark_delete()
        return True

    def ack_cumulative(self, position: Position, batch: BatchAck | None = None) -> None:
        """Acknowledge everything up to ``position`` (with a batch: up to the message
        ``max(batch.indexes)`` in that entry, the entry itself staying partly unacked; with
        no indexes, only what precedes the entry)."""
        if position <= self.mark_delete:
            return
        self._check_exists(position)
        self.acks_since_snapshot += 1
        if batch is not None:
            if position in self.holes:
                self._move_mark_delete(position)
            else:
                up_to = range(max(batch.indexes) + 1 if batch.indexes else 0)
                complete = self.batches.ack(position, up_to, batch.size)  # checks first
                previous = Position(position.ledger_id, position.entry_id - 1)
                if previous > self.mark_delete:
                    self._move_mark_delete(previous)
                self.dirty_segments.add(segment_of(position))
                if complete:
                    self.holes.add(position)
        else:
            self._move_mark_delete(position)
        self._advance_mark_delete()

    def reset(self, position: Position) -> None:
        """Make ``position`` the next entry to deliver: everything before it counts as
        acknowledged, everything from it on as not (Pulsar's reset-cursor)."""
        if position.entry_id < 0:  # "the start of that ledger"
            position = self.chain.next_valid(position)
        write_position = self.chain.write_position()
        if position > write_position:
            raise InvalidCursorPositionError(
                f"cannot reset to {position}: the topic ends at {write_position}"
            )
        first = self.chain.first_position()
        if position < first:
            position = first
        self.needs_full_snapshot = True
        self.holes.clear()
        self.batches.clear()
        self.mark_delete = Position(position.ledger_id, position.entry_id - 1)
        self.read_position = position
        self.acks_since_snapshot += 1

    def forget_missing_ledgers(self) -> None:
        """Drop holes and batch bits of ledgers the chain no longer holds (trimmed).

        A ledger is trimmed only once every cursor has passed it, so what a snapshot still
        holds of it is acknowledged; left in place, it would keep the mark-delete position
        from ever moving over the gap.
        """
        stale = {start.ledger_id for start, _ in self.holes if start.ledger_id not in self.chain}
        stale |= {p.ledger_id for p, _ in self.batches if p.ledger_id not in self.chain}
        for ledger_id in stale:
            self.holes.remove_key_range(ledger_id << ENTRY_BITS, (ledger_id + 1) << ENTRY_BITS)
            for position, _bits in list(
                self.batches.in_range(Position(ledger_id, 0), Position(ledger_id + 1, 0))
            ):
                self.batches.discard(position)
        if stale:
            self.needs_full_snapshot = True
            self._advance_mark_delete()

    def skip(self, count: int) -> int:
        """Acknowledge the next ``count`` unacknowledged entries; returns how many it did."""
        skipped = 0
        position = self.first_unacked_from(self.chain.next_valid(self.mark_delete))
        batch: list[Position] = []
        while skipped < count and self.chain.exists(position):
            batch.append(position)
            skipped += 1
            position = self.first_unacked_from(self.chain.next_valid(position))
        self.ack(batch)
        return skipped

    # ------------------------------------------------------------------ reading

    def rewind(self) -> None:
        """Read again from the first unacknowledged entry (after a consumer reconnects)."""
        self.read_position = self.chain.next_valid(self.mark_delete)

    def advance_read(self, last_read: Position) -> None:
        """Entries up to ``last_read`` were handed out."""
        following = self.chain.next_valid(last_read)
        if following > self.read_position:
            self.read_position = following

    # ------------------------------------------------------------------ internals

    def _check_exists(self, position: Position) -> None:
        if not self.chain.exists(position):
            raise InvalidCursorPositionError(
                f"cursor {self.name}: no entry at {position} (topic ends at "
                f"{self.chain.last_confirmed()})"
            )

    def _move_mark_delete(self, position: Position) -> None:
        # Segments left wholly behind are dropped by the next snapshot, and holes a snapshot
        # still holds at or before the mark-delete position are trimmed on recovery: neither
        # needs marking dirty here.
        self.mark_delete = position
        self.holes.remove_at_most(position)
        self.batches.discard_at_most(position)

    def _advance_mark_delete(self) -> None:
        """Move the mark-delete position over the holes that now touch it."""
        while True:
            first = self.holes.first_range()
            if first is None or first[0] != self.chain.next_valid(self.mark_delete):
                break
            start, end = first
            last = Position(start.ledger_id, end.entry_id - 1 if end.entry_id else ENTRY_MASK)
            self._move_mark_delete(last)
        if self.read_position <= self.mark_delete:
            self.read_position = self.chain.next_valid(self.mark_delete)
