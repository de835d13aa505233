"""Message TTL on a topic over a real managed ledger (memory:// metadata, in-memory ledger
client): which entries have expired, and how far subscriptions are moved."""

from __future__ import annotations

from typing import cast

from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.message_expiry import (
    entry_before,
    expire_cursor_to,
    expire_messages,
    expire_topic,
    last_expired,
)
from stripemq.broker.topic import Consumer, PersistentTopic
from stripemq.clock import now_ms
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.cursor.non_durable import NonDurableCursor
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.sinks import NullSink

Exclusive = pb.CommandSubscribe.Exclusive


def message(publish_time_ms: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=publish_time_ms)
    return encode_entry(metadata, b"payload")


async def topic_with(store: MetadataStore, publish_times: list[int]) -> PersistentTopic:
    """A topic whose entries were published at ``publish_times`` (two per ledger)."""
    config = ManagedLedgerConfig(max_entries_per_ledger=2, min_rollover_time_s=0)
    ml = ManagedLedger(
        "acme/orders/persistent/ttl", store, cast(BookKeeper, FakeBookKeeper()), config
    )
    await ml.open(create=True)
    topic = PersistentTopic(TopicName.parse("persistent://acme/orders/ttl"), ml)
    await topic.subscribe("early", Exclusive, InitialPosition.Earliest)
    for publish_time in publish_times:
        await ml.add_entry(message(publish_time))
    return topic


def test_the_entry_before_steps_back_over_ledger_ends() -> None:
    chain = LedgerChain([LedgerInfo(1, 3), LedgerInfo(2, 0), LedgerInfo(3, 2)])
    assert entry_before(chain, Position(3, 1)) == Position(3, 0)
    assert entry_before(chain, Position(3, 0)) == Position(1, 2)
    assert entry_before(chain, Position(1, 0)) is None


def test_expiring_moves_a_cursor_only_forward() -> None:
    chain = LedgerChain([LedgerInfo(1, 5)])
    cursor = NonDurableCursor("s", chain, Position(1, 1))
    assert expire_cursor_to(cursor, None) == 0
    assert expire_cursor_to(cursor, Position(1, 0)) == 0  # already past it
    assert expire_cursor_to(cursor, Position(1, 3)) == 2
    assert cursor.mark_delete_position == Position(1, 3)
    assert cursor.backlog == 1


async def test_the_last_expired_entry_is_found_by_publish_time(store: MetadataStore) -> None:
    now = now_ms()
    topic = await topic_with(store, [now - 90_000, now - 80_000, now - 70_000, now - 1_000])
    last = await last_expired(topic, 60, now=now)
    assert last is not None
    assert topic.ml.chain.entries_between(topic.ml.chain.first_position(), last) == 3
    assert await last_expired(topic, 3600, now=now) is None  # nothing that old
    everything = await last_expired(topic, 0.5, now=now)
    assert everything == topic.ml.chain.last_confirmed()
    await topic.close()


async def test_expire_messages_moves_the_subscription_and_counts(store: MetadataStore) -> None:
    now = now_ms()
    topic = await topic_with(store, [now - 90_000, now - 80_000, now - 70_000, now])
    subscription = topic.subscriptions["early"]
    assert subscription.cursor.backlog == 4
    assert await expire_messages(topic, subscription, 60) == 3
    assert subscription.cursor.backlog == 1
    assert subscription.stats.expired.count == 3
    assert await expire_messages(topic, subscription, 60) == 0  # nothing more has expired
    await topic.close()


async def reloaded(topic: PersistentTopic) -> PersistentTopic:
    """The topic closed and loaded again (as after an unload or a restart)."""
    await topic.close()
    ml = ManagedLedger(topic.ml.name, topic.ml.store, topic.ml.bk, topic.ml.config)
    await ml.open(create=False)
    return PersistentTopic(topic.topic_name, ml)


async def test_a_ttl_reaches_subscriptions_nobody_consumes(store: MetadataStore) -> None:
    now = now_ms()
    topic = await topic_with(store, [now - 90_000, now - 80_000, now])
    await topic.subscribe("idle", None, InitialPosition.Earliest)  # made for nobody
    # Loaded again: no consumer has come back to either subscription.
    topic = await reloaded(topic)
    assert await expire_topic(topic, 60) == 4  # two on each
    assert topic.ml.cursors["idle"].backlog == 1
    assert topic.subscriptions["early"].cursor.backlog == 1
    assert topic.subscriptions["idle"].stats.expired.count == 2
    await topic.close()


async def test_every_subscription_checked_is_stamped_and_its_consumers_let_go(
    store: MetadataStore,
) -> None:
    now = now_ms()
    topic = await topic_with(store, [now - 90_000, now - 80_000, now])
    await topic.subscribe("fresh", None, InitialPosition.Latest)  # nothing to expire
    early = topic.subscriptions["early"]
    consumer = Consumer(ConsumerSlot(1, "c"), NullSink(), early)
    early.add_consumer(consumer)
    consumer.slot.pending.update({topic.ml.chain.first_position(): 1})  # delivered, unacked
    assert await expire_topic(topic, 60) == 2
    assert consumer.slot.pending == {}  # expired: no longer the consumer's to ack
    fresh = topic.subscriptions["fresh"].stats
    assert fresh.last_expire_ms > 0 and fresh.expired.count == 0  # checked, as Pulsar stamps
    await topic.close()


async def test_a_topic_without_backlog_reads_nothing(store: MetadataStore) -> None:
    now = now_ms()
    topic = await topic_with(store, [now - 90_000])
    subscription = topic.subscriptions["early"]
    subscription.cursor.ack_cumulative(topic.ml.chain.last_confirmed())
    reads = topic.ml.cache.hits + topic.ml.cache.misses
    assert await expire_topic(topic, 60) == 0
    assert topic.ml.cache.hits + topic.ml.cache.misses == reads
    await topic.close()
