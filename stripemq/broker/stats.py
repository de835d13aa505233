"""Topic statistics with Pulsar's JSON names: counters kept as messages flow, and the
builders of the admin API's TopicStats, PersistentTopicInternalStats and
PartitionedTopicStats documents.

Counting (no I/O, cheap enough for every message):

- ``PersistentTopic.stats`` (``TopicCounters``): messages and bytes stored, and the
  storage write latency (from the SEND to the entry being durable) in Pulsar's buckets.
- ``Producer.stats`` (``ProducerCounters``): what one producer had stored.
- ``Subscription.stats`` (``SubscriptionCounters``): what was dispatched, redelivered,
  acknowledged and expired by message TTL (``record_expired``).
- ``Consumer.stats`` (``ConsumerCounters``): what one consumer was sent.

Messages are counted as Pulsar counts them: a batch entry is as many messages as its
producer said it holds (``CommandSend.num_messages``; on dispatch, what the consumer was
charged for it), bytes are whole entries (metadata and payload).

Rates (``msgRateIn``, ``msgThroughputOut``, ...) come from a ``RateMeter``: what was counted
in the last ``RATE_WINDOW_S`` seconds (Pulsar's ``statsUpdateFrequencyInSecs``, 60 s), in
one-second buckets, divided by the window (or by the meter's age while it is younger than
the window, so a fresh topic does not show a fraction of its real rate). Unlike Pulsar,
which recomputes rates once per interval, a rate here moves as soon as messages flow.

Times that leave the process are wall-clock (``stripemq.clock.now_ms``); Pulsar's string
timestamps (``connectedSince``, ``lastLedgerCreatedTimestamp``) are ISO-8601 with the local
offset, as Pulsar's ``DateFormatter`` writes them.
"""

from __future__ import annotations

import bisect
import datetime
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stripemq.broker.dispatch import FailoverDispatcher
from stripemq.clock import now_ms
from stripemq.managed_ledger.cursor.managed_cursor import CursorLifecycle, ManagedCursor
from stripemq.managed_ledger.managed_ledger import ManagedLedgerLifecycle
from stripemq.managed_ledger.position import ENTRY_MASK, Position
from stripemq.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from stripemq.broker.topic import Consumer, PersistentTopic, Producer, Subscription

# Rates are averaged over this window (Pulsar: statsUpdateFrequencyInSecs, default 60).
RATE_WINDOW_S = 60.0
# Buckets per window: rates are exact to one bucket (a second).
RATE_BUCKETS = 60
# Storage write latency buckets, upper bounds in milliseconds (Pulsar's
# ManagedLedgerMBeanImpl.ENTRY_LATENCY_BUCKETS_USEC); one more bucket takes the overflow.
WRITE_LATENCY_BOUNDS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)

SubType = pb.CommandSubscribe.SubType


class RateMeter:
    """Counts and bytes: totals since it was made, and rates over a sliding window.

    Sans-IO: the clock (seconds, monotonic) is injected, so tests drive time by hand.
    """

    def __init__(
        self,
        window_s: float = RATE_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        buckets: int = RATE_BUCKETS,
    ) -> None:
        if window_s <= 0 or buckets <= 0:
            raise ValueError("a rate window and its bucket count must be positive")
        self.window_s = window_s
        self.clock = clock
        self._width = window_s / buckets
        self._buckets = buckets
        self._started = clock()
        self.count = 0  # everything ever recorded
        self.bytes = 0
        # (bucket number, count, bytes), oldest first; only the window's buckets are kept.
        self._recent: deque[list[int]] = deque()

    def record(self, count: int = 1, size: int = 0) -> None:
        """``count`` events (messages) of ``size`` bytes in all, now."""
        self.count += count
        self.bytes += size
        now = self._bucket(self.clock())
        if self._recent and self._recent[-1][0] == now:
            self._recent[-1][1] += count
            self._recent[-1][2] += size
        else:
            self._recent.append([now, count, size])
            self._drop_old(now)

    def _bucket(self, at: float) -> int:
        return int(at // self._width)

    def _drop_old(self, now_bucket: int) -> None:
        while self._recent and self._recent[0][0] <= now_bucket - self._buckets:
            self._recent.popleft()

    def _window(self) -> tuple[int, int, float]:
        """Counts and bytes in the window, and the seconds they spread over."""
        now = self.clock()
        self._drop_old(self._bucket(now))
        count = sum(b[1] for b in self._recent)
        size = sum(b[2] for b in self._recent)
        span = min(self.window_s, max(now - self._started, self._width))
        return count, size, span

    def rate(self) -> float:
        """Events per second over the window."""
        count, _, span = self._window()
        return count / span

    def throughput(self) -> float:
        """Bytes per second over the window."""
        _, size, span = self._window()
        return size / span

    def average_size(self) -> float:
        """Bytes per event over the window (0 when nothing happened in it)."""
        count, size, _ = self._window()
        return size / count if count else 0.0


@dataclass
class LatencyBuckets:
    """A distribution over Pulsar's latency buckets (``WRITE_LATENCY_BOUNDS_MS`` and an
    overflow): per-bucket counts (not cumulative, as Pulsar's StatsBuckets), their total
    and the sum of the values, in milliseconds, since the topic was loaded."""

    bounds: tuple[float, ...] = WRITE_LATENCY_BOUNDS_MS
    buckets: list[int] = field(default_factory=lambda: [0] * (len(WRITE_LATENCY_BOUNDS_MS) + 1))
    count: int = 0
    sum_ms: float = 0.0

    def record(self, value_ms: float) -> None:
        self.buckets[bisect.bisect_left(self.bounds, value_ms)] += 1
        self.count += 1
        self.sum_ms += value_ms

    def add(self, other: LatencyBuckets) -> None:
        for i, n in enumerate(other.buckets):
            self.buckets[i] += n
        self.count += other.count
        self.sum_ms += other.sum_ms


@dataclass
class ClientCounters:
    """Who is behind a producer or consumer, as the stats show it."""

    address: str = ""
    client_version: str = ""
    connected_since_ms: int = field(default_factory=now_ms)
    metadata: dict[str, str] = field(default_factory=dict)

    def describe_client(
        self, peer: object, client_version: str, metadata: Iterable[pb.KeyValue] = ()
    ) -> None:
        """Its connection's peer (``(host, port)``) and client, and its properties."""
        self.address = format_address(peer)
        self.client_version = client_version
        self.metadata = {kv.key: kv.value for kv in metadata}


@dataclass
class ProducerCounters(ClientCounters):
    """What one producer had stored."""

    meter: RateMeter = field(default_factory=RateMeter)


@dataclass
class ConsumerCounters(ClientCounters):
    """What one consumer was sent, gave back and acknowledged."""

    meter: RateMeter = field(default_factory=RateMeter)
    redeliver: RateMeter = field(default_factory=RateMeter)
    acks: RateMeter = field(default_factory=RateMeter)
    entries: int = 0  # entries sent (``meter`` counts their messages)
    last_consumed_ms: int = 0
    last_acked_ms: int = 0
    last_flow_ms: int = 0


@dataclass
class SubscriptionCounters:
    """What one subscription dispatched, redelivered, had acknowledged and expired."""

    meter: RateMeter = field(default_factory=RateMeter)
    redeliver: RateMeter = field(default_factory=RateMeter)
    acks: RateMeter = field(default_factory=RateMeter)
    expired: RateMeter = field(default_factory=RateMeter)
    last_expire_ms: int = 0
    last_consumed_ms: int = 0
    last_acked_ms: int = 0
    last_flow_ms: int = 0

    def record_expired(self, count: int) -> None:
        """Message TTL moved the subscription past ``count`` messages (0: it looked and
        found none; the time of the check is kept either way, as Pulsar does)."""
        if count > 0:
            self.expired.record(count)
        self.last_expire_ms = now_ms()

    def dispatched(self, consumer: ConsumerCounters, messages: int, size: int) -> None:
        """An entry of ``messages`` messages and ``size`` bytes went to ``consumer``."""
        self.meter.record(messages, size)
        consumer.meter.record(messages, size)
        consumer.entries += 1
        self.last_consumed_ms = consumer.last_consumed_ms = now_ms()

    def redelivered(self, consumer: ConsumerCounters, messages: int) -> None:
        """``consumer`` gave ``messages`` messages back to be delivered again."""
        if messages > 0:
            self.redeliver.record(messages)
            consumer.redeliver.record(messages)

    def acknowledged(self, consumer: ConsumerCounters, messages: int) -> None:
        """``consumer`` acknowledged ``messages`` message ids."""
        self.acks.record(messages)
        consumer.acks.record(messages)
        self.last_acked_ms = consumer.last_acked_ms = now_ms()

    def flowed(self, consumer: ConsumerCounters) -> None:
        """``consumer`` asked for more messages."""
        self.last_flow_ms = consumer.last_flow_ms = now_ms()


@dataclass
class TopicCounters:
    """What was stored on one topic, and how long storing took."""

    meter: RateMeter = field(default_factory=RateMeter)
    write_latency: LatencyBuckets = field(default_factory=LatencyBuckets)
    chunk_published: bool = False  # a chunk of a chunked message was stored (Pulsar's flag)

    def published(self, messages: int, size: int, latency_ms: float) -> None:
        self.meter.record(messages, size)
        self.write_latency.record(latency_ms)


def record_publish(producer: Producer, messages: int, size: int, latency_ms: float) -> None:
    """Count a stored entry of ``messages`` messages (as ``limits.messages_in_send`` bounds
    what its client said) and ``size`` bytes on its producer and topic, with the time its
    append took."""
    producer.stats.meter.record(messages, size)
    producer.topic.stats.published(messages, size, latency_ms)


# ---------------------------------------------------------------------- formatting


def format_address(peer: object) -> str:
    """A connection's peer as Pulsar shows it: ``/host:port``."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"/{peer[0]}:{peer[1]}"
    return str(peer) if peer else ""


def format_timestamp(ms: int) -> str:
    """Milliseconds since the epoch as Pulsar's DateFormatter writes them: ISO-8601 with
    the local offset (``Z`` for UTC)."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).astimezone()
    text = moment.isoformat(timespec="milliseconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def format_individually_deleted(holes: Iterable[tuple[Position, Position]]) -> str:
    """Acknowledged ranges beyond the mark-delete position in Pulsar's notation: each
    ``[start, end)`` range is written open-closed, ``(l:e-1..l:e_last]``."""
    parts = []
    for start, end in holes:
        if end.entry_id > 0:
            last = Position(end.ledger_id, end.entry_id - 1)
        else:  # the range ran to the very end of its ledger
            last = Position(start.ledger_id, ENTRY_MASK)
        parts.append(f"({start.ledger_id}:{start.entry_id - 1}..{last}]")
    return "[" + ",".join(parts) + "]"


# ---------------------------------------------------------------------- TopicStats


def _access_mode(mode: int) -> str:
    try:
        return pb.ProducerAccessMode.Name(mode)
    except ValueError:
        return "Shared"


def publisher_stats(producer: Producer) -> dict[str, Any]:
    """Pulsar's PublisherStats of one producer."""
    counters = producer.stats
    return {
        "accessMode": _access_mode(producer.access_mode),
        "msgRateIn": counters.meter.rate(),
        "msgThroughputIn": counters.meter.throughput(),
        "averageMsgSize": counters.meter.average_size(),
        "chunkedMessageRate": 0.0,
        "producerId": producer.producer_id,
        "supportsPartialProducer": False,
        "producerName": producer.name,
        "address": counters.address,
        "connectedSince": format_timestamp(counters.connected_since_ms),
        "clientVersion": counters.client_version,
        "metadata": dict(counters.metadata),
    }


def _unacked_messages(subscription: Subscription, consumer: Consumer) -> int:
    """Messages delivered to ``consumer`` and not acknowledged: whole entries it holds,
    less what of a batch entry was acknowledged message by message."""
    total = 0
    state = subscription.cursor.state
    for position, messages in consumer.slot.pending.items():
        bits = state.ack_set(position)
        total += bits.count(1) if bits is not None else messages
    return total


def consumer_stats(subscription: Subscription, consumer: Consumer) -> dict[str, Any]:
    """Pulsar's ConsumerStats of one consumer."""
    counters = consumer.stats
    slot = consumer.slot
    entries = counters.entries
    return {
        "msgRateOut": counters.meter.rate(),
        "msgThroughputOut": counters.meter.throughput(),
        "bytesOutCounter": counters.meter.bytes,
        "msgOutCounter": counters.meter.count,
        "msgRateRedeliver": counters.redeliver.rate(),
        "messageAckRate": counters.acks.rate(),
        "chunkedMessageRate": 0.0,
        "consumerName": slot.name,
        "availablePermits": slot.permits,
        "unackedMessages": _unacked_messages(subscription, consumer),
        "avgMessagesPerEntry": round(counters.meter.count / entries) if entries else 0,
        "blockedConsumerOnUnackedMsgs": slot.blocked_on_unacked,
        "lastAckedTimestamp": counters.last_acked_ms,
        "lastConsumedTimestamp": counters.last_consumed_ms,
        "lastConsumedFlowTimestamp": counters.last_flow_ms,
        "address": counters.address,
        "connectedSince": format_timestamp(counters.connected_since_ms),
        "clientVersion": counters.client_version,
        "metadata": dict(counters.metadata),
    }


def _active_consumer_name(subscription: Subscription) -> str | None:
    """The consumer that receives, on an Exclusive or Failover subscription."""
    dispatcher = subscription.dispatcher
    if isinstance(dispatcher, FailoverDispatcher):
        slot = dispatcher.active()
        return slot.name if slot is not None else None
    if dispatcher.exclusive and dispatcher.consumers:
        return dispatcher.consumers[0].name
    return None


def subscription_stats(subscription: Subscription) -> dict[str, Any]:
    """Pulsar's SubscriptionStats of one subscription."""
    counters = subscription.stats
    cursor = subscription.cursor
    chain = subscription.topic.ml.chain
    consumers = [consumer_stats(subscription, c) for c in subscription.consumers.values()]
    backlog = cursor.backlog
    tracker = subscription.delivery.delayed
    delayed = len(tracker) if tracker is not None else 0
    stats: dict[str, Any] = {
        "msgRateOut": counters.meter.rate(),
        "msgThroughputOut": counters.meter.throughput(),
        "bytesOutCounter": counters.meter.bytes,
        "msgOutCounter": counters.meter.count,
        "msgRateRedeliver": counters.redeliver.rate(),
        "messageAckRate": counters.acks.rate(),
        "chunkedMessageRate": 0,
        "msgBacklog": backlog,
        "backlogSize": chain.size_after(cursor.mark_delete_position),
        "earliestMsgPublishTimeInBacklog": 0,
        "msgBacklogNoDelayed": max(backlog - delayed, 0),
        "blockedSubscriptionOnUnackedMsgs": subscription.blocked_on_unacked,
        "msgDelayed": delayed,
        "unackedMessages": sum(c["unackedMessages"] for c in consumers),
        "type": subscription.type_name,  # "None" until a consumer chose one (Pulsar's)
        "msgRateExpired": counters.expired.rate(),
        "totalMsgExpired": counters.expired.count,
        "lastExpireTimestamp": counters.last_expire_ms,
        "lastConsumedFlowTimestamp": counters.last_flow_ms,
        "lastConsumedTimestamp": counters.last_consumed_ms,
        "lastAckedTimestamp": counters.last_acked_ms,
        "lastMarkDeleteAdvancedTimestamp": 0,
        "consumers": consumers,
        "isDurable": subscription.durable,
        "isReplicated": False,
        "allowOutOfOrderDelivery": False,
        "consumersAfterMarkDeletePosition": {},
        "nonContiguousDeletedMessagesRanges": len(cursor.state.holes),
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "delayedMessageIndexSizeInBytes": 0,
        "subscriptionProperties": {},
        "filterProcessedMsgCount": 0,
        "filterAcceptedMsgCount": 0,
        "filterRejectedMsgCount": 0,
        "filterRescheduledMsgCount": 0,
    }
    active = _active_consumer_name(subscription)
    if active is not None:
        stats["activeConsumerName"] = active
    if subscription.sub_type == SubType.Key_Shared:
        sticky = getattr(subscription.dispatcher, "sticky", False)
        stats["keySharedMode"] = "STICKY" if sticky else "AUTO_SPLIT"
    return stats


def topic_stats(topic: PersistentTopic) -> dict[str, Any]:
    """Pulsar's TopicStats of ``topic`` (``/admin/v2/persistent/{t}/{ns}/{topic}/stats``).

    Every subscription is there: the topic holds one for each durable cursor, consumers
    or not (and readers'). Rates in and out are the topic's and its subscriptions' meters
    (so a producer that just left still counts for the window); counters are since the
    topic was loaded here.
    """
    publishers = [publisher_stats(p) for p in topic.producers]
    subscriptions = {name: subscription_stats(s) for name, s in topic.subscriptions.items()}
    meter = topic.stats.meter
    return {
        "msgRateIn": meter.rate(),
        "msgThroughputIn": meter.throughput(),
        "msgRateOut": sum(s["msgRateOut"] for s in subscriptions.values()),
        "msgThroughputOut": sum(s["msgThroughputOut"] for s in subscriptions.values()),
        "bytesInCounter": meter.bytes,
        "msgInCounter": meter.count,
        "bytesOutCounter": sum(s["bytesOutCounter"] for s in subscriptions.values()),
        "msgOutCounter": sum(s["msgOutCounter"] for s in subscriptions.values()),
        "averageMsgSize": meter.average_size(),
        "msgChunkPublished": topic.stats.chunk_published,
        "storageSize": topic.ml.chain.size,
        "backlogSize": topic.estimated_backlog_size(),
        "publishRateLimitedTimes": 0,
        "earliestMsgPublishTimeInBacklogs": 0,
        "offloadedStorageSize": 0,
        "lastOffloadLedgerId": 0,
        "lastOffloadSuccessTimeStamp": 0,
        "lastOffloadFailureTimeStamp": 0,
        "ongoingTxnCount": 0,
        "abortedTxnCount": 0,
        "committedTxnCount": 0,
        "publishers": publishers,
        "waitingPublishers": 0,
        "subscriptions": subscriptions,
        "replication": {},
        "deduplicationStatus": topic.deduplication_status,
        "nonContiguousDeletedMessagesRanges": sum(
            s["nonContiguousDeletedMessagesRanges"] for s in subscriptions.values()
        ),
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "delayedMessageIndexSizeInBytes": 0,
        "compaction": topic.compaction.stats.to_json(),
    }


# ---------------------------------------------------------------------- internal stats

_ML_STATE = {
    ManagedLedgerLifecycle.OPENING: "None",
    ManagedLedgerLifecycle.OPEN: "LedgerOpened",
    ManagedLedgerLifecycle.FENCED: "Fenced",
    ManagedLedgerLifecycle.CLOSING: "Closed",
    ManagedLedgerLifecycle.CLOSED: "Closed",
}
_CURSOR_STATE = {
    CursorLifecycle.OPEN: "Open",
    CursorLifecycle.FENCED: "Closed",
    CursorLifecycle.CLOSING: "Closing",
    CursorLifecycle.CLOSED: "Closed",
}


def _ledger_state(topic: PersistentTopic) -> str:
    ml = topic.ml
    if ml.terminated:
        return "Terminated"
    state = _ML_STATE[ml.lifecycle]
    if state == "LedgerOpened" and ml.current_ledger_id < 0:
        return "ClosedLedger"  # between ledgers (a rollover, or one failed)
    return state


def cursor_internal_stats(topic: PersistentTopic, cursor: ManagedCursor) -> dict[str, Any]:
    """Pulsar's ManagedLedgerInternalStats.CursorStats of one durable cursor."""
    chain = topic.ml.chain
    state = cursor.state
    info = cursor.stats()
    subscription = topic.subscriptions.get(cursor.name)
    caught_up = state.read_position >= chain.write_position()
    waiting = subscription is not None and bool(subscription.consumers) and caught_up
    lifecycle = _CURSOR_STATE.get(cursor.lifecycle, "Open")
    if lifecycle == "Open" and info.cursor_ledger < 0:
        lifecycle = "NoLedger"
    read = state.read_position
    since_first_unacked = chain.entries_after(state.mark_delete) - chain.entries_after(read)
    return {
        "markDeletePosition": str(state.mark_delete),
        "readPosition": str(read),
        "waitingReadOp": waiting,
        "pendingReadOps": 0,
        "messagesConsumedCounter": topic.ml.entries_added - state.backlog,
        "cursorLedger": info.cursor_ledger,
        "cursorLedgerLastEntry": info.snapshots - 1 if info.cursor_ledger >= 0 else -1,
        "individuallyDeletedMessages": format_individually_deleted(state.holes),
        "lastLedgerSwitchTimestamp": format_timestamp(info.last_active_ms),
        "state": lifecycle,
        "active": subscription is not None and bool(subscription.consumers),
        "numberOfEntriesSinceFirstNotAckedMessage": max(since_first_unacked, 0),
        "totalNonContiguousDeletedMessagesRange": len(state.holes),
        "subscriptionHavePendingRead": waiting,
        "subscriptionHavePendingReplayRead": False,
        "properties": dict(state.properties),
    }


def internal_stats(topic: PersistentTopic) -> dict[str, Any]:
    """Pulsar's PersistentTopicInternalStats of ``topic``
    (``/admin/v2/persistent/{t}/{ns}/{topic}/internalStats``)."""
    ml = topic.ml
    chain = ml.chain
    current = chain.get(ml.current_ledger_id) if ml.current_ledger_id >= 0 else None
    last = chain.get(chain.last_ledger_id) if chain.last_ledger_id is not None else None
    newest = current if current is not None else last
    created = newest.created_ms if newest is not None else 0
    waiting = 0
    for subscription in topic.subscriptions.values():
        if subscription.consumers and subscription.cursor.read_position >= chain.write_position():
            waiting += 1
    stats: dict[str, Any] = {
        "entriesAddedCounter": ml.entries_added,
        "numberOfEntries": chain.entries,
        "totalSize": chain.size,
        "currentLedgerEntries": current.entries if current is not None else 0,
        "currentLedgerSize": current.size if current is not None else 0,
        "waitingCursorsCount": waiting,
        "pendingAddEntriesCount": topic.publishes_in_flight,
        "lastConfirmedEntry": str(chain.last_confirmed()),
        "state": _ledger_state(topic),
        "ledgers": [
            {
                "ledgerId": info.ledger_id,
                "entries": info.entries,
                "size": info.size,
                "offloaded": False,
                "underReplicated": False,
            }
            for info in chain
        ],
        "cursors": {
            name: cursor_internal_stats(topic, cursor) for name, cursor in ml.cursors.items()
        },
        "schemaLedgers": [],
        "compactedLedger": _compacted_ledger(topic),
    }
    if created:
        stats["lastLedgerCreatedTimestamp"] = format_timestamp(created)
    return stats


def _compacted_ledger(topic: PersistentTopic) -> dict[str, object]:
    """The compacted ledger as internal stats show it (-1s when there is none, or it
    could not be opened)."""
    compacted = topic.compaction.opened
    return {
        "ledgerId": compacted.ledger_id if compacted is not None else -1,
        "entries": compacted.entries if compacted is not None else -1,
        "size": compacted.size if compacted is not None else -1,
        "offloaded": False,
        "underReplicated": False,
    }


# ---------------------------------------------------------------------- partitioned stats

# Fields that add up across partitions (Pulsar's TopicStatsImpl.add and friends).
_TOPIC_SUMS = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "bytesInCounter",
    "msgInCounter",
    "bytesOutCounter",
    "msgOutCounter",
    "storageSize",
    "backlogSize",
    "publishRateLimitedTimes",
    "offloadedStorageSize",
    "waitingPublishers",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
    "delayedMessageIndexSizeInBytes",
)
_SUBSCRIPTION_SUMS = (
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "chunkedMessageRate",
    "msgBacklog",
    "backlogSize",
    "msgBacklogNoDelayed",
    "msgDelayed",
    "unackedMessages",
    "msgRateExpired",
    "totalMsgExpired",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
    "delayedMessageIndexSizeInBytes",
)
_CONSUMER_SUMS = (
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "chunkedMessageRate",
    "availablePermits",
    "unackedMessages",
)
_PUBLISHER_SUMS = ("msgRateIn", "msgThroughputIn", "chunkedMessageRate")


def _add_fields(into: dict[str, Any], other: dict[str, Any], names: Iterable[str]) -> None:
    for name in names:
        into[name] = into.get(name, 0) + other.get(name, 0)


def _merge_by_name(
    merged: list[dict[str, Any]], more: list[dict[str, Any]], key: str, sums: Iterable[str]
) -> None:
    """Fold ``more`` into ``merged``: entries with the same ``key`` (a partitioned
    producer's or consumer's name, the same on every partition) add up."""
    names = tuple(sums)
    by_name = {entry.get(key): entry for entry in merged if entry.get(key)}
    for entry in more:
        existing = by_name.get(entry.get(key)) if entry.get(key) else None
        if existing is None:
            copy = dict(entry)
            copy["_parts"] = 1
            merged.append(copy)
            if entry.get(key):
                by_name[entry[key]] = copy
            continue
        _add_fields(existing, entry, names)
        existing["_parts"] += 1
        if "averageMsgSize" in existing:  # a running mean, as Pulsar computes it
            parts = existing["_parts"]
            previous = existing["averageMsgSize"] * (parts - 1)
            existing["averageMsgSize"] = (previous + entry.get("averageMsgSize", 0.0)) / parts


def _strip_parts(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        entry.pop("_parts", None)


def partitioned_stats(
    per_partition_stats: dict[str, dict[str, Any]], *, partitions: int, per_partition: bool
) -> dict[str, Any]:
    """Pulsar's PartitionedTopicStats: the partitions' TopicStats added up (rates, counters,
    sizes and backlogs summed; ``averageMsgSize`` averaged; publishers and consumers that
    share a name, as a partitioned producer or consumer does, merged into one), with
    ``metadata.partitions`` and, when ``per_partition``, each partition's own stats."""
    total: dict[str, Any] = {name: 0 for name in _TOPIC_SUMS}
    for name in ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut"):
        total[name] = 0.0
    total["averageMsgSize"] = 0.0
    publishers: list[dict[str, Any]] = []
    subscriptions: dict[str, dict[str, Any]] = {}
    dedup: str | None = None
    for count, stats in enumerate(per_partition_stats.values(), start=1):
        _add_fields(total, stats, _TOPIC_SUMS)
        previous = total["averageMsgSize"] * (count - 1)
        total["averageMsgSize"] = (previous + stats.get("averageMsgSize", 0.0)) / count
        _merge_by_name(publishers, stats.get("publishers", []), "producerName", _PUBLISHER_SUMS)
        for name, sub in stats.get("subscriptions", {}).items():
            merged = subscriptions.get(name)
            if merged is None:
                merged = {k: v for k, v in sub.items() if k != "consumers"}
                merged["consumers"] = []
                subscriptions[name] = merged
            else:
                _add_fields(merged, sub, _SUBSCRIPTION_SUMS)
                merged["isDurable"] = merged.get("isDurable", False) or sub.get("isDurable")
                if sub.get("type", "None") != "None":  # a partition nobody consumes has none
                    merged["type"] = sub["type"]
            _merge_by_name(
                merged["consumers"], sub.get("consumers", []), "consumerName", _CONSUMER_SUMS
            )
        if dedup is None:
            dedup = stats.get("deduplicationStatus")
    _strip_parts(publishers)
    for sub in subscriptions.values():
        _strip_parts(sub["consumers"])
    total.update(
        {
            "msgChunkPublished": any(
                s.get("msgChunkPublished") for s in per_partition_stats.values()
            ),
            "publishers": publishers,
            "subscriptions": subscriptions,
            "replication": {},
            "metadata": {"partitions": partitions},
            "partitions": dict(per_partition_stats) if per_partition else {},
        }
    )
    if dedup is not None:
        total["deduplicationStatus"] = dedup
    return total
