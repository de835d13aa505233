"""Subscription expiry: subscriptions without consumers for longer than the expiration
time are deleted; ones with consumers, recently used ones and replicators' stay."""

from __future__ import annotations

from typing import cast

from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.policy_tasks import PolicyChecks
from stripemq.broker.subscription_expiry import expire_subscriptions, idle_subscriptions
from stripemq.broker.topic import Consumer, PersistentTopic
from stripemq.clock import now_ms
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.sinks import NullSink

MINUTE_MS = 60_000


async def topic_with_subscriptions(store: MetadataStore) -> PersistentTopic:
    """``idle`` and ``recent`` have no consumer (idle for an hour and for a minute),
    ``busy`` has one (idle as long as ``idle``), ``pulsar.repl.west`` is a replicator's."""
    name = TopicName.parse("persistent://public/default/expiring")
    ml = ManagedLedger(
        name.managed_ledger_name, store, cast(BookKeeper, FakeBookKeeper()), ManagedLedgerConfig()
    )
    await ml.open(create=True)
    await ml.open_cursor("pulsar.repl.west", InitialPosition.Earliest)  # a replicator's
    topic = PersistentTopic(name, ml)  # takes every durable cursor up as a subscription
    shared = pb.CommandSubscribe.Shared
    for sub in ("idle", "recent", "busy"):
        await topic.subscribe(sub, shared, InitialPosition.Earliest)
    busy = topic.subscriptions["busy"]
    busy.add_consumer(Consumer(ConsumerSlot(1, "c"), NullSink(), busy))
    hour_ago = now_ms() - 60 * MINUTE_MS
    for sub in ("idle", "busy", "pulsar.repl.west"):
        topic.subscriptions[sub].last_active_ms = hour_ago
    topic.subscriptions["recent"].last_active_ms = now_ms() - MINUTE_MS
    return topic


async def test_only_subscriptions_idle_past_the_limit_are_deleted(store: MetadataStore) -> None:
    topic = await topic_with_subscriptions(store)
    assert idle_subscriptions(topic, 0, now_ms()) == []  # 0: never
    assert idle_subscriptions(topic, 30, now_ms()) == ["idle"]
    assert idle_subscriptions(topic, 90, now_ms()) == []
    assert await expire_subscriptions(topic, 30) == ["idle"]
    assert "idle" not in topic.subscriptions and "idle" not in topic.ml.cursors
    assert sorted(topic.subscription_names()) == ["busy", "pulsar.repl.west", "recent"]
    await topic.close()


async def test_the_idle_time_is_kept_by_the_cursor(store: MetadataStore) -> None:
    """Loaded again (an unload, a restart), a subscription counts from its cursor's stored
    last activity, not from the loading."""
    topic = await topic_with_subscriptions(store)
    idle = topic.subscriptions["idle"]
    (consumer,) = topic.subscriptions["busy"].consumers.values()
    idle.ack(consumer, pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual))
    used = idle.last_active_ms
    await topic.close()
    ml = ManagedLedger(topic.ml.name, store, topic.ml.bk, topic.ml.config)
    await ml.open(create=False)
    again = PersistentTopic(topic.topic_name, ml)
    assert again.subscriptions["idle"].last_active_ms == used
    # The consumer of "busy" went with the old topic: all three are idle by then.
    assert idle_subscriptions(again, 30, used + 31 * MINUTE_MS) == ["busy", "idle", "recent"]
    await again.close()


async def test_acknowledging_and_consumers_leaving_count_as_activity(
    store: MetadataStore,
) -> None:
    topic = await topic_with_subscriptions(store)
    busy = topic.subscriptions["busy"]
    (consumer,) = busy.consumers.values()
    busy.remove_consumer(consumer)  # it just left: idle from now
    assert idle_subscriptions(topic, 30, now_ms()) == ["idle"]
    idle = topic.subscriptions["idle"]
    idle.ack(consumer, pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual))
    assert idle_subscriptions(topic, 30, now_ms()) == []
    await topic.close()


async def test_the_periodic_check_uses_each_topic_s_effective_limit(
    store: MetadataStore,
) -> None:
    topic = await topic_with_subscriptions(store)
    checks = PolicyChecks(lambda: [topic], message_expiry_interval_s=0, backlog_quota_interval_s=0)
    await checks.check_subscription_expiry()  # no limit set: nothing expires
    assert "idle" in topic.subscriptions
    topic.policies = EffectivePolicies(subscription_expiration_minutes=30)
    await checks.check_subscription_expiry()
    assert "idle" not in topic.subscriptions and "recent" in topic.subscriptions
    await topic.close()
