"""A set of positions held as disjoint ranges, sparse parts as ranges and dense parts as bits.

The cursor's acknowledged "holes" beyond its mark-delete position live here. Positions are
integer keys (``ledger_id << 64 | entry_id``), cut into segments of ``SEGMENT_ENTRIES``
consecutive entries of one ledger (the same segments the cursor snapshots by). Each segment
is held one of two ways:

* sparse (the default): its keys are in two parallel ``SortedList``\\ s of range starts and
  ends, as merged ``[start, end)`` ranges that may run over many segments, so a run of ten
  million acknowledged entries is one range;
* dense: once more than ``DENSE_ABOVE`` ranges share a segment it becomes one bit per entry
  (a ``bitarray`` in a dict keyed by segment, plus a ``SortedList`` of those keys), so
  scattered acknowledgements cost about a bit per entry instead of ~90 bytes per range. It
  goes back to ranges when it is full or holds ``SPARSE_AT_MOST`` runs or fewer.

The ranges never hold a key of a dense segment. What the set reports (iteration, ``len``,
``range_containing`` ...) is always the merged maximal ranges, the same whatever the
representation, so the encoding is unchanged; ``len`` is kept exact by counting where
maximal ranges start around each change. Adding, looking up or trimming is logarithmic
in the number of ranges and segments (times a segment's bytes for bit operations). Ranges
never span ledgers (the set does not know where a ledger ends).
"""

from __future__ import annotations

import sys
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from itertools import chain, islice

from bitarray import bitarray, frozenbitarray
from bitarray.util import zeros
from sortedcontainers import SortedList

from stripemq.managed_ledger.position import (
    ENTRY_BITS,
    ENTRY_MASK,
    Position,
    key_position,
    position_key,
)

# 4096 entries, as the cursor's snapshot segments: a dense segment is a 512-byte bit set. A
# million every-other-entry holes measured 560, 406, 329 and 290 kB with segments of 1024,
# 2048, 4096 and 8192 entries; 4096 also lets a snapshot read one segment's bits at a time.
SEGMENT_BITS = 12
SEGMENT_ENTRIES = 1 << SEGMENT_BITS
SEGMENT_MASK = SEGMENT_ENTRIES - 1
# A range costs ~90 bytes, a dense segment ~700 (bits, key, dict slot): past this many
# ranges in one segment, bits are smaller. Back to ranges at half, so a segment does not
# flip back and forth.
DENSE_ABOVE = 8
SPARSE_AT_MOST = 4

# Searched for where runs of ones begin ("01": the run starts at the "1") and end ("10").
_RUN_START = frozenbitarray("01")
_RUN_END = frozenbitarray("10")

Piece = tuple[int, int]
Chunk = tuple[Piece, Iterable[Piece], Piece | None]


class RangeSet:
    """Disjoint, merged ``[start, end)`` ranges of positions."""

    __slots__ = ("_count", "_dense", "_dense_keys", "_ends", "_len", "_starts")

    def __init__(self) -> None:
        self._starts: SortedList = SortedList()  # ranges of the sparse segments
        self._ends: SortedList = SortedList()
        self._dense: dict[int, bitarray] = {}  # segment -> one bit per entry, never empty
        self._dense_keys: SortedList = SortedList()  # the same segment ints, ordered
        self._count = 0  # positions
        self._len = 0  # merged maximal ranges

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        """How many ranges (not positions: see ``count``)."""
        return self._len

    def __bool__(self) -> bool:
        return self._count > 0

    def __contains__(self, position: Position) -> bool:
        return self.contains_key(position_key(position))

    def contains_key(self, key: int) -> bool:
        if self._dense:
            bits = self._dense.get(key >> SEGMENT_BITS)
            if bits is not None:
                return bool(bits[key & SEGMENT_MASK])
        i = self._starts.bisect_right(key) - 1
        return i >= 0 and key < self._ends[i]

    @property
    def count(self) -> int:
        """How many positions the set holds."""
        return self._count

    def first_range(self) -> tuple[Position, Position] | None:
        """The lowest ``(start, end)`` range, or ``None`` when empty."""
        piece = self._first_piece()
        if piece is None:
            return None
        return key_position(piece[0]), key_position(self._run_end(piece[1]))

    def last_range(self) -> tuple[Position, Position] | None:
        """The highest ``(start, end)`` range, or ``None`` when empty."""
        key = self._last_key()
        if key is None:
            return None
        return key_position(self._run_start(self._piece(key)[0])), key_position(key + 1)

    def range_containing(self, position: Position) -> tuple[Position, Position] | None:
        """The range that holds ``position``, if any (a reader skips to its end)."""
        key = position_key(position)
        if not self.contains_key(key):
            return None
        start, end = self._piece(key)
        return key_position(self._run_start(start)), key_position(self._run_end(end))

    def count_in_ledger(self, ledger_id: int) -> int:
        """Positions of one ledger in the set."""
        low, high = ledger_id << ENTRY_BITS, (ledger_id + 1) << ENTRY_BITS
        starts, ends = self._starts, self._ends
        i, j = starts.bisect_left(low), starts.bisect_left(high)
        total = sum(ends.islice(i, j)) - sum(starts.islice(i, j))
        for segment in self._dense_keys.irange(low >> SEGMENT_BITS, (high - 1) >> SEGMENT_BITS):
            total += self._dense[segment].count()
        return total

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        for start, end in self.key_ranges():
            yield key_position(start), key_position(end)

    def key_ranges(self) -> Iterator[tuple[int, int]]:
        """The ranges as integer keys, lowest first."""
        return self._ranges(0, None)

    def key_ranges_overlapping(self, low: int, high: int) -> Iterator[tuple[int, int]]:
        """The ranges (whole, not clipped) that share a key with ``[low, high)``."""
        if high <= low:
            return
        previous: Piece | None = None
        for start, end in self._ranges(low, high):
            if previous is None:
                start = self._run_start(start)
            else:
                yield previous
            previous = start, end
        if previous is not None:
            yield previous[0], self._run_end(previous[1])

    def positions(self) -> Iterator[Position]:
        """Every position, lowest first (beware: may be many)."""
        for start, end in self.key_ranges():
            for key in range(start, end):
                yield key_position(key)

    def memory_bytes(self) -> int:
        """Bytes held by the set: its sorted lists with their internal index, the bit sets and
        their dict, and every key (``sys.getsizeof``, deep), so the figure can be reported
        without a memory tracer."""
        total = sys.getsizeof(self) + sys.getsizeof(self._count) + sys.getsizeof(self._len)
        # The dense segment ints are shared by the dict and the sorted list: counted once.
        for keys in (self._starts, self._ends, self._dense_keys):
            total += sys.getsizeof(keys) + sum(map(sys.getsizeof, keys))
            # SortedList keeps its keys in sublists, plus their maxima and a position index.
            for part in (*getattr(keys, "_lists", ()), getattr(keys, "_maxes", ())):
                total += sys.getsizeof(part)
            total += sys.getsizeof(getattr(keys, "_index", ()))
        total += sys.getsizeof(self._dense) + sum(map(sys.getsizeof, self._dense.values()))
        return total

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RangeSet):
            return NotImplemented
        return list(self.key_ranges()) == list(other.key_ranges())

    def __repr__(self) -> str:
        shown = ", ".join(f"[{s}, {e})" for s, e in islice(self, 5))
        more = f", … {len(self) - 5} more" if len(self) > 5 else ""
        return f"RangeSet({shown}{more})"

    # ------------------------------------------------------------------ changes

    def add(self, position: Position) -> None:
        self._add_key(position_key(position))

    def add_range(self, start: Position, end: Position) -> None:
        """Add ``[start, end)``; both in one ledger."""
        self.add_key_range(position_key(start), position_key(end))

    def add_key_range(self, start: int, end: int) -> None:
        if end <= start:
            return
        if start >> ENTRY_BITS != (end - 1) >> ENTRY_BITS:
            raise ValueError("a range must not span ledgers")
        if end - start == 1:
            self._add_key(start)
            return
        first_segment, last_segment = start >> SEGMENT_BITS, (end - 1) >> SEGMENT_BITS
        if not self._dense_near(first_segment, last_segment):
            merged, added = self._ranges_add(start, end)
            self._count += added
            self._len += 1 - merged
            self._densify_if_crowded(first_segment)
            if last_segment != first_segment:
                self._densify_if_crowded(last_segment)
            return
        before = self._run_starts_in(start, end + 1)
        ranges_start, ranges_end = start, end  # what is left for the ranges
        touched: list[int] = []
        for segment in list(self._dense_keys.irange(first_segment, last_segment)):
            bits, base = self._dense[segment], segment << SEGMENT_BITS
            a, b = max(start - base, 0), min(end - base, SEGMENT_ENTRIES)
            if a == 0 and b == SEGMENT_ENTRIES:  # wholly covered: the ranges take it over
                self._count -= bits.count()
                self._drop_dense(segment)
                continue
            self._count += (b - a) - bits.count(1, a, b)
            bits[a:b] = 1
            touched.append(segment)
            if segment == first_segment:
                ranges_start = base + b
            if segment == last_segment:
                ranges_end = base + a
        if ranges_start < ranges_end:
            _merged, added = self._ranges_add(ranges_start, ranges_end)
            self._count += added
        for segment in touched:
            self._sparsify_if_thin(segment)
        if ranges_start < ranges_end:
            self._densify_if_crowded(ranges_start >> SEGMENT_BITS)
            self._densify_if_crowded((ranges_end - 1) >> SEGMENT_BITS)
        self._len += self._run_starts_in(start, end + 1) - before

    def remove(self, position: Position) -> None:
        key = position_key(position)
        self.remove_key_range(key, key + 1)

    def remove_key_range(self, start: int, end: int) -> None:
        """Take ``[start, end)`` out, splitting a range that straddles either edge."""
        if end <= start:
            return
        first_segment, last_segment = start >> SEGMENT_BITS, (end - 1) >> SEGMENT_BITS
        if not self._dense_near(first_segment, last_segment):
            removed, ranges_change, split = self._ranges_remove(start, end)
            if removed:
                self._count -= removed
                self._len += ranges_change
                if split:
                    self._densify_if_crowded(end >> SEGMENT_BITS)
            return
        before = self._run_starts_in(start, end + 1)
        removed, _kept, split = self._ranges_remove(start, end)
        self._count -= removed
        for segment in list(self._dense_keys.irange(first_segment, last_segment)):
            bits, base = self._dense[segment], segment << SEGMENT_BITS
            a, b = max(start - base, 0), min(end - base, SEGMENT_ENTRIES)
            self._count -= bits.count(1, a, b)
            bits[a:b] = 0
            if not bits.any():
                self._drop_dense(segment)
            else:
                self._sparsify_if_thin(segment)
        if split:
            self._densify_if_crowded(end >> SEGMENT_BITS)
        self._len += self._run_starts_in(start, end + 1) - before

    def remove_at_most(self, position: Position) -> None:
        """Drop every position ``<= position`` (the cursor's mark-delete moved there)."""
        if position.entry_id < 0:  # "before the first entry of the ledger"
            bound = position.ledger_id << ENTRY_BITS
        else:
            bound = position_key(position) + 1
        first = self._first_key()
        if first is not None and first < bound:
            self.remove_key_range(first, bound)

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
        self._dense.clear()
        self._dense_keys.clear()
        self._count = 0
        self._len = 0

    # ------------------------------------------------------------------ internals

    def _add_key(self, key: int) -> None:
        """Add one key: the acknowledgement fast path (neighbours decide the range count)."""
        segment, offset = key >> SEGMENT_BITS, key & SEGMENT_MASK
        bits = self._dense.get(segment)
        if bits is not None:
            if bits[offset]:
                return
            if offset:
                left = inner_left = bits[offset - 1]
            else:
                left, inner_left = self._joins_previous(key), 1
            if offset != SEGMENT_MASK:
                right = inner_right = bits[offset + 1]
            else:
                right, inner_right = self._joins_next(key), 1
            bits[offset] = 1
            self._count += 1
            self._len += 1 - left - right
            if inner_left and inner_right:  # two runs merged, or the segment may be full
                self._sparsify_if_thin(segment)
            return
        starts, ends = self._starts, self._ends
        i = starts.bisect_right(key) - 1
        join_left = False
        if i >= 0:
            end = ends[i]
            if key < end:
                return
            join_left = end == key and key & ENTRY_MASK != 0
        following = key + 1
        join_right = (
            i + 1 < len(starts) and starts[i + 1] == following and following & ENTRY_MASK != 0
        )
        if join_left and join_right:
            del ends[i]
            del starts[i + 1]
        elif join_left:
            del ends[i]
            ends.add(following)
        elif join_right:
            del starts[i + 1]
            starts.add(key)
        else:
            starts.add(key)
            ends.add(following)
        self._count += 1
        left = join_left or (offset == 0 and self._joins_previous(key))
        right = join_right or (offset == SEGMENT_MASK and self._joins_next(key))
        self._len += 1 - left - right
        # The segment holds one range more unless a range of its own was extended.
        if not ((join_left and offset) or (join_right and offset != SEGMENT_MASK)):
            self._densify_if_crowded(segment)

    def _joins_previous(self, key: int) -> bool:
        """Whether ``key - 1`` is in the set and in the same ledger as ``key``."""
        return key & ENTRY_MASK != 0 and self.contains_key(key - 1)

    def _joins_next(self, key: int) -> bool:
        """Whether ``key + 1`` is in the set and in the same ledger as ``key``."""
        return (key + 1) & ENTRY_MASK != 0 and self.contains_key(key + 1)

    def _first_piece(self) -> Piece | None:
        """The lowest range or dense run (the start of the lowest maximal range)."""
        if not self._count:
            return None
        first = (self._starts[0], self._ends[0]) if self._starts else None
        if self._dense_keys:
            segment = self._dense_keys[0]
            bits, base = self._dense[segment], segment << SEGMENT_BITS
            start = bits.find(1)
            if first is None or base + start < first[0]:
                end = bits.find(0, start)
                first = base + start, base + (SEGMENT_ENTRIES if end < 0 else end)
        return first

    def _first_key(self) -> int | None:
        if not self._count:
            return None
        first = self._starts[0] if self._starts else None
        if self._dense_keys:
            segment = self._dense_keys[0]
            key = (segment << SEGMENT_BITS) + self._dense[segment].find(1)
            if first is None or key < first:
                first = key
        return first

    def _last_key(self) -> int | None:
        last = self._ends[-1] - 1 if self._ends else None
        if self._dense_keys:
            segment = self._dense_keys[-1]
            key = (segment << SEGMENT_BITS) + self._dense[segment].find(1, right=True)
            if last is None or key > last:
                last = key
        return last

    def _piece(self, key: int) -> Piece:
        """The range, or the run of a dense segment, that holds ``key`` (which must be in)."""
        segment = key >> SEGMENT_BITS
        bits = self._dense.get(segment)
        if bits is None:
            i = self._starts.bisect_right(key) - 1
            return self._starts[i], self._ends[i]
        base, offset = segment << SEGMENT_BITS, key & SEGMENT_MASK
        end = bits.find(0, offset)
        start = bits.find(0, 0, offset, right=True) + 1
        return base + start, base + (SEGMENT_ENTRIES if end < 0 else end)

    def _run_start(self, start: int) -> int:
        """Where the maximal range holding the piece that starts at ``start`` begins.

        Pieces only touch at segment edges (ranges merge; a run inside a segment ends at a
        zero bit), and a dense segment is never full, so this takes at most two steps."""
        while start & SEGMENT_MASK == 0 and self._joins_previous(start):
            start = self._piece(start - 1)[0]
        return start

    def _run_end(self, end: int) -> int:
        """Where the maximal range holding the piece that ends at ``end`` ends."""
        while end & SEGMENT_MASK == 0 and end & ENTRY_MASK and self.contains_key(end):
            end = self._piece(end)[1]
        return end

    def _run_starts_in(self, low: int, high: int) -> int:
        """How many maximal ranges start at a key in ``[low, high)``: the difference over a
        change's window gives the change in ``len`` whatever the representation."""
        found = 0
        for start in self._starts.irange(low, high, inclusive=(True, False)):
            if start & SEGMENT_MASK == 0 and start & ENTRY_MASK:
                previous = self._dense.get((start >> SEGMENT_BITS) - 1)
                if previous is not None and previous[SEGMENT_MASK]:
                    continue  # continues the run that ends the dense segment before
            found += 1
        for segment in self._dense_keys.irange(low >> SEGMENT_BITS, (high - 1) >> SEGMENT_BITS):
            bits, base = self._dense[segment], segment << SEGMENT_BITS
            a, b = max(low - base, 0), min(high - base, SEGMENT_ENTRIES)
            if a:
                found += bits.count(_RUN_START, a - 1, b)
            else:
                found += bits.count(_RUN_START, 0, b)
                if bits[0] and not self._joins_previous(base):
                    found += 1
        return found

    def _ranges(self, low: int, high: int | None) -> Iterator[Piece]:
        """The ranges that share a key with ``[low, high)`` (``None``: no upper bound), lowest
        first, merged where ranges and dense runs touch: maximal, but for the first and the
        last, which may go on past the window."""
        pending_start = pending_end = -1  # the last range so far: the next one may touch it
        for (start, end), middle, last in self._chunks(low, high):
            if start == pending_end and start & ENTRY_MASK:
                start = pending_start
            elif pending_end >= 0:
                yield pending_start, pending_end
            if last is None:
                pending_start, pending_end = start, end
            else:
                yield start, end
                yield from middle
                pending_start, pending_end = last
        if pending_end >= 0:
            yield pending_start, pending_end

    def _chunks(self, low: int, high: int | None) -> Iterator[Chunk]:
        """Blocks of ranges between dense segments, and the runs of each dense segment, that
        share a key with ``[low, high)``, lowest first, as (first, middle, last or ``None``):
        within a block nothing touches, so only a block's ends need merging."""
        starts, ends = self._starts, self._ends
        i = starts.bisect_right(low) - 1
        if i < 0 or ends[i] <= low:
            i += 1
        j = len(starts) if high is None else starts.bisect_left(high)
        last_segment = None if high is None else (high - 1) >> SEGMENT_BITS
        for segment in self._dense_keys.irange(low >> SEGMENT_BITS, last_segment):
            base = segment << SEGMENT_BITS
            k = starts.bisect_left(base)
            if k > i:
                yield self._ranges_chunk(i, k)
                i = k
            runs = _runs(self._dense[segment], base)
            if base < low or (high is not None and base + SEGMENT_ENTRIES > high):
                runs = [r for r in runs if r[1] > low and (high is None or r[0] < high)]
            if runs:
                yield runs[0], islice(runs, 1, len(runs) - 1), runs[-1] if len(runs) > 1 else None
        if j > i:
            yield self._ranges_chunk(i, j)

    def _ranges_chunk(self, i: int, k: int) -> Chunk:
        """Ranges ``i`` to ``k - 1`` (``i < k``) as a chunk."""
        starts, ends = self._starts, self._ends
        first = starts[i], ends[i]
        if k - i == 1:
            return first, (), None
        middle = zip(starts.islice(i + 1, k - 1), ends.islice(i + 1, k - 1), strict=True)
        return first, middle, (starts[k - 1], ends[k - 1])

    def _dense_near(self, first_segment: int, last_segment: int) -> bool:
        """Whether a dense segment lies in, or next to, segments ``first..last``: if not,
        a change there is a change of ranges alone."""
        keys = self._dense_keys
        if not keys:
            return False
        i = keys.bisect_left(first_segment - 1)
        return i < len(keys) and keys[i] <= last_segment + 1

    def _ranges_add(self, start: int, end: int) -> tuple[int, int]:
        """Add ``[start, end)`` (no key of a dense segment) to the ranges, merging the ranges
        of its ledger it overlaps or touches; returns (ranges merged, positions added)."""
        starts, ends = self._starts, self._ends
        i = starts.bisect_right(start) - 1
        if i >= 0 and ends[i] >= start and starts[i] >> ENTRY_BITS == start >> ENTRY_BITS:
            first, new_start = i, starts[i]
        else:
            first, new_start = i + 1, start
        last = starts.bisect_right(end)  # ranges from `first` to `last - 1` touch the new one
        if last - 1 >= first and starts[last - 1] >> ENTRY_BITS != start >> ENTRY_BITS:
            last -= 1  # a range of the next ledger that starts exactly at `end`
        new_end = end
        held = 0
        if last - first == 1:
            held_end = ends[first]
            new_end = max(end, held_end)
            held = held_end - starts[first]
            del starts[first]
            del ends[first]
        elif last > first:
            new_end = max(end, ends[last - 1])
            held = sum(ends.islice(first, last)) - sum(starts.islice(first, last))
            del starts[first:last]
            del ends[first:last]
        starts.add(new_start)
        ends.add(new_end)
        return last - first, new_end - new_start - held

    def _ranges_remove(self, start: int, end: int) -> tuple[int, int, bool]:
        """Take ``[start, end)`` out of the ranges; returns (positions removed, ranges the
        count changes by, whether one range was split in two)."""
        starts, ends = self._starts, self._ends
        first = starts.bisect_right(start) - 1
        if first < 0 or ends[first] <= start:
            first += 1
        last = starts.bisect_left(end)
        if first >= last:
            return 0, 0, False
        head_start, tail_end = starts[first], ends[last - 1]
        if last - first == 1:
            removed = tail_end - head_start
        else:
            removed = sum(ends.islice(first, last)) - sum(starts.islice(first, last))
        del starts[first:last]  # all of them: cheaper than one by one
        del ends[first:last]
        keep: list[Piece] = []
        if head_start < start:
            keep.append((head_start, start))
        if tail_end > end:
            keep.append((end, tail_end))
        for s, e in keep:
            starts.add(s)
            ends.add(e)
            removed -= e - s
        split = last - first == 1 and len(keep) == 2
        return removed, len(keep) - (last - first), split

    def _densify_if_crowded(self, segment: int) -> None:
        """Turn a segment's ranges into bits once they are more than ``DENSE_ABOVE``."""
        starts, ends = self._starts, self._ends
        if len(starts) <= DENSE_ABOVE or segment in self._dense:
            return
        base = segment << SEGMENT_BITS
        high = base + SEGMENT_ENTRIES
        first, last = starts.bisect_left(base), starts.bisect_left(high)
        if first and ends[first - 1] > base:
            first -= 1
        if last - first <= DENSE_ABOVE:
            return
        bits = zeros(SEGMENT_ENTRIES)
        outside: list[Piece] = []
        for s, e in zip(starts.islice(first, last), ends.islice(first, last), strict=True):
            if s < base:
                outside.append((s, base))
            if e > high:
                outside.append((high, e))
            bits[max(s, base) - base : min(e, high) - base] = 1
        del starts[first:last]
        del ends[first:last]
        for s, e in outside:
            starts.add(s)
            ends.add(e)
        self._dense[segment] = bits
        self._dense_keys.add(segment)

    def _sparsify_if_thin(self, segment: int) -> None:
        """Turn a dense segment back into ranges once full or down to a few runs."""
        bits = self._dense[segment]
        if bits.count(_RUN_START) + bits[0] > SPARSE_AT_MOST:
            return
        self._drop_dense(segment)
        for start, end in _runs(bits, segment << SEGMENT_BITS):
            self._ranges_add(start, end)

    def _drop_dense(self, segment: int) -> None:
        del self._dense[segment]
        self._dense_keys.remove(segment)
        if not self._dense:
            self._dense = {}  # a dict keeps its table when emptied: let a big one go

    # ------------------------------------------------------------------ encoding

    @classmethod
    def from_key_ranges(cls, ranges: Iterable[tuple[int, int]]) -> RangeSet:
        """Build from ranges in any order; overlapping or touching ones of a ledger merge."""
        starts: list[int] = []
        ends: list[int] = []
        last_end = last_ledger = -1
        for start, end in sorted(ranges):
            if end <= start:
                continue
            ledger = start >> ENTRY_BITS
            if ledger != (end - 1) >> ENTRY_BITS:
                raise ValueError("a range must not span ledgers")
            if start <= last_end and ledger == last_ledger:
                if end > last_end:
                    ends[-1] = last_end = end
            else:
                starts.append(start)
                ends.append(end)
                last_end, last_ledger = end, ledger
        result = cls()
        result._count = sum(ends) - sum(starts)
        result._len = len(starts)
        # A segment is dense when the range that ends in it and the ninth after it share it.
        crowded = {
            (end - 1) >> SEGMENT_BITS
            for end, later in zip(ends, islice(starts, DENSE_ABOVE, None), strict=False)
            if (end - 1) >> SEGMENT_BITS == later >> SEGMENT_BITS
        }
        done = 0  # ranges before this one are placed; the parts after a dense segment not
        kept_starts: list[int] = []
        kept_ends: list[int] = []
        for segment in sorted(crowded):
            base = segment << SEGMENT_BITS
            high = base + SEGMENT_ENTRIES
            i = bisect_right(ends, base, done)  # ranges i to j - 1 share keys with the segment
            j = bisect_left(starts, high, i)
            kept_starts += starts[done:i]
            kept_ends += ends[done:i]
            if starts[i] < base:
                kept_starts.append(starts[i])
                kept_ends.append(base)
            bits = zeros(SEGMENT_ENTRIES)
            for start, end in zip(starts[i:j], ends[i:j], strict=True):
                bits[max(start, base) - base : min(end, high) - base] = 1
            result._dense[segment] = bits
            done = j
            if ends[j - 1] > high:  # what is left of it may meet the next dense segment
                starts[j - 1] = high
                done = j - 1
        kept_starts += starts[done:]
        kept_ends += ends[done:]
        result._starts = SortedList(kept_starts)
        result._ends = SortedList(kept_ends)
        result._dense_keys = SortedList(result._dense)
        return result

    def encode(self) -> bytes:
        return encode_key_ranges(self.key_ranges())

    @classmethod
    def decode(cls, raw: bytes) -> RangeSet:
        return cls.from_key_ranges(decode_key_ranges(raw))


def _runs(bits: bitarray, base: int) -> list[Piece]:
    """The runs of ones of a dense segment as key ranges (searched in C: a segment may hold
    two thousand)."""
    after = (base + 1).__add__
    starts: Iterable[int] = map(after, bits.search(_RUN_START))
    ends: Iterable[int] = map(after, bits.search(_RUN_END))
    if bits[0]:
        starts = chain((base,), starts)
    if bits[-1]:
        ends = chain(ends, (base + SEGMENT_ENTRIES,))
    return list(zip(starts, ends, strict=True))


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
