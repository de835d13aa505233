"""Spark's planning over ledgers (``stripemq.spark.planning``), without I/O: Spark's filters
to a pushdown, pruning ledgers by topic, partition and time, cutting entry ranges into
splits, and narrowing a ledger's range by publish time with a fake probe."""

from __future__ import annotations

import math
import random
import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from stripemq.spark.planning import (
    LedgerSpan,
    Pushdown,
    ReadSplit,
    TimeBounds,
    TopicPartitionRef,
    TopicSnapshot,
    narrow_by_publish_time,
    plan_splits,
    prune_snapshot,
    split_range,
    translate_filters,
)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
REF = TopicPartitionRef(
    "persistent://public/default/orders-partition-1",
    1,
    "public/default/persistent/orders-partition-1",
)
OTHER = TopicPartitionRef(
    "persistent://public/default/orders-partition-2",
    2,
    "public/default/persistent/orders-partition-2",
)
MINUTE = 60_000


def closed(ledger_id: int, entries: int, size: int, created_ms: int, closed_ms: int) -> LedgerSpan:
    return LedgerSpan(ledger_id, entries - 1, size, created_ms, closed_ms, True)


def open_ledger(ledger_id: int, lac: int, size: int, created_ms: int) -> LedgerSpan:
    return LedgerSpan(ledger_id, lac, size, created_ms, 0, False)


# ---------------------------------------------------------------------- translate_filters


def test_publish_time_comparisons_become_millisecond_bounds() -> None:
    filters = [
        GreaterThanOrEqual(("__publishTime",), T0),
        LessThan(("__publishTime",), T0 + timedelta(minutes=5)),
    ]
    pushdown, remaining = translate_filters(filters)
    assert pushdown.time == TimeBounds(T0_MS, T0_MS + 5 * MINUTE - 1)
    assert pushdown.topics is None and pushdown.partitions is None
    # Every filter goes back to Spark, the same objects in the same order.
    assert len(remaining) == 2 and all(a is b for a, b in zip(remaining, filters, strict=True))


def test_bounds_round_microseconds_to_the_milliseconds_that_satisfy_them() -> None:
    t = T0 + timedelta(microseconds=500)  # 12:00:00.000500
    assert translate_filters([GreaterThan(("__publishTime",), t)])[0].time.lower_ms == T0_MS + 1
    assert translate_filters([GreaterThan(("__publishTime",), T0)])[0].time.lower_ms == T0_MS + 1
    assert (
        translate_filters([GreaterThanOrEqual(("__publishTime",), t)])[0].time.lower_ms == T0_MS + 1
    )
    assert translate_filters([LessThan(("__publishTime",), t)])[0].time.upper_ms == T0_MS
    assert translate_filters([LessThan(("__publishTime",), T0)])[0].time.upper_ms == T0_MS - 1
    assert translate_filters([LessThanOrEqual(("__publishTime",), t)])[0].time.upper_ms == T0_MS
    assert translate_filters([EqualTo(("__publishTime",), T0)])[0].time == TimeBounds(T0_MS, T0_MS)
    # No whole millisecond equals 12:00:00.000500: nothing can match.
    assert translate_filters([EqualTo(("__publishTime",), t)])[0].time.empty


def test_naive_datetimes_are_utc_and_other_zones_are_converted() -> None:
    naive = datetime(2026, 11, 1, 12, 0)
    assert translate_filters([GreaterThanOrEqual(("__publishTime",), naive)])[0].time.lower_ms == (
        T0_MS
    )
    paris = T0.astimezone(timezone(timedelta(hours=1)))
    assert translate_filters([LessThanOrEqual(("__publishTime",), paris)])[0].time.upper_ms == (
        T0_MS
    )


def test_several_time_filters_intersect_and_in_spans_its_values() -> None:
    pushdown, _ = translate_filters(
        [
            GreaterThan(("__publishTime",), T0),
            GreaterThanOrEqual(("__publishTime",), T0 + timedelta(seconds=10)),
            LessThanOrEqual(("__publishTime",), T0 + timedelta(minutes=2)),
            LessThan(("__publishTime",), T0 + timedelta(minutes=3)),
        ]
    )
    assert pushdown.time == TimeBounds(T0_MS + 10_000, T0_MS + 2 * MINUTE)
    within, _ = translate_filters([In(("__publishTime",), (T0 + timedelta(seconds=9), T0))])
    assert within.time == TimeBounds(T0_MS, T0_MS + 9_000)
    disjoint, _ = translate_filters(
        [GreaterThan(("__publishTime",), T0), LessThan(("__publishTime",), T0)]
    )
    assert disjoint.time.empty


def test_topic_and_partition_equalities_and_in_lists() -> None:
    pushdown, _ = translate_filters(
        [
            In(("__topic",), (REF.topic, OTHER.topic)),
            EqualTo(("__topic",), REF.topic),
            In(("__partition",), (1, 2, 3)),
            In(("__partition",), (2, 3, 4)),
        ]
    )
    assert pushdown.topics == frozenset({REF.topic})
    assert pushdown.partitions == frozenset({2, 3})
    assert pushdown.time.unbounded


def test_filters_planning_cannot_use_are_ignored() -> None:
    filters = [
        IsNotNull(("__publishTime",)),
        Not(EqualTo(("__partition",), 1)),
        StringStartsWith(("__topic",), "persistent://"),
        EqualTo(("__partition",), True),  # a boolean is not a partition index
        EqualTo(("__partition",), "1"),
        EqualTo(("__publishTime", "nested"), T0),
        GreaterThan(("__publishTime",), "2026-11-01"),  # not a datetime: no guess
        In(("__publishTime",), (T0, None)),
        EqualTo(("value",), b"x"),
    ]
    pushdown, remaining = translate_filters(filters)
    assert pushdown == Pushdown()
    assert remaining == filters


def test_planning_loads_without_pyspark() -> None:
    """planning matches filters by class name: importing it must not import PySpark."""
    import subprocess

    code = (
        "import sys; import stripemq.spark.planning, stripemq.spark.catalog; "
        "sys.exit(1 if 'pyspark' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---------------------------------------------------------------------- time bounds


def test_overlaps_and_covers_widen_by_the_skew() -> None:
    bounds = TimeBounds(1_000, 2_000)
    assert bounds.overlaps(2_000, 3_000, 0)
    assert not bounds.overlaps(2_001, 3_000, 0)
    assert bounds.overlaps(2_001, 3_000, 1)
    assert bounds.overlaps(0, 1_000, 0) and not bounds.overlaps(0, 999, 0)
    assert bounds.overlaps(0, 999, 1)
    assert TimeBounds(upper_ms=5).overlaps(-100, 5, 0)
    assert TimeBounds().overlaps(0, 0, 0)
    assert not TimeBounds(3, 2).overlaps(0, 10, 100)
    assert bounds.covers(1_000, 2_000, 0) and not bounds.covers(1_000, 2_000, 1)
    assert TimeBounds(lower_ms=10).covers(20, 2**62, 5)
    assert not TimeBounds(upper_ms=10).covers(0, 11, 0)


# ---------------------------------------------------------------------- pruning


SNAPSHOT = TopicSnapshot(
    REF,
    (
        closed(10, 100, 10_000, T0_MS, T0_MS + 10 * MINUTE),
        closed(11, 0, 0, T0_MS + 10 * MINUTE, T0_MS + 20 * MINUTE),  # rolled over empty
        closed(12, 100, 10_000, T0_MS + 20 * MINUTE, T0_MS + 30 * MINUTE),
        closed(13, 100, 10_000, T0_MS + 30 * MINUTE, T0_MS + 40 * MINUTE),
        open_ledger(14, 49, 5_000, T0_MS + 40 * MINUTE),
    ),
)


def ids(spans: list[LedgerSpan]) -> list[int]:
    return [span.ledger_id for span in spans]


def test_prune_keeps_non_empty_ledgers_without_filters() -> None:
    assert ids(prune_snapshot(SNAPSHOT, Pushdown(), 0)) == [10, 12, 13, 14]


def test_prune_by_time_drops_ledgers_wholly_outside_the_bounds_with_slack() -> None:
    bounds = TimeBounds(T0_MS + 25 * MINUTE, T0_MS + 35 * MINUTE)
    assert ids(prune_snapshot(SNAPSHOT, Pushdown(time=bounds), 0)) == [12, 13]
    # Five minutes of skew reach ledger 10's close? No (15 min away); ledger 14's creation, yes.
    assert ids(prune_snapshot(SNAPSHOT, Pushdown(time=bounds), 5 * MINUTE)) == [12, 13, 14]
    later = TimeBounds(lower_ms=T0_MS + 60 * MINUTE)
    assert ids(prune_snapshot(SNAPSHOT, Pushdown(time=later), 0)) == [14]  # open: no end yet
    earlier = TimeBounds(upper_ms=T0_MS - 1)
    assert ids(prune_snapshot(SNAPSHOT, Pushdown(time=earlier), 0)) == []
    assert ids(prune_snapshot(SNAPSHOT, Pushdown(time=earlier), 1)) == [10]


def test_prune_treats_unknown_times_as_unbounded() -> None:
    snapshot = TopicSnapshot(REF, (closed(7, 5, 50, 0, 0),))
    bounds = TimeBounds(T0_MS, T0_MS + 1)
    assert ids(prune_snapshot(snapshot, Pushdown(time=bounds), 0)) == [7]


def test_prune_by_topic_and_partition() -> None:
    assert prune_snapshot(SNAPSHOT, Pushdown(topics=frozenset({OTHER.topic})), 0) == []
    assert ids(prune_snapshot(SNAPSHOT, Pushdown(topics=frozenset({REF.topic})), 0)) == [
        10,
        12,
        13,
        14,
    ]
    assert prune_snapshot(SNAPSHOT, Pushdown(partitions=frozenset({0, 2})), 0) == []
    assert len(prune_snapshot(SNAPSHOT, Pushdown(partitions=frozenset({1})), 0)) == 4
    assert prune_snapshot(SNAPSHOT, Pushdown(time=TimeBounds(2, 1)), 0) == []


def test_an_open_ledger_with_nothing_confirmed_is_dropped() -> None:
    snapshot = TopicSnapshot(REF, (open_ledger(20, -1, 0, T0_MS),))
    assert prune_snapshot(snapshot, Pushdown(), 0) == []
    assert plan_splits([snapshot], Pushdown(), max_entries=10, max_bytes=1 << 20, skew_ms=0) == []


# ---------------------------------------------------------------------- splits


def test_split_by_entries_is_even_and_contiguous() -> None:
    span = closed(5, 1_000, 100_000, T0_MS, T0_MS + 1)
    splits = split_range(REF, span, 0, 999, max_entries=300, max_bytes=1 << 30)
    assert [(s.first_entry, s.last_entry) for s in splits] == [
        (0, 249),
        (250, 499),
        (500, 749),
        (750, 999),
    ]
    assert all(s.ledger_id == 5 and s.ref == REF for s in splits)
    assert [s.estimated_bytes for s in splits] == [25_000] * 4
    uneven = split_range(REF, span, 3, 12, max_entries=3, max_bytes=1 << 30)
    assert [s.entries for s in uneven] == [3, 3, 2, 2]
    assert uneven[0].first_entry == 3 and uneven[-1].last_entry == 12


def test_split_by_bytes_uses_the_average_entry_size() -> None:
    span = closed(5, 100, 1_000_000, T0_MS, T0_MS + 1)  # 10 kB an entry
    splits = split_range(REF, span, 0, 99, max_entries=1_000, max_bytes=45_000)
    assert all(s.entries <= 4 for s in splits)
    assert sum(s.entries for s in splits) == 100 and len(splits) == 25
    assert all(s.estimated_bytes == 40_000 for s in splits)
    # An entry bigger than max_bytes still gets a split of its own.
    huge = split_range(REF, closed(6, 3, 3_000_000, 0, 1), 0, 2, 1_000, 1_000)
    assert [(s.first_entry, s.last_entry) for s in huge] == [(0, 0), (1, 1), (2, 2)]


def test_split_of_an_empty_or_unknown_size_range() -> None:
    span = open_ledger(8, 9, 0, T0_MS)  # size not known
    assert [s.entries for s in split_range(REF, span, 0, 9, 4, 1)] == [4, 3, 3]
    assert split_range(REF, span, 5, 4, 4, 1) == []
    assert split_range(REF, open_ledger(9, -1, 0, T0_MS), 0, -1, 4, 1) == []
    # Never past what the span holds.
    assert split_range(REF, span, 0, 50, 100, 1 << 20)[-1].last_entry == 9


def test_plan_splits_in_topic_ledger_entry_order_with_ledger_pruning() -> None:
    other = TopicSnapshot(OTHER, (closed(30, 10, 100, T0_MS, T0_MS + MINUTE),))
    splits = plan_splits(
        [SNAPSHOT, other], Pushdown(), max_entries=60, max_bytes=1 << 30, skew_ms=0
    )
    assert [(s.ref.partition, s.ledger_id, s.first_entry, s.last_entry) for s in splits] == [
        (1, 10, 0, 49),
        (1, 10, 50, 99),
        (1, 12, 0, 49),
        (1, 12, 50, 99),
        (1, 13, 0, 49),
        (1, 13, 50, 99),
        (1, 14, 0, 49),  # the open ledger, to its LAC
        (2, 30, 0, 9),
    ]
    only_partition_two = plan_splits(
        [SNAPSHOT, other],
        Pushdown(partitions=frozenset({2})),
        max_entries=60,
        max_bytes=1 << 30,
        skew_ms=0,
    )
    assert only_partition_two == [ReadSplit(OTHER, 30, 0, 9, 100)]


# ---------------------------------------------------------------------- narrowing


class Probe:
    """Publish times of one ledger's entries, counting reads."""

    def __init__(self, times: list[int]) -> None:
        self.times = times
        self.reads: list[int] = []

    async def __call__(self, entry_id: int) -> int:
        assert 0 <= entry_id < len(self.times), entry_id
        self.reads.append(entry_id)
        return self.times[entry_id]


def probe_budget(n: int) -> int:
    return 2 * math.ceil(math.log2(n + 1)) + 2


async def test_narrowing_ordered_times_finds_the_exact_range() -> None:
    probe = Probe([1_000 + 10 * i for i in range(1_000)])  # entry i at 1000 + 10i
    found = await narrow_by_publish_time(probe, 0, 999, TimeBounds(2_000, 3_005), 0)
    assert found == (100, 200)
    assert len(set(probe.reads)) <= probe_budget(1_000)
    assert await narrow_by_publish_time(Probe(probe.times), 0, 999, TimeBounds(1_995), 0) == (
        100,
        999,
    )
    assert await narrow_by_publish_time(
        Probe(probe.times), 0, 999, TimeBounds(upper_ms=1_000), 0
    ) == (0, 0)
    # Within a sub-range of the ledger only.
    assert await narrow_by_publish_time(Probe(probe.times), 150, 170, TimeBounds(2_000), 0) == (
        150,
        170,
    )


async def test_narrowing_keeps_the_skew_as_slack() -> None:
    times = [1_000 + 10 * i for i in range(100)]
    found = await narrow_by_publish_time(Probe(times), 0, 99, TimeBounds(1_500, 1_600), 50)
    assert found == (45, 65)  # times 1450..1650


async def test_narrowing_that_matches_nothing_or_everything() -> None:
    times = [1_000 + i for i in range(64)]
    assert await narrow_by_publish_time(Probe(times), 0, 63, TimeBounds(5_000), 0) is None
    assert await narrow_by_publish_time(Probe(times), 0, 63, TimeBounds(upper_ms=10), 0) is None
    assert await narrow_by_publish_time(Probe(times), 0, 63, TimeBounds(1_010, 1_009), 0) is None
    assert await narrow_by_publish_time(Probe(times), 5, 4, TimeBounds(1_000), 0) is None
    unbounded = Probe(times)
    assert await narrow_by_publish_time(unbounded, 0, 63, TimeBounds(), 0) == (0, 63)
    assert unbounded.reads == []  # nothing to narrow: no reads
    single = Probe([7])
    assert await narrow_by_publish_time(single, 0, 0, TimeBounds(7, 7), 0) == (0, 0)


def skewed_times(rng: random.Random, n: int, skew: int) -> list[int]:
    """Publish times where no entry is more than ``skew`` older than any entry before it
    (several producers whose clocks differ by up to ``skew``)."""
    times, newest = [], 1_000_000
    for _ in range(n):
        t = rng.randint(newest - skew, newest + 40)
        times.append(t)
        newest = max(newest, t)
    return times


@pytest.mark.parametrize("seed", range(40))
async def test_narrowing_out_of_order_times_within_skew_never_drops_a_match(seed: int) -> None:
    rng = random.Random(seed)
    skew = rng.choice([0, 5, 50, 500])
    n = rng.randint(1, 2_000)
    times = skewed_times(rng, n, skew)
    low, high = min(times), max(times)
    lower = rng.choice([None, rng.randint(low - 100, high + 100)])
    upper = rng.choice([None, rng.randint(lower or low, high + 100)])
    bounds = TimeBounds(lower, upper)
    probe = Probe(times)
    found = await narrow_by_publish_time(probe, 0, n - 1, bounds, skew)
    matching = [
        i
        for i, t in enumerate(times)
        if (lower is None or t >= lower) and (upper is None or t <= upper)
    ]
    if matching:
        assert found is not None, (bounds, skew)
        assert found[0] <= matching[0] and matching[-1] <= found[1]
    if found is not None:
        assert 0 <= found[0] <= found[1] <= n - 1
        # What is kept is no wider than the skew requires: its ends may match within skew.
        slack = TimeBounds(
            None if lower is None else lower - 2 * skew,
            None if upper is None else upper + 2 * skew,
        )
        if not bounds.unbounded:
            assert slack.overlaps(times[found[0]], times[found[0]], 0)
            assert slack.overlaps(times[found[1]], times[found[1]], 0)
    assert len(set(probe.reads)) <= probe_budget(n)


async def test_narrowing_with_an_entry_far_behind_within_skew() -> None:
    """A producer whose clock runs 30 s behind writes entry 6: with 30 s of skew it is kept."""
    times = [100_000 + 1_000 * i for i in range(12)]
    times[6] = 76_000  # 30 s behind entry 5's 105 000, and before the lower bound
    bounds = TimeBounds(upper_ms=80_000)
    assert await narrow_by_publish_time(Probe(times), 0, 11, bounds, 30_000) is not None
    found = await narrow_by_publish_time(Probe(times), 0, 11, bounds, 30_000)
    assert found is not None and found[0] == 0 and found[1] >= 6
