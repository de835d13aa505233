"""A persistent topic on a managed ledger: its producers and its subscriptions.

Entries are stored as the producer sent them (metadata and payload, checksum included) and
delivered unchanged. Each subscription has a durable cursor and a dispatch loop that hands
entries to consumers as their permits allow. On Shared and Key_Shared subscriptions an
entry its producer wants delivered later waits in a delayed-delivery tracker, and a timer
on the event loop replays it when it is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

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
)
from stripemq.broker.key_shared import KeySharedDispatcher
from stripemq.broker.names import check_subscription_name
from stripemq.broker.publish_time import PublishTimeSearch, publish_time_of
from stripemq.clock import now_ms  # the clock producers set delivery times by
from stripemq.errors import (
    BrokerError,
    ConsumerAssignError,
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
    StripeMQError,
)
from stripemq.managed_ledger.cursor.managed_cursor import ManagedCursor
from stripemq.managed_ledger.cursor.non_durable import NonDurableCursor
from stripemq.managed_ledger.cursor.state import BatchAck
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import MAX_BATCH_SIZE, bits_of, words_of
from stripemq.proto.frames import entry_metadata
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.retry import Backoff

log = logging.getLogger(__name__)

READ_BATCH = 100
NO_KEY = b"NONE_KEY"  # what Pulsar hashes for a message without a key
SubType = pb.CommandSubscribe.SubType
# Subscription types that honour a message's delivery time (Pulsar ignores it on the others).
DELAYING_TYPES = frozenset({SubType.Shared, SubType.Key_Shared})


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

    def send_active_change(self, consumer_id: int, is_active: bool) -> None: ...

    def close_consumer(self, consumer_id: int) -> None: ...

    def close_producer(self, producer_id: int) -> None: ...

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


@dataclass
class Consumer:
    """A subscribed consumer: its dispatch slot and where its messages go."""

    slot: ConsumerSlot
    sink: MessageSink
    subscription: Subscription


def make_dispatcher(sub_type: int, partition_index: int, sticky: bool) -> Dispatcher:
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
    """A named cursor and the dispatch loop that feeds its consumers."""

    def __init__(
        self,
        topic: PersistentTopic,
        cursor: ManagedCursor | NonDurableCursor,
        sub_type: int,
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
        self._active: ConsumerSlot | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # The timer that releases due delayed entries, and the time (ms) it is set for.
        self._delayed_timer: asyncio.TimerHandle | None = None
        self._delayed_timer_at: int | None = None

    def _new_delivery_state(self) -> DeliveryState:
        """Delivery state from scratch; with a delayed-delivery tracker where the
        subscription type honours delivery times and the broker has them enabled."""
        config = self.topic.delayed_delivery
        tracker = None
        if config.enabled and self.sub_type in DELAYING_TYPES:
            tracker = DelayedDeliveryTracker(config.tick_ms)
        return DeliveryState(self.dispatcher, self.cursor.is_acked, tracker)

    # ------------------------------------------------------------------ consumers

    def add_consumer(
        self, consumer: Consumer, hash_ranges: list[tuple[int, int]] | None = None
    ) -> None:
        if self.sub_type == SubType.Exclusive and self.dispatcher.consumers:
            raise BrokerError(
                pb.ConsumerBusy, f"subscription {self.name} already has a consumer (Exclusive)"
            )
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
        self._active_may_have_changed()
        if self._task is None:
            self._task = asyncio.ensure_future(self._dispatch_loop())
        self._wake.set()

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.consumers.pop(consumer.slot.slot_id, None) is None:
            return
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
        if ack.ack_type == pb.CommandAck.Cumulative:
            if len(positions) != 1:
                raise BrokerError(pb.NotAllowedError, "a cumulative ack names one message")
            if self.sub_type in (SubType.Shared, SubType.Key_Shared):
                raise BrokerError(
                    pb.NotAllowedError,
                    f"cumulative ack on a {SubType.Name(self.sub_type)} subscription",
                )
            self._ack_cumulative(consumer, ack.message_id[0], positions[0])
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
        self.cursor.ack(whole)
        self.delivery.acknowledged(consumer.slot, whole)
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
            if done_indexes:
                self.cursor.ack_batch(position, done_indexes, size)
        done = [
            p
            for p in consumer.slot.pending
            if p < position or (p == position and self.cursor.is_acked(p))
        ]
        self.delivery.acknowledged(consumer.slot, done)
        self._wake.set()

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
        self._cancel_delayed_timer()
        self._wake.set()
        return consumers

    async def close(self) -> None:
        self._cancel_delayed_timer()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ------------------------------------------------------------------ dispatching

    async def _dispatch_loop(self) -> None:
        """Feed the consumers until the subscription closes. Nothing ends it but
        cancellation: a failure (storage trouble, or a bug) is logged once and retried
        with back-off until a round succeeds."""
        backoff = Backoff(initial=0.1, maximum=5.0)
        failing = False
        while True:
            if not self.dispatcher.has_permits():
                await self._wait_for_wake()
                continue
            try:
                progressed = False
                if self.delivery.replay_pending:
                    progressed = await self._deliver_replays()
                read_any = True
                if self.dispatcher.has_permits():
                    read_any, moved = await self._deliver_new()
                    progressed = progressed or moved
            except Exception as exc:
                if not failing:
                    failing = True
                    where = (self.topic.name, self.name)
                    if isinstance(exc, StripeMQError):
                        log.warning("[%s] [%s] dispatch failed: %s", *where, exc)
                    else:
                        log.exception("[%s] [%s] dispatch failed", *where)
                await backoff.sleep()
                continue
            if failing:
                failing = False
                backoff.reset()
                log.info("[%s] [%s] dispatch resumed", self.topic.name, self.name)
            if not read_any and not progressed:
                after = Position(
                    self.cursor.read_position.ledger_id, self.cursor.read_position.entry_id - 1
                )
                await self._wait_for_entries_or_wake(self.topic.ml, after)
            elif not progressed:
                await self._wait_for_wake()

    async def _deliver_replays(self) -> bool:
        infos: list[EntryInfo] = []
        data: dict[Position, bytes] = {}
        for position in self.delivery.replay_positions(READ_BATCH):
            found = await self.topic.ml.read_entries(position, 1)
            if not found or found[0].position != position:
                self.delivery.drop_replay(position)  # trimmed: acknowledged meanwhile
                continue
            infos.append(entry_info(position, found[0].data))
            data[position] = found[0].data
        plan = self.delivery.plan(infos, replay=True)
        self._send(plan.deliveries, data)
        return bool(plan.deliveries)

    async def _deliver_new(self) -> tuple[bool, bool]:
        """``(read anything, moved on)``."""
        start = self.cursor.state.first_unacked_from(self.cursor.read_position)
        entries = await self.topic.ml.read_entries(start, READ_BATCH)
        if not entries:
            return False, False
        data = {entry.position: entry.data for entry in entries}
        plan = self.delivery.plan(
            [entry_info(e.position, e.data) for e in entries], replay=False, now_ms=now_ms()
        )
        self._send(plan.deliveries, data)
        if plan.consumed_through is not None:
            self.cursor.state.advance_read(plan.consumed_through)
        self._schedule_delayed_timer()
        return True, plan.consumed_through is not None

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
        for delivery in deliveries:
            position = delivery.position
            message_id = pb.MessageIdData(
                ledgerId=position.ledger_id, entryId=position.entry_id, partition=partition
            )
            # A partly acknowledged batch goes with the bits of what is left (in MESSAGE's
            # ack_set, where clients look), so only that is delivered again.
            bits = self.cursor.state.ack_set(position)
            ack_set = words_of(bits.tolist()) if bits is not None else None
            consumer = self.consumers[delivery.slot.slot_id]
            consumer.sink.send_message(
                delivery.slot.consumer_id,
                message_id,
                delivery.redelivery_count,
                data[position],
                ack_set,
            )

    async def _wait_for_wake(self) -> None:
        await self._wake.wait()
        self._wake.clear()

    async def _wait_for_entries_or_wake(self, ml: ManagedLedger, after: Position) -> None:
        entries = asyncio.ensure_future(ml.wait_for_entries(after))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({entries, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (entries, woken):
                task.cancel()
            self._wake.clear()


class PersistentTopic:
    """A topic this broker serves: its managed ledger, producers and subscriptions."""

    def __init__(
        self,
        topic_name: TopicName,
        ml: ManagedLedger,
        delayed_delivery: DelayedDeliveryConfig | None = None,
    ) -> None:
        self.topic_name = topic_name
        self.name = str(topic_name)
        self.ml = ml
        self.delayed_delivery = delayed_delivery or DelayedDeliveryConfig()
        self.producers: list[Producer] = []
        self._producers_changed = asyncio.Condition()
        self.subscriptions: dict[str, Subscription] = {}
        self.dedup: Deduplication | None = None
        # After a failed append, until every append in flight is done (the managed ledger
        # refuses new ones meanwhile; Pulsar's PersistentTopic.addFailed fences the topic).
        self.publishing_paused = False
        self._publishes_in_flight = 0
        self._announcement: asyncio.Future[None] | None = None

    async def add_producer(self, producer: Producer) -> None:
        """Admit a producer by its access mode (Pulsar's ProducerAccessMode)."""
        mode = producer.access_mode
        async with self._producers_changed:
            self._take_over_name(producer)
            exclusive = [p for p in self.producers if p.access_mode != pb.Shared]
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
                await self._producers_changed.wait_for(lambda: not self.producers)
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

    async def remove_producer(self, producer: Producer) -> None:
        async with self._producers_changed:
            if producer in self.producers:
                self.producers.remove(producer)
            self._producers_changed.notify_all()

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
                self._disconnect_producers()
        if self.publishing_paused and self._publishes_in_flight == 0:
            if self.dedup is not None:
                self.dedup.forget_unstored()
            self.publishing_paused = False
            log.info("[%s] publishing resumes", self.name)

    def _disconnect_producers(self) -> None:
        producers, self.producers = self.producers, []
        for producer in producers:
            if producer.sink is not None:
                producer.sink.close_producer(producer.producer_id)
        # WaitForExclusive producers wait on the condition, which is notified under its lock.
        self._announcement = asyncio.ensure_future(self._announce_producers_changed())

    async def _announce_producers_changed(self) -> None:
        async with self._producers_changed:
            self._producers_changed.notify_all()

    async def subscribe(
        self, name: str, sub_type: int, initial: InitialPosition, sticky: bool = False
    ) -> Subscription:
        """The durable subscription ``name``, made at ``initial`` if new; reserved names
        (``names.check_subscription_name``) are refused before any cursor is opened."""
        check_subscription_name(name)
        subscription = self.subscriptions.get(name)
        if subscription is None:
            cursor = await self.ml.open_cursor(name, initial)
            subscription = self.subscriptions.get(name)  # opened meanwhile by another
            if subscription is None:
                subscription = Subscription(self, cursor, sub_type, sticky)
                self.subscriptions[name] = subscription
        elif subscription.sub_type != sub_type and subscription.consumers:
            raise BrokerError(
                pb.ConsumerBusy,
                f"subscription {name} is {SubType.Name(subscription.sub_type)}, "
                f"not {SubType.Name(sub_type)}",
            )
        elif subscription.sub_type != sub_type:  # no consumers left: it takes the new type
            await subscription.close()
            subscription = Subscription(self, subscription.cursor, sub_type, sticky)
            self.subscriptions[name] = subscription
        return subscription

    def subscribe_non_durable(
        self, name: str, sub_type: int, start: Position | None
    ) -> Subscription:
        """A reader's subscription: an in-memory cursor whose first entry is ``start``.
        A reader back under its subscription's name (a seek disconnected it) gets the same
        subscription, at the position the seek left it. Reserved names are refused."""
        check_subscription_name(name)
        existing = self.subscriptions.get(name)
        if existing is not None and not existing.durable and not existing.consumers:
            return existing
        if existing is not None:
            raise BrokerError(pb.ConsumerBusy, f"subscription {name} already exists")
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
        """The first entry published at or after ``publish_time_ms`` (else the end), by
        binary search over the ledger chain: one entry read per step, O(log n) in all."""
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
        return result if result is not None else self.ml.chain.write_position()

    async def unsubscribe(self, name: str) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            await subscription.close()
        await self.ml.delete_cursor(name)

    def disconnect_clients(self) -> None:
        """Tell every producer and consumer the broker closed them: they look the topic up
        again and reconnect wherever it is served next."""
        for producer in list(self.producers):
            if producer.sink is not None:
                producer.sink.close_producer(producer.producer_id)
        self.producers.clear()
        for subscription in self.subscriptions.values():
            for consumer in list(subscription.consumers.values()):
                consumer.sink.close_consumer(consumer.slot.consumer_id)
                subscription.remove_consumer(consumer)

    async def close(self) -> None:
        for subscription in self.subscriptions.values():
            await subscription.close()
        await self.ml.close()

    async def abandon(self) -> None:
        """Stop serving at once, writing nothing (see ``ManagedLedger.abandon``)."""
        for subscription in self.subscriptions.values():
            await subscription.close()
        self.ml.abandon()
