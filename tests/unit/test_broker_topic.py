"""Subscription acknowledgements, driven directly on an in-memory cursor (no I/O); then
the topic's lifecycle, subscriptions and policies on a managed ledger (memory:// metadata,
the in-memory ledger client)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker import topic as topic_module
from stripemq.broker.dedup import Deduplication
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.policies import PublishRate
from stripemq.broker.topic import Consumer, PersistentTopic, Producer, Subscription, TopicLifecycle
from stripemq.errors import BrokerError, ManagedLedgerError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.cursor.non_durable import NonDurableCursor
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import words_of
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.polling import until
from stripemq.testing.sinks import NullSink

LEDGER = 7
SubType = pb.CommandSubscribe.SubType


def subscription(
    entries: int = 4, sub_type: int = pb.CommandSubscribe.Exclusive
) -> tuple[Subscription, Consumer]:
    """A subscription over one ledger of ``entries`` entries and one consumer of it."""
    chain = LedgerChain([LedgerInfo(LEDGER, entries)])
    topic = PersistentTopic(TopicName.parse("t"), cast(ManagedLedger, SimpleNamespace(cursors={})))
    cursor = NonDurableCursor("sub", chain, Position(LEDGER, -1))
    sub = Subscription(topic, cursor, sub_type)
    consumer = Consumer(ConsumerSlot(1, "c"), NullSink(), sub)
    return sub, consumer


def ack(
    ack_type: int,
    entry: int,
    unacked: list[bool] | None = None,
    batch_size: int | None = None,
) -> pb.CommandAck:
    message_id = pb.MessageIdData(ledgerId=LEDGER, entryId=entry)
    if unacked is not None:
        message_id.ack_set.extend(words_of(unacked))
    if batch_size is not None:
        message_id.batch_size = batch_size
    return pb.CommandAck(consumer_id=1, ack_type=ack_type, message_id=[message_id])


@pytest.mark.parametrize("with_size", [True, False])
def test_a_cumulative_ack_inside_a_batch_acks_only_up_to_that_message(with_size: bool) -> None:
    sub, consumer = subscription()
    consumer.slot.pending.update({Position(LEDGER, 0): 1, Position(LEDGER, 1): 10})
    # Messages 0..4 of the batch at entry 1 acknowledged, cumulatively (the ack set's set
    # bits are the messages still unacknowledged).
    unacked = [False] * 5 + [True] * 5
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 1, unacked, 10 if with_size else None))
    state = sub.cursor.state
    assert state.mark_delete == Position(LEDGER, 0)  # everything before the entry
    assert not state.is_acked(Position(LEDGER, 1))
    bits = state.ack_set(Position(LEDGER, 1))
    assert bits is not None and bits.tolist() == unacked
    # The rest of the batch, later: now the whole entry is acknowledged.
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 1, [False] * 9 + [True], 10))
    assert state.ack_set(Position(LEDGER, 1)).tolist() == [False] * 9 + [True]  # type: ignore[union-attr]
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 1))
    assert state.mark_delete == Position(LEDGER, 1)
    assert state.ack_set(Position(LEDGER, 1)) is None


def test_a_cumulative_ack_whose_ack_set_clears_every_bit_acks_the_entry() -> None:
    sub, consumer = subscription()
    consumer.slot.pending.update({Position(LEDGER, 0): 3})
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 0, [False] * 3, 3))
    assert sub.cursor.state.mark_delete == Position(LEDGER, 0)


def test_a_cumulative_ack_that_acks_no_message_of_the_batch_acks_only_what_precedes() -> None:
    sub, consumer = subscription()
    consumer.slot.pending.update({Position(LEDGER, 2): 4})
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 2, [True] * 4, 4))
    state = sub.cursor.state
    assert state.mark_delete == Position(LEDGER, 1)
    assert not state.is_acked(Position(LEDGER, 2))


def test_a_cumulative_ack_without_an_ack_set_acks_the_whole_entry() -> None:
    sub, consumer = subscription()
    consumer.slot.pending.update({Position(LEDGER, 0): 1, Position(LEDGER, 1): 10})
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 1))
    assert sub.cursor.state.mark_delete == Position(LEDGER, 1)
    assert consumer.slot.pending == {}


@pytest.mark.parametrize("ack_type", [pb.CommandAck.Individual, pb.CommandAck.Cumulative])
@pytest.mark.parametrize("batch_size", [2**31 - 1, 1 << 17, -5])
def test_a_hostile_batch_size_is_refused_before_anything_is_allocated(
    ack_type: int, batch_size: int
) -> None:
    sub, consumer = subscription()
    with pytest.raises(BrokerError) as caught:
        sub.ack(consumer, ack(ack_type, 1, [False], batch_size))
    assert caught.value.server_error == pb.NotAllowedError
    assert sub.cursor.state.mark_delete == Position(LEDGER, -1)


def test_a_batch_size_taken_from_a_hostile_producers_entry_is_refused() -> None:
    sub, consumer = subscription()
    # The entry's metadata claimed 2**31 - 1 messages; the ack leaves batch_size out.
    consumer.slot.pending.update({Position(LEDGER, 1): 2**31 - 1})
    with pytest.raises(BrokerError):
        sub.ack(consumer, ack(pb.CommandAck.Individual, 1, [False]))
    assert sub.cursor.state.ack_set(Position(LEDGER, 1)) is None


# ---------------------------------------------------------------- a topic on a managed ledger


class Producers(NullSink):
    """A producer's connection that remembers what the topic told it."""

    def __init__(self) -> None:
        self.closed: list[int] = []
        self.rate_changes = 0

    def close_producer(self, producer_id: int) -> None:
        self.closed.append(producer_id)

    def publish_rate_changed(self) -> None:
        self.rate_changes += 1


async def live_topic(
    store: MetadataStore, name: str = "persistent://acme/orders/t"
) -> PersistentTopic:
    """A topic over a managed ledger on ``store`` and an in-memory ledger client."""
    ml = ManagedLedger(
        TopicName.parse(name).managed_ledger_name,
        store,
        cast(BookKeeper, FakeBookKeeper()),
        ManagedLedgerConfig(),
    )
    await ml.open(create=True)
    return PersistentTopic(TopicName.parse(name), ml)


async def consumed(topic: PersistentTopic, name: str = "s1") -> Subscription:
    """A subscription with a consumer connected: its dispatch loop runs."""
    sub = await topic.subscribe(name, SubType.Shared, InitialPosition.Earliest)
    consumer = Consumer(ConsumerSlot(1, "c"), NullSink(), sub)
    sub.add_consumer(consumer)
    sub.flow(consumer, 10)  # it waits for entries
    assert sub.dispatching
    return sub


def refused_not_ready(call: Callable[[], object]) -> None:
    with pytest.raises(BrokerError) as refused:
        call()
    assert refused.value.server_error == pb.ServiceNotReady


async def refused_not_ready_async(call: Callable[[], Awaitable[object]]) -> None:
    with pytest.raises(BrokerError) as refused:
        await call()
    assert refused.value.server_error == pb.ServiceNotReady


async def test_closing_while_an_admin_call_looks_a_subscription_up(store: MetadataStore) -> None:
    topic = await live_topic(store)
    await consumed(topic)
    # A durable cursor without a subscription yet (``subscribe`` is making it right now).
    await topic.ml.open_cursor("idle", InitialPosition.Earliest)
    closing = asyncio.ensure_future(topic.close())
    await asyncio.sleep(0)  # the close waits for the dispatch loop to stop
    assert topic.lifecycle is TopicLifecycle.CLOSING
    assert await topic.subscription("idle") is None  # not taken up while closing
    await closing  # and the close went through every subscription
    assert topic.lifecycle is TopicLifecycle.CLOSED
    assert topic.ml.closed


@pytest.mark.parametrize("how", ["close", "delete"])
async def test_a_topic_going_away_refuses_new_clients_with_service_not_ready(
    store: MetadataStore, how: str
) -> None:
    topic = await live_topic(store)
    await consumed(topic)
    going = asyncio.ensure_future(
        topic.close(disconnect=True) if how == "close" else topic.delete(force=True)
    )
    await asyncio.sleep(0)
    expected = TopicLifecycle.CLOSING if how == "close" else TopicLifecycle.DELETING
    assert topic.lifecycle is expected
    cursors = set(topic.ml.cursors)
    await refused_not_ready_async(
        lambda: topic.subscribe("late", SubType.Shared, InitialPosition.Earliest)
    )
    await refused_not_ready_async(lambda: topic.add_producer(Producer(1, "p", topic, NullSink())))
    refused_not_ready(lambda: topic.subscribe_non_durable("reader", SubType.Exclusive, None))
    assert set(topic.ml.cursors) <= cursors  # no cursor was opened for them
    await going
    assert topic.lifecycle is TopicLifecycle.CLOSED
    assert topic.producers == [] and "late" not in topic.subscriptions


async def test_a_failed_delete_serves_again(store: MetadataStore) -> None:
    topic = await live_topic(store)

    async def broken() -> None:
        raise ManagedLedgerError("the store is down")

    topic.ml.delete = broken  # type: ignore[method-assign]
    with pytest.raises(ManagedLedgerError):
        await topic.delete()
    assert topic.lifecycle is TopicLifecycle.OPEN
    await topic.subscribe("after", SubType.Shared, InitialPosition.Earliest)
    await topic.close()


async def test_dispatch_ends_when_the_managed_ledger_is_closed_under_it(
    store: MetadataStore,
) -> None:
    topic = await live_topic(store)
    sub = await consumed(topic)
    await topic.ml.close()  # deleted or unloaded under a consumer that came back too late
    await until(lambda: not sub.dispatching, "the dispatch loop ends")
    await topic.close()


async def test_a_changed_publish_rate_tells_the_producers_connections(
    store: MetadataStore,
) -> None:
    topic = await live_topic(store)
    sink = Producers()
    await topic.add_producer(Producer(1, "p", topic, sink))
    limited = EffectivePolicies(publish_rate=PublishRate(publish_throttling_rate_in_msg=10))
    await topic.apply_policies(limited)
    assert sink.rate_changes == 1
    await topic.apply_policies(limited)  # the same rate again: nothing to tell
    assert sink.rate_changes == 1
    await topic.apply_policies(EffectivePolicies())  # lifted
    assert sink.rate_changes == 2 and topic.publish_limiter is None
    await topic.close()


async def test_a_subscription_loaded_with_the_topic_has_no_type_until_a_consumer_comes(
    store: MetadataStore,
) -> None:
    topic = await live_topic(store)
    await topic.subscribe("made-by-admin", None, InitialPosition.Earliest)
    await topic.close()
    ml = ManagedLedger(topic.ml.name, store, topic.ml.bk, topic.ml.config)
    await ml.open(create=False)
    topic = PersistentTopic(topic.topic_name, ml)
    sub = topic.subscriptions["made-by-admin"]
    assert sub.sub_type is None and sub.type_name == "None"
    assert await topic.subscribe("made-by-admin", None, InitialPosition.Latest) is sub
    same = await topic.subscribe("made-by-admin", SubType.Key_Shared, InitialPosition.Latest)
    assert same is sub and sub.sub_type == SubType.Key_Shared
    await topic.close()


def test_a_refused_ack_is_not_counted() -> None:
    sub, consumer = subscription(sub_type=pb.CommandSubscribe.Shared)
    with pytest.raises(BrokerError):
        sub.ack(consumer, ack(pb.CommandAck.Cumulative, 1))  # not on a Shared subscription
    assert sub.stats.acks.count == 0 and consumer.stats.acks.count == 0
    sub.ack(consumer, ack(pb.CommandAck.Individual, 1))
    assert sub.stats.acks.count == 1


def test_a_consumer_told_the_end_of_the_topic_is_forgotten_when_it_leaves() -> None:
    sub, consumer = subscription()
    # Added as add_consumer adds it, without a dispatch loop (no event loop here).
    sub.dispatcher.add_consumer(consumer.slot)
    sub.consumers[consumer.slot.slot_id] = consumer
    sub._tell_end_of_topic()
    assert consumer.slot.slot_id in sub._told_end_of_topic
    sub.remove_consumer(consumer)
    assert sub._told_end_of_topic == set()


class GatedRecovery:
    """Stands in for ``Deduplication.start``: fails ``failures`` times, then waits for
    ``gate`` before doing the real work."""

    def __init__(self, failures: int = 0) -> None:
        self.gate = asyncio.Event()
        self.failures = failures
        self.calls = 0
        self.real = Deduplication.start

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        async def start(dedup: Deduplication) -> None:
            await self.run(dedup)

        monkeypatch.setattr(Deduplication, "start", start)

    async def run(self, dedup: Deduplication) -> None:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise ManagedLedgerError("cannot read the topic")
        await self.gate.wait()
        await self.real(dedup)


async def test_deduplication_is_enabled_in_the_background(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    recovery = GatedRecovery()
    recovery.install(monkeypatch)
    topic = await live_topic(store)
    # The change returns while the state is read back, and the next one is not held up.
    await asyncio.wait_for(topic.apply_policies(EffectivePolicies(deduplication=True)), 5)
    assert topic.deduplication_status == "Recovering" and topic.dedup is None
    ttl = EffectivePolicies(deduplication=True, message_ttl_s=60)
    await asyncio.wait_for(topic.apply_policies(ttl), 5)
    # A producer waits for it (its last sequence id is only known then).
    producer = asyncio.ensure_future(topic.add_producer(Producer(1, "p", topic, NullSink())))
    for _ in range(10):  # loop turns enough for it to be admitted if it were not held
        await asyncio.sleep(0)
    assert not producer.done()
    recovery.gate.set()
    await asyncio.wait_for(producer, 5)
    assert topic.deduplication_status == "Enabled" and topic.dedup is not None
    assert recovery.calls == 1
    await topic.close()


async def test_a_failed_deduplication_recovery_is_retried(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topic_module, "DEDUP_RETRY_S", 0.01)
    recovery = GatedRecovery(failures=2)
    recovery.gate.set()
    recovery.install(monkeypatch)
    topic = await live_topic(store)
    await topic.apply_policies(EffectivePolicies(deduplication=True))
    with pytest.raises(ManagedLedgerError):
        await topic.wait_for_deduplication()
    # Meanwhile producers are told to retry: their sequence ids are not known yet.
    await refused_not_ready_async(lambda: topic.add_producer(Producer(1, "p", topic, NullSink())))
    await until(lambda: topic.dedup is not None, "deduplication recovers on a retry")
    assert recovery.calls == 3 and topic.deduplication_status == "Enabled"
    await topic.add_producer(Producer(1, "p", topic, NullSink()))
    # Switched off: its cursor goes, so it holds no ledger back.
    await topic.apply_policies(EffectivePolicies())
    assert topic.dedup is None and "pulsar.dedup" not in topic.ml.cursors
    await topic.close()


class Received(NullSink):
    """A consumer's connection that remembers the entries it was sent, by position."""

    def __init__(self) -> None:
        self.positions: list[Position] = []

    def send_message(
        self,
        consumer_id: int,
        message_id: pb.MessageIdData,
        redelivery_count: int,
        entry: bytes,
        ack_set: list[int] | None = None,
    ) -> None:
        self.positions.append(Position(message_id.ledgerId, message_id.entryId))


async def test_a_read_in_flight_when_everything_is_given_back_is_not_sent(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Exclusive consumer gives everything back while the dispatcher reads: that read
    belongs to the old order, so it is dropped and the entries go out once, in order."""
    topic = await live_topic(store)
    positions = [await topic.ml.add_entry(f"m{i}".encode()) for i in range(4)]
    sub = await topic.subscribe("s", SubType.Exclusive, InitialPosition.Earliest)
    sink = Received()
    consumer = Consumer(ConsumerSlot(1, "c"), sink, sub)
    sub.add_consumer(consumer)
    sub.flow(consumer, 2)
    await until(lambda: len(sink.positions) == 2, "the first two sent")
    real_read = topic.ml.read_entries
    reading, release = asyncio.Event(), asyncio.Event()

    async def gated_read(start: Position, count: int) -> list[object]:
        reading.set()
        await release.wait()
        return await real_read(start, count)  # type: ignore[return-value]

    monkeypatch.setattr(topic.ml, "read_entries", gated_read)
    sub.flow(consumer, 10)
    await reading.wait()  # reading entries 2 and 3
    sub.redeliver(consumer, [])  # the client cleared its queue: 0..3 again
    release.set()
    await until(lambda: len(sink.positions) == 6, "everything sent again")
    await until(lambda: sub.idle, "dispatch waits")
    assert sink.positions == positions[:2] + positions
    await topic.close()


async def test_a_producer_waiting_for_exclusive_access(store: MetadataStore) -> None:
    """It is told it waits, goes before Shared and Exclusive producers that come later,
    is refused once the topic is terminated, and wakes (refused) when the topic closes."""
    topic = await live_topic(store)
    holder = Producer(1, "holder", topic, Producers(), pb.Exclusive)
    await topic.add_producer(holder)
    queued: list[str] = []
    waiter = Producer(2, "waiter", topic, Producers(), pb.WaitForExclusive)
    waiting = asyncio.ensure_future(topic.add_producer(waiter, lambda: queued.append("w")))
    await until(lambda: queued == ["w"], "the waiter is told it waits")
    for mode in (pb.Shared, pb.Exclusive):
        with pytest.raises(BrokerError, match="waiting for exclusive access"):
            await topic.add_producer(Producer(3, f"late-{mode}", topic, Producers(), mode))
    await topic.remove_producer(holder)
    await waiting
    assert topic.producers == [waiter]
    await topic.remove_producer(waiter)

    # Terminated while it waits: refused, not admitted to a topic that takes no messages.
    await topic.add_producer(holder)
    waiting = asyncio.ensure_future(topic.add_producer(waiter))
    await until(lambda: topic._exclusive_waiters == 1, "the waiter waits")
    await topic.terminate()
    with pytest.raises(BrokerError) as refused:
        await waiting
    assert refused.value.server_error == pb.TopicTerminatedError
    assert topic.producers == []
    await topic.close()


async def test_a_waiting_producer_wakes_when_the_topic_is_unloaded(store: MetadataStore) -> None:
    topic = await live_topic(store)
    await topic.add_producer(Producer(1, "holder", topic, Producers(), pb.Exclusive))
    waiter = Producer(2, "waiter", topic, Producers(), pb.WaitForExclusive)
    waiting = asyncio.ensure_future(topic.add_producer(waiter))
    await until(lambda: topic._exclusive_waiters == 1, "the waiter waits")
    await topic.close(disconnect=True)
    with pytest.raises(BrokerError) as refused:
        await asyncio.wait_for(waiting, 5)
    assert refused.value.server_error == pb.ServiceNotReady
