"""The verdict on a chaos run's history (sans-IO): lost, duplicated, reordered, recovery.

Definitions, per topic:

- *lost*: an acknowledged send whose message is not in the topic's stored log (read back from
  the start after the run). Failed and unknown sends may be stored or not.
- *undelivered*: an acknowledged message a subscription never received. Delivery is at least
  once, so receiving a message again is not a fault; never receiving it is.
- *duplicated*: a message stored more than once in a topic that deduplicates.
- *reordered*: for one producer and key, a message whose first appearance comes after that of
  a later message: in the stored log, and in the first deliveries of each subscription that
  promises order (Exclusive, Failover, Key_Shared; Shared promises none).
- *recovery*: after the last fault heals, the time until every producer has a send
  acknowledged and every subscription a message delivered again.
- *disruption* of one fault: the longest pause, in any producer's acknowledgements or any
  subscription's deliveries, that overlaps the fault (the time that stream took to recover).
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stripemq.chaos.history import (
    SUBSCRIPTION_MODES,
    Delivery,
    FaultEvent,
    History,
    MessageKey,
    Outcome,
)

ORDERED_SUBSCRIPTIONS = frozenset({"exclusive", "failover", "key_shared"})
# How many example messages a check's detail names.
EXAMPLES = 5


@dataclass(frozen=True)
class Check:
    """One line of the verdict table."""

    name: str
    passed: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class Verdict:
    """The counts a run is judged by, and each check with its reason."""

    acked: int = 0
    failed: int = 0
    unknown: int = 0
    lost: int = 0
    undelivered: int = 0
    duplicated: int = 0
    duplicated_without_dedup: int = 0
    reordered: int = 0
    recovery_s: float | None = None
    time_to_recover_by_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def add(self, name: str, passed: bool, detail: str) -> None:
        self.checks.append(Check(name, passed, detail))


def _examples(messages: Iterable[tuple[str, MessageKey]]) -> str:
    shown = [f"{topic} {m.producer}/{m.key}#{m.seq}" for topic, m in messages]
    more = len(shown) - EXAMPLES
    text = ", ".join(shown[:EXAMPLES])
    return text + (f" and {more} more" if more > 0 else "")


def count_reordered(messages: Iterable[MessageKey]) -> list[MessageKey]:
    """The messages whose first appearance follows that of a later message of the same
    producer and key."""
    highest: dict[tuple[str, str], int] = {}
    seen: set[MessageKey] = set()
    out_of_order = []
    for message in messages:
        if message in seen:
            continue
        seen.add(message)
        stream = (message.producer, message.key)
        top = highest.get(stream)
        if top is not None and message.seq < top:
            out_of_order.append(message)
        else:
            highest[stream] = message.seq
    return out_of_order


def check_history(
    history: History,
    *,
    recovery_bound_s: float = 60.0,
    under_replicated: int | None = None,
    unexpected_exits: Sequence[str] = (),
    subscriptions: Iterable[str] = SUBSCRIPTION_MODES,
    corrupt_messages: int = 0,
) -> Verdict:
    """Judge ``history``. ``under_replicated`` (ledgers still short of copies after the run
    settled) and ``unexpected_exits`` (processes that died without a fault) come from the
    cluster; ``None`` means not measured, and is not a pass. Every topic sent to must have
    each of ``subscriptions``, whether or not it received anything. ``corrupt_messages``
    counts payloads received or read back that failed their checksum."""
    verdict = Verdict()
    acked_by_topic: dict[str, set[MessageKey]] = collections.defaultdict(set)
    dedup_topics: set[str] = set()
    for send in history.sends:
        if send.dedup:
            dedup_topics.add(send.topic)
        if send.outcome is Outcome.ACKED:
            verdict.acked += 1
            acked_by_topic[send.topic].add(send.message)
        elif send.outcome is Outcome.FAILED:
            verdict.failed += 1
        else:
            verdict.unknown += 1

    expected = {(send.topic, name) for send in history.sends for name in subscriptions}
    _check_traffic(history, verdict)
    _check_stored(history, verdict, acked_by_topic, dedup_topics)
    _check_subscriptions(history, verdict, acked_by_topic, expected)
    _check_recovery(history, verdict, recovery_bound_s, expected)

    if under_replicated is None:
        verdict.add("no ledger left under-replicated", False, "not measured")
    else:
        verdict.add(
            "no ledger left under-replicated",
            under_replicated == 0,
            f"{under_replicated} ledger(s) under-replicated after the run settled",
        )
    verdict.add(
        "every message intact",
        corrupt_messages == 0,
        f"{corrupt_messages} payload(s) received or read back failed their checksum",
    )
    verdict.add(
        "no process died on its own",
        not unexpected_exits,
        "; ".join(unexpected_exits) if unexpected_exits else "every exit was a fault's",
    )
    return verdict


def _check_traffic(history: History, verdict: Verdict) -> None:
    """A run proves something only if traffic flowed and the faults landed."""
    producers = {s.producer for s in history.sends}
    acked = {s.producer for s in history.sends if s.outcome is Outcome.ACKED}
    idle = sorted(producers - acked)
    verdict.add(
        "traffic flowed",
        bool(producers) and not idle,
        f"{len(acked)} of {len(producers)} producers had sends acknowledged"
        + (f"; none for {', '.join(idle)}" if idle else ""),
    )
    missed = [f"{f.kind} {f.target}: {f.detail}" for f in history.faults if not f.took_effect]
    verdict.add(
        "every fault took effect",
        not missed,
        f"{len(history.faults) - len(missed)} of {len(history.faults)} faults took effect"
        + (f"; not: {'; '.join(missed[:EXAMPLES])}" if missed else ""),
    )


def _check_stored(
    history: History,
    verdict: Verdict,
    acked_by_topic: dict[str, set[MessageKey]],
    dedup_topics: set[str],
) -> None:
    lost: list[tuple[str, MessageKey]] = []
    duplicates: list[tuple[str, MessageKey]] = []
    reordered: list[tuple[str, MessageKey]] = []
    unread = sorted(set(acked_by_topic) - set(history.read_back))
    verdict.add(
        "every topic read back whole",
        not unread,
        "read back: "
        + ", ".join(sorted(history.read_back))
        + (f"; could not read back: {', '.join(unread)}" if unread else ""),
    )
    for topic in sorted(history.read_back):
        stored = history.read_back[topic]
        counts = collections.Counter(stored)
        lost += sorted(((topic, m) for m in acked_by_topic[topic] if m not in counts), key=str)
        extra = [(topic, m) for m, n in counts.items() for _ in range(n - 1)]
        if topic in dedup_topics:
            duplicates += extra
        else:
            verdict.duplicated_without_dedup += len(extra)
        reordered += [(topic, m) for m in count_reordered(stored)]
    verdict.lost = len(lost)
    verdict.duplicated = len(duplicates)
    verdict.reordered += len(reordered)
    stored_total = sum(len(v) for v in history.read_back.values())
    verdict.add(
        "no acknowledged message lost",
        not lost,
        f"{len(lost)} of {verdict.acked} acknowledged missing from the stored log"
        + (f": {_examples(lost)}" if lost else f" ({stored_total} stored)"),
    )
    verdict.add(
        "stored exactly once with deduplication",
        not duplicates,
        f"{len(duplicates)} duplicate(s) in deduplicated topics"
        + (f": {_examples(duplicates)}" if duplicates else "")
        + f"; {verdict.duplicated_without_dedup} resend duplicate(s) where dedup is off",
    )
    verdict.add(
        "stored in order per producer and key",
        not reordered,
        f"{len(reordered)} out of order" + (f": {_examples(reordered)}" if reordered else ""),
    )


def _check_subscriptions(
    history: History,
    verdict: Verdict,
    acked_by_topic: dict[str, set[MessageKey]],
    expected: set[tuple[str, str]],
) -> None:
    by_subscription: dict[tuple[str, str], list[Delivery]] = {pair: [] for pair in expected}
    for delivery in history.deliveries:
        by_subscription.setdefault((delivery.topic, delivery.subscription), []).append(delivery)
    missing: list[tuple[str, MessageKey]] = []
    reordered: list[tuple[str, MessageKey]] = []
    for (topic, subscription), deliveries in sorted(by_subscription.items()):
        received = {d.message for d in deliveries}
        label = f"{topic}[{subscription}]"
        missing += sorted(((label, m) for m in acked_by_topic[topic] - received), key=str)
        if subscription in ORDERED_SUBSCRIPTIONS:
            in_order = sorted(deliveries, key=lambda d: d.received_ms)
            reordered += [(label, m) for m in count_reordered(d.message for d in in_order)]
    for topic in acked_by_topic:
        if not any(t == topic for t, _ in by_subscription):
            missing += [(f"{topic}[no subscription]", m) for m in acked_by_topic[topic]]
    verdict.undelivered = len(missing)
    verdict.reordered += len(reordered)
    verdict.add(
        "every subscription received every acknowledged message",
        not missing,
        f"{len(missing)} never delivered" + (f": {_examples(missing)}" if missing else ""),
    )
    verdict.add(
        "delivered in order per producer and key (Exclusive, Failover, Key_Shared)",
        not reordered,
        f"{len(reordered)} first deliveries out of order"
        + (f": {_examples(reordered)}" if reordered else ""),
    )


def fault_end_ms(fault: FaultEvent) -> int:
    return fault.end_ms if fault.end_ms is not None else fault.start_ms


class _Resumption:
    """When each producer had a send acknowledged and each subscription a delivery."""

    def __init__(self, history: History, expected: set[tuple[str, str]]) -> None:
        # Every producer and expected subscription is a stream, even one that never moved.
        streams: dict[str, list[int]] = {f"producer {s.producer}": [] for s in history.sends}
        streams.update({f"subscription {t}[{name}]": [] for t, name in expected})
        for send in history.sends:
            if send.outcome is Outcome.ACKED and send.done_ms is not None:
                streams[f"producer {send.producer}"].append(send.done_ms)
        for d in history.deliveries:
            name = f"subscription {d.topic}[{d.subscription}]"
            streams.setdefault(name, []).append(d.received_ms)
        self.streams = {name: sorted(times) for name, times in streams.items()}

    def longest_pause(self, start_ms: int, end_ms: int) -> float:
        """Seconds of the longest gap between two events of one stream that overlaps
        ``[start_ms, end_ms]`` (a stream with nothing after the fault counts as no gap: the
        run's final check reports it)."""
        longest = 0
        for times in self.streams.values():
            i = max(bisect.bisect_left(times, start_ms) - 1, 0)
            while i + 1 < len(times) and times[i] <= end_ms:
                longest = max(longest, times[i + 1] - times[i])
                i += 1
        return longest / 1000

    def after(self, since_ms: int) -> tuple[float | None, list[str]]:
        """Seconds from ``since_ms`` until every stream moved again, and those that never
        did."""
        waits, stalled = [], []
        for name, times in self.streams.items():
            i = bisect.bisect_left(times, since_ms)
            if i == len(times):
                stalled.append(name)
            else:
                waits.append((times[i] - since_ms) / 1000)
        return (max(waits) if waits else None), stalled


def _check_recovery(
    history: History, verdict: Verdict, bound_s: float, expected: set[tuple[str, str]]
) -> None:
    resumption = _Resumption(history, expected)
    by_kind: dict[str, list[float]] = collections.defaultdict(list)
    for fault in history.faults:
        by_kind[fault.kind].append(resumption.longest_pause(fault.start_ms, fault_end_ms(fault)))
    verdict.time_to_recover_by_kind = {
        kind: {"faults": len(w), "mean_s": round(sum(w) / len(w), 3), "max_s": round(max(w), 3)}
        for kind, w in sorted(by_kind.items())
        if w
    }
    if not history.faults:
        verdict.add("resumed after the last fault", True, "no fault was injected")
        return
    last = max(fault_end_ms(f) for f in history.faults)
    wait, stalled = resumption.after(last)
    verdict.recovery_s = None if wait is None else round(wait, 3)
    if stalled or wait is None:
        verdict.add(
            "resumed after the last fault",
            False,
            "no progress after the last fault from: " + ", ".join(sorted(stalled)),
        )
    else:
        verdict.add(
            "resumed after the last fault",
            wait <= bound_s,
            f"every producer and subscription moved again {wait:.1f}s after the last fault "
            f"(bound {bound_s:.0f}s)",
        )
