"""A set of positions held as disjoint closed-open ranges, one ledger per range.

The cursor's acknowledged "holes" beyond its mark-delete position live here. Positions are
kept as integer keys (``ledger_id << 64 | entry_id``) in two parallel ``SortedList``\\ s of
range starts and ends, so a million scattered holes cost a few tens of bytes each, and
adding, looking up or trimming is logarithmic. Adjacent ranges of one ledger merge; ranges
never span ledgers (the set does not know where a ledger ends).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

from stripemq.managed_ledger.position import ENTRY_BITS, Position, key_position, position_key


class RangeSet:
    """Disjoint, merged ``[start, end)`` ranges of positions."""

    def __init__(self) -> None:
        self._starts: SortedList = SortedList()
        self._ends: SortedList = SortedList()
        self._count = 0

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        """How many ranges (not positions: see ``count``)."""
        return len(self._starts)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __contains__(self, position: Position) -> bool:
        return self.contains_key(position_key(position))

    def contains_key(self, key: int) -> bool:
        i = self._starts.bisect_right(key) - 1
        return i >= 0 and key < self._ends[i]

    @property
    def count(self) -> int:
        """How many positions the set holds."""
        return self._count

    def first_range(self) -> tuple[Position, Position] | None:
        """The lowest ``(start, end)`` range, or ``None`` when empty."""
        if not self._starts:
            return None
        return key_position(self._starts[0]), key_position(self._ends[0])

    def last_range(self) -> tuple[Position, Position] | None:
        if not self._starts:
            return None
        return key_position(self._starts[-1]), key_position(self._ends[-1])

    def range_containing(self, position: Position) -> tuple[Position, Position] | None:
        """The range that holds ``position``, if any (a reader skips to its end)."""
        key = position_key(position)
        i = self._starts.bisect_right(key) - 1
        if i >= 0 and key < self._ends[i]:
            return key_position(self._starts[i]), key_position(self._ends[i])
        return None

    def count_in_ledger(self, ledger_id: int) -> int:
        """Positions of one ledger in the set."""
        low, high = ledger_id << ENTRY_BITS, (ledger_id + 1) << ENTRY_BITS
        total = 0
        for i in range(self._starts.bisect_left(low), self._starts.bisect_left(high)):
            total += self._ends[i] - self._starts[i]
        return total

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        for start, end in zip(self._starts, self._ends, strict=True):
            yield key_position(start), key_position(end)

    def key_ranges(self) -> Iterator[tuple[int, int]]:
        """The ranges as integer keys, lowest first."""
        return zip(self._starts, self._ends, strict=True)

    def key_ranges_overlapping(self, low: int, high: int) -> Iterator[tuple[int, int]]:
        """The ranges (whole, not clipped) that share a key with ``[low, high)``."""
        first = max(self._starts.bisect_right(low) - 1, 0)
        for i in range(first, self._starts.bisect_left(high)):
            if self._ends[i] > low:
                yield self._starts[i], self._ends[i]

    def positions(self) -> Iterator[Position]:
        """Every position, lowest first (beware: may be many)."""
        for start, end in self.key_ranges():
            for key in range(start, end):
                yield key_position(key)

    def memory_bytes(self) -> int:
        """Bytes held by the set: its sorted lists, their internal index and every key
        (``sys.getsizeof``, deep), so the figure can be reported without a memory tracer."""
        total = sys.getsizeof(self)
        for keys in (self._starts, self._ends):
            total += sys.getsizeof(keys) + sum(map(sys.getsizeof, keys))
            # SortedList keeps its keys in sublists, plus their maxima and a position index.
            for part in (*getattr(keys, "_lists", ()), getattr(keys, "_maxes", ())):
                total += sys.getsizeof(part)
            total += sys.getsizeof(getattr(keys, "_index", ()))
        return total

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RangeSet):
            return NotImplemented
        return list(self.key_ranges()) == list(other.key_ranges())

    def __repr__(self) -> str:
        shown = ", ".join(f"[{s}, {e})" for s, e in list(self)[:5])
        more = f", … {len(self) - 5} more" if len(self) > 5 else ""
        return f"RangeSet({shown}{more})"

    # ------------------------------------------------------------------ changes

    def add(self, position: Position) -> None:
        key = position_key(position)
        self.add_key_range(key, key + 1)

    def add_range(self, start: Position, end: Position) -> None:
        """Add ``[start, end)``; both in one ledger."""
        self.add_key_range(position_key(start), position_key(end))

    def add_key_range(self, start: int, end: int) -> None:
        if end <= start:
            return
        if start >> ENTRY_BITS != (end - 1) >> ENTRY_BITS:
            raise ValueError("a range must not span ledgers")
        starts, ends = self._starts, self._ends
        i = starts.bisect_right(start) - 1
        if i >= 0 and ends[i] >= start and self._same_ledger(starts[i], start):
            first, new_start = i, starts[i]
        else:
            first, new_start = i + 1, start
        last = starts.bisect_right(end)  # ranges from `first` to `last - 1` touch the new one
        if last - 1 >= first and not self._same_ledger(starts[last - 1], start):
            last -= 1  # a range of the next ledger that starts exactly at `end`
        new_end = max(end, ends[last - 1]) if last > first else end
        if last > first:
            self._count -= sum(ends[j] - starts[j] for j in range(first, last))
            del starts[first:last]
            del ends[first:last]
        starts.add(new_start)
        ends.add(new_end)
        self._count += new_end - new_start

    def remove(self, position: Position) -> None:
        key = position_key(position)
        self.remove_key_range(key, key + 1)

    def remove_key_range(self, start: int, end: int) -> None:
        """Take ``[start, end)`` out, splitting a range that straddles either edge."""
        if end <= start:
            return
        starts, ends = self._starts, self._ends
        first = max(starts.bisect_right(start) - 1, 0)
        last = starts.bisect_left(end)
        keep: list[tuple[int, int]] = []
        removed = 0
        for j in range(first, last):
            s, e = starts[j], ends[j]
            if e <= start:
                continue
            removed += e - s
            if s < start:
                keep.append((s, start))
            if e > end:
                keep.append((end, e))
        if not removed:
            return
        lo = first if ends[first] > start else first + 1
        del starts[lo:last]
        del ends[lo:last]
        self._count -= removed
        for s, e in keep:
            starts.add(s)
            ends.add(e)
            self._count += e - s

    def remove_at_most(self, position: Position) -> None:
        """Drop every position ``<= position`` (the cursor's mark-delete moved there)."""
        if position.entry_id < 0:  # "before the first entry of the ledger"
            bound = position.ledger_id << ENTRY_BITS
        else:
            bound = position_key(position) + 1
        if self._starts and self._starts[0] < bound:
            self.remove_key_range(self._starts[0], bound)

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
        self._count = 0

    @staticmethod
    def _same_ledger(a: int, b: int) -> bool:
        return a >> ENTRY_BITS == b >> ENTRY_BITS

    # ------------------------------------------------------------------ encoding

    @classmethod
    def from_key_ranges(cls, ranges: Iterable[tuple[int, int]]) -> RangeSet:
        """Build from ranges in any order; overlapping or touching ones of a ledger merge."""
        starts: list[int] = []
        ends: list[int] = []
        for start, end in sorted(ranges):
            if end <= start:
                continue
            if start >> ENTRY_BITS != (end - 1) >> ENTRY_BITS:
                raise ValueError("a range must not span ledgers")
            if ends and start <= ends[-1] and start >> ENTRY_BITS == starts[-1] >> ENTRY_BITS:
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
        result = cls()
        result._starts = SortedList(starts)
        result._ends = SortedList(ends)
        result._count = sum(e - s for s, e in zip(starts, ends, strict=True))
        return result

    def encode(self) -> bytes:
        return encode_key_ranges(self.key_ranges())

    @classmethod
    def decode(cls, raw: bytes) -> RangeSet:
        return cls.from_key_ranges(decode_key_ranges(raw))


# ---------------------------------------------------------------------------- codec
#
# Ranges as varints: count, then per range the ledger id's increase over the previous range,
# the start entry (counted from the previous range's end when in the same ledger, else from
# 0) and the length. Every-other-entry holes take three bytes each.


def encode_key_ranges(ranges: Iterable[tuple[int, int]]) -> bytes:
    body = bytearray()
    count = 0
    ledger, cursor = 0, 0
    for start, end in ranges:
        start_ledger, start_entry = start >> ENTRY_BITS, start & ((1 << ENTRY_BITS) - 1)
        if count and start_ledger == ledger:
            gap = start_entry - cursor
        else:
            gap = start_entry
        put_varint(body, start_ledger - ledger if count else start_ledger)
        put_varint(body, gap)
        put_varint(body, end - start)
        ledger, cursor = start_ledger, start_entry + (end - start)
        count += 1
    head = bytearray()
    put_varint(head, count)
    return bytes(head + body)


def decode_key_ranges(raw: bytes) -> list[tuple[int, int]]:
    """The ranges of ``encode_key_ranges``; ``ValueError`` if ``raw`` is not such a list."""
    view = memoryview(raw)
    ranges, offset = read_key_ranges(view, 0)
    if offset != len(view):
        raise ValueError(f"{len(view) - offset} stray bytes after {len(ranges)} encoded ranges")
    return ranges


def read_key_ranges(view: memoryview, offset: int) -> tuple[list[tuple[int, int]], int]:
    """Encoded ranges starting at ``offset``, and the offset just after them."""
    count, offset = get_varint(view, offset)
    ranges: list[tuple[int, int]] = []
    ledger, cursor = 0, 0
    for i in range(count):
        ledger_step, offset = get_varint(view, offset)
        gap, offset = get_varint(view, offset)
        length, offset = get_varint(view, offset)
        if length == 0 or (i and ledger_step == 0 and gap == 0):
            raise ValueError("encoded ranges are empty or not merged")
        ledger = ledger + ledger_step if i else ledger_step
        entry = (cursor + gap) if i and ledger_step == 0 else gap
        if entry + length > 1 << ENTRY_BITS:
            raise ValueError("encoded range runs past its ledger")
        start = (ledger << ENTRY_BITS) | entry
        ranges.append((start, start + length))
        cursor = entry + length
    return ranges, offset


def put_varint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError("varints are unsigned")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def get_varint(view: memoryview, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(view):
            raise ValueError("encoded ranges are cut short")
        byte = view[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7
        if shift > 140:
            raise ValueError("varint too long")
