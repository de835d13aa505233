"""Cursor snapshots in a cursor ledger: incremental chunks, markers, and recovery."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stripemq.managed_ledger.cursor.snapshot import (
    SnapshotFormatError,
    chunk_entry_ids,
    decode_chunk,
    decode_marker,
    is_marker,
    plan_snapshot,
    restore_state,
)
from stripemq.managed_ledger.cursor.state import SEGMENT_BITS, BatchAck, CursorState, segment_of
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.position import Position

SEG = 1 << SEGMENT_BITS


class CursorLedger:
    """A cursor ledger as a list of entries, with snapshot writing and recovery."""

    def __init__(self) -> None:
        self.entries: list[bytes] = []
        self.index: dict[int, tuple[int, ...]] | None = None

    def snapshot(self, state: CursorState, *, full: bool = False, chunk_bytes: int = 300) -> int:
        plan = plan_snapshot(state, None if full else self.index, max_chunk_bytes=chunk_bytes)
        ids = []
        for chunk in plan.chunks:
            self.entries.append(chunk)
            ids.append(len(self.entries) - 1)
        marker, self.index = plan.marker_for(ids)
        self.entries.append(marker)
        return len(plan.chunks)

    def recover(self, chain: LedgerChain) -> CursorState:
        last = max(i for i, raw in enumerate(self.entries) if is_marker(raw))
        marker = decode_marker(self.entries[last])
        state = CursorState("sub", chain, Position(0, -1))
        restore_state(state, marker, {i: self.entries[i] for i in chunk_entry_ids(marker)})
        return state


def same_state(a: CursorState, b: CursorState) -> None:
    assert a.mark_delete == b.mark_delete
    assert a.holes == b.holes
    assert [(p, bits.to01()) for p, bits in a.batches] == [
        (p, bits.to01()) for p, bits in b.batches
    ]
    assert a.properties == b.properties


ENTRIES_PER_LEDGER = 3 * SEG + 100
CHAIN = [LedgerInfo(1, ENTRIES_PER_LEDGER), LedgerInfo(2, 0), LedgerInfo(3, ENTRIES_PER_LEDGER)]
entry_ids = st.one_of(
    st.integers(0, 40), st.integers(SEG - 20, SEG + 20), st.integers(0, ENTRIES_PER_LEDGER - 1)
)
acks = st.tuples(
    st.sampled_from(["ack", "batch", "cumulative", "snapshot", "full", "reset", "crash"]),
    st.sampled_from([1, 3]),
    entry_ids,
    st.integers(0, 3),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(acks, max_size=60))
def test_recovery_returns_the_state_of_the_last_complete_snapshot(
    steps: list[tuple[str, int, int, int]],
) -> None:
    chain = LedgerChain(LedgerInfo(i.ledger_id, i.entries) for i in CHAIN)
    state = CursorState("sub", chain, Position(1, -1))
    ledger = CursorLedger()
    ledger.snapshot(state, full=True)
    snapshotted = ledger.recover(chain)
    for op, ledger_id, entry_id, extra in steps:
        position = Position(ledger_id, entry_id)
        if op == "ack":
            state.ack(
                [
                    Position(ledger_id, e)
                    for e in range(entry_id, entry_id + extra + 1)
                    if e < ENTRIES_PER_LEDGER
                ]
            )
        elif op == "batch":
            state.ack_batch(position, BatchAck([extra], 4))
        elif op == "cumulative" and extra == 0:  # rarely: it wipes out most holes
            state.ack_cumulative(position)
        elif op == "reset" and extra == 0:
            state.reset(position)
        elif op == "snapshot":
            ledger.snapshot(state)
            snapshotted = ledger.recover(chain)
            same_state(snapshotted, state)
        elif op == "full":
            ledger = CursorLedger()  # a new cursor ledger starts with everything
            ledger.snapshot(state, full=True)
            snapshotted = ledger.recover(chain)
            same_state(snapshotted, state)
        elif op == "crash":
            # Chunks of a snapshot whose marker never made it are ignored.
            plan = plan_snapshot(state, ledger.index)
            ledger.entries.extend(plan.chunks)
            same_state(ledger.recover(chain), snapshotted)
            ledger.snapshot(state, full=True)  # the dirty set is gone: write it all again
            snapshotted = ledger.recover(chain)
    state.properties["k"] = 7
    ledger.snapshot(state)
    same_state(ledger.recover(chain), state)


def test_only_changed_segments_are_rewritten() -> None:
    chain = LedgerChain([LedgerInfo(1, 100 * SEG)])
    state = CursorState("sub", chain, Position(1, -1))
    state.ack([Position(1, e) for e in range(1, 50 * SEG, 7)])  # holes in 50 segments
    ledger = CursorLedger()
    ledger.snapshot(state, full=True, chunk_bytes=1 << 20)
    full_bytes = sum(len(e) for e in ledger.entries)
    before = len(ledger.entries)
    state.ack([Position(1, 3 * SEG + 2 + 7 * i) for i in range(3)])  # within one segment
    ledger.snapshot(state, chunk_bytes=1 << 20)
    new_entries = ledger.entries[before:]
    assert len(new_entries) == 2  # one chunk, one marker
    assert list(decode_chunk(new_entries[0])) == [(segment_of(Position(1, 3 * SEG + 2)), 0)]
    assert sum(len(e) for e in new_entries) < full_bytes / 20
    same_state(ledger.recover(chain), state)

    state.ack_cumulative(Position(1, 40 * SEG))  # 40 segments behind the mark-delete now
    ledger.snapshot(state)
    marker = decode_marker(ledger.entries[-1])
    assert len(marker.segments) == 10
    same_state(ledger.recover(chain), state)


def test_half_a_million_holes_snapshot_in_a_few_megabytes() -> None:
    chain = LedgerChain([LedgerInfo(1, 1_000_000)])
    state = CursorState("sub", chain, Position(1, -1))
    state.ack([Position(1, e) for e in range(1, 1_000_000, 2)])
    assert state.holes_count == 500_000
    ledger = CursorLedger()
    ledger.snapshot(state, full=True, chunk_bytes=1 << 20)
    assert sum(len(e) for e in ledger.entries) < 2_000_000
    recovered = ledger.recover(chain)
    assert recovered.holes == state.holes and recovered.backlog == 500_000


@pytest.mark.parametrize(
    "raw",
    [b"", b"X", b"M\x02", b"M\x01\x80", b"C\x01\x05", b"C\x01\x01\x00\x09abc"],
)
def test_damaged_entries_raise_a_format_error(raw: bytes) -> None:
    with pytest.raises(SnapshotFormatError):
        if raw[:1] == b"C":
            decode_chunk(raw)
        else:
            decode_marker(raw)


def test_a_segment_too_big_for_one_chunk_is_split_into_parts() -> None:
    chain = LedgerChain([LedgerInfo(1, 4096, closed=True), LedgerInfo(2, 0)])
    state = CursorState("sub", chain, Position(1, -1))
    state.ack([Position(1, e) for e in range(4000, 4096, 2)])
    for entry in range(4000):  # one segment: 4,000 partial batches of 16,384 messages (8 MB)
        state.ack_batch(Position(1, entry), BatchAck([0], 16_384))
    ledger = CursorLedger()
    ledger.snapshot(state, full=True, chunk_bytes=1 << 20)
    assert len(ledger.entries) >= 9
    assert max(len(e) for e in ledger.entries) <= 1 << 20
    same_state(ledger.recover(chain), state)
    state.ack_batch(Position(1, 7), BatchAck([1], 16_384))  # then only that segment again
    ledger.snapshot(state, chunk_bytes=1 << 20)
    same_state(ledger.recover(chain), state)
