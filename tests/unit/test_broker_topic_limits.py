"""Pulsar's count limits on a topic: the unacknowledged-message blocking decisions (sans-IO,
on dispatch slots), then producers, consumers, subscriptions and unacked messages enforced
by a topic on a managed ledger (memory:// metadata, the in-memory ledger client)."""

from __future__ import annotations

from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker.dispatch import ConsumerSlot, PendingAcks, blocked_on_unacked
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.stats import consumer_stats, subscription_stats
from stripemq.broker.topic import Consumer, PersistentTopic, Producer, Subscription
from stripemq.errors import BrokerError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import words_of
from stripemq.proto.frames import encode_entry
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.polling import until
from stripemq.testing.sinks import NullSink
from stripemq.topic_limits import Limit, default_limits

SubType = pb.CommandSubscribe.SubType
EARLIEST = InitialPosition.Earliest


def at(entry: int) -> Position:
    return Position(1, entry)


# ---------------------------------------------------------------------------- sans-IO


def test_pending_acks_keep_the_messages_they_hold() -> None:
    pending = PendingAcks()
    pending[at(0)] = 1
    pending[at(1)] = 10
    pending[at(1)] = 4  # the same entry again: replaced, not added
    assert pending.messages == 5 and len(pending) == 2
    assert pending.pop(at(0)) == 1 and pending.pop(at(0), None) is None
    with pytest.raises(KeyError):
        pending.pop(at(0))
    del pending[at(1)]
    assert pending.messages == 0 and dict(pending) == {}
    pending[at(2)] = 3
    pending.clear()
    assert pending.messages == 0 and at(2) not in pending


def test_a_partly_acknowledged_batch_holds_what_is_left_of_it() -> None:
    pending = PendingAcks()
    pending[at(0)] = 10
    pending[at(1)] = 1
    pending.set_unacked(at(0), 4)  # six of ten acknowledged by batch index
    assert pending.messages == 5 and pending[at(0)] == 10  # its size stays
    pending.set_unacked(at(0), 99)  # never more than the batch
    assert pending.messages == 11
    pending.set_unacked(at(0), 2)
    pending.set_unacked(at(7), 1)  # not held: nothing
    assert pending.pop(at(0)) == 10 and pending.messages == 1
    pending[at(2)] = 5
    pending.set_unacked(at(2), 0)
    pending[at(2)] = 5  # handed out again: whole again
    assert pending.messages == 6


def test_a_consumer_is_blocked_at_its_limit_until_it_holds_half() -> None:
    slot = ConsumerSlot(1, "c", permits=100, max_unacked=4)
    for i in range(3):
        slot.take(at(i), 1)
    assert slot.ready and not slot.blocked_on_unacked
    slot.take(at(3), 1)  # four held: blocked, permits or not
    assert slot.blocked_on_unacked and not slot.ready
    slot.acknowledged([at(0)])  # three: still more than half
    assert slot.blocked_on_unacked
    slot.acknowledged([at(1)])  # two: half, free again
    assert not slot.blocked_on_unacked and slot.ready


def test_a_batch_counts_its_messages_and_no_limit_never_blocks() -> None:
    limited = ConsumerSlot(1, "c", permits=100, max_unacked=10)
    limited.take(at(0), 12)  # one batch past the limit: it goes, and then nothing more
    assert limited.blocked_on_unacked
    unlimited = ConsumerSlot(2, "d", permits=10**6)
    unlimited.take(at(0), 10**5)
    assert not unlimited.blocked_on_unacked
    limited.max_unacked = 0  # the limit lifted
    assert not limited.blocked_on_unacked


def test_a_subscription_blocks_on_what_its_consumers_hold_together() -> None:
    a, b = ConsumerSlot(1, "a", permits=100), ConsumerSlot(2, "b", permits=100)
    a.take(at(0), 3)
    b.take(at(1), 2)
    assert not blocked_on_unacked([a, b], 6, blocked=False)
    b.take(at(2), 1)
    assert blocked_on_unacked([a, b], 6, blocked=False)  # six held
    a.acknowledged([at(0)])  # three: half
    assert not blocked_on_unacked([a, b], 6, blocked=True)
    assert blocked_on_unacked([a, b], 5, blocked=True)  # half of 5 is 2: three is more
    assert not blocked_on_unacked([a, b], 0, blocked=True)  # 0: no limit


# ---------------------------------------------------------------- a topic on a ledger


class Recording(NullSink):
    """A consumer's connection that remembers the entries it was sent."""

    def __init__(self) -> None:
        self.sent: list[pb.MessageIdData] = []

    def send_message(  # type: ignore[override]
        self, consumer_id: int, message_id: pb.MessageIdData, *args: object, **kw: object
    ) -> None:
        self.sent.append(message_id)


async def live_topic(store: MetadataStore, **limits: int) -> PersistentTopic:
    name = TopicName.parse("persistent://acme/orders/limited")
    ml = ManagedLedger(
        name.managed_ledger_name, store, cast(BookKeeper, FakeBookKeeper()), ManagedLedgerConfig()
    )
    await ml.open(create=True)
    topic = PersistentTopic(name, ml)
    chosen = {**default_limits(), **{Limit[k.upper()]: v for k, v in limits.items()}}
    await topic.apply_policies(EffectivePolicies(limits=chosen))
    return topic


def entry(i: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
    return encode_entry(metadata, f"m{i}".encode())


async def publish(topic: PersistentTopic, count: int) -> None:
    for i in range(count):
        await topic.publish(entry(i))


def consumer_of(sub: Subscription, consumer_id: int, sink: NullSink | None = None) -> Consumer:
    consumer = Consumer(ConsumerSlot(consumer_id, f"c{consumer_id}"), sink or NullSink(), sub)
    sub.add_consumer(consumer)
    return consumer


def acked(sub: Subscription, consumer: Consumer, ids: list[pb.MessageIdData]) -> None:
    sub.ack(
        consumer,
        pb.CommandAck(consumer_id=consumer.slot.consumer_id, ack_type=0, message_id=ids),
    )


async def refused(code: int, message: str, call: object) -> None:
    with pytest.raises(BrokerError) as caught:
        if callable(call):
            result = call()
            if hasattr(result, "__await__"):
                await result
    assert caught.value.server_error == code
    assert message in str(caught.value)


async def test_a_topic_takes_as_many_producers_as_its_limit(store: MetadataStore) -> None:
    topic = await live_topic(store, max_producers=2)
    await topic.add_producer(Producer(1, "p1", topic, NullSink()))
    await topic.add_producer(Producer(2, "p2", topic, NullSink()))
    await refused(
        pb.ProducerBusy,
        "reached max producers limit",
        lambda: topic.add_producer(Producer(3, "p3", topic, NullSink())),
    )
    await topic.remove_producer(topic.producers[0])
    await topic.add_producer(Producer(3, "p3", topic, NullSink()))  # room again
    await topic.close()


async def test_consumer_limits_of_the_topic_and_of_a_subscription(store: MetadataStore) -> None:
    topic = await live_topic(store, max_consumers=3, max_consumers_per_subscription=2)
    shared = await topic.subscribe("shared", SubType.Shared, EARLIEST)
    consumer_of(shared, 1)
    consumer_of(shared, 2)
    await refused(
        pb.ConsumerBusy, "Subscription reached max consumers limit", lambda: consumer_of(shared, 3)
    )
    other = await topic.subscribe("other", SubType.Shared, EARLIEST)
    consumer_of(other, 4)
    await refused(
        pb.ConsumerBusy, "Topic reached max consumers limit", lambda: consumer_of(other, 5)
    )
    reader = topic.subscribe_non_durable("reader", SubType.Exclusive, None)
    full = "Topic reached max consumers limit"
    await refused(pb.ConsumerBusy, full, lambda: consumer_of(reader, 6))
    await topic.close()


async def test_a_topic_takes_as_many_subscriptions_as_its_limit(store: MetadataStore) -> None:
    topic = await live_topic(store, max_subscriptions=2)
    await topic.subscribe("a", SubType.Shared, EARLIEST)
    await topic.subscribe("b", SubType.Shared, EARLIEST)
    assert await topic.subscribe("a", SubType.Shared, EARLIEST)  # an existing one: fine
    message = "Exceed the maximum number of subscriptions of the topic"
    await refused(pb.NotAllowedError, message, lambda: topic.subscribe("c", None, EARLIEST))
    await refused(
        pb.NotAllowedError,
        message,
        lambda: topic.subscribe_non_durable("reader", SubType.Exclusive, None),
    )
    assert "c" not in topic.ml.cursors  # refused before a cursor was made
    await topic.close()


async def test_a_shared_consumer_gets_nothing_more_at_its_unacked_limit(
    store: MetadataStore,
) -> None:
    topic = await live_topic(store, max_unacked_per_consumer=4)
    await publish(topic, 10)
    sub = await topic.subscribe("s", SubType.Shared, EARLIEST)
    sink = Recording()
    consumer = consumer_of(sub, 1, sink)
    sub.flow(consumer, 100)
    await until(lambda: len(sink.sent) == 4, "four delivered")
    stats = consumer_stats(sub, consumer)
    assert stats["blockedConsumerOnUnackedMsgs"] is True and stats["unackedMessages"] == 4
    acked(sub, consumer, sink.sent[:1])  # three held: still blocked
    await until(lambda: consumer.stats.acks.count == 1, "acked")
    assert len(sink.sent) == 4
    acked(sub, consumer, sink.sent[1:2])  # two: half, it gets more
    await until(lambda: len(sink.sent) == 6, "two more, up to the limit again")
    assert consumer_stats(sub, consumer)["blockedConsumerOnUnackedMsgs"] is True
    await topic.apply_policies(EffectivePolicies(limits={**default_limits()}))  # 50,000
    await until(lambda: len(sink.sent) == 10, "the rest, once the limit is raised")
    await topic.close()


def batch(i: int, size: int) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=i, publish_time=1, num_messages_in_batch=size
    )
    return encode_entry(metadata, b"batch payload")


async def test_batch_index_acks_count_towards_unblocking(store: MetadataStore) -> None:
    """A consumer blocked by two batches of four (limit 8) is free again once it has
    acknowledged half of their messages by batch index, as on Pulsar."""
    topic = await live_topic(store, max_unacked_per_consumer=8)
    for i in range(3):
        await topic.publish(batch(i, 4))
    sub = await topic.subscribe("s", SubType.Shared, EARLIEST)
    sink = Recording()
    consumer = consumer_of(sub, 1, sink)
    sub.flow(consumer, 100)
    await until(lambda: len(sink.sent) == 2, "two batches delivered")
    assert consumer_stats(sub, consumer)["unackedMessages"] == 8

    def some_of(message_id: pb.MessageIdData, acked: int) -> pb.MessageIdData:
        partial = pb.MessageIdData()
        partial.CopyFrom(message_id)
        partial.ack_set.extend(words_of([i >= acked for i in range(4)]))
        partial.batch_size = 4
        return partial

    acked(sub, consumer, [some_of(sink.sent[0], 3)])  # five held: still blocked
    await until(lambda: consumer.stats.acks.count == 1, "acked")
    assert consumer_stats(sub, consumer)["unackedMessages"] == 5 and len(sink.sent) == 2
    acked(sub, consumer, [some_of(sink.sent[1], 1)])  # four: half, the third batch comes
    await until(lambda: len(sink.sent) == 3, "the third batch")
    # Given back and handed to another consumer, the batches count what is left of them:
    # one, three and four messages, so the limit of eight lets all three go.
    sub.remove_consumer(consumer)
    again = Recording()
    other = consumer_of(sub, 2, again)
    sub.flow(other, 100)
    await until(lambda: len(again.sent) == 3, "the three batches again")
    assert consumer_stats(sub, other)["unackedMessages"] == 8
    await topic.close()


async def test_an_exclusive_consumer_is_not_limited(store: MetadataStore) -> None:
    topic = await live_topic(store, max_unacked_per_consumer=2, max_unacked_per_subscription=2)
    await publish(topic, 6)
    sub = await topic.subscribe("s", SubType.Exclusive, EARLIEST)
    sink = Recording()
    sub.flow(consumer_of(sub, 1, sink), 100)
    await until(lambda: len(sink.sent) == 6, "everything")
    await topic.close()


async def test_a_shared_subscription_stops_at_its_unacked_limit(store: MetadataStore) -> None:
    topic = await live_topic(store, max_unacked_per_subscription=4)
    await publish(topic, 10)
    sub = await topic.subscribe("s", SubType.Shared, EARLIEST)
    sinks = [Recording(), Recording()]
    consumers = [consumer_of(sub, i, sink) for i, sink in enumerate(sinks)]
    for consumer in consumers:
        sub.flow(consumer, 100)

    def sent() -> int:
        return sum(len(sink.sent) for sink in sinks)

    await until(lambda: sent() == 4, "up to the limit")
    assert subscription_stats(sub)["blockedSubscriptionOnUnackedMsgs"] is True
    for consumer, sink in zip(consumers, sinks, strict=True):
        acked(sub, consumer, list(sink.sent))
    await until(lambda: sent() == 8, "as many again once acknowledged")
    assert subscription_stats(sub)["blockedSubscriptionOnUnackedMsgs"] is True
    await topic.apply_policies(EffectivePolicies(limits={**default_limits()}))  # 200,000
    await until(lambda: sent() == 10, "the rest, once the limit is raised")
    assert subscription_stats(sub)["blockedSubscriptionOnUnackedMsgs"] is False
    await topic.close()
