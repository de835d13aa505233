"""CursorState against a model that just remembers which messages were acknowledged."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from stripemq.errors import InvalidCursorPositionError
from stripemq.managed_ledger.cursor.state import BatchAck, CursorState
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.position import Position

LEDGER_IDS = (3, 4, 7, 9)


def batch_size(position: Position) -> int:
    """Every entry is a batch of a fixed size (1 to 4 messages)."""
    return 1 + (position.ledger_id + position.entry_id) % 4


class CursorModel(RuleBasedStateMachine):
    """Random acks, cumulative acks, batch acks, resets and skips over a fixed chain."""

    @initialize(counts=st.lists(st.integers(0, 6), min_size=len(LEDGER_IDS), max_size=4))
    def start(self, counts: list[int]) -> None:
        self.chain = LedgerChain(
            LedgerInfo(ledger_id, entries)
            for ledger_id, entries in zip(LEDGER_IDS, counts, strict=True)
        )
        self.existing = [
            Position(ledger_id, e)
            for ledger_id, n in zip(LEDGER_IDS, counts, strict=True)
            for e in range(n)
        ]
        self.state = CursorState("sub", self.chain, Position(LEDGER_IDS[0], -1))
        self.acked: set[Position] = set()
        self.unacked_bits: dict[Position, set[int]] = {}

    # -------------------------------------------------------------- helpers

    def pick(self, data: st.DataObject) -> Position:
        """An existing position most of the time, sometimes one the chain does not hold."""
        candidates = [*self.existing, Position(5, 0), Position(9, 6), Position(3, 99)]
        return data.draw(st.sampled_from(candidates))

    def model_ack(self, position: Position) -> None:
        self.acked.add(position)
        self.unacked_bits.pop(position, None)

    # -------------------------------------------------------------- rules

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        position = self.pick(data)
        if position not in self.existing:
            if position > self.state.mark_delete:
                with pytest.raises(InvalidCursorPositionError):
                    self.state.ack([position])
            return
        self.state.ack([position])
        self.model_ack(position)

    @rule(data=st.data())
    def ack_many(self, data: st.DataObject) -> None:
        positions = data.draw(st.lists(st.sampled_from(self.existing or [Position(3, 0)])))
        if not all(p in self.existing for p in positions):
            return
        self.state.ack(positions)
        for position in positions:
            self.model_ack(position)

    @rule(data=st.data())
    def ack_batch_message(self, data: st.DataObject) -> None:
        position = self.pick(data)
        if position not in self.existing:
            return
        size = batch_size(position)
        index = data.draw(st.integers(0, size - 1))
        self.state.ack_batch(position, BatchAck([index], size))
        if position in self.acked:
            return
        bits = self.unacked_bits.setdefault(position, set(range(size)))
        bits.discard(index)
        if not bits:
            self.model_ack(position)

    @rule(data=st.data())
    def bad_batch_index_changes_nothing(self, data: st.DataObject) -> None:
        position = self.pick(data)
        if position not in self.existing or position in self.acked:
            return
        before = self.state.ack_set(position)
        with pytest.raises(InvalidCursorPositionError):
            self.state.ack_batch(
                position, BatchAck([0, batch_size(position)], batch_size(position))
            )
        assert self.state.ack_set(position) == before

    @rule(data=st.data())
    def ack_cumulative(self, data: st.DataObject) -> None:
        position = self.pick(data)
        if position not in self.existing:
            return
        self.state.ack_cumulative(position)
        for p in self.existing:
            if p <= position:
                self.model_ack(p)

    @rule(data=st.data())
    def ack_cumulative_inside_a_batch(self, data: st.DataObject) -> None:
        position = self.pick(data)
        if position not in self.existing:
            return
        size = batch_size(position)
        index = data.draw(st.integers(0, size - 1))
        if position <= self.state.mark_delete:
            return  # already acknowledged as a whole
        self.state.ack_cumulative(position, BatchAck([index], size))
        for p in self.existing:
            if p < position:
                self.model_ack(p)
        if position not in self.acked:
            bits = self.unacked_bits.setdefault(position, set(range(size)))
            bits -= set(range(index + 1))
            if not bits:
                self.model_ack(position)

    @rule(data=st.data())
    def reset(self, data: st.DataObject) -> None:
        targets = [*self.existing, self.chain.write_position()]
        position = data.draw(st.sampled_from(targets))
        self.state.reset(position)
        self.acked = {p for p in self.existing if p < position}
        self.unacked_bits.clear()
        assert self.state.read_position == position

    @rule()
    def reset_beyond_the_end_is_refused(self) -> None:
        end = self.chain.write_position()
        with pytest.raises(InvalidCursorPositionError):
            self.state.reset(Position(end.ledger_id + 1, 5))

    @rule(count=st.integers(0, 5))
    def skip(self, count: int) -> None:
        todo = [p for p in self.existing if p not in self.acked][:count]
        assert self.state.skip(count) == len(todo)
        for p in todo:
            self.model_ack(p)

    @precondition(lambda self: hasattr(self, "state"))
    @rule(data=st.data())
    def read_some(self, data: st.DataObject) -> None:
        position = self.state.first_unacked_from(self.state.read_position)
        if self.chain.exists(position):
            self.state.advance_read(position)

    # -------------------------------------------------------------- invariants

    @invariant()
    def acknowledgements_match(self) -> None:
        for p in self.existing:
            assert self.state.is_acked(p) is (p in self.acked), p
            bits = self.state.ack_set(p)
            if p in self.unacked_bits:
                assert (
                    bits is not None
                    and {i for i, b in enumerate(bits) if b} == (self.unacked_bits[p])
                )
            else:
                assert bits is None

    @invariant()
    def mark_delete_is_the_end_of_the_acknowledged_prefix(self) -> None:
        md = self.state.mark_delete
        assert all(p in self.acked for p in self.existing if p <= md)
        following = self.chain.next_valid(md)
        assert not self.chain.exists(following) or following not in self.acked
        assert all(start > md for start, _ in self.state.holes)

    @invariant()
    def backlog_counts_unacknowledged_entries(self) -> None:
        assert self.state.backlog == sum(1 for p in self.existing if p not in self.acked)

    @invariant()
    def delivery_starts_at_the_first_unacknowledged_entry(self) -> None:
        unacked = [p for p in self.existing if p not in self.acked]
        first = self.state.first_unacked_from(self.chain.first_position())
        if unacked:
            assert first == unacked[0]
        else:
            assert not self.chain.exists(first)
        assert self.state.read_position > md_or_none(self.state)


def md_or_none(state: CursorState) -> Position:
    return state.mark_delete


TestCursorModel = CursorModel.TestCase
TestCursorModel.settings = __import__("hypothesis").settings(
    max_examples=200, stateful_step_count=30, deadline=None
)


def test_holes_touching_the_mark_delete_position_fold_into_it() -> None:
    chain = LedgerChain([LedgerInfo(1, 5), LedgerInfo(2, 0), LedgerInfo(3, 4)])
    state = CursorState("sub", chain, Position(1, -1))
    state.ack([Position(1, 2), Position(1, 4), Position(3, 1)])
    assert state.mark_delete == Position(1, -1) and state.holes_count == 3
    state.ack([Position(1, 0), Position(1, 1)])
    assert state.mark_delete == Position(1, 2)
    state.ack([Position(1, 3)])  # 1:4 was acked and ledger 2 is empty: on to 3:0
    assert state.mark_delete == Position(1, 4)
    state.ack([Position(3, 0)])
    assert state.mark_delete == Position(3, 1) and state.holes_count == 0
    assert state.backlog == 2


def test_acks_before_the_mark_delete_position_are_ignored_and_unknown_ones_refused() -> None:
    chain = LedgerChain([LedgerInfo(1, 5)])
    state = CursorState("sub", chain, Position(1, 2))
    assert state.ack([Position(1, 0)]) == 0
    with pytest.raises(InvalidCursorPositionError):
        state.ack([Position(1, 3), Position(1, 5)])
    assert not state.is_acked(Position(1, 3))  # nothing of the refused call was applied
    with pytest.raises(InvalidCursorPositionError):
        state.ack_cumulative(Position(2, 0))


def test_a_range_is_acknowledged_ledger_by_ledger_over_what_the_chain_holds() -> None:
    chain = LedgerChain([LedgerInfo(1, 5), LedgerInfo(2, 0), LedgerInfo(3, 4), LedgerInfo(4, 9)])
    state = CursorState("sub", chain, Position(1, 0))
    state.ack_batch(Position(3, 2), BatchAck([0], 3))
    state.ack_range(Position(1, 3), Position(3, 2))
    assert state.mark_delete == Position(1, 0)  # 1:1 and 1:2 are not acknowledged
    assert state.holes_count == 2  # ranges: 1:3..1:4, 3:0..3:2
    assert state.ack_set(Position(3, 2)) is None  # acknowledged whole
    state.ack_range(Position(-1, -1), Position(1, 2))
    assert state.mark_delete == Position(3, 2)
    state.ack_range(Position(3, 3), Position(4, -1))  # through the end of ledger 3
    assert state.mark_delete == Position(3, 3) and state.backlog == 9
    state.ack_range(Position(4, 5), Position(4, 2))  # empty: nothing
    assert state.holes_count == 0


def test_reset_to_the_start_of_a_ledger() -> None:
    chain = LedgerChain([LedgerInfo(1, 5), LedgerInfo(2, 0), LedgerInfo(3, 5)])
    state = CursorState("sub", chain, Position(1, -1))
    state.reset(Position(2, -1))  # "from ledger 2 on": 2 is empty, so 3:0
    assert state.read_position == Position(3, 0) and state.backlog == 5
    assert all(state.is_acked(Position(1, e)) for e in range(5))


def test_holes_in_ledgers_no_longer_in_the_chain_are_forgotten() -> None:
    chain = LedgerChain([LedgerInfo(1, 3), LedgerInfo(2, 3)])
    state = CursorState("sub", chain, Position(1, -1))
    state.ack([Position(1, 1), Position(2, 1)])
    chain.remove(1)  # trimmed (by an owner whose snapshot of this cursor was older)
    state.forget_missing_ledgers()
    assert state.mark_delete == Position(1, -1) and state.holes_count == 1
    state.ack([Position(2, 0)])
    assert state.mark_delete == Position(2, 1) and state.backlog == 1
