"""Topic-level policies over HTTP (aiohttp's test server) on a memory:// store with a real
``BrokerService``: Pulsar's paths and bodies, what is stored, what ``?applied=true``
answers, and that the broker serving the topic obeys a change at once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from admin_app import App, admin_app

from stripemq.broker import topic as topic_module
from stripemq.broker.policies import BacklogQuotaType
from stripemq.broker.schema import CompatibilityStrategy
from stripemq.broker.topic_policies import (
    TopicLevelPolicies,
    read_topic_policies,
    topic_policies_key,
)
from stripemq.errors import BrokerError
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import TopicName
from stripemq.testing.polling import until

TOPIC = "/admin/v2/persistent/public/default/orders"
NS = "/admin/v2/namespaces/public/default"
NAME = TopicName.parse("persistent://public/default/orders")


@pytest.fixture
async def app(store: MetadataStore) -> AsyncIterator[App]:
    async with admin_app(store) as a:
        assert (await a.call("PUT", TOPIC))[0] == 204
        yield a


async def own(app: App) -> TopicLevelPolicies:
    return (await read_topic_policies(app.store, topic_policies_key(NAME)))[0]


async def test_each_policy_is_set_read_and_removed(app: App) -> None:
    cases = [
        ("retention", "POST", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}),
        ("deduplicationEnabled", "POST", True),
        (
            "publishRate",
            "POST",
            {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1},
        ),
        ("schemaCompatibilityStrategy", "PUT", "BACKWARD"),
        ("compactionThreshold", "POST", 10 * 1024 * 1024),
        ("maxProducers", "POST", 3),
        ("maxConsumers", "POST", 4),
        ("maxConsumersPerSubscription", "POST", 2),
        ("maxUnackedMessagesOnConsumer", "POST", 100),
        ("maxUnackedMessagesOnSubscription", "POST", 1000),
        ("maxSubscriptionsPerTopic", "POST", 5),
    ]
    assert await app.call("GET", f"{TOPIC}/schemaValidationEnforced") == (200, False)
    for path, method, body in cases:
        assert (await app.call("GET", f"{TOPIC}/{path}"))[0] == 204, path  # unset
        assert (await app.call(method, f"{TOPIC}/{path}", body))[0] == 204, path
        assert await app.call("GET", f"{TOPIC}/{path}") == (200, body), path
    stored = await own(app)
    assert stored.schema_compatibility_strategy is CompatibilityStrategy.BACKWARD
    assert stored.retention is not None and stored.retention.retention_time_in_minutes == 60
    for path, _, _ in cases:
        assert (await app.call("DELETE", f"{TOPIC}/{path}"))[0] == 204
        assert (await app.call("GET", f"{TOPIC}/{path}"))[0] == 204
    assert await own(app) == TopicLevelPolicies()


async def test_message_ttl_comes_as_a_query_parameter(app: App) -> None:
    assert (await app.call("POST", f"{TOPIC}/messageTTL?messageTTL=90"))[0] == 204
    assert await app.call("GET", f"{TOPIC}/messageTTL") == (200, 90)
    assert (await app.call("POST", f"{TOPIC}/messageTTL?messageTTL=soon"))[0] == 412
    assert (await app.call("POST", f"{TOPIC}/messageTTL?messageTTL=-1"))[0] == 412
    assert await app.call("GET", f"{TOPIC}/messageTTL") == (200, 90)


async def test_backlog_quotas_by_type(app: App) -> None:
    quota = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    assert (await app.call("POST", f"{TOPIC}/backlogQuota", quota))[0] == 204
    status, quotas = await app.call("GET", f"{TOPIC}/backlogQuotaMap")
    assert status == 200 and quotas["destination_storage"]["limitSize"] == 1024
    assert (await app.call("DELETE", f"{TOPIC}/backlogQuota"))[0] == 204
    assert (await own(app)).backlog_quotas == {}
    age = "?backlogQuotaType=message_age"
    assert (await app.call("POST", f"{TOPIC}/backlogQuota{age}", quota))[0] == 204
    assert set((await own(app)).backlog_quotas) == {BacklogQuotaType.MESSAGE_AGE}


async def test_applied_falls_back_to_the_namespace_and_the_broker(app: App) -> None:
    # Nothing set anywhere: the broker's settings.
    assert await app.call("GET", f"{TOPIC}/messageTTL?applied=true") == (200, 0)
    assert await app.call("GET", f"{TOPIC}/deduplicationEnabled?applied=true") == (200, False)
    assert await app.call("GET", f"{TOPIC}/schemaCompatibilityStrategy?applied=true") == (
        200,
        "FULL",
    )
    status, retention = await app.call("GET", f"{TOPIC}/retention?applied=true")
    assert status == 200 and set(retention) == {"retentionTimeInMinutes", "retentionSizeInMB"}
    status, quotas = await app.call("GET", f"{TOPIC}/backlogQuotaMap?applied=true")
    assert status == 200 and set(quotas) == {"destination_storage", "message_age"}
    # The namespace's, then the topic's own.
    assert (await app.call("POST", f"{NS}/messageTTL", 120))[0] == 204
    assert (await app.call("GET", f"{TOPIC}/messageTTL"))[0] == 204
    assert await app.call("GET", f"{TOPIC}/messageTTL?applied=true") == (200, 120)
    assert (await app.call("POST", f"{TOPIC}/messageTTL?messageTTL=7"))[0] == 204
    assert await app.call("GET", f"{TOPIC}/messageTTL?applied=true") == (200, 7)


async def test_an_undefined_strategy_is_none_set(app: App) -> None:
    assert (await app.call("PUT", f"{NS}/schemaCompatibilityStrategy", "FORWARD"))[0] == 204
    assert (await app.call("PUT", f"{TOPIC}/schemaCompatibilityStrategy", "UNDEFINED"))[0] == 204
    assert (await app.call("GET", f"{TOPIC}/schemaCompatibilityStrategy"))[0] == 204
    applied = await app.call("GET", f"{TOPIC}/schemaCompatibilityStrategy?applied=true")
    assert applied == (200, "FORWARD")


async def test_retention_and_backlog_quota_are_checked_together(app: App) -> None:
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1}
    assert (await app.call("POST", f"{TOPIC}/retention", retention))[0] == 204
    quota = {"limitSize": 10 * 1024 * 1024 * 1024, "limitTime": -1, "policy": "producer_exception"}
    status, body = await app.call("POST", f"{TOPIC}/backlogQuota", quota)
    assert status == 412 and "Backlog Quota exceeds configured retention quota" in body["reason"]
    assert (await app.call("DELETE", f"{TOPIC}/backlogQuota?backlogQuotaType=bogus"))[0] == 412


async def test_a_topics_quota_is_checked_against_the_retention_it_obeys(app: App) -> None:
    """Pulsar's TopicPoliciesTest.testCheckSizeBasedBacklogQuota and
    testCheckTimeBasedBacklogQuota: the namespace's retention counts, and so does age."""
    ten_mb = {"retentionTimeInMinutes": 10, "retentionSizeInMB": 10}
    assert (await app.call("POST", f"{NS}/retention", ten_mb))[0] == 204
    size = {"limitSize": 10 * 1024 * 1024, "limitTime": -1, "policy": "consumer_backlog_eviction"}
    assert (await app.call("POST", f"{TOPIC}/backlogQuota", size))[0] == 412
    size["limitSize"] -= 1
    assert (await app.call("POST", f"{TOPIC}/backlogQuota", size))[0] == 204
    age = "?backlogQuotaType=message_age"
    by_age = {"limitSize": -1, "limitTime": 600, "policy": "consumer_backlog_eviction"}
    assert (await app.call("POST", f"{TOPIC}/backlogQuota{age}", by_age))[0] == 412
    by_age["limitTime"] = 599
    assert (await app.call("POST", f"{TOPIC}/backlogQuota{age}", by_age))[0] == 204
    status, body = await app.call(
        "POST", f"{TOPIC}/retention", {"retentionTimeInMinutes": 9, "retentionSizeInMB": 100}
    )
    assert status == 412 and body["reason"].startswith("Retention Quota must exceed")


async def test_a_corrupt_document_is_written_over_by_a_change(app: App) -> None:
    await app.store.create("/stripemq/topic-policies/public/default/orders", b"[1, 2]")
    assert (await app.call("POST", f"{TOPIC}/messageTTL?messageTTL=3"))[0] == 204
    assert await app.call("GET", f"{TOPIC}/messageTTL") == (200, 3)


async def test_refusals(app: App) -> None:
    assert await app.call("GET", "/admin/v2/persistent/public/default/none/retention") == (
        404,
        {"reason": "Topic persistent://public/default/none not found"},
    )
    status, body = await app.call("POST", f"{TOPIC}-partition-0/messageTTL?messageTTL=1")
    assert (status, body["reason"]) == (412, "Not allowed to set/get topic policy for a partition")
    assert (await app.call("POST", f"{TOPIC}/messageTTL?messageTTL=-5"))[1] == {
        "reason": "Invalid value for message TTL"
    }
    assert (await app.call("PUT", f"{TOPIC}/schemaCompatibilityStrategy", "SIDEWAYS"))[0] == 412
    assert (await app.call("POST", f"{TOPIC}/retention", {"retentionSizeInMB": "x"}))[0] == 412
    assert (await app.call("POST", f"{TOPIC}/deduplicationEnabled", "yes"))[0] == 412
    assert await own(app) == TopicLevelPolicies()


async def test_a_partitioned_topics_policies_reach_its_partitions(app: App) -> None:
    parts = "/admin/v2/persistent/public/default/parts"
    assert (await app.call("PUT", f"{parts}/partitions", 2))[0] == 204
    assert (await app.call("POST", f"{parts}/messageTTL?messageTTL=33"))[0] == 204
    assert await app.call("GET", f"{parts}/messageTTL") == (200, 33)
    partition = await app.service.get_topic(TopicName.parse("public/default/parts-partition-0"))
    assert partition.policies.message_ttl_s == 33


async def test_the_serving_broker_obeys_a_change_at_once(app: App) -> None:
    topic = await app.service.get_topic(NAME)
    assert topic.policies.message_ttl_s == 0
    assert (await app.call("POST", f"{TOPIC}/messageTTL?messageTTL=45"))[0] == 204
    await until(lambda: topic.policies.message_ttl_s == 45, "the topic's TTL is applied")
    strategy = CompatibilityStrategy.ALWAYS_COMPATIBLE
    assert (await app.call("PUT", f"{TOPIC}/schemaCompatibilityStrategy", strategy.value))[0] == 204
    await until(lambda: topic.policies.schema_compatibility_strategy is strategy, "applied")
    # The namespace changes under it: the topic's own TTL still wins.
    assert (await app.call("POST", f"{NS}/messageTTL", 600))[0] == 204
    assert (await app.call("POST", f"{NS}/deduplication", True))[0] == 204
    await until(lambda: topic.policies.deduplication, "the namespace's change is applied")
    assert topic.policies.message_ttl_s == 45
    assert (await app.call("DELETE", f"{TOPIC}/messageTTL"))[0] == 204
    await until(lambda: topic.policies.message_ttl_s == 600, "the namespace's TTL applies")


async def test_deleting_a_topic_or_its_namespace_deletes_its_policies(app: App) -> None:
    assert (await app.call("POST", f"{TOPIC}/messageTTL?messageTTL=5"))[0] == 204
    assert (await app.call("DELETE", TOPIC))[0] == 204
    assert await app.store.exists("/stripemq/topic-policies/public/default/orders") is None
    parts = "/admin/v2/persistent/public/default/parts"
    assert (await app.call("PUT", f"{parts}/partitions", 2))[0] == 204
    assert (await app.call("POST", f"{parts}/messageTTL?messageTTL=5"))[0] == 204
    assert (await app.call("DELETE", f"{parts}/partitions"))[0] == 204
    assert await app.store.exists("/stripemq/topic-policies/public/default/parts") is None
    assert (await app.call("PUT", "/admin/v2/namespaces/public/gone"))[0] == 204
    assert (await app.call("PUT", "/admin/v2/persistent/public/gone/t"))[0] == 204
    assert (await app.call("POST", "/admin/v2/persistent/public/gone/t/messageTTL?messageTTL=5"))[
        0
    ] == 204
    assert (await app.call("DELETE", "/admin/v2/namespaces/public/gone?force=true"))[0] == 204
    assert await app.store.exists("/stripemq/topic-policies/public/gone") is None


async def test_a_change_reaches_every_partition_served_here(app: App) -> None:
    parts = "/admin/v2/persistent/public/default/fan"
    assert (await app.call("PUT", f"{parts}/partitions", 3))[0] == 204
    served = [
        await app.service.get_topic(TopicName.parse(f"public/default/fan-partition-{i}"))
        for i in range(3)
    ]
    assert (await app.call("POST", f"{parts}/messageTTL?messageTTL=21"))[0] == 204
    await until(
        lambda: all(t.policies.message_ttl_s == 21 for t in served), "every partition obeys"
    )


async def test_a_topic_that_fails_to_open_leaves_no_watch(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = app.service
    name = TopicName.parse("public/default/broken")

    async def failing(self: object, policies: object) -> None:
        raise RuntimeError("cannot apply")

    monkeypatch.setattr(topic_module.PersistentTopic, "apply_policies", failing)
    with pytest.raises(RuntimeError):
        await service.get_topic(name)
    await until(lambda: topic_policies_key(name) not in service.topic_policies.watched, "forgot")


async def test_limits_at_the_topic_level(app: App) -> None:
    """Stored under Pulsar's TopicPolicies names, applied over the namespace's and the
    broker's (maxUnackedMessagesPerConsumer: 50000 by default), refused below 0."""
    assert await app.call("GET", f"{TOPIC}/maxProducers?applied=true") == (200, 0)
    assert await app.call("GET", f"{TOPIC}/maxUnackedMessagesOnConsumer?applied=true") == (
        200,
        50_000,
    )
    assert (await app.call("POST", f"{NS}/maxProducersPerTopic", 8))[0] == 204

    async def applied_max_producers() -> bool:
        answer = await app.call("GET", f"{TOPIC}/maxProducers?applied=true")
        return answer == (200, 8)

    await until(applied_max_producers)
    assert (await app.call("POST", f"{TOPIC}/maxProducers", 2))[0] == 204
    assert await app.call("GET", f"{TOPIC}/maxProducers?applied=true") == (200, 2)
    assert (await own(app)).to_json() == {"maxProducerPerTopic": 2}
    status, body = await app.call("POST", f"{TOPIC}/maxUnackedMessagesOnSubscription", -1)
    assert (status, body["reason"]) == (412, "maxUnackedNum must be 0 or more")
    status, body = await app.call("POST", f"{TOPIC}/maxConsumers", "many")
    assert status == 412


async def test_persistence_at_the_topic_level(app: App) -> None:
    """Over the namespace's, else the broker's defaults (``-ap``); the serving broker's
    managed ledger writes its next ledgers with it at once; bounds are the broker's."""
    body = {
        "bookkeeperEnsemble": 1,
        "bookkeeperWriteQuorum": 1,
        "bookkeeperAckQuorum": 1,
        "managedLedgerMaxMarkDeleteRate": 0.0,
    }
    assert await app.call("GET", f"{TOPIC}/persistence?applied=true") == (
        200,
        {
            "bookkeeperEnsemble": 2,
            "bookkeeperWriteQuorum": 2,
            "bookkeeperAckQuorum": 2,
            "managedLedgerMaxMarkDeleteRate": 1.0,
        },
    )
    namespace_body = {**body, "bookkeeperEnsemble": 3}
    assert (await app.call("POST", f"{NS}/persistence", namespace_body))[0] == 204

    async def applied_is_the_namespaces() -> bool:
        return await app.call("GET", f"{TOPIC}/persistence?applied=true") == (200, namespace_body)

    await until(applied_is_the_namespaces)
    topic = await app.service.get_topic(NAME)
    assert topic.ml.persistence.ensemble_size == 3
    assert (await app.call("POST", f"{TOPIC}/persistence", body))[0] == 204
    assert await app.call("GET", f"{TOPIC}/persistence") == (200, body)
    assert (await own(app)).to_json() == {"persistence": body}
    await until(lambda: topic.ml.persistence.ensemble_size == 1, "the topic's applies")
    assert topic.ml.cursor_env.config.snapshot_interval_ms == 0
    status, refused = await app.call(
        "POST", f"{TOPIC}/persistence", {**body, "bookkeeperAckQuorum": 9}
    )
    assert (status, refused["reason"]) == (400, "Bookkeeper-AckQuorum must be <= 5 and > 0.")
    assert (await app.call("DELETE", f"{TOPIC}/persistence"))[0] == 204
    await until(lambda: topic.ml.persistence.ensemble_size == 3, "the namespace's applies again")


async def test_delayed_delivery_at_the_topic_level(app: App) -> None:
    """Stored as TopicPolicies' three fields, applied over the namespace's and the
    broker's (on, a second's tick, no maximum), and obeyed by the serving broker."""
    url = f"{TOPIC}/delayedDelivery"
    assert await app.call("GET", f"{url}?applied=true") == (
        200,
        {"tickTime": 1000, "active": True, "maxDeliveryDelayInMillis": 0},
    )
    topic = await app.service.get_topic(NAME)
    body = {"tickTime": 100, "active": False, "maxDeliveryDelayInMillis": 5000}
    assert (await app.call("POST", url, body))[0] == 204
    assert await app.call("GET", url) == (200, body)
    assert (await own(app)).to_json() == {
        "delayedDeliveryEnabled": False,
        "delayedDeliveryTickTimeMillis": 100,
        "delayedDeliveryMaxDelayInMillis": 5000,
    }
    await until(lambda: not topic.delayed_delivery.enabled, "the topic's applies")
    assert (topic.delayed_delivery.tick_ms, topic.delayed_delivery.max_delay_ms) == (100, 5000)
    namespace_body = {"tickTime": 300, "active": True, "maxDeliveryDelayInMillis": 0}
    assert (await app.call("POST", f"{NS}/delayedDelivery", namespace_body))[0] == 204
    assert (await app.call("DELETE", url))[0] == 204
    await until(lambda: topic.delayed_delivery.tick_ms == 300, "the namespace's applies")
    assert await app.call("GET", f"{url}?applied=true") == (200, namespace_body)


async def test_subscription_types_at_the_topic_level(app: App) -> None:
    """Over the namespace's, else the broker's (all four); a consumer of a type the topic
    does not enable is refused NotAllowed with Pulsar's reason."""
    url = f"{TOPIC}/subscriptionTypesEnabled"
    everything = ["Exclusive", "Shared", "Failover", "Key_Shared"]
    assert await app.call("GET", f"{url}?applied=true") == (200, everything)
    topic = await app.service.get_topic(NAME)
    topic.check_subscription_type(pb.CommandSubscribe.Exclusive)
    assert (await app.call("POST", f"{NS}/subscriptionTypesEnabled", ["Exclusive"]))[0] == 204
    assert (await app.call("POST", url, ["Shared", "Failover"]))[0] == 204
    assert (await own(app)).to_json() == {"subscriptionTypesEnabled": ["Shared", "Failover"]}
    await until(
        lambda: topic.policies.subscription_types_enabled == ("Shared", "Failover"), "applied"
    )
    with pytest.raises(BrokerError) as refused:
        topic.check_subscription_type(pb.CommandSubscribe.Exclusive)
    assert refused.value.server_error == pb.NotAllowedError
    assert str(refused.value) == (
        "Topic[{persistent://public/default/orders}] doesn't support Exclusive sub type!"
    )
    assert (await app.call("DELETE", url))[0] == 204
    await until(lambda: topic.policies.subscription_types_enabled == ("Exclusive",), "ns")
