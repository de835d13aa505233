"""Namespace policies as a broker applies them: resolution against the broker's settings
(sans-IO), and the cache that watches each namespace's node (memory:// metadata)."""

from __future__ import annotations

import asyncio
import json

import pytest

from stripemq.broker import namespace_policies
from stripemq.broker.namespace_policies import (
    NamespacePolicyCache,
    dispatch_rate,
    publish_rate,
    resolve,
)
from stripemq.broker.namespaces import (
    NamespaceNotFoundError,
    TenantInfo,
    create_namespace,
    create_tenant,
    policies_path,
    read_policies,
    write_policies,
)
from stripemq.broker.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    DispatchRate,
    Policies,
    PublishRate,
    RetentionPolicies,
    TopicType,
)
from stripemq.broker.service import TopicPolicies
from stripemq.errors import MetadataError
from stripemq.metadata import MetadataStore
from stripemq.testing.polling import until

NS = "acme/orders"


def test_unset_policies_fall_back_to_the_broker_settings() -> None:
    broker = TopicPolicies(
        deduplication=True,
        auto_create=False,
        message_ttl_s=30,
        backlog_quota=BacklogQuota(limit_size=100, policy=BacklogQuotaPolicy.PRODUCER_EXCEPTION),
        publish_rate=PublishRate(10, -1),
        dispatch_rate=DispatchRate(20, -1),
        subscription_dispatch_rate=DispatchRate(5, -1),
    )
    effective = resolve(Policies(), broker, "standalone")
    assert effective.retention is None
    assert effective.message_ttl_s == 30
    assert effective.deduplication is True
    assert not effective.auto_create
    assert effective.publish_rate == PublishRate(10, -1)
    assert effective.dispatch_rate == DispatchRate(20, -1)
    assert effective.subscription_dispatch_rate == DispatchRate(5, -1)
    for kind in BacklogQuotaType:
        assert effective.backlog_quota(kind) == broker.backlog_quota


def test_set_policies_win_over_the_broker_settings() -> None:
    broker = TopicPolicies(deduplication=True, message_ttl_s=30, subscription_expiration_minutes=9)
    retention = RetentionPolicies(10, 20)
    age = BacklogQuota(limit_time=60, policy=BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION)
    policies = Policies(
        retention=retention,
        message_ttl_in_seconds=0,  # set to 0: no TTL, whatever the broker's default
        subscription_expiration_time_minutes=0,  # ... and subscriptions never expire
        deduplication_enabled=False,
        backlog_quotas={BacklogQuotaType.MESSAGE_AGE: age},
        publish_rates={"standalone": PublishRate(50, 1000)},
        dispatch_rates={"standalone": DispatchRate(7, -1, 2)},
        subscription_dispatch_rates={"standalone": DispatchRate(3, -1, 1)},
        auto_topic_creation=AutoTopicCreationOverride(False),
    )
    effective = resolve(policies, broker, "standalone")
    assert effective.retention == retention
    assert effective.message_ttl_s == 0
    assert effective.subscription_expiration_minutes == 0
    assert resolve(Policies(), broker, "standalone").subscription_expiration_minutes == 9
    assert effective.deduplication is False
    assert effective.backlog_quota(BacklogQuotaType.MESSAGE_AGE) == age
    assert effective.backlog_quota(BacklogQuotaType.DESTINATION_STORAGE) == BacklogQuota()
    assert effective.publish_rate == PublishRate(50, 1000)
    assert effective.dispatch_rate == DispatchRate(7, -1, 2)
    assert effective.subscription_dispatch_rate == DispatchRate(3, -1, 1)
    assert not effective.auto_create


def test_rates_are_taken_for_this_brokers_cluster_only() -> None:
    policies = Policies(publish_rates={"elsewhere": PublishRate(1, 1)})
    effective = resolve(policies, TopicPolicies(), "standalone")
    assert not publish_rate(effective.publish_rate).limited
    effective = resolve(policies, TopicPolicies(), "elsewhere")
    assert publish_rate(effective.publish_rate).limited


def test_auto_topic_creation_follows_the_override_else_the_broker() -> None:
    partitioned = TopicPolicies(auto_create_partitioned=True, default_partitions=4)
    assert resolve(Policies(), partitioned, "c").auto_create_partitions == 4
    assert resolve(Policies(), TopicPolicies(), "c").auto_create_partitions == 0
    override = AutoTopicCreationOverride(True, TopicType.PARTITIONED, 2)
    effective = resolve(Policies(auto_topic_creation=override), TopicPolicies(), "c")
    assert effective.auto_create and effective.auto_create_partitions == 2
    effective = resolve(
        Policies(auto_topic_creation=AutoTopicCreationOverride(True)), partitioned, "c"
    )
    assert effective.auto_create and effective.auto_create_partitions == 0


def test_rates_in_the_limiters_terms() -> None:
    rate = dispatch_rate(DispatchRate(10, 2048, 5))
    assert (rate.messages, rate.bytes, rate.period_s) == (10, 2048, 5.0)
    assert not dispatch_rate(DispatchRate()).limited
    assert publish_rate(PublishRate(0, 100)).limited


# ---------------------------------------------------------------- the cache


@pytest.fixture
async def namespace(store: MetadataStore) -> str:
    await create_tenant(store, "acme", TenantInfo())
    await create_namespace(store, NS)
    return NS


async def change(store: MetadataStore, namespace: str, **changes: object) -> None:
    policies, version = await read_policies(store, namespace)
    await write_policies(store, namespace, policies.with_(**changes), version)


async def test_a_change_is_read_again_and_handed_on(store: MetadataStore, namespace: str) -> None:
    seen: list[tuple[str, Policies]] = []

    async def on_change(ns: str, policies: Policies) -> None:
        seen.append((ns, policies))

    cache = NamespacePolicyCache(store, on_change)
    first = await cache.get(namespace)
    assert first.message_ttl_in_seconds is None
    assert cache.watched == {namespace}
    await change(store, namespace, message_ttl_in_seconds=42)
    await until(lambda: bool(seen), "the change is handed on")
    assert seen[-1][0] == namespace
    assert seen[-1][1].message_ttl_in_seconds == 42
    assert (await cache.get(namespace)).message_ttl_in_seconds == 42
    await change(store, namespace, deduplication_enabled=True)
    await until(lambda: seen[-1][1].deduplication_enabled is True, "the next change too")
    await cache.close()


async def test_a_missing_namespace_is_refused_and_not_watched(store: MetadataStore) -> None:
    cache = NamespacePolicyCache(store)
    with pytest.raises(NamespaceNotFoundError):
        await cache.get("acme/none")
    assert cache.watched == set()
    await cache.close()


async def test_unreadable_policies_give_the_broker_defaults(
    store: MetadataStore, namespace: str
) -> None:
    await store.put(policies_path(namespace), json.dumps({"message_ttl_in_seconds": "x"}).encode())
    cache = NamespacePolicyCache(store)
    assert await cache.get(namespace) == Policies()
    await cache.close()


async def test_a_forgotten_namespace_is_no_longer_watched(
    store: MetadataStore, namespace: str
) -> None:
    seen: list[Policies] = []

    async def on_change(_ns: str, policies: Policies) -> None:
        seen.append(policies)

    cache = NamespacePolicyCache(store, on_change)
    await cache.get(namespace)
    cache.retain(set())
    assert cache.watched == set() and cache.cached(namespace) is None
    await change(store, namespace, message_ttl_in_seconds=5)
    other = NamespacePolicyCache(store)  # a second reader sees the change: it was written
    assert (await other.get(namespace)).message_ttl_in_seconds == 5
    assert seen == []
    await cache.close()
    await other.close()


async def test_a_failing_listener_does_not_stop_later_changes(
    store: MetadataStore, namespace: str
) -> None:
    calls: list[int | None] = []

    async def on_change(_ns: str, policies: Policies) -> None:
        calls.append(policies.message_ttl_in_seconds)
        raise RuntimeError("boom")

    cache = NamespacePolicyCache(store, on_change)
    await cache.get(namespace)
    await change(store, namespace, message_ttl_in_seconds=1)
    await until(lambda: 1 in calls, "the first change is handed on")
    await change(store, namespace, message_ttl_in_seconds=2)
    await until(lambda: 2 in calls, "the second change is handed on")
    await cache.close()


async def test_a_namespace_only_asked_about_is_read_not_watched(
    store: MetadataStore, namespace: str
) -> None:
    cache = NamespacePolicyCache(store)
    await change(store, namespace, message_ttl_in_seconds=3)
    assert (await cache.get(namespace, watch=False)).message_ttl_in_seconds == 3
    assert cache.watched == set() and cache.cached(namespace) is None
    await cache.close()


async def test_a_changed_namespace_that_cannot_be_read_is_read_again(
    store: MetadataStore, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(namespace_policies, "REFRESH_RETRY_S", 0.01)
    seen: list[int | None] = []

    async def on_change(_ns: str, policies: Policies) -> None:
        seen.append(policies.message_ttl_in_seconds)

    cache = NamespacePolicyCache(store, on_change)
    await cache.get(namespace)
    failures = [MetadataError("the store is away"), MetadataError("still away")]
    real = namespace_policies.read_policies

    async def flaky(store: MetadataStore, ns: str) -> tuple[Policies, int]:
        if failures:
            raise failures.pop(0)
        return await real(store, ns)

    monkeypatch.setattr(namespace_policies, "read_policies", flaky)
    await change(store, namespace, message_ttl_in_seconds=11)
    await until(lambda: seen == [11], "the change is read once the store answers")
    assert failures == []
    await cache.close()


async def test_a_first_read_does_not_undo_a_change_read_after_it(
    store: MetadataStore, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch is set before the first read: a change that lands meanwhile is read by
    the watch, and the first read, older, must not replace it in the cache."""
    real = namespace_policies.read_policies
    first = asyncio.Event()
    release = asyncio.Event()

    async def slow_first(store: MetadataStore, ns: str) -> tuple[Policies, int]:
        found = await real(store, ns)
        if not first.is_set():
            first.set()
            await release.wait()  # answers with what it read before the change
        return found

    monkeypatch.setattr(namespace_policies, "read_policies", slow_first)
    seen: list[int | None] = []

    async def on_change(_ns: str, policies: Policies) -> None:
        seen.append(policies.message_ttl_in_seconds)

    cache = NamespacePolicyCache(store, on_change)
    loading = asyncio.ensure_future(cache.get(namespace))
    await first.wait()
    await change(store, namespace, message_ttl_in_seconds=21)
    await until(lambda: seen == [21], "the watch read the change")
    release.set()
    assert (await loading).message_ttl_in_seconds == 21
    assert cache.cached(namespace).message_ttl_in_seconds == 21  # type: ignore[union-attr]
    await cache.close()
