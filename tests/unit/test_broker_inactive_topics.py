"""Inactive topic deletion: the decision on live topics (``inactive_for_deletion``, sans-IO
over a topic's state) and the broker service's check, which deletes a topic that stayed
inactive and leaves one a client uses; the policy's REST paths at both levels."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import cast

import pytest
from admin_app import App, admin_app
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker.inactive_topics import inactive_for_deletion
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.policies import InactiveTopicDeleteMode, InactiveTopicPolicies
from stripemq.broker.topic import PersistentTopic
from stripemq.clock import now_ms
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.polling import until

NO_SUBSCRIPTIONS = InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS
CAUGHT_UP = InactiveTopicDeleteMode.DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP


async def topic_with(store: MetadataStore, policies: InactiveTopicPolicies) -> PersistentTopic:
    name = TopicName.parse("persistent://acme/idle/orders")
    bk = cast(BookKeeper, FakeBookKeeper())
    ml = ManagedLedger(name.managed_ledger_name, store, bk, ManagedLedgerConfig())
    await ml.open(create=True)
    topic = PersistentTopic(name, ml)
    await topic.apply_policies(EffectivePolicies(inactive_topic_policies=policies))
    return topic


def entry(i: int) -> bytes:
    return encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1), b"x")


async def test_a_topic_without_subscriptions_goes_once_inactive_long_enough(
    store: MetadataStore,
) -> None:
    topic = await topic_with(store, InactiveTopicPolicies(True, 60, NO_SUBSCRIPTIONS))
    now = now_ms()
    assert not inactive_for_deletion(topic, now)  # inactive, not for a minute yet
    assert inactive_for_deletion(topic, now + 61_000)
    await topic.subscribe("s", None, InitialPosition.Earliest)
    assert not inactive_for_deletion(topic, now + 61_000)  # a subscription: active
    assert topic.last_active_ms == now + 61_000  # ... and counted from now
    await topic.close()


async def test_inactivity_counts_from_the_last_client_or_subscription(
    store: MetadataStore,
) -> None:
    """A subscription deleted restarts the count; the broker's deduplication cursor is
    no subscription."""
    topic = await topic_with(store, InactiveTopicPolicies(True, 60, NO_SUBSCRIPTIONS))
    await topic.subscribe("s", None, InitialPosition.Earliest)
    topic.last_active_ms -= 600_000
    await topic.remove_subscription("s")
    assert not inactive_for_deletion(topic, now_ms() + 30_000)  # counted from its removal
    await topic.ml.open_cursor("pulsar.dedup", InitialPosition.Earliest)
    assert inactive_for_deletion(topic, now_ms() + 61_000)
    await topic.close()


async def test_disabled_or_retained_topics_stay(store: MetadataStore) -> None:
    topic = await topic_with(store, InactiveTopicPolicies(False, 1, NO_SUBSCRIPTIONS))
    assert not inactive_for_deletion(topic, now_ms() + 3_600_000)
    await topic.apply_policies(
        EffectivePolicies(inactive_topic_policies=InactiveTopicPolicies(True, 1, NO_SUBSCRIPTIONS))
    )
    topic.ml.set_retention(-1)  # kept for ever: never deleted (shouldTopicBeRetained)
    assert not inactive_for_deletion(topic, now_ms() + 3_600_000)
    topic.ml.set_retention(600)  # kept ten minutes after it was last active
    assert not inactive_for_deletion(topic, now_ms() + 300_000)
    assert inactive_for_deletion(topic, now_ms() + 700_000)
    await topic.close()


async def test_caught_up_subscriptions_let_a_topic_go(store: MetadataStore) -> None:
    topic = await topic_with(store, InactiveTopicPolicies(True, 1, CAUGHT_UP))
    subscription = await topic.subscribe("s", None, InitialPosition.Earliest)
    position = await topic.publish(entry(0))
    later = now_ms() + 5_000
    assert not inactive_for_deletion(topic, later)  # a backlog: active
    subscription.cursor.ack([position])
    assert inactive_for_deletion(topic, later + 5_000)
    await topic.close()


@pytest.fixture
async def app(store: MetadataStore) -> AsyncIterator[App]:
    async with admin_app(store) as a:
        yield a


async def test_the_broker_deletes_what_its_policy_says(app: App) -> None:
    """Set over REST; the check deletes an idle topic and leaves one with a producer."""
    topics = "/admin/v2/persistent/public/default"
    body = {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 1,
        "deleteWhileInactive": True,
    }
    ns = "/admin/v2/namespaces/public/default/inactiveTopicPolicies"
    assert await app.call("GET", ns) == (204, None)
    assert (await app.call("POST", ns, body))[0] == 204
    assert await app.call("GET", ns) == (200, body)
    for name in ("idle", "busy", "own"):
        assert (await app.call("PUT", f"{topics}/{name}"))[0] == 204
    own = {**body, "deleteWhileInactive": False}
    assert (await app.call("POST", f"{topics}/own/inactiveTopicPolicies", own))[0] == 204
    assert await app.call("GET", f"{topics}/own/inactiveTopicPolicies") == (200, own)
    service = app.service
    served = {
        name: await service.get_topic(TopicName.parse(f"public/default/{name}"))
        for name in ("idle", "busy", "own")
    }
    await served["busy"].subscribe("keep", None, InitialPosition.Earliest)
    for topic in served.values():
        topic.last_active_ms -= 5_000  # inactive for five seconds already
    await service.policy_checks.check_inactive_topics()
    assert (await app.call("GET", f"{topics}/idle/stats"))[0] == 404
    assert (await app.call("GET", f"{topics}/busy/stats"))[0] == 200
    assert (await app.call("GET", f"{topics}/own/stats"))[0] == 200  # its own says no
    assert await app.call("GET", f"{topics}/own/inactiveTopicPolicies?applied=true") == (
        200,
        own,
    )
    assert (await app.call("DELETE", ns))[0] == 204


@pytest.mark.parametrize("delete_metadata", [False, True])
async def test_a_partitioned_topic_goes_once_its_partitions_have(
    app: App, delete_metadata: bool
) -> None:
    """Its partitions go one by one; the partitioned topic itself only with the broker's
    brokerDeleteInactivePartitionedTopicMetadataEnabled (off, as in Pulsar)."""
    app.service.policies = dataclasses.replace(
        app.service.policies, delete_inactive_partitioned_metadata=delete_metadata
    )
    parts = "/admin/v2/persistent/public/default/fan"
    body = {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 1,
        "deleteWhileInactive": True,
    }
    assert (await app.call("PUT", f"{parts}/partitions", 2))[0] == 204
    assert (await app.call("POST", f"{parts}/inactiveTopicPolicies", body))[0] == 204
    for index in range(2):
        topic = await app.service.get_topic(
            TopicName.parse(f"public/default/fan-partition-{index}")
        )
        await until(lambda t=topic: t.policies.inactive_topic_policies.delete_while_inactive, "on")
        topic.last_active_ms -= 5_000
    await app.service.policy_checks.check_inactive_topics()
    assert not any(
        name.startswith("persistent://public/default/fan") for name in app.service.topics
    )
    status, _ = await app.call("GET", f"{parts}/partitions")
    assert status == (404 if delete_metadata else 200)
