"""The chaos run's verdict (``stripemq.chaos.checker``) on hand-made histories: lost,
duplicated and reordered messages are each flagged, what is allowed is not, recovery is timed
per fault and after the last one; and ``History`` survives its JSON-lines round trip."""

from __future__ import annotations

import gc
import json
import random
import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stripemq.chaos.checker import Check, Verdict, check_history, count_reordered
from stripemq.chaos.history import (
    Delivery,
    FaultEvent,
    History,
    MessageKey,
    Outcome,
    SendRecord,
)

T0 = 1_700_000_000_000  # every timestamp below is T0 + milliseconds
DEDUP = "persistent://public/chaos-dedup/events"
PLAIN = "persistent://public/chaos-plain/events"
MODES = ("exclusive", "failover", "shared", "key_shared")
ORDERED_MODES = ("exclusive", "failover", "key_shared")


def msg(seq: int, key: str = "k0", producer: str = "p0") -> MessageKey:
    return MessageKey(producer, key, seq)


def send(
    topic: str,
    message: MessageKey,
    at: int,
    outcome: Outcome = Outcome.ACKED,
    *,
    dedup: bool | None = None,
) -> SendRecord:
    """A send at ``T0 + at`` whose outcome was known 5 ms later."""
    return SendRecord(
        topic=topic,
        producer=message.producer,
        key=message.key,
        seq=message.seq,
        dedup=(topic == DEDUP) if dedup is None else dedup,
        sent_ms=T0 + at,
        outcome=outcome,
        done_ms=T0 + at + 5,
    )


def deliver(
    topic: str, subscription: str, message: MessageKey, at: int, redelivery_count: int = 0
) -> Delivery:
    return Delivery(
        topic=topic,
        subscription=subscription,
        consumer=f"{subscription}-0",
        producer=message.producer,
        key=message.key,
        seq=message.seq,
        sent_ms=T0 + at,
        received_ms=T0 + at + 10,
        redelivery_count=redelivery_count,
    )


def clean_history(count: int = 4) -> History:
    """Both topics: ``count`` acked sends 100 ms apart over two keys, stored once and in
    order, each delivered once and in order to a subscription of every mode."""
    history = History()
    for topic in (DEDUP, PLAIN):
        messages = [msg(i // 2, key=f"k{i % 2}") for i in range(count)]
        history.sends += [send(topic, m, 100 * i) for i, m in enumerate(messages)]
        history.read_back[topic] = list(messages)
        for mode in MODES:
            history.deliveries += [deliver(topic, mode, m, 100 * i) for i, m in enumerate(messages)]
    return history


def check(
    history: History,
    *,
    recovery_bound_s: float = 60.0,
    under_replicated: int | None = 0,
    unexpected_exits: Sequence[str] = (),
) -> Verdict:
    """The verdict with the cluster's measurements clean unless a test says otherwise; the
    subscriptions expected on every topic are those the history delivered to anywhere."""
    return check_history(
        history,
        recovery_bound_s=recovery_bound_s,
        under_replicated=under_replicated,
        unexpected_exits=unexpected_exits,
        subscriptions=sorted({d.subscription for d in history.deliveries}),
    )


def named(verdict: Verdict, words: str) -> Check:
    """The one check whose name contains ``words``."""
    found = [c for c in verdict.checks if words in c.name]
    assert len(found) == 1, [c.name for c in verdict.checks]
    return found[0]


def failing(verdict: Verdict) -> list[str]:
    return [c.name for c in verdict.checks if not c.passed]


# --- a clean run --------------------------------------------------------------------------


def test_clean_history_passes_every_check() -> None:
    verdict = check(clean_history())

    assert failing(verdict) == []
    assert verdict.passed
    assert (verdict.acked, verdict.failed, verdict.unknown) == (8, 0, 0)
    assert verdict.lost == verdict.undelivered == verdict.reordered == 0
    assert verdict.duplicated == verdict.duplicated_without_dedup == 0
    assert verdict.recovery_s is None
    assert verdict.time_to_recover_by_kind == {}
    assert "no fault was injected" in named(verdict, "resumed").detail
    assert "0 of 8 acknowledged" in named(verdict, "lost").detail


def test_counts_outcomes_of_every_send() -> None:
    history = clean_history()
    history.sends += [
        send(DEDUP, msg(10), 900, Outcome.FAILED),
        send(DEDUP, msg(11), 910, Outcome.UNKNOWN),
        send(PLAIN, msg(12), 920, Outcome.UNKNOWN),
    ]
    verdict = check(history)
    assert (verdict.acked, verdict.failed, verdict.unknown) == (8, 1, 2)
    assert verdict.passed


def test_check_as_dict_and_verdict_passed_follow_the_checks() -> None:
    verdict = Verdict()
    assert verdict.passed  # nothing checked, nothing failed
    verdict.add("a", True, "fine")
    verdict.add("b", False, "not fine")
    assert not verdict.passed
    assert verdict.checks[1].as_dict() == {"name": "b", "passed": False, "detail": "not fine"}


# --- lost -----------------------------------------------------------------------------------


def test_lost_acknowledged_message_is_flagged_and_named() -> None:
    history = clean_history()
    history.read_back[DEDUP].remove(msg(1, key="k0"))

    verdict = check(history)

    assert verdict.lost == 1
    lost = named(verdict, "lost")
    assert not lost.passed
    assert f"{DEDUP} p0/k0#1" in lost.detail
    assert "1 of 8 acknowledged" in lost.detail
    assert failing(verdict) == [lost.name]  # it was still delivered: only the log lost it


def test_acked_message_stored_in_another_topic_is_lost() -> None:
    history = clean_history()
    history.sends.append(send(DEDUP, msg(9), 900))
    history.read_back[PLAIN].append(msg(9))

    verdict = check(history)

    assert verdict.lost == 1
    assert f"{DEDUP} p0/k0#9" in named(verdict, "lost").detail


def test_a_topic_not_read_back_fails_the_run_without_counting_its_messages_lost() -> None:
    history = clean_history()
    del history.read_back[PLAIN]  # the read-back failed (a timeout): nothing is known

    verdict = check(history)

    assert verdict.lost == 0
    unread = named(verdict, "read back whole")
    assert not unread.passed and PLAIN in unread.detail
    assert not verdict.passed


def test_a_run_where_nothing_was_acknowledged_proves_nothing() -> None:
    history = History()
    history.sends += [
        SendRecord(DEDUP, "p0", "k0", i, True, T0 + i, Outcome.UNKNOWN, T0 + i + 5)
        for i in range(100)
    ]

    verdict = check(history)

    assert not named(verdict, "traffic flowed").passed
    assert not verdict.passed


def test_a_fault_that_did_not_take_effect_fails_the_run() -> None:
    history = clean_history()
    history.faults.append(
        FaultEvent("partition", "broker-0/bookie-1", T0, T0 + 10, "held 0", took_effect=False)
    )

    verdict = check(history)

    missed = named(verdict, "took effect")
    assert not missed.passed and "partition broker-0/bookie-1: held 0" in missed.detail


def test_corrupt_payloads_fail_the_run() -> None:
    verdict = check_history(clean_history(), under_replicated=0, corrupt_messages=2)

    assert not named(verdict, "intact").passed


def test_many_losses_name_a_few_examples() -> None:
    history = History()
    history.sends += [send(DEDUP, msg(i), 10 * i) for i in range(8)]
    history.read_back[DEDUP] = []

    detail = named(check(history), "lost").detail

    assert "8 of 8" in detail
    assert "and 3 more" in detail


@pytest.mark.parametrize("outcome", [Outcome.FAILED, Outcome.UNKNOWN])
def test_unacknowledged_send_missing_from_the_log_is_not_lost(outcome: Outcome) -> None:
    history = clean_history()
    history.sends.append(send(DEDUP, msg(7), 1_000, outcome))

    verdict = check(history)

    assert verdict.lost == 0
    assert verdict.undelivered == 0  # nor owed to any subscription
    assert verdict.passed


@pytest.mark.parametrize("outcome", [Outcome.FAILED, Outcome.UNKNOWN])
def test_unacknowledged_send_found_in_the_log_is_fine(outcome: Outcome) -> None:
    history = clean_history()
    history.sends.append(send(DEDUP, msg(7), 1_000, outcome))
    history.read_back[DEDUP].append(msg(7))

    assert check(history).passed


def test_failed_then_acked_resend_must_be_stored() -> None:
    history = clean_history()
    history.sends += [
        send(DEDUP, msg(7), 1_000, Outcome.UNKNOWN),
        send(DEDUP, msg(7), 1_100, Outcome.ACKED),
    ]
    verdict = check(history)
    assert verdict.lost == 1
    assert f"{DEDUP} p0/k0#7" in named(verdict, "lost").detail


# --- duplicated -----------------------------------------------------------------------------


def test_duplicate_in_a_deduplicated_topic_fails() -> None:
    history = clean_history()
    history.read_back[DEDUP].append(msg(1, key="k1"))

    verdict = check(history)

    assert verdict.duplicated == 1
    assert verdict.duplicated_without_dedup == 0
    dup = named(verdict, "exactly once")
    assert not dup.passed
    assert f"{DEDUP} p0/k1#1" in dup.detail
    assert failing(verdict) == [dup.name]  # a later copy of an earlier message: no reorder


def test_duplicate_without_dedup_is_only_counted() -> None:
    history = clean_history()
    history.read_back[PLAIN] += [msg(1, key="k1"), msg(1, key="k1")]

    verdict = check(history)

    assert verdict.duplicated == 0
    assert verdict.duplicated_without_dedup == 2
    dup = named(verdict, "exactly once")
    assert dup.passed
    assert "2 resend duplicate(s)" in dup.detail
    assert verdict.passed


def test_dedup_is_per_topic() -> None:
    """One topic's deduplication says nothing about another's copies."""
    history = clean_history()
    history.read_back[DEDUP].append(msg(0))
    history.read_back[PLAIN].append(msg(0))

    verdict = check(history)

    assert (verdict.duplicated, verdict.duplicated_without_dedup) == (1, 1)


# --- reordered in the stored log ------------------------------------------------------------


def test_reordered_pair_in_the_stored_log_is_flagged() -> None:
    history = History()
    messages = [msg(i) for i in range(4)]
    history.sends += [send(DEDUP, m, 10 * i) for i, m in enumerate(messages)]
    history.read_back[DEDUP] = [msg(0), msg(2), msg(1), msg(3)]
    history.deliveries += [deliver(DEDUP, "shared", m, 10 * i) for i, m in enumerate(messages)]

    verdict = check(history)

    assert verdict.reordered == 1
    order = named(verdict, "stored in order")
    assert not order.passed
    assert f"{DEDUP} p0/k0#1" in order.detail
    assert failing(verdict) == [order.name]


def test_resend_of_a_stored_run_is_not_a_reorder() -> None:
    """m1 m2 m1 m2: the second copies repeat what came first; nothing moved ahead."""
    history = History()
    history.sends += [send(PLAIN, msg(1), 0), send(PLAIN, msg(2), 10)]
    history.read_back[PLAIN] = [msg(1), msg(2), msg(1), msg(2)]
    history.deliveries += [deliver(PLAIN, "exclusive", msg(i), 10 * i) for i in (1, 2, 1, 2)]

    verdict = check(history)

    assert verdict.reordered == 0
    assert named(verdict, "stored in order").passed
    assert verdict.duplicated_without_dedup == 2
    assert verdict.passed


def test_order_is_per_producer_and_key() -> None:
    """Different keys and producers interleave freely."""
    stored = [msg(5, "k0"), msg(0, "k1"), msg(0, "k0", "p1"), msg(6, "k0"), msg(1, "k1")]
    history = History()
    history.sends += [send(PLAIN, m, 10 * i) for i, m in enumerate(stored)]
    history.read_back[PLAIN] = stored
    history.deliveries += [deliver(PLAIN, "exclusive", m, 10 * i) for i, m in enumerate(stored)]

    assert check(history).passed


def test_count_reordered_names_each_message_behind_a_later_one() -> None:
    sequence = [msg(0), msg(3), msg(1), msg(2), msg(4), msg(1), msg(0, "k1")]
    assert count_reordered(sequence) == [msg(1), msg(2)]
    assert count_reordered([]) == []


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 20)), max_size=40), st.randoms())
def test_count_reordered_ignores_repeats_of_an_ordered_log(
    draws: list[tuple[int, int]], rnd: random.Random
) -> None:
    """Any log whose first appearances are in order, with earlier messages repeated anywhere
    after their first appearance, has nothing out of order."""
    firsts = sorted({msg(seq, key=f"k{key}") for key, seq in draws}, key=lambda m: m.seq)
    log: list[MessageKey] = []
    for m in firsts:
        log.append(m)
        log += rnd.choices(log, k=rnd.randrange(3))  # resends of what is already there
    assert count_reordered(log) == []


# --- delivery: undelivered and reordered ----------------------------------------------------


def test_subscription_that_never_received_an_acked_message_is_flagged() -> None:
    history = clean_history()
    history.deliveries = [
        d
        for d in history.deliveries
        if not (d.topic == PLAIN and d.subscription == "shared" and d.message == msg(1, "k0"))
    ]

    verdict = check(history)

    assert verdict.undelivered == 1
    missing = named(verdict, "received every")
    assert not missing.passed
    assert f"{PLAIN}[shared] p0/k0#1" in missing.detail
    assert failing(verdict) == [missing.name]


def test_unacknowledged_message_is_not_owed_to_subscriptions() -> None:
    history = clean_history()
    history.sends.append(send(PLAIN, msg(9), 1_000, Outcome.UNKNOWN))
    history.read_back[PLAIN].append(msg(9))  # stored, yet never delivered: allowed

    verdict = check(history)
    assert verdict.undelivered == 0
    assert verdict.passed


def test_topic_without_any_delivery_is_flagged() -> None:
    history = clean_history()
    history.deliveries = [d for d in history.deliveries if d.topic != PLAIN]

    verdict = check(history)

    assert verdict.undelivered == 16  # 4 acknowledged messages, owed to each of 4 modes
    assert f"{PLAIN}[exclusive]" in named(verdict, "received every").detail
    # Expecting no subscription by name, a topic nobody received from is still flagged.
    bare = check_history(history, under_replicated=0, subscriptions=())
    assert bare.undelivered == 4
    assert f"{PLAIN}[no subscription]" in named(bare, "received every").detail


def test_subscription_with_no_delivery_at_all_is_flagged() -> None:
    history = clean_history()
    history.deliveries = [
        d for d in history.deliveries if not (d.topic == PLAIN and d.subscription == "failover")
    ]

    verdict = check(history)

    assert verdict.undelivered == 4
    assert not named(verdict, "received every").passed


@pytest.mark.parametrize("mode", MODES)
def test_reorder_in_first_deliveries_is_flagged_only_where_order_is_promised(mode: str) -> None:
    history = clean_history()
    # In this mode on PLAIN, p0/k0#1 now arrives first and p0/k0#0 only third.
    arrival = [msg(1, "k0"), msg(0, "k1"), msg(0, "k0"), msg(1, "k1")]
    history.deliveries = [
        d for d in history.deliveries if not (d.topic == PLAIN and d.subscription == mode)
    ]
    history.deliveries += [deliver(PLAIN, mode, m, 100 * i) for i, m in enumerate(arrival)]

    verdict = check(history)

    order = named(verdict, "delivered in order")
    if mode in ORDERED_MODES:
        assert verdict.reordered == 1
        assert not order.passed
        assert f"{PLAIN}[{mode}] p0/k0#0" in order.detail
        assert failing(verdict) == [order.name]
    else:
        assert verdict.reordered == 0
        assert order.passed
        assert verdict.passed


@pytest.mark.parametrize("mode", ORDERED_MODES)
def test_redeliveries_are_not_a_reorder(mode: str) -> None:
    history = History()
    messages = [msg(i) for i in range(4)]
    history.sends += [send(DEDUP, m, 10 * i) for i, m in enumerate(messages)]
    history.read_back[DEDUP] = list(messages)
    # First deliveries 0 1 2 3, then 1 2 3 again (a consumer reconnected or failed over).
    history.deliveries += [deliver(DEDUP, mode, m, 10 * i) for i, m in enumerate(messages)]
    history.deliveries += [deliver(DEDUP, mode, m, 100 + 10 * m.seq, 1) for m in messages[1:]]

    verdict = check(history)

    assert verdict.reordered == 0
    assert verdict.passed


def test_deliveries_are_ordered_by_when_they_arrived() -> None:
    """Two consumers' records interleave in the history; arrival time decides the order."""
    history = History()
    messages = [msg(i) for i in range(3)]
    history.sends += [send(DEDUP, m, 10 * i) for i, m in enumerate(messages)]
    history.read_back[DEDUP] = list(messages)
    history.deliveries += [
        deliver(DEDUP, "failover", msg(2), 20),
        deliver(DEDUP, "failover", msg(0), 0),
        deliver(DEDUP, "failover", msg(1), 10),
    ]
    assert check(history).passed


def test_reorders_in_the_log_and_in_deliveries_add_up() -> None:
    history = History()
    messages = [msg(i) for i in range(3)]
    history.sends += [send(DEDUP, m, 10 * i) for i, m in enumerate(messages)]
    history.read_back[DEDUP] = [msg(1), msg(0), msg(2)]
    history.deliveries += [
        deliver(DEDUP, mode, m, 10 * i)
        for mode in ("exclusive", "key_shared")
        for i, m in enumerate([msg(1), msg(0), msg(2)])
    ]
    assert check(history).reordered == 3


# --- recovery -------------------------------------------------------------------------------


def steady_history(until: int, step: int = 100) -> History:
    """One producer acked every ``step`` ms and one subscription delivered to, up to ``until``."""
    history = History()
    for i, at in enumerate(range(0, until + 1, step)):
        history.sends.append(send(DEDUP, msg(i), at))
        history.deliveries.append(deliver(DEDUP, "exclusive", msg(i), at))
        history.read_back.setdefault(DEDUP, []).append(msg(i))
    return history


def drop_between(history: History, start: int, end: int, *, sends: bool, deliveries: bool) -> None:
    """Turns acks known in [start, end) ms into unknown outcomes and/or drops deliveries there."""

    def inside(t: int | None) -> bool:
        return t is not None and T0 + start <= t < T0 + end

    if sends:
        for s in history.sends:
            if inside(s.done_ms):
                s.outcome = Outcome.UNKNOWN
    if deliveries:
        history.deliveries = [d for d in history.deliveries if not inside(d.received_ms)]


def test_streams_resuming_within_the_bound_pass() -> None:
    history = steady_history(10_000)
    history.faults.append(FaultEvent("bookie_kill", "bookie-1", T0 + 3_000, T0 + 4_000))
    history.faults.append(FaultEvent("broker_kill", "broker-0", T0 + 5_000, T0 + 5_950))
    # Nothing moves from 3 000 to 6 000 ms; the acks come back at 6 005 ms (sent at 6 000).
    drop_between(history, 3_000, 6_000, sends=True, deliveries=True)

    verdict = check(history, recovery_bound_s=1.0)

    resumed = named(verdict, "resumed")
    assert resumed.passed, resumed.detail
    # The last fault healed at 5 950 ms; the producer moved at 6 005, the subscription at 6 010.
    assert verdict.recovery_s == 0.06
    assert "bound 1s" in resumed.detail
    assert verdict.passed


def test_stream_that_never_resumes_fails_naming_it() -> None:
    history = steady_history(10_000)
    history.faults.append(FaultEvent("partition", "broker-0/bookie-2", T0 + 4_000, T0 + 6_000))
    drop_between(history, 4_000, 20_000, sends=False, deliveries=True)

    verdict = check(history)

    resumed = named(verdict, "resumed")
    assert not resumed.passed
    assert f"subscription {DEDUP}[exclusive]" in resumed.detail
    assert "producer p0" not in resumed.detail  # it kept going


def test_producer_that_never_resumes_fails_naming_it() -> None:
    history = steady_history(10_000)
    history.faults.append(FaultEvent("broker_kill", "broker-1", T0 + 4_000, T0 + 6_000))
    drop_between(history, 4_000, 20_000, sends=True, deliveries=False)

    resumed = named(check(history), "resumed")

    assert not resumed.passed
    assert "producer p0" in resumed.detail


def test_resuming_beyond_the_bound_fails() -> None:
    history = steady_history(30_000)
    history.faults.append(FaultEvent("bookie_pause", "bookie-0", T0 + 2_000, T0 + 3_000))
    drop_between(history, 2_000, 18_000, sends=True, deliveries=True)

    verdict = check(history, recovery_bound_s=10.0)

    resumed = named(verdict, "resumed")
    assert not resumed.passed
    assert verdict.recovery_s == 15.01  # subscription moved at 18 010 ms, 15.01 s after 3 000
    assert "bound 10s" in resumed.detail


def test_recovery_counts_from_the_fault_that_healed_last() -> None:
    """Not the one that started last, and an unhealed fault counts from its start."""
    history = steady_history(10_000)
    history.faults += [
        FaultEvent("bookie_disk_full", "bookie-1", T0 + 1_000, T0 + 7_000),
        FaultEvent("entry_log_bit_flip", "bookie-1", T0 + 2_000, None),
    ]
    drop_between(history, 1_000, 8_000, sends=True, deliveries=False)

    verdict = check(history)

    assert verdict.recovery_s == 1.005  # from 7 000 to the ack at 8 005


def test_producer_never_acknowledged_is_stalled() -> None:
    history = steady_history(10_000)
    history.sends += [
        SendRecord(DEDUP, "p1", "k0", i, True, T0 + 100 * i, Outcome.UNKNOWN, T0 + 100 * i + 30)
        for i in range(100)
    ]
    history.faults.append(FaultEvent("broker_kill", "broker-1", T0 + 4_000, T0 + 6_000))

    resumed = named(check(history), "resumed")

    assert not resumed.passed
    assert "producer p1" in resumed.detail


def test_time_to_recover_by_kind_is_the_longest_pause_overlapping_each_fault() -> None:
    history = History()
    # Producer p0 acked at 0, 1 000, 2 000, 6 000, 7 000 ms (done_ms = at + 5).
    history.sends += [send(DEDUP, msg(i), at) for i, at in enumerate([0, 1000, 2000, 6000, 7000])]
    # Subscription received at 10, 510, 3 010, 3 110, 7 010 ms (received_ms = at + 10).
    history.deliveries += [
        deliver(DEDUP, "shared", msg(i), at) for i, at in enumerate([0, 500, 3000, 3100, 7000])
    ]
    history.faults += [
        # Overlaps the producer's 2 005 -> 6 005 (4.0 s) and the subscription's
        # 510 -> 3 010 (2.5 s) and 3 110 -> 7 010 (3.9 s): 4.0.
        FaultEvent("bookie_kill", "bookie-1", T0 + 2_500, T0 + 3_500),
        # Overlaps the producer's 6 005 -> 7 005 (1.0 s) and the subscription's 3 110 -> 7 010
        # (3.9 s): 3.9.
        FaultEvent("bookie_kill", "bookie-2", T0 + 6_500, T0 + 6_600),
        # An instant fault at 1 500: the producer's 1 005 -> 2 005 (1.0 s), the subscription's
        # 510 -> 3 010 (2.5 s): 2.5.
        FaultEvent("entry_log_bit_flip", "bookie-3", T0 + 1_500, None),
        # After every stream's last event: no pause to measure.
        FaultEvent("broker_kill", "broker-0", T0 + 8_000, T0 + 9_000),
    ]

    by_kind = check(history).time_to_recover_by_kind

    assert by_kind == {
        "bookie_kill": {"faults": 2, "mean_s": 3.95, "max_s": 4.0},
        "broker_kill": {"faults": 1, "mean_s": 0.0, "max_s": 0.0},
        "entry_log_bit_flip": {"faults": 1, "mean_s": 2.5, "max_s": 2.5},
    }
    assert list(by_kind) == sorted(by_kind)


# --- measurements from the cluster ----------------------------------------------------------


def test_under_replicated_not_measured_fails() -> None:
    verdict = check_history(clean_history())
    check_ = named(verdict, "under-replicated")
    assert not check_.passed
    assert check_.detail == "not measured"
    assert not verdict.passed


@pytest.mark.parametrize(("count", "passed"), [(0, True), (1, False), (7, False)])
def test_under_replicated_count(count: int, passed: bool) -> None:
    verdict = check(clean_history(), under_replicated=count)
    check_ = named(verdict, "under-replicated")
    assert check_.passed is passed
    assert f"{count} ledger(s)" in check_.detail
    assert verdict.passed is passed


def test_unexpected_exit_fails_naming_it() -> None:
    exits = ["bookie-2 exited with code 1", "broker-0 killed by signal 11"]
    verdict = check(clean_history(), unexpected_exits=exits)
    died = named(verdict, "died")
    assert not died.passed
    assert exits[0] in died.detail and exits[1] in died.detail
    assert failing(verdict) == [died.name]


def test_no_unexpected_exit_passes() -> None:
    died = named(check(clean_history(), unexpected_exits=()), "died")
    assert died.passed


# --- the history file -----------------------------------------------------------------------


def rich_history() -> History:
    history = clean_history(3)
    history.sends += [
        send(DEDUP, msg(8), 500, Outcome.FAILED),
        SendRecord(PLAIN, "p1", "k9", 3, False, T0 + 600, Outcome.UNKNOWN, None, "timed out"),
    ]
    history.deliveries.append(deliver(DEDUP, "shared", msg(0), 700, redelivery_count=2))
    history.faults += [
        FaultEvent("bookie_kill", "bookie-1", T0 + 100, T0 + 900, "pid 4242"),
        FaultEvent("entry_log_truncate", "bookie-1", T0 + 300, None, 'cut "tail" \u2192 0'),
    ]
    history.read_back[PLAIN].append(msg(0, "k0"))
    return history


def test_history_jsonl_round_trip(tmp_path: Path) -> None:
    history = rich_history()
    path = tmp_path / "history.jsonl"

    history.write_jsonl(path)
    again = History.read_jsonl(path)

    assert again == history
    assert list(again.read_back) == list(history.read_back)
    assert check(again) == check(history)


def test_history_jsonl_is_one_typed_object_per_line(tmp_path: Path) -> None:
    history = rich_history()
    path = tmp_path / "history.jsonl"
    history.write_jsonl(path)

    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    stored = sum(len(v) for v in history.read_back.values())
    expected = len(history.sends) + len(history.deliveries) + len(history.faults) + stored
    assert len(lines) == expected
    assert {line["type"] for line in lines} == {"send", "delivery", "fault", "stored"}
    assert {line["outcome"] for line in lines if line["type"] == "send"} == {
        "acked",
        "failed",
        "unknown",
    }


def test_read_jsonl_closes_its_file(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    rich_history().write_jsonl(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        History.read_jsonl(path)
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_history_from_lines_refuses_an_unknown_type() -> None:
    with pytest.raises(ValueError, match="'bogus'"):
        History.from_lines([{"type": "bogus"}])


def test_empty_history_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    History().write_jsonl(path)
    assert path.read_text(encoding="utf-8") == ""
    assert History.read_jsonl(path) == History()
