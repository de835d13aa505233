"""A persistent topic on a managed ledger: its producers and its subscriptions.

Entries are stored as the producer sent them (metadata and payload, checksum included) and
delivered unchanged. Each subscription has a durable cursor and a dispatch loop that hands
entries to consumers as their permits allow. On Shared and Key_Shared subscriptions an
entry its producer wants delivered later waits in a delayed-delivery tracker, and a timer
on the event loop replays it when it is due.

A topic serves from its load until it is closed (unload, shutdown) or deleted
(``TopicLifecycle``): from the moment either starts it takes no new producer or consumer
(``ServiceNotReady``, which clients retry), so that nothing attaches to a managed ledger
about to go; dispatch loops end once their managed ledger is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from stripemq.broker import backlog_quota
from stripemq.broker.backlog_monitor import check_producer_admission
from stripemq.broker.compaction import TopicCompaction
from stripemq.broker.compaction.rules import compacted_out
from stripemq.broker.config import DelayedDeliveryConfig
from stripemq.broker.dedup import Deduplication
from stripemq.broker.delayed_delivery import DelayedDeliveryTracker
from stripemq.broker.delivery import Delivery, DeliveryState, EntryInfo
from stripemq.broker.dispatch import (
    ConsumerSlot,
    Dispatcher,
    FailoverDispatcher,
    RoundRobinDispatcher,
    SingleActiveDispatcher,
    blocked_on_unacked,
)
from stripemq.broker.key_shared import KeySharedDispatcher
from stripemq.broker.names import (
    COMPACTION_CURSOR,
    DEDUPLICATION_CURSOR,
    check_subscription_name,
)
from stripemq.broker.namespace_policies import EffectivePolicies, dispatch_rate, publish_rate
from stripemq.broker.publish_time import PublishTimeSearch, publish_time_of
from stripemq.broker.rate_limiter import (
    RateLimiter,
    dispatch_budget,
    limiter_for,
    longest_delay,
)
from stripemq.broker.schema import SchemaData, SchemaRegistry, schema_id
from stripemq.broker.stats import (
    ConsumerCounters,
    ProducerCounters,
    SubscriptionCounters,
    TopicCounters,
)
from stripemq.clock import now_ms  # the clock producers set delivery times by
from stripemq.errors import (
    BookieError,
    BrokerError,
    ConsumerAssignError,
    CursorNotFoundError,
    IncompatibleSchemaError,
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
    StripeMQError,
)
from stripemq.lifecycle import Transitions
from stripemq.managed_ledger.cursor.managed_cursor import ManagedCursor
from stripemq.managed_ledger.cursor.non_durable import NonDurableCursor
from stripemq.managed_ledger.cursor.state import BatchAck
from stripemq.managed_ledger.managed_ledger import Entry, ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import MAX_BATCH_SIZE, bits_of, words_of
from stripemq.proto.frames import entry_metadata
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.retry import Backoff
from stripemq.topic_limits import Limit

log = logging.getLogger(__name__)

READ_BATCH = 100
NO_KEY = b"NONE_KEY"  # what Pulsar hashes for a message without a key
SubType = pb.CommandSubscribe.SubType
# Subscription types that honour a message's delivery time (Pulsar ignores it on the others).
DELAYING_TYPES = frozenset({SubType.Shared, SubType.Key_Shared})
# Back-off of a deduplication recovery that failed (its state could not be read back).
DEDUP_RETRY_S = 1.0
DEDUP_RETRY_MAX_S = 60.0


class MessageSink(Protocol):
    """Where a consumer's messages go (its connection)."""

    def send_message(
        self,
        consumer_id: int,
        message_id: pb.MessageIdData,
        redelivery_count: int,
        entry: bytes,
        ack_set: list[int] | None = None,
    ) -> None: ...

    def flush_messages(self) -> None:
        """A dispatch round has queued its messages: write them now, in one syscall,
        rather than at the end of the loop turn."""
        ...

    def send_active_change(self, consumer_id: int, is_active: bool) -> None: ...

    def send_reached_end_of_topic(self, consumer_id: int) -> None: ...

    def close_consumer(self, consumer_id: int) -> None: ...

    def close_producer(self, producer_id: int) -> None: ...

    def publish_rate_changed(self) -> None:
        """A topic its producers publish to has a new publish rate: a connection paused
        by the old one reads again at once (and is measured against the new one)."""
        ...

    @property
    def is_active(self) -> bool:
        """Whether the client behind it is still connected."""
        ...


@dataclass(eq=False)
class Producer:
    producer_id: int
    name: str
    topic: PersistentTopic
    sink: MessageSink | None = None
    access_mode: int = pb.Shared
    stats: ProducerCounters = field(default_factory=ProducerCounters)
    schema_version: int | None = None  # the version of its schema (None: it sends bytes)
    encrypted: bool = False  # it said it encrypts what it sends (CommandProducer.encrypted)


@dataclass
class Consumer:
    """A subscribed consumer: its dispatch slot and where its messages go."""

    slot: ConsumerSlot
    sink: MessageSink
    subscription: Subscription
    stats: ConsumerCounters = field(default_factory=ConsumerCounters)
    read_compacted: bool = False  # reads what compaction kept, up to its horizon


def make_dispatcher(sub_type: int | None, partition_index: int, sticky: bool) -> Dispatcher:
    if sub_type == SubType.Shared:
        return RoundRobinDispatcher()
    if sub_type == SubType.Failover:
        return FailoverDispatcher(partition_index)
    if sub_type == SubType.Key_Shared:
        return KeySharedDispatcher(sticky=sticky)
    return SingleActiveDispatcher()


def entry_info(position: Position, data: bytes) -> EntryInfo:
    """Messages in the entry, its key (ordering key, else partition key) and the time it
    is to be delivered at (a batch entry as a whole, by the entry's metadata)."""
    metadata = entry_metadata(data)
    if metadata is None:
        return EntryInfo(position, 1, NO_KEY)
    messages = 1
    if metadata.HasField("num_messages_in_batch"):  # bounded, as SENDs are
        messages = min(max(1, metadata.num_messages_in_batch), MAX_BATCH_SIZE)
    if metadata.HasField("ordering_key"):
        key = metadata.ordering_key
    elif metadata.HasField("partition_key"):
        key = metadata.partition_key.encode()
    else:
        key = NO_KEY
    deliver_at = metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None
    return EntryInfo(position, messages, key, deliver_at)


class Subscription:
    """A named cursor and the dispatch loop that feeds its consumers.

    ``sub_type`` is the type its consumers chose; ``None`` for a durable subscription no
    consumer has joined since the topic was loaded here (Pulsar's subscription without a
    dispatcher, whose stats say ``"type": "None"``). Its first consumer gives it a type
    (``PersistentTopic.subscribe``), and so does the first one after the last one left.
    """

    def __init__(
        self,
        topic: PersistentTopic,
        cursor: ManagedCursor | NonDurableCursor,
        sub_type: int | None,
        sticky: bool = False,
    ) -> None:
        self.topic = topic
        self.cursor = cursor
        self.durable = isinstance(cursor, ManagedCursor)
        self.name = cursor.name
        self.sub_type = sub_type
        self.dispatcher = make_dispatcher(sub_type, topic.topic_name.partition_index, sticky)
        self.delivery = self._new_delivery_state()
        self.consumers: dict[int, Consumer] = {}
        self.stats = SubscriptionCounters()  # dispatched, redelivered, expired (stats.py)
        # The subscription's own dispatch rate (the topic's is shared by all of them).
        self.rate_limiter = limiter_for(
            None, dispatch_rate(topic.policies.subscription_dispatch_rate)
        )
        self._active: ConsumerSlot | None = None
        self._wake = asyncio.Event()
        self._idle = False  # its dispatch loop waits on ``_wake`` with nothing to do
        self._task: asyncio.Task[None] | None = None
        # The timer that releases due delayed entries, and the time (ms) it is set for.
        self._delayed_timer: asyncio.TimerHandle | None = None
        self._delayed_timer_at: int | None = None
        # Consumers told the topic is terminated and read to its end (told once each).
        self._told_end_of_topic: set[int] = set()
        self._reader_last_active_ms = now_ms()  # see last_active_ms: a reader's cursor has none
        # Where reading what compaction kept of trimmed ledgers goes on, for a consumer
        # that reads compacted from the earliest (``read_compacted_from_earliest``).
        self._compacted_from: Position | None = None
        self._blocked_on_unacked = False  # see blocked_on_unacked

    @property
    def last_active_ms(self) -> int:
        """When a consumer last came, left or acknowledged (ms), which subscription expiry
        counts idle time from. A durable cursor keeps it, stored with its position (Pulsar's
        lastActive), so the count goes on across unloads and restarts."""
        if isinstance(self.cursor, ManagedCursor):
            return self.cursor.last_active_ms
        return self._reader_last_active_ms

    @last_active_ms.setter
    def last_active_ms(self, ms: int) -> None:
        if isinstance(self.cursor, ManagedCursor):
            self.cursor.last_active_ms = ms  # stored with the cursor's next write
        else:
            self._reader_last_active_ms = ms

    def _touch(self) -> None:
        """A consumer came, left or acknowledged: the subscription is in use now."""
        self.last_active_ms = now_ms()

    @property
    def type_name(self) -> str:
        """The type as Pulsar's stats name it (``"None"`` while no consumer chose one)."""
        return SubType.Name(self.sub_type) if self.sub_type is not None else "None"

    @property
    def dispatching(self) -> bool:
        """Whether its dispatch loop is running (from its first consumer to ``close``)."""
        return self._task is not None

    def take_type(self, sub_type: int, sticky: bool = False) -> None:
        """Become a ``sub_type`` subscription (its next consumer asked for that type): a
        new dispatcher and delivery state over the same cursor and counters, as Pulsar
        makes a new dispatcher. Only without consumers and with the loop stopped."""
        if self.consumers or self._task is not None:
            raise RuntimeError(f"subscription {self.name} changes type only when idle")
        self.sub_type = sub_type
        self.dispatcher = make_dispatcher(sub_type, self.topic.topic_name.partition_index, sticky)
        self.delivery = self._new_delivery_state()
        self._active = None
        self._told_end_of_topic.clear()

    def _new_delivery_state(self) -> DeliveryState:
        """Delivery state from scratch; with a delayed-delivery tracker where the
        subscription type honours delivery times and the broker has them enabled."""
        config = self.topic.delayed_delivery
        tracker = None
        if config.enabled and self.sub_type in DELAYING_TYPES:
            tracker = DelayedDeliveryTracker(config.tick_ms)
        return DeliveryState(self.dispatcher, self.cursor.is_acked, tracker, self._left_in_batch)

    def _left_in_batch(self, position: Position) -> int | None:
        """Unacknowledged messages of a partly acknowledged batch (None: not one)."""
        bits = self.cursor.state.ack_set(position)
        return bits.count() if bits is not None else None

    # ------------------------------------------------------------------ consumers

    def add_consumer(
        self, consumer: Consumer, hash_ranges: list[tuple[int, int]] | None = None
    ) -> None:
        """Raises ``BrokerError(ConsumerBusy)`` past a consumer limit (the subscription's
        or the topic's), or for a second consumer of an Exclusive subscription."""
        if self.sub_type == SubType.Exclusive and self.dispatcher.consumers:
            raise BrokerError(
                pb.ConsumerBusy, f"subscription {self.name} already has a consumer (Exclusive)"
            )
        policies = self.topic.policies
        if 0 < policies.limit(Limit.MAX_CONSUMERS) <= self.topic.consumer_count():
            raise BrokerError(pb.ConsumerBusy, "Topic reached max consumers limit")
        if 0 < policies.limit(Limit.MAX_CONSUMERS_PER_SUBSCRIPTION) <= len(self.consumers):
            raise BrokerError(pb.ConsumerBusy, "Subscription reached max consumers limit")
        consumer.slot.max_unacked = self._consumer_unacked_limit()
        if isinstance(self.dispatcher, KeySharedDispatcher):
            try:
                self.dispatcher.add_consumer(consumer.slot, hash_ranges)
            except ConsumerAssignError as exc:
                raise BrokerError(pb.ConsumerAssignError, str(exc)) from None
        else:
            if self.sub_type == SubType.Exclusive:
                self.cursor.state.rewind()  # a new exclusive consumer starts at the first unacked
            self.dispatcher.add_consumer(consumer.slot)
        self.consumers[consumer.slot.slot_id] = consumer
        self._touch()
        self._active_may_have_changed()
        if self._task is None:
            self._task = asyncio.ensure_future(self._dispatch_loop())
        self._wake.set()

    @property
    def limits_unacked(self) -> bool:
        """Whether unacknowledged messages are limited here: on Shared and Key_Shared
        subscriptions, as in Pulsar (an Exclusive or Failover consumer reads in order)."""
        return self.sub_type in (SubType.Shared, SubType.Key_Shared)

    def _consumer_unacked_limit(self) -> int:
        if not self.limits_unacked:
            return 0
        return self.topic.policies.limit(Limit.MAX_UNACKED_PER_CONSUMER)

    def policies_changed(self) -> None:
        """The topic's policies changed: its consumers' unacked limit, its delayed
        delivery, and a dispatch that waits on a rate or a limit looks again."""
        for consumer in self.consumers.values():
            consumer.slot.max_unacked = self._consumer_unacked_limit()
        self._delayed_delivery_changed()
        self.wake()

    def _delayed_delivery_changed(self) -> None:
        """Switched off: what is held goes out now. Switched on: entries read from now on
        wait for their time. A new tick applies to the next release."""
        config = self.topic.delayed_delivery
        wanted = config.enabled and self.sub_type in DELAYING_TYPES
        tracker = self.delivery.delayed
        if tracker is not None and not wanted:
            released = self.delivery.stop_delaying()
            self._cancel_delayed_timer()
            log.info(
                "subscription %s on %s: delayed delivery off, %d held entries go out now",
                self.name,
                self.topic.name,
                released,
            )
        elif tracker is None and wanted:
            self.delivery.delayed = DelayedDeliveryTracker(config.tick_ms)
        elif tracker is not None and tracker.tick_ms != config.tick_ms:
            tracker.tick_ms = config.tick_ms
            self._schedule_delayed_timer()

    @property
    def blocked_on_unacked(self) -> bool:
        """Pulsar's blockedSubscriptionOnUnackedMsgs: its consumers hold the subscription's
        limit of unacknowledged messages (until they hold half as many)."""
        limit = self._subscription_unacked_limit()
        slots = [consumer.slot for consumer in self.consumers.values()]
        self._blocked_on_unacked = blocked_on_unacked(slots, limit, self._blocked_on_unacked)
        return self._blocked_on_unacked

    def _subscription_unacked_limit(self) -> int:
        if not self.limits_unacked:
            return 0
        return self.topic.policies.limit(Limit.MAX_UNACKED_PER_SUBSCRIPTION)

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.consumers.pop(consumer.slot.slot_id, None) is None:
            return
        self._touch()
        self.topic.last_active_ms = now_ms()  # inactivity counts from its last client
        self._told_end_of_topic.discard(consumer.slot.slot_id)
        self.delivery.consumer_removed(consumer.slot)
        self._active_may_have_changed()
        self._wake.set()

    def _active_may_have_changed(self) -> None:
        """Failover: tell everyone who is active; the new active one starts at the first
        unacknowledged entry (what the old one held comes to it)."""
        if not isinstance(self.dispatcher, FailoverDispatcher):
            return
        active = self.dispatcher.active()
        if active is self._active:
            return
        previous, self._active = self._active, active
        if previous is not None:
            previous.pending.clear()
        self.cursor.state.rewind()
        for consumer in self.consumers.values():
            consumer.sink.send_active_change(consumer.slot.consumer_id, consumer.slot is active)

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.slot.permits += permits
        self.stats.flowed(consumer.stats)
        self._wake.set()

    def wake(self) -> None:
        """Look again for entries to hand out (a consumer's connection drained)."""
        self._wake.set()

    def ack(self, consumer: Consumer, ack: pb.CommandAck) -> None:
        """Acknowledge whole entries, messages of batch entries (by ack set, PIP-54), or
        cumulatively everything up to a message (inside a batch: up to that message).

        Raises ``BrokerError`` (before any ack set is decoded, and before anything is
        acknowledged) for a batch size outside ``0..MAX_BATCH_SIZE``.
        """
        positions = [Position(m.ledgerId, m.entryId) for m in ack.message_id]
        self._touch()
        if ack.ack_type == pb.CommandAck.Cumulative:
            if len(positions) != 1:
                raise BrokerError(pb.NotAllowedError, "a cumulative ack names one message")
            if self.sub_type in (SubType.Shared, SubType.Key_Shared):
                raise BrokerError(
                    pb.NotAllowedError, f"cumulative ack on a {self.type_name} subscription"
                )
            self._ack_cumulative(consumer, ack.message_id[0], positions[0])
            self.stats.acknowledged(consumer.stats, 1)  # counted once it was taken
            return
        # Sizes first: a bad one refuses the whole ack before any of it is applied.
        sizes = [
            self._batch_size(consumer, message_id, position) if message_id.ack_set else 0
            for message_id, position in zip(ack.message_id, positions, strict=True)
        ]
        whole = []
        for message_id, position, size in zip(ack.message_id, positions, sizes, strict=True):
            if not message_id.ack_set:
                whole.append(position)
                continue
            if size <= 0:
                log.warning(
                    "%s: batch-index ack of %s with unknown size ignored", self.name, position
                )
                continue
            done_indexes = self._acked_indexes(message_id.ack_set, size)
            if self.cursor.ack_batch(position, done_indexes, size):
                whole.append(position)
            else:
                self._count_unacked_in_batch(consumer.slot, position)
        self.cursor.ack(whole)
        self.delivery.acknowledged(consumer.slot, whole)
        self.stats.acknowledged(consumer.stats, len(positions))
        self._wake.set()  # a draining Key_Shared hash may be free now

    def _ack_cumulative(
        self, consumer: Consumer, message_id: pb.MessageIdData, position: Position
    ) -> None:
        """Everything before ``position``; of the entry itself, all of it, or with an ack
        set only the messages it clears (the rest stays to be delivered again)."""
        if not message_id.ack_set:
            self.cursor.ack_cumulative(position)
        else:
            size = self._batch_size(consumer, message_id, position)
            if size <= 0:
                log.warning(
                    "%s: cumulative ack inside %s with unknown batch size ignored",
                    self.name,
                    position,
                )
                return
            done_indexes = self._acked_indexes(message_id.ack_set, size)
            self.cursor.ack_cumulative(position, BatchAck([], size))  # what precedes it
            if done_indexes and not self.cursor.ack_batch(position, done_indexes, size):
                self._count_unacked_in_batch(consumer.slot, position)
        done = [
            p
            for p in consumer.slot.pending
            if p < position or (p == position and self.cursor.is_acked(p))
        ]
        self.delivery.acknowledged(consumer.slot, done)
        self._wake.set()

    def _count_unacked_in_batch(self, slot: ConsumerSlot, position: Position) -> None:
        """A consumer holding a partly acknowledged batch holds only what is left of it
        (for its unacked limit and stats, as Pulsar counts batch-index acks)."""
        bits = self.cursor.state.ack_set(position)
        if bits is not None:
            slot.pending.set_unacked(position, bits.count())

    def _batch_size(
        self, consumer: Consumer, message_id: pb.MessageIdData, position: Position
    ) -> int:
        """Messages in the batch entry at ``position``: as the ack says, else as the
        subscription knows (delivered, or partly acked before); 0 if unknown.

        The C++ client leaves ``batch_size`` out. Raises ``BrokerError`` for a size
        outside ``0..MAX_BATCH_SIZE``, whether the client or the entry's producer chose it.
        """
        size = message_id.batch_size if message_id.HasField("batch_size") else 0
        if size == 0:
            size = consumer.slot.pending.get(position, 0)
        if size == 0:
            bits = self.cursor.state.ack_set(position)
            size = len(bits) if bits is not None else 0
        if not 0 <= size <= MAX_BATCH_SIZE:
            raise BrokerError(
                pb.NotAllowedError,
                f"batch size {size} at {position} is outside 0..{MAX_BATCH_SIZE}",
            )
        return size

    @staticmethod
    def _acked_indexes(ack_set: Iterable[int], size: int) -> list[int]:
        """The messages an ack set acknowledges: its clear bits (set means unacked)."""
        return [i for i, unacked in enumerate(bits_of(ack_set, size)) if not unacked]

    def redeliver(self, consumer: Consumer, message_ids: Iterable[pb.MessageIdData]) -> None:
        """The consumer gives entries back (negative ack, ack timeout, or all of them)."""
        positions = [Position(m.ledgerId, m.entryId) for m in message_ids]
        pending = consumer.slot.pending
        given = sum(pending.get(p, 0) for p in positions) if positions else pending.messages
        self.stats.redelivered(consumer.stats, given)
        if self.dispatcher.exclusive:
            # One consumer reads in order: give back means read again from the first unacked.
            consumer.slot.pending.clear()
            self.cursor.state.rewind()
        else:
            self.delivery.give_back(consumer.slot, positions)
        self._wake.set()

    async def persist_acks(self) -> None:
        """Snapshot the cursor now rather than at its next turn (a consumer is leaving)."""
        if not isinstance(self.cursor, ManagedCursor):
            return
        try:
            await self.cursor.flush()
        except StripeMQError as exc:  # storage or metadata trouble: acks come again later
            log.warning("subscription %s on %s: %s", self.name, self.topic.name, exc)

    def seek(self, position: Position) -> list[Consumer]:
        """Restart delivery at ``position``; returns the consumers to disconnect (they
        reconnect and read from there, as Pulsar's clients expect after a seek)."""
        self.cursor.reset(position)
        consumers = list(self.consumers.values())
        for consumer in consumers:
            self.remove_consumer(consumer)
        self.delivery = self._new_delivery_state()  # delayed entries are read again too
        self._compacted_from = None
        self._cancel_delayed_timer()
        self._wake.set()
        return consumers

    # ------------------------------------------------------------------ admin operations

    def reset_cursor(self, position: Position) -> None:
        """Admin reset-cursor: restart delivery at ``position`` (see ``seek``); the
        consumers are told to reconnect, and read from there."""
        for consumer in self.seek(position):
            consumer.sink.close_consumer(consumer.slot.consumer_id)

    async def clear_backlog(self) -> int:
        """Acknowledge everything published so far (Pulsar's skip-all / clear-backlog);
        returns the entries that were unacknowledged. Consumers stay connected."""
        backlog = self.cursor.backlog
        last = self.topic.ml.last_confirmed
        if backlog and last.entry_id >= 0:
            self.cursor.ack_cumulative(last)
        self.cursor_moved_on()
        await self.persist_acks()
        return backlog

    async def skip(self, count: int) -> int:
        """Acknowledge the next ``count`` unacknowledged entries; returns how many."""
        if count >= self.cursor.backlog:
            return await self.clear_backlog()
        if isinstance(self.cursor, ManagedCursor):
            skipped = self.cursor.skip(count)
        else:
            skipped = self.cursor.state.skip(count)
        self.cursor_moved_on()
        await self.persist_acks()
        return skipped

    def cursor_moved_on(self) -> None:
        """The cursor moved on without the consumers (skip, clear-backlog, expiry):
        entries they hold that are now acknowledged are no longer theirs to ack."""
        for consumer in self.consumers.values():
            done = [p for p in consumer.slot.pending if self.cursor.is_acked(p)]
            if done:
                self.delivery.acknowledged(consumer.slot, done)
        self._wake.set()

    def _tell_end_of_topic(self) -> None:
        """A terminated topic read to its end: each consumer hears so once."""
        for consumer in self.consumers.values():
            slot_id = consumer.slot.slot_id
            if slot_id not in self._told_end_of_topic:
                self._told_end_of_topic.add(slot_id)
                consumer.sink.send_reached_end_of_topic(consumer.slot.consumer_id)

    def _read_to_end_of_terminated_topic(self) -> bool:
        """The topic is terminated and the subscription has acknowledged everything up to
        its last entry (Pulsar tells consumers the end only once all is acknowledged: told
        sooner, a client may stop acknowledging what it still holds); a reader's, that it
        has read it all."""
        end = self.topic.ml.terminated_position
        if end is None or self.delivery.replay_pending:
            return False
        if not self.durable:  # a reader acknowledges nothing: read to the end is the end
            return self.cursor.state.first_unacked_from(self.cursor.read_position) > end
        return self.cursor.backlog == 0

    async def close(self) -> None:
        self._cancel_delayed_timer()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ------------------------------------------------------------------ dispatching

    async def _dispatch_loop(self) -> None:
        """Feed the consumers until the subscription closes (cancellation) or its managed
        ledger does (the topic was unloaded or deleted under it: there is nothing left to
        read). Any other failure (storage trouble, or a bug) is logged once and retried with
        back-off until a round succeeds."""
        backoff = Backoff(initial=0.1, maximum=5.0)
        failing = False
        while True:
            if self.blocked_on_unacked or not self.dispatcher.has_permits():
                if self._read_to_end_of_terminated_topic():  # told on the ack, permits or not
                    self._tell_end_of_topic()
                await self._wait_for_wake()  # an ack, a flow, a consumer: look again
                continue
            if self._dispatch_budget() == 0:
                await self._wait_for_dispatch_rate()
                continue
            try:
                progressed = False
                if self.delivery.replay_pending:
                    progressed = await self._deliver_replays()
                read_any = True
                if self.dispatcher.has_permits() and self._dispatch_budget() == 0:
                    progressed = True  # replays used the rate up: wait for it at the top
                elif self.dispatcher.has_permits():
                    read_any, moved = await self._deliver_new()
                    progressed = progressed or moved
            except ManagedLedgerClosedError:
                log.debug("[%s] [%s] managed ledger closed: dispatch ends", *self._where())
                if self._task is asyncio.current_task():
                    self._task = None
                return
            except Exception as exc:
                if not failing:
                    failing = True
                    if isinstance(exc, StripeMQError):
                        log.warning("[%s] [%s] dispatch failed: %s", *self._where(), exc)
                    else:
                        log.exception("[%s] [%s] dispatch failed", *self._where())
                await backoff.sleep()
                continue
            if failing:
                failing = False
                backoff.reset()
                log.info("[%s] [%s] dispatch resumed", self.topic.name, self.name)
            if not read_any and not progressed and self._read_to_end_of_terminated_topic():
                self._tell_end_of_topic()
            if not read_any and not progressed:
                # New entries are read from the first unacknowledged position on: acknowledged
                # holes up to the tail are nothing to wait for (waiting "after" the read
                # position would find them there and never wait).
                start = self.cursor.state.first_unacked_from(self.cursor.read_position)
                after = Position(start.ledger_id, start.entry_id - 1)
                await self._wait_for_entries_or_wake(self.topic.ml, after)
            elif not progressed:
                await self._wait_for_wake()

    def _where(self) -> tuple[str, str]:
        return self.topic.name, self.name

    def _limiters(self) -> list[RateLimiter | None]:
        return [self.topic.dispatch_limiter, self.rate_limiter]

    def _dispatch_budget(self) -> int | None:
        """Entries the dispatch rates let go now (``None``: no rate is set)."""
        return dispatch_budget(self._limiters())

    def _read_batch(self) -> int:
        """Entries one read asks for: within the dispatch rates' budget and, under an
        unacked limit, what the subscription may still hand out (an entry holds one message
        or more, so a batch may take it past the limit, as in Pulsar)."""
        budget = self._dispatch_budget()
        batch = READ_BATCH if budget is None else max(1, min(READ_BATCH, budget))
        limit = self._subscription_unacked_limit()
        if limit > 0:
            held = sum(c.slot.pending.messages for c in self.consumers.values())
            batch = max(1, min(batch, limit - held))
        return batch

    async def _wait_for_dispatch_rate(self) -> None:
        """Wait until the dispatch rates allow more (or something wakes the loop)."""
        delay = longest_delay(self._limiters())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(delay, 0.001))
        self._wake.clear()

    def _charge_dispatch(
        self, deliveries: list[Delivery], infos: list[EntryInfo], data: dict[Position, bytes]
    ) -> None:
        """Count what was sent against the dispatch rates (messages of batches, bytes)."""
        limiters = [lim for lim in self._limiters() if lim is not None]
        if not limiters or not deliveries:
            return
        sent = {d.position for d in deliveries}
        messages = sum(info.messages for info in infos if info.position in sent)
        size = sum(len(data[position]) for position in sent)
        for limiter in limiters:
            limiter.spend(messages, size)

    async def _deliver_replays(self) -> bool:
        infos: list[EntryInfo] = []
        data: dict[Position, bytes] = {}
        for position in self.delivery.replay_positions(self._read_batch()):
            found = await self._read(position, 1)
            if not found or found[0].position != position:
                self.delivery.drop_replay(position)  # trimmed: acknowledged meanwhile
                continue
            infos.append(entry_info(position, found[0].data))
            data[position] = found[0].data
        plan = self.delivery.plan(infos, replay=True)
        self._send(plan.deliveries, data)
        self._charge_dispatch(plan.deliveries, infos, data)
        return bool(plan.deliveries)

    async def _deliver_new(self) -> tuple[bool, bool]:
        """``(read anything, moved on)``."""
        if self._compacted_from is not None:
            return await self._deliver_compacted_before_topic()
        before = self.cursor.read_position
        start = self.cursor.state.first_unacked_from(before)
        kept = await self._read_compacted(start, self._read_batch())
        if kept == []:  # compaction left out everything from ``start`` to its horizon
            horizon = self.topic.compaction.horizon_after(start)
            self._acknowledge_compacted_away(start, [horizon])
            start = horizon
        entries = kept or await self.topic.ml.read_entries(start, self._read_batch())
        if self.cursor.read_position != before:
            # Rewound or reset while reading (a redelivery of everything, a seek): what was
            # read belongs to the old order and is not sent; the loop reads again from the
            # new position at once (Pulsar drops such a read by its consumer epoch).
            return True, True
        if not entries:
            return False, False
        data = {entry.position: entry.data for entry in entries}
        infos = [entry_info(e.position, e.data) for e in entries]
        plan = self.delivery.plan(infos, replay=False, now_ms=now_ms())
        self._send(plan.deliveries, data)
        self._charge_dispatch(plan.deliveries, infos, data)
        if kept and plan.consumed_through is not None:
            through = plan.consumed_through
            self._acknowledge_compacted_away(start, [p for p in data if p <= through])
        if plan.consumed_through is not None:
            self.cursor.state.advance_read(plan.consumed_through)
        self._schedule_delayed_timer()
        return True, plan.consumed_through is not None

    @property
    def reads_compacted(self) -> bool:
        """Whether its consumers read compacted (Exclusive and Failover only)."""
        return any(c.read_compacted for c in self.consumers.values())

    async def _read(self, start: Position, max_entries: int) -> list[Entry]:
        """Entries from ``start`` on: for consumers that read compacted, what compaction
        kept up to its horizon, then the topic's entries after it."""
        kept = await self._read_compacted(start, max_entries)
        if kept:
            return kept
        if kept is not None:  # nothing kept from ``start`` to the horizon
            start = self.topic.compaction.horizon_after(start)
        return await self.topic.ml.read_entries(start, max_entries)

    async def _read_compacted(self, start: Position, max_entries: int) -> list[Entry] | None:
        """What compaction kept from ``start`` on (``None``: the consumers do not read
        compacted, or ``start`` is past the horizon)."""
        if not (self.reads_compacted and self.topic.compaction.has_compacted):
            return None
        compacted = await self.topic.compaction.compacted()
        if compacted is None or start > compacted.horizon:
            return None
        try:
            return await compacted.read_from(start, max_entries)
        except BookieError:
            if self.topic.compaction.opened is compacted:
                raise
            # Replaced (and deleted) by a newer compaction meanwhile: read that.
            return await self._read_compacted(start, max_entries)

    def _acknowledge_compacted_away(self, start: Position, kept: list[Position]) -> None:
        """Entries from ``start`` up to the last of ``kept`` (what a read of the compacted
        ledger gave, and was delivered) that compaction left out are acknowledged: a
        subscription reading compacted never gets them, and its backlog goes when it has
        acknowledged what it got."""
        gap_start = start
        for position in kept:
            if gap_start < position:
                self.cursor.ack_range(
                    gap_start, Position(position.ledger_id, position.entry_id - 1)
                )
            gap_start = max(gap_start, position.next())

    def read_compacted_from_earliest(self) -> None:
        """A consumer reading compacted from the earliest: what compaction kept of
        ledgers trimmed since comes first, before the cursor's entries (Pulsar's
        readFromEarliest). The compacted ledger is opened before
        (``TopicCompaction.compacted``)."""
        compacted = self.topic.compaction.opened
        first = compacted.first if compacted is not None else None
        if first is not None and first < self.topic.ml.chain.first_position():
            self._compacted_from = first

    async def _deliver_compacted_before_topic(self) -> tuple[bool, bool]:
        """``_deliver_new`` for what compaction kept before the topic's first entry: sent
        although the cursor is past it (acknowledging it changes nothing), in order, until
        the topic's own entries come."""
        start, compacted = self._compacted_from, self.topic.compaction.opened
        assert start is not None
        first = self.topic.ml.chain.first_position()
        entries = []
        if compacted is not None and self.reads_compacted:
            found = await compacted.read_from(start, self._read_batch())
            entries = [e for e in found if e.position < first]
        if not entries:
            self._compacted_from = None  # on to the cursor's entries
            return True, True
        data = {entry.position: entry.data for entry in entries}
        infos = [entry_info(e.position, e.data) for e in entries]
        plan = self.delivery.plan(infos, replay=False, acked_too=True)
        self._send(plan.deliveries, data)
        self._charge_dispatch(plan.deliveries, infos, data)
        if plan.consumed_through is not None:
            self._compacted_from = plan.consumed_through.next()
        return True, plan.consumed_through is not None

    def _acknowledge_compacted_out(
        self, position: Position, data: bytes, unacked: list[bool] | None
    ) -> list[bool] | None:
        """The ack set of a kept entry: the messages compaction marked out of its batch
        count as acknowledged (on the cursor too, so acknowledging the others completes
        the entry)."""
        found = compacted_out(data)
        if found is None:
            return unacked
        size, out = found
        base = unacked if unacked is not None and len(unacked) == size else [True] * size
        if any(base[i] for i in out) and not self.cursor.is_acked(position):
            self.cursor.ack_batch(position, out, size)
        hidden = set(out)
        return [bit and i not in hidden for i, bit in enumerate(base)]

    # ------------------------------------------------------------------ delayed delivery

    def _schedule_delayed_timer(self) -> None:
        """Set the timer for the tracker's next deadline (or none if nothing waits)."""
        tracker = self.delivery.delayed
        deadline = tracker.next_deadline() if tracker is not None else None
        if deadline == self._delayed_timer_at:
            return
        self._cancel_delayed_timer()
        if deadline is None:
            return
        wait_ms = deadline - now_ms()
        # A deadline a hair ahead still waits a millisecond: no spinning until it comes.
        delay = max(wait_ms, 1) / 1000 if wait_ms > 0 else 0.0
        loop = asyncio.get_running_loop()
        self._delayed_timer = loop.call_later(delay, self._on_delayed_timer)
        self._delayed_timer_at = deadline

    def _cancel_delayed_timer(self) -> None:
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
        self._delayed_timer = None
        self._delayed_timer_at = None

    def _on_delayed_timer(self) -> None:
        """Due delayed entries become replays; the dispatch loop sends them as permits
        allow. The timer is then set for whatever waits next."""
        self._delayed_timer = None
        self._delayed_timer_at = None
        released = self.delivery.release_delayed(now_ms())
        if released:
            log.debug(
                "subscription %s on %s: %d delayed entries due",
                self.name,
                self.topic.name,
                released,
            )
            self._wake.set()
        self._schedule_delayed_timer()

    def _send(self, deliveries: list[Delivery], data: dict[Position, bytes]) -> None:
        partition = self.topic.topic_name.partition_index
        compacted = self.topic.compaction.opened if self.reads_compacted else None
        sinks: dict[int, MessageSink] = {}
        for delivery in deliveries:
            position = delivery.position
            message_id = pb.MessageIdData(
                ledgerId=position.ledger_id, entryId=position.entry_id, partition=partition
            )
            # A partly acknowledged batch goes with the bits of what is left (in MESSAGE's
            # ack_set, where clients look), so only that is delivered again.
            bits = self.cursor.state.ack_set(position)
            unacked = [bool(b) for b in bits] if bits is not None else None
            if compacted is not None and position <= compacted.horizon:
                unacked = self._acknowledge_compacted_out(position, data[position], unacked)
            ack_set = words_of(unacked) if unacked is not None else None
            if unacked is not None:  # compaction may have acknowledged more of it just now
                delivery.slot.pending.set_unacked(position, sum(unacked))
            consumer = self.consumers[delivery.slot.slot_id]
            messages = delivery.slot.pending.get(position, 1)
            self.stats.dispatched(consumer.stats, messages, len(data[position]))
            consumer.sink.send_message(
                delivery.slot.consumer_id,
                message_id,
                delivery.redelivery_count,
                data[position],
                ack_set,
            )
            sinks[id(consumer.sink)] = consumer.sink
        for sink in sinks.values():
            sink.flush_messages()

    async def _wait_for_wake(self) -> None:
        await self._parked()
        self._wake.clear()

    async def _parked(self) -> None:
        """Wait for a wake, with nothing else to do meanwhile (``idle`` says so)."""
        self._idle = True
        try:
            await self._wake.wait()
        finally:
            self._idle = False

    @property
    def idle(self) -> bool:
        """Its dispatch loop has done all it can and waits to be woken (a flow, an ack, a
        new entry)."""
        return self._idle

    async def _wait_for_entries_or_wake(self, ml: ManagedLedger, after: Position) -> None:
        """Wait at the tail: the add that confirms the next entry (or the ledger closing)
        wakes this loop directly, as does anything else that sets ``_wake``."""
        if not ml.has_entries_after(after) and not ml.closed:
            ml.wake_on_new_entry(self._wake.set)
            await self._parked()
        else:
            # Something arrived since the read (or the ledger closed: the next read says
            # so). Yield all the same: this loop must never keep the event loop to itself.
            await asyncio.sleep(0)
        self._wake.clear()


class TopicLifecycle(enum.Enum):
    """Where a served topic is in its life (Pulsar fences a topic it closes or deletes).

    Only an ``OPEN`` topic takes producers and consumers; from ``CLOSING`` (unload,
    shutdown) or ``DELETING`` on, new ones are refused with ``ServiceNotReady`` (clients
    retry, and find the topic wherever it is served next). A delete that fails serves
    again (``DELETING`` -> ``OPEN``). ``abandon`` goes to ``CLOSED`` from anywhere.
    """

    OPEN = "open"
    CLOSING = "closing"
    DELETING = "deleting"
    CLOSED = "closed"


_T = TopicLifecycle
TOPIC_TRANSITIONS = Transitions[TopicLifecycle](
    {
        _T.OPEN: {_T.CLOSING, _T.DELETING, _T.CLOSED},
        _T.CLOSING: {_T.CLOSED},
        _T.DELETING: {_T.OPEN, _T.CLOSING, _T.CLOSED},
        _T.CLOSED: set(),
    }
)


def last_batch_index(entry: bytes) -> int:
    """The index of the last message in a batch entry; -1 for a single message."""
    metadata = entry_metadata(entry)
    if metadata is None or not metadata.HasField("num_messages_in_batch"):
        return -1
    return max(metadata.num_messages_in_batch - 1, 0)


class PersistentTopic:
    """A topic this broker serves: its managed ledger, producers and subscriptions.

    Loading it takes up every durable cursor of its managed ledger (but the
    deduplication cursor) as a subscription, as Pulsar does, so that stats, metrics, TTL
    and backlog quotas see subscriptions whose consumers are all away.
    """

    def __init__(
        self,
        topic_name: TopicName,
        ml: ManagedLedger,
        delayed_delivery: DelayedDeliveryConfig | None = None,
        *,
        schemas: SchemaRegistry | None = None,
        compaction_retain_null_key: bool = False,
    ) -> None:
        self.topic_name = topic_name
        self.schemas = schemas  # None: no registry (a topic made by a unit test)
        self.name = str(topic_name)
        self.ml = ml
        self.delayed_delivery = delayed_delivery or DelayedDeliveryConfig()
        self.lifecycle = TopicLifecycle.OPEN  # changed only by _move_to
        self._closing: asyncio.Future[None] | None = None
        # When the inactive-topic check last found it active (``inactive_topics``).
        self.last_active_ms = now_ms()
        self.producers: list[Producer] = []
        self._producers_changed = asyncio.Condition()
        self._exclusive_waiters = 0  # WaitForExclusive producers waiting on the condition
        self.subscriptions: dict[str, Subscription] = {}
        self.stats = TopicCounters()  # published messages and bytes (stats.py)
        self.compaction = TopicCompaction(
            ml,
            retain_null_key=compaction_retain_null_key,
            open_cursor=self._open_compaction_cursor,
        )
        # Deduplication: on once its state is read back (``_recover_deduplication``, in
        # the background after a live change), retried with back-off if that fails.
        self.dedup: Deduplication | None = None
        self._dedup_recovery: asyncio.Task[StripeMQError | None] | None = None
        self._dedup_retry: asyncio.TimerHandle | None = None
        self._dedup_backoff = Backoff(initial=DEDUP_RETRY_S, maximum=DEDUP_RETRY_MAX_S)
        self._dedup_failed = False
        # After a failed append, until every append in flight is done (the managed ledger
        # refuses new ones meanwhile; Pulsar's PersistentTopic.addFailed fences the topic).
        self.publishing_paused = False
        self._publishes_in_flight = 0
        self._announcement: asyncio.Future[None] | None = None
        # Namespace policies as this topic obeys them (``apply_policies``), and the rate
        # limiters they set: publishing (the connections pause reading while it is
        # exceeded) and dispatching (shared by every subscription).
        self.policies = EffectivePolicies()
        self.publish_limiter: RateLimiter | None = None
        self.dispatch_limiter: RateLimiter | None = None
        self._applying_policies = asyncio.Lock()
        for name, cursor in self.subscription_cursors().items():
            self.subscriptions[name] = Subscription(self, cursor, None)

    # ------------------------------------------------------------------ lifecycle

    def _move_to(self, new: TopicLifecycle) -> None:
        """The one place the lifecycle changes; ``IllegalTransitionError`` if it may not."""
        self.lifecycle = TOPIC_TRANSITIONS.check(f"topic {self.name}", self.lifecycle, new)

    @property
    def serving(self) -> bool:
        """Open, on a managed ledger that is neither closed nor taken over."""
        return self.lifecycle is TopicLifecycle.OPEN and not self.ml.closed and not self.ml.fenced

    def _check_serving(self) -> None:
        """Raises ``BrokerError(ServiceNotReady)`` unless the topic takes new clients."""
        if self.lifecycle is not TopicLifecycle.OPEN:
            raise BrokerError(
                pb.ServiceNotReady, f"topic {self.name} is {self.lifecycle.value}: retry"
            )

    async def add_producer(
        self, producer: Producer, on_queued: Callable[[], None] | None = None
    ) -> None:
        """Admit a producer by its access mode (Pulsar's ProducerAccessMode). A
        ``WaitForExclusive`` one waits while the topic has producers, after calling
        ``on_queued`` (its client is told it is queued, so it waits rather than times out);
        cancelling the call withdraws it.

        Raises ``BrokerError``: ``ServiceNotReady`` while the topic is not open or its
        deduplication is not ready, ``TopicTerminatedError``, the backlog quota's refusal,
        ``ProducerBusy``."""
        mode = producer.access_mode
        self._check_serving()
        if self.ml.terminated:
            raise BrokerError(pb.TopicTerminatedError, f"topic {self.name} is terminated")
        await self._check_deduplication_ready()
        await check_producer_admission(self, producer.name)  # backlog quotas
        async with self._producers_changed:
            self._check_serving()  # (closed while it waited)
            self._take_over_name(producer)
            exclusive = [p for p in self.producers if p.access_mode != pb.Shared]
            if mode in (pb.Shared, pb.Exclusive) and self._exclusive_waiters:
                # As Pulsar: a producer waiting for exclusive access goes first.
                raise BrokerError(
                    pb.ProducerBusy, f"{self.name} has a producer waiting for exclusive access"
                )
            if mode == pb.Shared:
                if exclusive:
                    raise BrokerError(pb.ProducerBusy, f"{self.name} has an exclusive producer")
            elif mode == pb.Exclusive:
                if self.producers:
                    raise BrokerError(pb.ProducerBusy, f"{self.name} already has producers")
            elif mode == pb.ExclusiveWithFencing:
                for other in list(self.producers):  # fenced out: their clients are told
                    self.producers.remove(other)
                    if other.sink is not None:
                        other.sink.close_producer(other.producer_id)
            elif mode == pb.WaitForExclusive:
                if self.producers and on_queued is not None:
                    on_queued()
                self._exclusive_waiters += 1
                try:
                    await self._producers_changed.wait_for(lambda: not self.producers)
                finally:
                    self._exclusive_waiters -= 1
                self._check_serving()  # unloaded or closed meanwhile: it goes elsewhere
                if self.ml.terminated:
                    raise BrokerError(pb.TopicTerminatedError, f"topic {self.name} is terminated")
            limit = self.policies.limit(Limit.MAX_PRODUCERS)
            if 0 < limit <= len(self.producers):
                raise BrokerError(
                    pb.ProducerBusy, f"Topic '{self.name}' reached max producers limit"
                )
            self.producers.append(producer)

    def _take_over_name(self, producer: Producer) -> None:
        """Producer names are unique on a topic (deduplication counts by name): a name in
        use is refused, unless its holder's connection is gone (a client reconnecting
        before the broker noticed the old connection drop), as in Pulsar."""
        for other in self.producers:
            if other.name != producer.name:
                continue
            if other.sink is not None and other.sink.is_active:
                raise BrokerError(
                    pb.ProducerBusy,
                    f"producer {producer.name!r} is already connected to {self.name}",
                )
            log.info("[%s] producer %s replaces its dropped connection", self.name, other.name)
            self.producers.remove(other)
            self._producers_changed.notify_all()
            return

    # ------------------------------------------------------------------ schemas

    def _registry(self) -> SchemaRegistry:
        if self.schemas is None:
            raise BrokerError(pb.NotAllowedError, f"{self.name} keeps no schemas")
        return self.schemas

    async def add_schema(self, schema: SchemaData | None) -> int | None:
        """The schema version a producer with ``schema`` writes, registered if it is new
        and may be (Pulsar's ``addSchema``); ``None`` for a producer of bytes.

        Raises ``IncompatibleSchemaError`` when the schema is refused: it does not agree
        with the topic's (``schema_compatibility_strategy``), it is new and producers may
        not register schemas here, or there is none and the topic enforces one."""
        registry, policies = self._registry(), self.policies
        sid = schema_id(self.topic_name)
        if schema is None or schema.type.carries_no_schema:
            if policies.schema_validation_enforced and await registry.latest(sid) is not None:
                raise IncompatibleSchemaError(
                    "Producers cannot connect or send message without a schema to topics "
                    "with a schema when SchemaValidationEnforced is enabled"
                )
            return None
        if policies.allow_auto_update_schema:
            return await registry.put_if_absent(sid, schema, policies.schema_compatibility_strategy)
        version = await registry.find(sid, schema)
        if version is None:
            raise IncompatibleSchemaError("Schema not found and schema auto updating is disabled.")
        return version

    async def add_consumer_schema(self, schema: SchemaData | None) -> None:
        """Admit a consumer reading with ``schema`` (Pulsar's
        ``addSchemaIfIdleOrCheckCompatible``): on an idle topic without a schema (no
        producer, consumer or message) it is registered as a producer's would be;
        otherwise it must read the topic's schema. A consumer of bytes is always admitted.

        Raises ``IncompatibleSchemaError``."""
        if schema is None or schema.type.carries_no_schema:
            return
        registry = self._registry()
        sid = schema_id(self.topic_name)
        idle = (
            not self.producers
            and not any(s.consumers for s in self.subscriptions.values())
            and self.ml.chain.entries == 0
        )
        if idle and await registry.latest(sid) is None:
            await self.add_schema(schema)
            return
        await registry.check_reader(sid, schema, self.policies.schema_compatibility_strategy)

    async def remove_producer(self, producer: Producer) -> None:
        self.last_active_ms = now_ms()  # inactivity counts from its last client
        async with self._producers_changed:
            if producer in self.producers:
                self.producers.remove(producer)
            self._producers_changed.notify_all()

    @property
    def publishes_in_flight(self) -> int:
        """Appends handed to the managed ledger and not yet done."""
        return self._publishes_in_flight

    def publish(self, entry: bytes) -> asyncio.Future[Position]:
        """Store an entry; entries are stored and confirmed in the order of the calls.

        Raises the managed ledger's errors: closed, fenced, too large, or a write failed
        and the appends after it are not all done yet.
        """
        appended = self.ml.add_entry_async(entry)
        self._publishes_in_flight += 1
        appended.add_done_callback(self._publish_done)
        return appended

    def _publish_done(self, appended: asyncio.Future[Position]) -> None:
        """An append failed for other reasons than a takeover or a close: the producers
        are disconnected (they reconnect and resend), and once every append in flight is
        done, deduplication forgets the sequence ids that were not stored."""
        self._publishes_in_flight -= 1
        error = None if appended.cancelled() else appended.exception()
        stopping = isinstance(error, (ManagedLedgerFencedError, ManagedLedgerClosedError))
        if (appended.cancelled() or error is not None) and not stopping:
            if not self.publishing_paused:
                log.warning("[%s] append failed (%s): producers reconnect", self.name, error)
                self.publishing_paused = True
                self._drop_producers()
        if self.publishing_paused and self._publishes_in_flight == 0:
            if self.dedup is not None:
                self.dedup.forget_unstored()
            self.publishing_paused = False
            log.info("[%s] publishing resumes", self.name)

    def _drop_producers(self) -> None:
        """Close every producer (their clients reconnect) and tell waiting ones."""
        producers, self.producers = self.producers, []
        for producer in producers:
            if producer.sink is not None:
                producer.sink.close_producer(producer.producer_id)
        # WaitForExclusive producers wait on the condition, which is notified under its lock.
        self._announcement = asyncio.ensure_future(self._announce_producers_changed())

    async def _announce_producers_changed(self) -> None:
        async with self._producers_changed:
            self._producers_changed.notify_all()

    def disconnect_producers(self) -> int:
        """Close every producer (a backlog quota is exceeded): their clients reconnect,
        and are admitted again once the quota allows. Returns how many were closed."""
        count = len(self.producers)
        if count:
            log.info("[%s] disconnecting %d producers", self.name, count)
            self._drop_producers()
        return count

    async def apply_policies(self, policies: EffectivePolicies) -> None:
        """Obey ``policies`` from now on: retention and rates change at once (connections
        paused by the old publish rate resume, and are measured against the new one);
        deduplication is switched off at once, and on once its state is read back, in the
        background (``wait_for_deduplication``). TTL and backlog quotas are read by the
        periodic checks and by the next producer; persistence by the next ledger (after a
        rollover or an unload). Changes are applied one at a time, in the order they
        come."""
        async with self._applying_policies:
            old_publish_rate = publish_rate(self.policies.publish_rate)
            self.policies = policies
            retention = policies.retention
            if retention is None:
                self.ml.set_retention(None)
            else:
                self.ml.set_retention(retention.time_s, retention.size_bytes)
            persistence = policies.persistence
            self.ml.set_persistence(persistence.for_ledgers() if persistence else None)
            if policies.encryption_required:
                self._drop_unencrypted_producers()
            delayed = policies.delayed_delivery
            if delayed is not None:  # read by each subscription's policies_changed
                self.delayed_delivery = DelayedDeliveryConfig(
                    delayed.active, delayed.tick_time, delayed.max_delivery_delay_in_millis
                )
            new_publish_rate = publish_rate(policies.publish_rate)
            self.publish_limiter = limiter_for(self.publish_limiter, new_publish_rate)
            if new_publish_rate != old_publish_rate:
                for producer in list(self.producers):
                    if producer.sink is not None:
                        producer.sink.publish_rate_changed()
            self.dispatch_limiter = limiter_for(
                self.dispatch_limiter, dispatch_rate(policies.dispatch_rate)
            )
            subscription_rate = dispatch_rate(policies.subscription_dispatch_rate)
            for subscription in list(self.subscriptions.values()):
                subscription.rate_limiter = limiter_for(
                    subscription.rate_limiter, subscription_rate
                )
                subscription.policies_changed()  # a lifted limit lets a dispatch go at once
            if policies.deduplication:
                self._start_deduplication()
            else:
                await self._stop_deduplication()

    @property
    def deduplication_status(self) -> str:
        """Pulsar's MessageDeduplication status, as topic stats show it."""
        if self.dedup is not None:
            return "Enabled"
        if self._dedup_recovery is not None:
            return "Recovering"
        if self._dedup_failed and self.policies.deduplication:
            return "Failed"
        return "Disabled"

    def _start_deduplication(self) -> None:
        """Read deduplication's state back in the background (once at a time)."""
        if self.dedup is not None or self._dedup_recovery is not None or not self.serving:
            return
        self._cancel_deduplication_retry()
        self._dedup_recovery = asyncio.ensure_future(self._recover_deduplication())

    async def _recover_deduplication(self) -> StripeMQError | None:
        """One attempt at reading deduplication's state back (its cursor's snapshot, then
        the entries after it); on failure, another is scheduled with back-off while the
        policy still wants it. Returns the attempt's failure."""
        try:
            dedup = Deduplication(self.ml)
            try:
                await dedup.start()
            except StripeMQError as exc:
                self._dedup_failed = True
                if self.serving and self.policies.deduplication:
                    delay = self._dedup_backoff.next_delay()
                    log.warning(
                        "[%s] deduplication could not read its state (%s): again in %.1fs",
                        self.name,
                        exc,
                        delay,
                    )
                    loop = asyncio.get_running_loop()
                    self._dedup_retry = loop.call_later(delay, self._start_deduplication)
                return exc
            self._dedup_failed = False
            self._dedup_backoff.reset()
            self.dedup = dedup
            log.info("[%s] deduplication enabled", self.name)
            return None
        finally:
            self._dedup_recovery = None

    def _cancel_deduplication_retry(self) -> None:
        if self._dedup_retry is not None:
            self._dedup_retry.cancel()
            self._dedup_retry = None

    async def _stop_deduplication(self, *, delete_cursor: bool = True) -> None:
        """Switch deduplication off (a recovery in progress is abandoned); with
        ``delete_cursor`` its cursor goes too, as Pulsar does, so that it holds no
        ledger back (a failure to delete it is logged: the next change tries again)."""
        self._cancel_deduplication_retry()
        self._dedup_failed = False
        recovery = self._dedup_recovery
        if recovery is not None:
            recovery.cancel()
            await asyncio.wait({recovery})
        if self.dedup is not None:
            self.dedup = None
            log.info("[%s] deduplication disabled", self.name)
        if delete_cursor and DEDUPLICATION_CURSOR in self.ml.cursors:
            try:
                await self.ml.delete_cursor(DEDUPLICATION_CURSOR)
            except CursorNotFoundError:
                pass
            except StripeMQError as exc:
                log.warning("[%s] deduplication cursor not deleted: %s", self.name, exc)

    async def wait_for_deduplication(self) -> None:
        """Wait for a deduplication recovery in progress (none: return at once).

        Raises what its attempt failed with (another is scheduled meanwhile)."""
        recovery = self._dedup_recovery
        if recovery is None:
            return
        await asyncio.wait({recovery})
        error = None if recovery.cancelled() else recovery.result()
        if error is not None:
            raise error

    async def _check_deduplication_ready(self) -> None:
        """A producer waits for deduplication to be read back; it is refused, to retry,
        while the policy wants deduplication and it is not running (its sequence ids
        would not be known)."""
        try:
            await self.wait_for_deduplication()
        except StripeMQError as exc:
            raise BrokerError(
                pb.ServiceNotReady, f"deduplication of {self.name} is not ready: {exc}"
            ) from None
        if self.policies.deduplication and self.dedup is None:
            raise BrokerError(pb.ServiceNotReady, f"deduplication of {self.name} is not ready")

    async def subscribe(
        self, name: str, sub_type: int | None, initial: InitialPosition, sticky: bool = False
    ) -> Subscription:
        """The durable subscription ``name``, made at ``initial`` if new, of ``sub_type``
        (the type a consumer asks for; ``None``: made for nobody yet, as Pulsar's admin
        and a producer's initial subscription make it). Without consumers it takes the type
        asked for; with consumers of another type it is ``ConsumerBusy``.

        Returns with nothing awaited after its checks: the caller adds its consumer before
        anyone else can change the subscription. Raises ``ReservedSubscriptionNameError``
        (before any cursor is opened) and ``BrokerError`` (``ServiceNotReady`` unless the
        topic is open)."""
        check_subscription_name(name)
        while True:
            self._check_serving()
            subscription = self.subscriptions.get(name)
            if subscription is None:
                self._check_room_for_a_subscription()
                cursor = await self.ml.open_cursor(name, initial)
                self._check_serving()
                if name not in self.subscriptions:  # (else taken up meanwhile by another)
                    self.subscriptions[name] = Subscription(self, cursor, None)
                continue
            if sub_type is None or subscription.sub_type == sub_type:
                return subscription
            if subscription.consumers:
                raise BrokerError(
                    pb.ConsumerBusy,
                    f"subscription {name} is {subscription.type_name}, "
                    f"not {SubType.Name(sub_type)}",
                )
            if subscription.dispatching:
                await subscription.close()  # then look again: a consumer may have come
                continue
            subscription.take_type(sub_type, sticky)  # same cursor, same counts
            return subscription

    def check_encrypted_producer(self, encrypted: bool) -> None:
        """Raises ``BrokerError(MetadataError)`` for a producer that will not encrypt, on a
        topic whose namespace requires encryption (Pulsar's reason)."""
        if self.policies.encryption_required and not encrypted:
            raise BrokerError(pb.MetadataError, f"Encryption is required in {self.name}")

    @staticmethod
    def check_encrypted_message(producer: Producer, metadata: pb.MessageMetadata | None) -> None:
        """Raises ``BrokerError(MetadataError)`` for a message without encryption keys from
        a producer that said it encrypts (Pulsar checks the producer's word)."""
        if not producer.encrypted:
            return
        if metadata is None or len(metadata.encryption_keys) == 0:
            raise BrokerError(pb.MetadataError, "Messages must be encrypted")

    def _drop_unencrypted_producers(self) -> None:
        """Encryption became required: producers that do not encrypt are disconnected
        (they are refused when they come back), as Pulsar does."""
        for producer in list(self.producers):
            if not producer.encrypted and producer.sink is not None:
                log.info(
                    "[%s] producer %s disconnected: encryption required", self.name, producer.name
                )
                producer.sink.close_producer(producer.producer_id)

    def check_subscription_type(self, sub_type: int) -> None:
        """Raises ``BrokerError(NotAllowedError)`` for a type its policies do not enable
        (Pulsar's subscriptionTypesEnabled, readers included)."""
        name = SubType.Name(sub_type)
        if name not in self.policies.subscription_types_enabled:
            raise BrokerError(
                pb.NotAllowedError, f"Topic[{{{self.name}}}] doesn't support {name} sub type!"
            )

    def _check_room_for_a_subscription(self) -> None:
        """Raises ``BrokerError(NotAllowedError)`` when the topic has as many subscriptions
        as maxSubscriptionsPerTopic lets it (the broker's own cursors do not count)."""
        limit = self.policies.limit(Limit.MAX_SUBSCRIPTIONS)
        if limit <= 0:
            return
        if len(self.subscriptions.keys() - {COMPACTION_CURSOR}) >= limit:
            raise BrokerError(
                pb.NotAllowedError,
                f"Exceed the maximum number of subscriptions of the topic: {self.name}",
            )

    def consumer_count(self) -> int:
        """Consumers of every subscription, readers' included."""
        return sum(len(s.consumers) for s in self.subscriptions.values())

    async def _open_compaction_cursor(self) -> ManagedCursor:
        """The compaction cursor, made at the earliest if new, taken up as a subscription
        (a name clients may not subscribe with)."""
        self._check_serving()
        cursor = await self.ml.open_cursor(COMPACTION_CURSOR, InitialPosition.Earliest)
        if COMPACTION_CURSOR not in self.subscriptions:
            self.subscriptions[COMPACTION_CURSOR] = Subscription(self, cursor, None)
        return cursor

    def subscribe_non_durable(
        self, name: str, sub_type: int, start: Position | None
    ) -> Subscription:
        """A reader's subscription: an in-memory cursor whose first entry is ``start``.
        A reader back under its subscription's name (a seek disconnected it) gets the same
        subscription, at the position the seek left it. Reserved names are refused."""
        check_subscription_name(name)
        self._check_serving()
        existing = self.subscriptions.get(name)
        if existing is not None and not existing.durable and not existing.consumers:
            return existing
        if existing is not None:
            raise BrokerError(pb.ConsumerBusy, f"subscription {name} already exists")
        self._check_room_for_a_subscription()
        cursor = self.ml.open_non_durable_cursor(name, start)
        subscription = Subscription(self, cursor, sub_type)
        self.subscriptions[name] = subscription
        return subscription

    async def drop_if_unused(self, subscription: Subscription) -> None:
        """A reader's subscription goes with its last consumer."""
        if not subscription.durable and not subscription.consumers:
            if self.subscriptions.get(subscription.name) is subscription:
                del self.subscriptions[subscription.name]
            await subscription.close()

    async def find_by_publish_time(self, publish_time_ms: int) -> Position:
        """The first entry published at or after ``publish_time_ms``, else the position
        after the last entry (``find_first_published``)."""
        found = await self.find_first_published(publish_time_ms)
        return found if found is not None else self.ml.chain.write_position()

    async def find_first_published(self, publish_time_ms: int) -> Position | None:
        """The first entry published at or after ``publish_time_ms`` (``None``: every
        entry was published before it, or there are none), by binary search over the
        ledger chain: one entry read per step, O(log n) in all. Seek by time and message
        TTL both search with it."""
        search = PublishTimeSearch.over(self.ml.chain, publish_time_ms)
        while (probe := search.probe()) is not None:
            entries = await self.ml.read_entries(probe, 1)
            found = entries[0] if entries and entries[0].position == probe else None
            search.record(publish_time_of(found.data) if found is not None else None)
        result = search.result
        log.debug(
            "%s: publish time %d found at %s in %d reads",
            self.name,
            publish_time_ms,
            result,
            search.probes,
        )
        return result

    # ------------------------------------------------------------------ admin operations

    async def last_message_id(self, read_compacted: bool = False) -> tuple[Position, int]:
        """The last message a consumer can read here: its entry's position and, when that
        entry is a batch, its last index (else -1), as Pulsar's GetLastMessageId answers.

        One reading compacted, with nothing after the horizon, reads up to the last kept
        entry (none: the answer of an empty topic)."""
        last = self.ml.last_confirmed
        if read_compacted:
            compacted = await self.compaction.compacted()
            if compacted is not None and not self.ml.has_entries_after(compacted.horizon):
                entry = await compacted.last_entry()
                if entry is None:
                    return Position(last.ledger_id, -1), -1
                return entry.position, last_batch_index(entry.data)
        if last.entry_id < 0:
            return last, -1
        entries = await self.ml.read_entries(last, 1)
        if not entries or entries[0].position != last:
            return last, -1
        return last, last_batch_index(entries[0].data)

    def subscription_names(self) -> list[str]:
        """Every subscription: durable ones (opened or not since the topic was loaded)
        and readers', without the broker's own cursors."""
        names = set(self.subscriptions) | set(self.ml.cursors)
        names.discard(DEDUPLICATION_CURSOR)
        return sorted(names)

    async def subscription(self, name: str) -> Subscription | None:
        """The subscription ``name`` if it exists, else ``None``. Nothing is created: a
        durable cursor without a subscription (one being made by ``subscribe`` right now)
        is taken up as it is, while the topic is open."""
        subscription = self.subscriptions.get(name)
        if subscription is not None:
            return subscription
        cursor = self.subscription_cursors().get(name)
        if cursor is None or self.lifecycle is not TopicLifecycle.OPEN:
            return None
        subscription = self.subscriptions[name] = Subscription(self, cursor, None)
        return subscription

    def subscription_cursors(self) -> dict[str, ManagedCursor]:
        """The durable subscriptions' cursors, by name: the deduplication cursor is the
        broker's own, and holds no subscription's backlog."""
        return {n: c for n, c in self.ml.cursors.items() if n != DEDUPLICATION_CURSOR}

    def estimated_backlog_size(self) -> int:
        """Bytes after the slowest durable subscription's mark-delete position (0 without
        any), as Pulsar's ManagedLedger.getEstimatedBacklogSize: what topic stats,
        ``/metrics`` and the backlog quota all count."""
        marks = (c.mark_delete_position for c in self.subscription_cursors().values())
        return backlog_quota.backlog_bytes(self.ml.chain, marks)

    @property
    def has_clients(self) -> bool:
        """Whether a producer or a consumer is connected."""
        return bool(self.producers) or any(s.consumers for s in self.subscriptions.values())

    async def remove_subscription(self, name: str, *, force: bool = False) -> None:
        """Delete a subscription and its cursor (admin unsubscribe). Its consumers, if any,
        are disconnected with ``force``; without it, ``ConsumerBusy``.

        Raises ``CursorNotFoundError`` for a subscription that does not exist."""
        self.last_active_ms = now_ms()  # inactivity counts from its last subscription
        subscription = await self.subscription(name)
        if subscription is None:
            raise CursorNotFoundError(f"subscription {name} does not exist on {self.name}")
        if subscription.consumers and not force:
            raise BrokerError(pb.ConsumerBusy, "Subscription has active connected consumers")
        for consumer in list(subscription.consumers.values()):
            consumer.sink.close_consumer(consumer.slot.consumer_id)
            subscription.remove_consumer(consumer)
        if subscription.durable:
            await self.unsubscribe(name)
        else:
            self.subscriptions.pop(name, None)
            await subscription.close()

    async def terminate(self) -> Position:
        """No more messages, for ever (Pulsar's terminate): the managed ledger is
        terminated, producers are disconnected (their reconnection is refused with
        ``TopicTerminatedError``) and consumers that acknowledged everything hear
        ``REACHED_END_OF_TOPIC``. Returns the last message's position."""
        last = await self.ml.terminate()
        self._drop_producers()
        for subscription in list(self.subscriptions.values()):
            subscription.wake()
        log.info("[%s] terminated at %s", self.name, last)
        return last

    async def delete(self, *, force: bool = False) -> None:
        """Delete the topic: its schemas, managed ledger, cursors and ledgers. Connected clients are
        disconnected with ``force``; without it, a topic with any is refused
        (``NotAllowedError``, "Topic has active producers/subscriptions"). From the start
        the topic takes no new clients (``ServiceNotReady``); if the delete fails it serves
        again, as Pulsar unfences it."""
        self._check_serving()
        if self.has_clients and not force:
            raise BrokerError(pb.NotAllowedError, "Topic has active producers/subscriptions")
        self._move_to(TopicLifecycle.DELETING)
        try:
            self.disconnect_clients()
            await self._stop()
            if self.schemas is not None and self.topic_name.partition_index < 0:
                # First, while no client can come back and find them (Pulsar's order);
                # a partition's are its partitioned topic's, deleted with it.
                await self.schemas.delete_all(schema_id(self.topic_name))
            await self.compaction.delete()
            await self.ml.delete()
        except BaseException:
            if self.lifecycle is TopicLifecycle.DELETING:
                self._move_to(TopicLifecycle.OPEN)
            raise
        self.subscriptions.clear()
        self._move_to(TopicLifecycle.CLOSED)
        log.info("[%s] deleted", self.name)

    async def unsubscribe(self, name: str) -> None:
        self.last_active_ms = now_ms()  # inactivity counts from its last subscription
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            await subscription.close()
        if name == COMPACTION_CURSOR:  # the compacted ledger goes with the cursor naming it
            await self.compaction.stop()
            await self.compaction.delete()
        await self.ml.delete_cursor(name)

    def disconnect_clients(self) -> None:
        """Tell every producer and consumer the broker closed them: they look the topic up
        again and reconnect wherever it is served next."""
        for producer in list(self.producers):
            if producer.sink is not None:
                producer.sink.close_producer(producer.producer_id)
        self.producers.clear()
        # Waiting WaitForExclusive producers wake, find the topic closing and are refused
        # (ServiceNotReady): their clients look it up again too.
        self._announcement = asyncio.ensure_future(self._announce_producers_changed())
        for subscription in list(self.subscriptions.values()):
            for consumer in list(subscription.consumers.values()):
                consumer.sink.close_consumer(consumer.slot.consumer_id)
                subscription.remove_consumer(consumer)

    async def _stop(self) -> None:
        """Stop the background work: deduplication's recovery and every dispatch loop."""
        self._cancel_deduplication_retry()
        await self.compaction.stop()
        recovery = self._dedup_recovery
        if recovery is not None:
            recovery.cancel()
            await asyncio.wait({recovery})
        for subscription in list(self.subscriptions.values()):
            await subscription.close()

    async def close(self, *, disconnect: bool = False) -> None:
        """Stop serving (an unload, the broker's shutdown): no producer or consumer is
        taken from now on (``ServiceNotReady``); with ``disconnect`` the connected ones are
        told to reconnect (wherever the topic is served next); the dispatch loops stop and
        the managed ledger is closed (cursors persisted). Closing twice waits for the
        first close."""
        if self._closing is None:
            if self.lifecycle is not TopicLifecycle.CLOSED:
                self._move_to(TopicLifecycle.CLOSING)  # before anyone is told to reconnect
            self._closing = asyncio.ensure_future(self._close())
        if disconnect:
            self.disconnect_clients()
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if self.lifecycle is TopicLifecycle.CLOSED:
            return  # deleted or abandoned already
        try:
            await self._stop()
            await self.ml.close()
        finally:
            self._move_to(TopicLifecycle.CLOSED)

    async def abandon(self) -> None:
        """Stop serving at once, writing nothing (see ``ManagedLedger.abandon``)."""
        self._move_to(TopicLifecycle.CLOSED)
        await self._stop()
        self.ml.abandon()
