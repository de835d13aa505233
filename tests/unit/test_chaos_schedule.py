"""The seeded fault schedule (``stripemq.chaos.schedule``): replayable from its seed, the
right number of faults in time order, and always inside what the cluster promises to survive
(one bookie out at a time, one broker out at a time, damage on one victim bookie only, lost
bookies spaced out, targets that exist), for many seeds and cluster shapes."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stripemq.chaos.schedule import (
    FaultKind,
    PlannedFault,
    ScheduleShape,
    bookie_name,
    broker_name,
    make_schedule,
    parse_kinds,
)

# at_s is rounded to 10 ms after the planner decided on the exact time: allow that much.
ROUNDING_S = 0.01 + 1e-9
# The planner keeps a second between two outages of the same kind of process.
MARGIN_S = 1.0
PARTITION_TARGET = re.compile(r"^broker-(\d+)/bookie-(\d+)$")

SHAPES = [
    ScheduleShape(),
    ScheduleShape(bookies=5, brokers=3, lost_bookie_gap_s=5.0),
    ScheduleShape(bookies=3, brokers=1, kill_downtime_s=(0.1, 0.2), partition_s=(0.5, 1.0)),
    ScheduleShape(session_timeout_s=10.0, pause_s=(1.0, 9.5), disk_full_s=(5.0, 30.0)),
]
# (duration_s, faults): sparse, and far more faults than fit without pushing starts back.
RUNS = [(120.0, 8), (30.0, 40)]


def overlaps(a: PlannedFault, b: PlannedFault) -> bool:
    """Whether the planned times ``[at_s, end_s)`` of two faults meet."""
    return a.at_s < b.end_s and b.at_s < a.end_s


def assert_sequential(faults: Sequence[PlannedFault], what: str) -> None:
    """Each starts after the one before ended, with the planner's margin (give or take the
    rounding); ends then only grow, so no two of them overlap."""
    for before, after in itertools.pairwise(faults):
        assert not overlaps(before, after), f"{what} overlap: {before} and {after}"
        assert after.at_s >= before.end_s + MARGIN_S - ROUNDING_S, f"{what}: {before} {after}"


def assert_within_promises(schedule: Sequence[PlannedFault], shape: ScheduleShape) -> None:
    """Every constraint the schedule's docstring states, checked fault by fault."""
    ats = [p.at_s for p in schedule]
    assert ats == sorted(ats)
    assert all(at >= 0 for at in ats)

    assert_sequential([p for p in schedule if p.kind.on_bookie], "bookie outages")
    assert_sequential([p for p in schedule if p.kind.on_broker], "broker outages")
    # A partition needs its broker up: it never meets a broker outage (nor another partition).
    broker_side = [p for p in schedule if p.kind.on_broker or p.kind is FaultKind.PARTITION]
    assert_sequential(broker_side, "broker outages and partitions")

    losses = [p for p in schedule if p.kind is FaultKind.BOOKIE_LOST]
    for before, after in itertools.pairwise(losses):
        assert after.at_s - before.at_s >= shape.lost_bookie_gap_s - ROUNDING_S

    brokers = {broker_name(i) for i in range(shape.brokers)}
    members = {bookie_name(i) for i in range(shape.bookies)}
    ever = set(members)
    lost: set[str] = set()
    victim: str | None = None  # the one bookie whose data may be damaged
    for p in schedule:
        kind = p.kind
        assert (p.replacement is not None) is (kind is FaultKind.BOOKIE_LOST), p
        if kind is FaultKind.PARTITION:
            match = PARTITION_TARGET.match(p.target)
            assert match, p
            assert f"broker-{match[1]}" in brokers and f"bookie-{match[2]}" in members, p
        elif kind.on_broker:
            assert p.target in brokers, p
        else:
            assert p.target in members, (p, members)
        assert not any(name in lost for name in p.target.split("/")), p
        if kind.damages_data:
            if victim is None:
                victim = p.target
            assert p.target == victim, f"{p} damages a second bookie (victim {victim})"
        if kind is FaultKind.BOOKIE_LOST:
            assert p.replacement is not None and p.replacement not in ever, p
            members.remove(p.target)
            lost.add(p.target)
            members.add(p.replacement)
            ever.add(p.replacement)
            victim = p.replacement
        assert len(members) == shape.bookies


def assert_durations(schedule: Sequence[PlannedFault], shape: ScheduleShape) -> None:
    """Each kind lasts as its shape says (rounded to 10 ms); session expiries outlast the
    session and pauses end before it, when the shape leaves room for that."""
    spans = {
        FaultKind.BOOKIE_KILL: shape.kill_downtime_s,
        FaultKind.BROKER_KILL: shape.kill_downtime_s,
        FaultKind.BOOKIE_PAUSE: shape.pause_s,
        FaultKind.BROKER_PAUSE: shape.pause_s,
        FaultKind.BOOKIE_DISK_FULL: shape.disk_full_s,
        FaultKind.PARTITION: shape.partition_s,
    }
    for p in schedule:
        if p.kind in spans:
            low, high = spans[p.kind]
            assert low - 0.005 <= p.duration_s <= high + 0.005, p
        elif p.kind is FaultKind.BROKER_SESSION_EXPIRY:
            assert p.duration_s > shape.session_timeout_s, p
        else:
            assert p.duration_s == 0.0, p
        if p.kind in (FaultKind.BOOKIE_PAUSE, FaultKind.BROKER_PAUSE):
            assert p.duration_s < shape.session_timeout_s, p


# --- replay -----------------------------------------------------------------------------------


def test_same_seed_and_arguments_give_the_same_schedule() -> None:
    first = make_schedule(42, 120.0, 20)
    assert make_schedule(42, 120.0, 20) == first
    shape = ScheduleShape(bookies=5)
    assert make_schedule(7, 60.0, 10, shape=shape) == make_schedule(7, 60.0, 10, shape=shape)


def test_different_seeds_give_different_schedules() -> None:
    assert make_schedule(1, 120.0, 20) != make_schedule(2, 120.0, 20)
    schedules = {tuple(make_schedule(seed, 120.0, 10)) for seed in range(50)}
    assert len(schedules) == 50


# --- shape of the list ----------------------------------------------------------------------


@pytest.mark.parametrize(("duration_s", "faults"), [(60.0, 1), (120.0, 10), (10.0, 25)])
def test_exactly_the_requested_faults_in_time_order(duration_s: float, faults: int) -> None:
    schedule = make_schedule(3, duration_s, faults)
    assert len(schedule) == faults
    assert [p.at_s for p in schedule] == sorted(p.at_s for p in schedule)


def test_zero_faults_is_an_empty_schedule() -> None:
    assert make_schedule(5, 60.0, 0) == []


@pytest.mark.parametrize(("duration_s", "faults"), [(60.0, -1), (0.0, 5), (-10.0, 5), (0.0, 0)])
def test_bad_arguments_raise(duration_s: float, faults: int) -> None:
    with pytest.raises(ValueError):
        make_schedule(1, duration_s, faults)


def test_no_kind_allowed_raises() -> None:
    with pytest.raises(ValueError, match="no fault kind"):
        make_schedule(1, 60.0, 5, kinds=[])


def test_starts_spread_over_the_duration_when_nothing_is_busy() -> None:
    """Instant faults on nothing busy: starts follow the even spread (with jitter)."""
    schedule = make_schedule(9, 100.0, 10, kinds=[FaultKind.ENTRY_LOG_BIT_FLIP])
    for i, p in enumerate(schedule):
        assert 10.0 * i - 0.005 <= p.at_s <= 10.0 * i + 8.0 + 0.005, p


def test_end_s_is_start_plus_duration() -> None:
    fault = PlannedFault(2.5, FaultKind.BOOKIE_KILL, "bookie-0", 1.25)
    assert fault.end_s == 3.75
    assert PlannedFault(4.0, FaultKind.ENTRY_LOG_TRUNCATE, "bookie-1").end_s == 4.0


# --- the promises, over many seeds ----------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=[f"shape{i}" for i in range(len(SHAPES))])
@pytest.mark.parametrize(("duration_s", "faults"), RUNS)
def test_schedules_keep_their_promises(
    shape: ScheduleShape, duration_s: float, faults: int
) -> None:
    for seed in range(200):
        schedule = make_schedule(seed, duration_s, faults, shape=shape)
        assert len(schedule) == faults
        assert_within_promises(schedule, shape)
        assert_durations(schedule, shape)


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    duration_s=st.floats(1.0, 600.0),
    faults=st.integers(0, 40),
    kinds=st.lists(st.sampled_from(list(FaultKind)), min_size=1, max_size=6, unique=True),
    shape=st.sampled_from(SHAPES),
)
def test_any_schedule_keeps_its_promises(
    seed: int, duration_s: float, faults: int, kinds: list[FaultKind], shape: ScheduleShape
) -> None:
    schedule = make_schedule(seed, duration_s, faults, shape=shape, kinds=kinds)
    assert len(schedule) == faults
    assert {p.kind for p in schedule} <= set(kinds)
    assert_within_promises(schedule, shape)
    assert_durations(schedule, shape)


def test_every_kind_is_drawn_over_many_seeds() -> None:
    drawn = {p.kind for seed in range(30) for p in make_schedule(seed, 300.0, 30)}
    assert drawn == set(FaultKind)


def test_only_the_allowed_kinds_are_drawn() -> None:
    allowed = {FaultKind.BROKER_KILL, FaultKind.PARTITION}
    for seed in range(50):
        schedule = make_schedule(seed, 60.0, 12, kinds=allowed)
        assert {p.kind for p in schedule} <= allowed
    assert {p.kind for seed in range(50) for p in make_schedule(seed, 60, 12, kinds=allowed)} == (
        allowed
    )


def test_lost_bookies_wait_for_the_gap_even_when_the_pace_asks_sooner() -> None:
    shape = ScheduleShape(lost_bookie_gap_s=20.0)
    schedule = make_schedule(11, 10.0, 4, shape=shape, kinds=[FaultKind.BOOKIE_LOST])

    assert [p.kind for p in schedule] == [FaultKind.BOOKIE_LOST] * 4
    for before, after in itertools.pairwise(schedule):
        assert after.at_s - before.at_s >= 20.0 - ROUNDING_S
    # Each loss takes the bookie that replaced the one lost before.
    for before, after in itertools.pairwise(schedule):
        assert after.target == before.replacement
    assert [p.replacement for p in schedule] == ["bookie-4", "bookie-5", "bookie-6", "bookie-7"]
    assert_within_promises(schedule, shape)


def test_damage_always_hits_the_victim() -> None:
    damage = [FaultKind.ENTRY_LOG_BIT_FLIP, FaultKind.ENTRY_LOG_TRUNCATE]
    for seed in range(50):
        targets = {p.target for p in make_schedule(seed, 60.0, 15, kinds=damage)}
        assert len(targets) == 1


def test_after_a_loss_the_replacement_is_the_victim() -> None:
    kinds = [FaultKind.BOOKIE_LOST, FaultKind.ENTRY_LOG_BIT_FLIP, FaultKind.ENTRY_LOG_TRUNCATE]
    seen_loss = False
    for seed in range(50):
        schedule = make_schedule(seed, 200.0, 20, kinds=kinds)
        victim = None
        for p in schedule:
            if victim is not None:
                assert p.target == victim, (seed, p)
            victim = p.replacement or p.target
            seen_loss |= p.kind is FaultKind.BOOKIE_LOST
    assert seen_loss


def test_session_expiry_outlasts_the_session() -> None:
    shape = ScheduleShape(session_timeout_s=6.0)
    schedule = make_schedule(2, 300.0, 20, shape=shape, kinds=[FaultKind.BROKER_SESSION_EXPIRY])
    assert len(schedule) == 20
    for p in schedule:
        assert 7.0 - 0.005 <= p.duration_s <= 8.0 + 0.005, p
    assert_within_promises(schedule, shape)


def test_pauses_end_before_a_short_session_expires() -> None:
    shape = ScheduleShape(session_timeout_s=1.5)  # pause_s stays at its default (0.5, 2.0)
    pauses = [FaultKind.BOOKIE_PAUSE, FaultKind.BROKER_PAUSE]
    for seed in range(20):
        for p in make_schedule(seed, 60.0, 10, shape=shape, kinds=pauses):
            assert p.duration_s < shape.session_timeout_s, p


# --- parse_kinds ----------------------------------------------------------------------------


def test_parse_kinds_reads_a_comma_list() -> None:
    assert parse_kinds("bookie_kill,partition") == [FaultKind.BOOKIE_KILL, FaultKind.PARTITION]
    assert parse_kinds(" broker_pause , entry_log_truncate ,") == [
        FaultKind.BROKER_PAUSE,
        FaultKind.ENTRY_LOG_TRUNCATE,
    ]
    assert parse_kinds(",".join(k.value for k in FaultKind)) == list(FaultKind)


def test_parse_kinds_names_the_unknown_one_and_lists_the_kinds() -> None:
    with pytest.raises(ValueError) as caught:
        parse_kinds("bookie_kill,bookie_explode")
    message = str(caught.value)
    assert "'bookie_explode'" in message
    for kind in FaultKind:
        assert kind.value in message


@pytest.mark.parametrize("text", ["", " ", ",", " , ,"])
def test_parse_kinds_refuses_an_empty_list(text: str) -> None:
    with pytest.raises(ValueError, match="no fault kind"):
        parse_kinds(text)


def test_kind_categories() -> None:
    bookie_out = {k for k in FaultKind if k.on_bookie}
    assert bookie_out == {
        FaultKind.BOOKIE_KILL,
        FaultKind.BOOKIE_PAUSE,
        FaultKind.BOOKIE_DISK_FULL,
        FaultKind.BOOKIE_LOST,
        FaultKind.PARTITION,
    }
    assert {k for k in FaultKind if k.on_broker} == {
        FaultKind.BROKER_KILL,
        FaultKind.BROKER_PAUSE,
        FaultKind.BROKER_SESSION_EXPIRY,
    }
    assert {k for k in FaultKind if k.damages_data} == {
        FaultKind.BOOKIE_LOST,
        FaultKind.ENTRY_LOG_BIT_FLIP,
        FaultKind.ENTRY_LOG_TRUNCATE,
    }
