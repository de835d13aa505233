"""Seek by publish time: the binary search over a ledger chain (``broker.publish_time``),
driven by fake readers, and ``PersistentTopic.find_by_publish_time`` on a fake managed
ledger that counts its reads."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stripemq.broker.publish_time import (
    PublishTimeSearch,
    find_first_published,
    publish_time_of,
)
from stripemq.broker.topic import PersistentTopic
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.managed_ledger import Entry
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry
from stripemq.proto.topic_name import TopicName


def layout(counts: list[int], first_ledger: int = 3) -> list[tuple[int, int]]:
    """``(ledger_id, entries)`` for ledgers with the given entry counts (ids with gaps)."""
    return [(first_ledger + 2 * i, count) for i, count in enumerate(counts)]


def positions_of(ledgers: list[tuple[int, int]]) -> list[Position]:
    return [Position(ledger, entry) for ledger, count in ledgers for entry in range(count)]


class CountingReader:
    """Publish times by position, counting lookups."""

    def __init__(self, times: dict[Position, int | None]) -> None:
        self.times = times
        self.reads = 0

    def __call__(self, position: Position) -> int | None:
        self.reads += 1
        return self.times[position]


def test_finds_the_first_entry_at_or_after_the_target() -> None:
    ledgers = layout([3, 0, 4, 2])  # an empty ledger in the middle is stepped over
    positions = positions_of(ledgers)
    times = dict(zip(positions, [10, 20, 20, 30, 40, 40, 50, 60, 70], strict=True))
    find = lambda t: find_first_published(ledgers, t, times.__getitem__)  # noqa: E731
    assert find(0) == positions[0]
    assert find(10) == positions[0]
    assert find(11) == positions[1]
    assert find(20) == positions[1]  # the first of equal times
    assert find(21) == Position(7, 0)  # first entry of the ledger after the empty one
    assert find(40) == positions[4]
    assert find(70) == positions[-1]
    assert find(71) is None  # every entry is older: the end


def test_an_empty_chain_answers_the_end_without_reading() -> None:
    reader = CountingReader({})
    assert find_first_published(layout([0, 0]), 5, reader) is None
    assert find_first_published([], 5, reader) is None
    assert reader.reads == 0


def test_a_hundred_thousand_entries_take_at_most_seventeen_reads() -> None:
    counts = [1000 + (i * 37) % 900 for i in range(72)]  # ledgers of uneven sizes
    ledgers = layout(counts)
    total = sum(counts)
    assert total >= 100_000
    positions = positions_of(ledgers)
    times = {position: 1_000 + 3 * i for i, position in enumerate(positions)}
    bound = math.ceil(math.log2(total + 1))
    assert bound <= 17
    for target_index in (0, 1, total // 3, total // 2, total - 1):
        reader = CountingReader(times)  # type: ignore[arg-type]
        target = 1_000 + 3 * target_index
        assert find_first_published(ledgers, target, reader) == positions[target_index]
        assert reader.reads <= bound
    reader = CountingReader(times)  # type: ignore[arg-type]
    assert find_first_published(ledgers, 10**12, reader) is None
    assert reader.reads <= bound


def test_unreadable_or_vanished_entries_count_as_older() -> None:
    ledgers = layout([4])
    positions = positions_of(ledgers)
    times: dict[Position, int | None] = dict(zip(positions, [None, None, 30, 40], strict=True))
    assert find_first_published(ledgers, 25, times.__getitem__) == positions[2]
    assert find_first_published(ledgers, 0, times.__getitem__) == positions[2]


def test_the_search_state_machine_refuses_misuse() -> None:
    search = PublishTimeSearch(layout([2]), 5)
    with pytest.raises(RuntimeError):
        _ = search.result
    while (probe := search.probe()) is not None:
        assert probe.ledger_id == 3
        search.record(10)
    assert search.result == Position(3, 0)
    with pytest.raises(RuntimeError):
        search.record(1)
    with pytest.raises(IndexError):
        search.position(2)


@given(
    counts=st.lists(st.integers(0, 30), max_size=12),
    steps=st.lists(st.integers(0, 3), max_size=400),
    target=st.integers(0, 700),
)
def test_monotonic_times_match_a_linear_scan(
    counts: list[int], steps: list[int], target: int
) -> None:
    ledgers = layout(counts)
    positions = positions_of(ledgers)
    values = []
    now = 0
    for i in range(len(positions)):
        now += steps[i] if i < len(steps) else 1
        values.append(now)
    times = dict(zip(positions, values, strict=True))
    index = bisect.bisect_left(values, target)
    expected = positions[index] if index < len(positions) else None
    reader = CountingReader(times)  # type: ignore[arg-type]
    assert find_first_published(ledgers, target, reader) == expected
    assert reader.reads <= math.ceil(math.log2(len(positions) + 1))


@given(
    counts=st.lists(st.integers(0, 20), max_size=8),
    values=st.lists(st.integers(0, 50), min_size=160, max_size=160),
    target=st.integers(0, 50),
)
def test_unordered_times_still_give_a_boundary(
    counts: list[int], values: list[int], target: int
) -> None:
    """Several producers' clocks interleave: the answer is an entry at or after the
    target right after one before it (or an end), as Pulsar's search gives."""
    ledgers = layout(counts)
    positions = positions_of(ledgers)
    times = dict(zip(positions, values, strict=False))
    found = find_first_published(ledgers, target, times.__getitem__)
    index = len(positions) if found is None else positions.index(found)
    if index < len(positions):
        assert times[positions[index]] >= target
    if index > 0:
        assert times[positions[index - 1]] < target


def test_publish_time_of_reads_the_stored_metadata() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1234)
    assert publish_time_of(encode_entry(metadata, b"x")) == 1234
    assert publish_time_of(b"\x00") is None


# ---------------------------------------------------------------- through the topic


@dataclass
class FakeManagedLedger:
    """What ``find_by_publish_time`` uses of a managed ledger: the chain and reads."""

    chain: LedgerChain
    times: dict[Position, int]
    cursors: dict[str, object] = field(default_factory=dict)  # none: no subscriptions
    reads: int = 0
    entries_read: int = 0

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        self.reads += 1
        out = []
        position = start
        while len(out) < max_entries and self.chain.exists(position):
            metadata = pb.MessageMetadata(
                producer_name="p", sequence_id=0, publish_time=self.times[position]
            )
            out.append(Entry(position, encode_entry(metadata, b"")))
            position = self.chain.next_valid(position)
        self.entries_read += len(out)
        return out


def fake_ledger(counts: list[int]) -> FakeManagedLedger:
    chain = LedgerChain(
        LedgerInfo(ledger_id, entries=count, closed=True) for ledger_id, count in layout(counts)
    )
    times = {p: 5_000 + i for i, p in enumerate(positions_of(layout(counts)))}
    return FakeManagedLedger(chain, times)


async def test_the_topic_seeks_by_time_reading_a_logarithmic_number_of_entries() -> None:
    ml = fake_ledger([10_000] * 10)
    topic = PersistentTopic(TopicName.parse("seek-by-time"), ml)  # type: ignore[arg-type]
    assert await topic.find_by_publish_time(5_000 + 99_990) == Position(21, 9_990)
    assert ml.reads <= 17
    assert ml.entries_read <= 17


async def test_the_topic_answers_the_write_position_after_the_last_entry() -> None:
    ml = fake_ledger([5, 5])
    topic = PersistentTopic(TopicName.parse("seek-by-time"), ml)  # type: ignore[arg-type]
    assert await topic.find_by_publish_time(10**12) == Position(5, 5)
    assert await topic.find_by_publish_time(0) == Position(3, 0)
