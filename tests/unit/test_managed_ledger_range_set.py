"""RangeSet against a plain set of positions, and its compact encoding."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from stripemq.managed_ledger.cursor.range_set import RangeSet, decode_key_ranges, encode_key_ranges
from stripemq.managed_ledger.position import ENTRY_MASK, Position, position_key

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
