"""RangeSet against a plain set of positions, and its compact encoding."""

from __future__ import annotations

import bisect
import random
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from stripemq.managed_ledger.cursor.range_set import (
    DENSE_ABOVE,
    SEGMENT_BITS,
    SEGMENT_ENTRIES,
    SEGMENT_MASK,
    RangeSet,
    decode_key_ranges,
    encode_key_ranges,
)
from stripemq.managed_ledger.position import ENTRY_MASK, Position, key_position, position_key

ledgers = st.integers(0, 3)
# Mostly small entry ids, sometimes the very last entries of a ledger (the edge of a key).
entries = st.one_of(st.integers(0, 40), st.integers(ENTRY_MASK - 3, ENTRY_MASK))
positions = st.builds(Position, ledgers, entries)


class RangeSetModel(RuleBasedStateMachine):
    """Random adds and removes; the set must always equal the model."""

    def __init__(self) -> None:
        super().__init__()
        self.ranges = RangeSet()
        self.model: set[tuple[int, int]] = set()

    @rule(position=positions)
    def add(self, position: Position) -> None:
        self.ranges.add(position)
        self.model.add((position.ledger_id, position.entry_id))

    @rule(start=positions, length=st.integers(0, 12))
    def add_range(self, start: Position, length: int) -> None:
        end_entry = min(start.entry_id + length, ENTRY_MASK + 1)  # stay in the ledger
        key = position_key(start)
        self.ranges.add_key_range(key, key + end_entry - start.entry_id)
        self.model |= {(start.ledger_id, e) for e in range(start.entry_id, end_entry)}

    @rule(position=positions)
    def remove(self, position: Position) -> None:
        self.ranges.remove(position)
        self.model.discard((position.ledger_id, position.entry_id))

    @rule(start=positions, length=st.integers(0, 30))
    def remove_span(self, start: Position, length: int) -> None:
        key = position_key(start)
        self.ranges.remove_key_range(key, key + length)  # may cross into the next ledger
        doomed = {(k >> 64, k & ENTRY_MASK) for k in range(key, key + length)}
        self.model -= doomed

    @rule(position=positions)
    def remove_at_most(self, position: Position) -> None:
        self.ranges.remove_at_most(position)
        self.model = {p for p in self.model if p > (position.ledger_id, position.entry_id)}

    @rule(position=positions)
    def contains(self, position: Position) -> None:
        expected = (position.ledger_id, position.entry_id) in self.model
        assert (position in self.ranges) is expected
        found = self.ranges.range_containing(position)
        assert (found is not None) is expected
        if found is not None:
            assert found[0] <= position < found[1]

    @invariant()
    def same_positions(self) -> None:
        got = [(p.ledger_id, p.entry_id) for p in self.ranges.positions()]
        assert got == sorted(self.model)
        assert self.ranges.count == len(self.model)

    @invariant()
    def ranges_are_merged_and_within_one_ledger(self) -> None:
        previous_end: Position | None = None
        for start, end in self.ranges:
            assert start < end
            assert start.ledger_id == end.ledger_id or (
                end.ledger_id == start.ledger_id + 1 and end.entry_id == 0
            )
            if previous_end is not None:
                # Touching ranges merge, unless the first ran to the end of its ledger.
                assert previous_end < start or (previous_end == start and start.entry_id == 0)
            previous_end = end
        first = self.ranges.first_range()
        if self.model:
            low = min(self.model)
            assert first is not None and (first[0].ledger_id, first[0].entry_id) == low
        else:
            assert first is None

    @invariant()
    def per_ledger_counts(self) -> None:
        for ledger in range(4):
            expected = sum(1 for p in self.model if p[0] == ledger)
            assert self.ranges.count_in_ledger(ledger) == expected

    @invariant()
    def encoding_round_trips(self) -> None:
        assert RangeSet.decode(self.ranges.encode()) == self.ranges


TestRangeSetModel = RangeSetModel.TestCase
TestRangeSetModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_adjacent_adds_merge_into_one_range() -> None:
    ranges = RangeSet()
    for entry in (5, 3, 4, 7, 6):
        ranges.add(Position(1, entry))
    assert list(ranges) == [(Position(1, 3), Position(1, 8))]
    ranges.add(Position(2, 0))
    assert len(ranges) == 2 and ranges.count == 6


def test_a_range_may_not_span_ledgers() -> None:
    with pytest.raises(ValueError, match="span ledgers"):
        RangeSet().add_range(Position(1, 5), Position(2, 3))


def test_every_other_entry_encodes_in_three_bytes_per_hole() -> None:
    ranges = RangeSet()
    for entry in range(0, 20_000, 2):
        ranges.add(Position(7, entry))
    assert len(ranges) == 10_000
    assert len(ranges.encode()) <= 3 * 10_000 + 8


@given(st.binary(max_size=64))
def test_decoding_garbage_raises_value_error_or_gives_merged_ranges(raw: bytes) -> None:
    try:
        ranges = decode_key_ranges(raw)
    except ValueError:
        return
    assert encode_key_ranges(ranges) == raw
    assert all(start < end for start, end in ranges)


def test_position_parsing_and_order() -> None:
    assert Position.parse("12:7") == Position(12, 7)
    assert Position(1, 99) < Position(2, 0)
    with pytest.raises(ValueError):
        Position.parse("12")
    with pytest.raises(ValueError):
        Position(1, -2)


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 6))))
def test_building_from_ranges_in_any_order_equals_adding_them(
    spans: list[tuple[int, int, int]],
) -> None:
    keys = [((ledger << 64) + e, (ledger << 64) + e + n) for ledger, e, n in spans]
    one_by_one = RangeSet()
    for start, end in keys:
        one_by_one.add_key_range(start, end)
    built = RangeSet.from_key_ranges(reversed(keys))
    assert built == one_by_one and built.count == one_by_one.count


def test_memory_accounting_agrees_with_the_allocator() -> None:
    positions = [Position(3, e) for e in range(1, 100_000, 2)]
    tracemalloc.start()
    try:
        ranges = RangeSet()
        for position in positions:
            ranges.add(position)
        traced, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0.85 < ranges.memory_bytes() / traced < 1.15


# ------------------------------------------------------------------ dense segments
#
# The set keeps crowded segments of SEGMENT_ENTRIES entries as bits: the tests below drive
# keys over several ledgers and segment edges, where ranges and bits meet.


def _expected_ranges(model: set[int]) -> list[tuple[int, int]]:
    """Maximal ranges of a set of keys (touching keys of one ledger merge)."""
    ranges: list[list[int]] = []
    for key in sorted(model):
        if ranges and key == ranges[-1][1] and key & ENTRY_MASK:
            ranges[-1][1] = key + 1
        else:
            ranges.append([key, key + 1])
    return [(start, end) for start, end in ranges]


def _check_representation(ranges: RangeSet) -> None:
    """Ranges merged and clear of dense segments; dense segments neither empty nor full."""
    starts, ends = list(ranges._starts), list(ranges._ends)
    for (_, end), start in zip(zip(starts, ends, strict=True), starts[1:], strict=False):
        assert end < start or (end == start and not start & ENTRY_MASK)
    per_segment: dict[int, int] = {}
    for start, end in zip(starts, ends, strict=True):
        assert start < end and start >> 64 == (end - 1) >> 64
        for segment in {start >> SEGMENT_BITS, (end - 1) >> SEGMENT_BITS}:
            assert segment not in ranges._dense
            per_segment[segment] = per_segment.get(segment, 0) + 1
        # a range over whole segments in between holds them alone
        inner = ranges._dense_keys.irange(start >> SEGMENT_BITS, (end - 1) >> SEGMENT_BITS)
        assert not list(inner)
    assert max(per_segment.values(), default=0) <= DENSE_ABOVE
    assert list(ranges._dense_keys) == sorted(ranges._dense)
    for bits in ranges._dense.values():
        assert len(bits) == SEGMENT_ENTRIES and bits.any() and not bits.all()


def _check_against_model(ranges: RangeSet, model: set[int], rng: random.Random) -> None:
    expected = _expected_ranges(model)
    assert list(ranges.key_ranges()) == expected
    assert ranges.count == len(model) and len(ranges) == len(expected)
    assert bool(ranges) is bool(model)
    if expected:
        assert ranges.first_range() == (key_position(expected[0][0]), key_position(expected[0][1]))
        assert ranges.last_range() == (key_position(expected[-1][0]), key_position(expected[-1][1]))
    else:
        assert ranges.first_range() is None and ranges.last_range() is None
    starts = [start for start, _ in expected]
    probes = rng.sample(sorted(model), min(20, len(model))) + [_random_key(rng) for _ in range(20)]
    for key in probes:
        i = bisect.bisect_right(starts, key) - 1
        holder = expected[i] if i >= 0 and key < expected[i][1] else None
        assert ranges.contains_key(key) is (key in model)
        assert (key_position(key) in ranges) is (key in model)
        found = ranges.range_containing(key_position(key))
        assert found == (None if holder is None else tuple(map(key_position, holder)))
    for _ in range(4):
        low = _random_key(rng)
        if rng.random() < 0.5:
            low &= ~SEGMENT_MASK  # a snapshot asks for whole segments
            high = low + SEGMENT_ENTRIES
        else:
            high = low + rng.choice([1, 2, 100, 5000, 1 << 64])
        overlapping = [(s, e) for s, e in expected if e > low and s < high]
        assert list(ranges.key_ranges_overlapping(low, high)) == overlapping
    for ledger in LEDGERS:
        assert ranges.count_in_ledger(ledger) == sum(1 for key in model if key >> 64 == ledger)
    raw = ranges.encode()
    assert raw == encode_key_ranges(expected)
    decoded = RangeSet.decode(raw)
    assert decoded == ranges and decoded.count == ranges.count and len(decoded) == len(ranges)
    _check_representation(decoded)
    # As a snapshot recovery does: ranges cut at segment edges, in any order.
    pieces = [
        (max(s, segment << SEGMENT_BITS), min(e, (segment + 1) << SEGMENT_BITS))
        for s, e in expected
        for segment in range(s >> SEGMENT_BITS, ((e - 1) >> SEGMENT_BITS) + 1)
        if e - s < 10 * SEGMENT_ENTRIES
    ]
    if len(pieces) >= len(expected):
        rng.shuffle(pieces)
        rebuilt = RangeSet.from_key_ranges(pieces)
        assert rebuilt == ranges and rebuilt.count == ranges.count
        assert len(rebuilt) == len(ranges)
        _check_representation(rebuilt)
    _check_representation(ranges)


LEDGERS = (1, 2, 4)
# Where keys fall: the first segments of a ledger and its very last one.
REGIONS = ((0, 3 * SEGMENT_ENTRIES + 40), (ENTRY_MASK + 1 - SEGMENT_ENTRIES - 40, ENTRY_MASK + 1))


def _random_key(rng: random.Random) -> int:
    low, high = rng.choice(REGIONS)
    if rng.random() < 0.3:  # near a segment edge
        edge = rng.randrange(low, high) & ~SEGMENT_MASK
        entry = min(max(edge + rng.randint(-3, 3), low), high - 1)
    else:
        entry = rng.randrange(low, high)
    return (rng.choice(LEDGERS) << 64) | entry


@pytest.mark.parametrize("seed", range(3))
def test_random_changes_agree_with_a_set_of_keys(seed: int) -> None:
    rng = random.Random(seed)
    ranges = RangeSet()
    model: set[int] = set()
    for step in range(700):
        op = rng.random()
        key = _random_key(rng)
        ledger_end = ((key >> 64) + 1) << 64
        if op < 0.25:  # scattered single acks, enough to make segments dense
            stride = rng.choice([2, 3, 5])
            for k in range(key, min(key + stride * rng.randint(1, 60), ledger_end), stride):
                ranges.add(key_position(k))
                model.add(k)
        elif op < 0.45:
            end = min(key + rng.choice([rng.randint(1, 12), rng.randint(1, 9000)]), ledger_end)
            if rng.random() < 0.5:
                ranges.add_key_range(key, end)
            else:
                ranges.add_range(key_position(key), key_position(end))
            model.update(range(key, end))
        elif op < 0.65:
            ranges.remove(key_position(key))
            model.discard(key)
        elif op < 0.90:
            end = key + rng.choice([rng.randint(1, 12), rng.randint(1, 9000)])
            ranges.remove_key_range(key, end)  # may run into the next ledger
            model.difference_update(range(key, end))
        elif op < 0.95 and model:
            # the mark-delete position moves: usually to a key the set holds, or just before
            bound = rng.choice(sorted(model)[: 1 + len(model) // 20])
            position = key_position(bound)
            if rng.random() < 0.2:
                position = Position(position.ledger_id, -1)
                bound = position.ledger_id << 64
            else:
                bound += 1
            ranges.remove_at_most(position)
            model = {k for k in model if k >= bound}
        else:
            ranges.add(key_position(key))
            model.add(key)
        assert ranges.count == len(model)
        if step % 7 == 0:
            _check_against_model(ranges, model, rng)
    _check_against_model(ranges, model, rng)
    ranges.clear()
    assert not ranges and len(ranges) == 0 and list(ranges) == []


def test_old_snapshots_decode_and_encode_byte_for_byte() -> None:
    # Written by the range-list implementation the bit sets replaced.
    raw = bytes.fromhex(
        "0807030300030100f51f03008e2e01008f4e904e01000100feffffffffffffffff0101a4020101"
    )
    built = RangeSet()
    for entry in (3, 4, 5, 9, 4095, 4096, 4097, 10_000):
        built.add(Position(7, entry))
    built.add_key_range((7 << 64) + 20_000, (7 << 64) + 30_000)
    for position in (Position(8, 0), Position(8, ENTRY_MASK), Position(300, 1)):
        built.add(position)
    assert RangeSet.decode(raw) == built and built.encode() == raw
    assert len(built) == 8 and built.count == 8 + 10_000 + 3


def test_a_million_scattered_holes_fit_in_50_mb() -> None:
    """The issue's figure (``bench/cursor.py`` prints it); how far ``memory_bytes`` can be
    trusted is checked against the allocator above, on 50,000 holes."""
    base = 3 << 64
    ranges = RangeSet()
    for key in range(base + 1, base + 2_000_000, 2):  # every other entry acknowledged
        ranges.add_key_range(key, key + 1)
    assert len(ranges) == 1_000_000 and ranges.count == 1_000_000
    held = ranges.memory_bytes()
    assert held < 50_000_000
    assert held < 1_000_000  # in fact about a third of a megabyte: bits, not ranges


def test_ten_percent_unacked_and_sparse_holes_stay_small() -> None:
    rng = random.Random(3)
    dense = RangeSet()
    for entry in range(500_000):
        if rng.random() >= 0.1:
            dense.add(Position(1, entry))
    assert dense.memory_bytes() < 10 * 500_000 // 8  # ~45k ranges in about a bit per entry
    sparse = RangeSet()
    for entry in range(0, 50_000_000, 5_000):  # one hole every few segments: ranges
        sparse.add(Position(1, entry))
    assert not sparse._dense
    assert sparse.memory_bytes() < 100 * len(sparse)


def test_long_runs_stay_one_range() -> None:
    ranges = RangeSet()
    ranges.add_key_range(5 << 64, (5 << 64) + 10_000_000)
    ranges.add_range(Position(6, 0), Position(7, 0))  # a whole ledger
    assert len(ranges) == 2 and ranges.memory_bytes() < 2_000
    # Acknowledged scattered first, then filled in: the bits fold back into one range.
    filled = RangeSet()
    for entry in [*range(1, 100_000, 2), *range(0, 100_000, 2)]:
        filled.add(Position(9, entry))
    assert list(filled) == [(Position(9, 0), Position(9, 100_000))]
    assert not filled._dense and filled.memory_bytes() < 2_000


def test_ranges_meet_across_dense_segment_edges() -> None:
    base = 2 << 64
    ranges = RangeSet()
    for entry in range(SEGMENT_ENTRIES - 40, SEGMENT_ENTRIES, 2):  # 20 holes crowd segment 0
        ranges.add_key_range(base + entry, base + entry + 1)
    run_end = base + 3 * SEGMENT_ENTRIES + 7
    ranges.add_key_range(base + SEGMENT_ENTRIES - 2, run_end)  # takes in the last hole
    for key in range(run_end + 1, run_end + 33, 2):  # 16 holes crowd segment 3
        ranges.add(key_position(key))
    assert sorted(ranges._dense) == [base >> SEGMENT_BITS, (base >> SEGMENT_BITS) + 3]
    long_run = key_position(base + SEGMENT_ENTRIES - 2), key_position(run_end)
    for key in (base + SEGMENT_ENTRIES - 2, base + 2 * SEGMENT_ENTRIES, run_end - 1):
        assert ranges.range_containing(key_position(key)) == long_run
    assert len(ranges) == 19 + 1 + 16
    ranges.add(key_position(run_end))  # joins the run to the next hole
    assert len(ranges) == 19 + 1 + 15
    assert ranges.range_containing(key_position(run_end + 1)) == (
        long_run[0],
        key_position(run_end + 2),
    )
    ranges.remove_key_range(base + SEGMENT_ENTRIES, base + SEGMENT_ENTRIES + 1)
    assert len(ranges) == 19 + 2 + 15
    assert ranges.range_containing(long_run[0]) == (
        long_run[0],
        key_position(base + SEGMENT_ENTRIES),
    )
    assert RangeSet.decode(ranges.encode()) == ranges
