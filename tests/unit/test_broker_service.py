"""``BrokerService`` refusals that need no bookies: a topic of a tenant or namespace that
does not exist, and non-persistent topics, are refused by lookup, partitioned metadata
and topic use, and nothing is written to the metadata store. Then topics served over an
in-memory ledger client: what a closing topic answers, and namespace policies reaching
topics (while they open too) and watched only while a topic of theirs is served."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker import service as service_module
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.names import UnsupportedTopicError
from stripemq.broker.namespaces import (
    NamespaceNotFoundError,
    TenantInfo,
    check_namespace,
    create_namespace,
    create_tenant,
    namespace_exists,
    read_policies,
    write_policies,
)
from stripemq.broker.ownership import BrokerInfo, bundle_of
from stripemq.broker.partitions import create_partitioned_topic
from stripemq.broker.policies import Policies
from stripemq.broker.service import BrokerService, TopicPolicies
from stripemq.broker.topic import Consumer, PersistentTopic, TopicLifecycle
from stripemq.errors import BrokerError, ManagedLedgerError, NodeExistsError
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.metadata import metadata_tree
from stripemq.testing.polling import until
from stripemq.testing.sinks import NullSink

ME = BrokerInfo("127.0.0.1:6650", "pulsar://127.0.0.1:6650")


class NoBookies:
    """Stands in for the ledger client: these paths must never reach storage."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the ledger client was used ({name})")


async def started(store: MetadataStore, policies: TopicPolicies) -> BrokerService:
    service = BrokerService(store, NoBookies(), ME, policies=policies)  # type: ignore[arg-type]
    await service.start()
    return service


MISSING = [
    "persistent://nobody/none/t",  # no tenant
    "persistent://public/none/t",  # a tenant, no namespace
    "persistent://public/none/t-partition-1",
]
POLICIES = [
    TopicPolicies(),
    TopicPolicies(auto_create=False),
    TopicPolicies(auto_create_partitioned=True, default_partitions=3),
]


@pytest.mark.parametrize("policies", POLICIES)
@pytest.mark.parametrize("topic", MISSING)
async def test_a_missing_namespace_is_refused_and_nothing_is_written(
    store: MetadataStore, policies: TopicPolicies, topic: str
) -> None:
    service = await started(store, policies)
    name = TopicName.parse(topic)
    before = await metadata_tree(store)
    for authoritative in (False, True):
        with pytest.raises(NamespaceNotFoundError, match="does not exist"):
            await service.lookup(name, authoritative)
    with pytest.raises(NamespaceNotFoundError):
        await service.partitions(name)
    with pytest.raises(NamespaceNotFoundError):
        await service.get_topic(name)
    assert await metadata_tree(store) == before
    assert NamespaceNotFoundError.server_error == pb.TopicNotFound
    assert service.ownership.owned == set()


async def test_the_error_names_what_is_missing(store: MetadataStore) -> None:
    service = await started(store, TopicPolicies())
    with pytest.raises(NamespaceNotFoundError, match="tenant nobody does not exist"):
        await service.lookup(TopicName.parse("persistent://nobody/none/t"), True)
    with pytest.raises(NamespaceNotFoundError, match="namespace public/none does not exist"):
        await service.lookup(TopicName.parse("persistent://public/none/t"), True)


async def test_non_persistent_topics_are_refused_and_nothing_is_written(
    store: MetadataStore,
) -> None:
    service = await started(store, TopicPolicies(auto_create_partitioned=True))
    name = TopicName.parse("non-persistent://public/default/t")
    before = await metadata_tree(store)
    with pytest.raises(UnsupportedTopicError):
        await service.lookup(name, True)
    with pytest.raises(UnsupportedTopicError):
        await service.partitions(name)
    with pytest.raises(UnsupportedTopicError):
        await service.get_topic(name)
    assert await metadata_tree(store) == before


async def test_lookups_in_namespaces_that_exist_take_the_bundle(store: MetadataStore) -> None:
    service = await started(store, TopicPolicies(auto_create_partitioned=True))
    assert await namespace_exists(store, "public/default")  # made at start
    default = TopicName.parse("orders")
    assert await service.lookup(default, True) == ME.service_url
    assert bundle_of(default) in service.ownership.owned
    await create_tenant(store, "acme", TenantInfo(allowed_clusters=("standalone",)))
    await create_namespace(store, "acme/billing")
    billing = TopicName.parse("acme/billing/invoices")
    assert await service.lookup(billing, False) == ME.service_url
    assert await service.partitions(billing) == 1  # default_partitions


async def test_bundles_follow_the_namespaces_bundle_count(store: MetadataStore) -> None:
    service = await started(store, TopicPolicies())
    await create_tenant(store, "acme", TenantInfo(allowed_clusters=("standalone",)))
    await create_namespace(store, "acme/eight", bundles=8)
    topic = TopicName.parse("acme/eight/t")
    assert await service.bundle_of(topic) == bundle_of(topic, 8) != bundle_of(topic)
    assert await service.lookup(topic, True) == ME.service_url
    assert service.ownership.owned == {bundle_of(topic, 8)}
    assert await store.get(bundle_of(topic, 8).path) is not None


async def test_namespaces_are_made_in_existing_tenants_only(store: MetadataStore) -> None:
    with pytest.raises(NamespaceNotFoundError):
        await create_namespace(store, "nobody/ns")
    await create_tenant(store, "acme", TenantInfo(allowed_clusters=("standalone",)))
    await create_namespace(store, "acme/ns")
    with pytest.raises(NodeExistsError):
        await create_namespace(store, "acme/ns")
    with pytest.raises(NodeExistsError):
        await create_tenant(store, "acme", TenantInfo())


async def test_requests_that_come_while_the_broker_starts_wait_for_the_defaults(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that reaches the service before the default namespace is made must not be
    told ``public/default`` does not exist: it waits for the defaults."""
    checked: list[str] = []

    async def spying_check(store: MetadataStore, namespace: str) -> None:
        checked.append(namespace)
        await check_namespace(store, namespace)

    monkeypatch.setattr(service_module, "check_namespace", spying_check)
    service = BrokerService(store, NoBookies(), ME)  # type: ignore[arg-type]
    lookup = asyncio.ensure_future(service.lookup(TopicName.parse("orders"), True))
    partitions = asyncio.ensure_future(service.partitions(TopicName.parse("orders")))
    await asyncio.sleep(0)  # both start, and send their first reads to the store
    for _ in range(3):  # the store answers in order: theirs, then ours, and they go on
        await store.get("/stripemq")
    assert checked == [] and not lookup.done() and not partitions.done()
    await service.start()
    assert await lookup == ME.service_url
    assert await partitions == 0


async def test_a_partition_of_a_partitioned_topic_reports_no_partitions_of_its_own(
    store: MetadataStore,
) -> None:
    """Asked about ``t-partition-0``, the broker answers 0 (as Pulsar does), not the parent's
    count: a client would otherwise make a partitioned producer of the partition."""
    service = await started(store, TopicPolicies(auto_create_partitioned=True))
    parent = TopicName.parse("persistent://public/default/routed")
    await create_partitioned_topic(store, parent, 5)
    assert await service.partitions(parent) == 5
    assert await service.partitions(TopicName.parse(f"{parent}-partition-0")) == 0


# ---------------------------------------------------------------- serving topics


@pytest.fixture
async def service(store: MetadataStore) -> AsyncIterator[BrokerService]:
    """A started service over an in-memory ledger client."""
    service = BrokerService(store, cast(BookKeeper, FakeBookKeeper()), ME)
    await service.start()
    yield service
    await service.close()


async def change(store: MetadataStore, namespace: str, **changes: object) -> None:
    policies, version = await read_policies(store, namespace)
    await write_policies(store, namespace, policies.with_(**changes), version)


def in_other_bundles(count: int) -> list[TopicName]:
    """``count`` topics of public/default, each in a bundle of its own."""
    found: dict[object, TopicName] = {}
    index = 0
    while len(found) < count:
        name = TopicName.parse(f"persistent://public/default/t{index}")
        found.setdefault(bundle_of(name), name)
        index += 1
    return list(found.values())


class GatedOpen:
    """Holds every topic's open between its policies being read and its registration."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.waiting = asyncio.Event()
        self.gate = asyncio.Event()
        real = PersistentTopic.wait_for_deduplication

        async def gated(topic: PersistentTopic) -> None:
            self.waiting.set()
            await self.gate.wait()
            await real(topic)

        monkeypatch.setattr(PersistentTopic, "wait_for_deduplication", gated)


async def test_a_closing_topic_is_not_served_and_not_opened_twice(
    service: BrokerService,
) -> None:
    name = TopicName.parse("persistent://public/default/closing")
    topic = await service.get_topic(name)
    sub = await topic.subscribe("s", pb.CommandSubscribe.Shared, InitialPosition.Earliest)
    consumer = Consumer(ConsumerSlot(1, "c"), NullSink(), sub)
    sub.add_consumer(consumer)
    sub.flow(consumer, 10)
    unloading = asyncio.ensure_future(service.unload_topic(name))
    await asyncio.sleep(0)
    assert topic.lifecycle is TopicLifecycle.CLOSING
    with pytest.raises(BrokerError) as refused:
        await service.get_topic(name)  # a client reconnecting at once retries
    assert refused.value.server_error == pb.ServiceNotReady
    await unloading
    again = await service.get_topic(name)
    assert again is not topic and again.serving and topic.ml.closed


async def test_a_policy_change_made_while_a_topic_opens_reaches_it(
    service: BrokerService, store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    gated = GatedOpen(monkeypatch)
    name = TopicName.parse("persistent://public/default/opening")
    opening = asyncio.ensure_future(service.get_topic(name))
    await gated.waiting.wait()  # its policies are read, it is not served yet
    await change(store, "public/default", message_ttl_in_seconds=42)
    cache = service.namespace_policies
    await until(lambda: (cache.cached("public/default") or Policies()).message_ttl_in_seconds == 42)
    gated.gate.set()
    topic = await opening
    assert topic.policies.message_ttl_s == 42


async def test_the_namespace_of_a_topic_being_opened_stays_watched(
    service: BrokerService, store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    served, opened = in_other_bundles(2)
    await service.get_topic(served)
    gated = GatedOpen(monkeypatch)
    opening = asyncio.ensure_future(service.get_topic(opened))
    await gated.waiting.wait()
    await service.unload(bundle_of(served))  # the namespace's only topic served goes
    assert "public/default" in service.namespace_policies.watched
    gated.gate.set()
    topic = await opening
    await change(store, "public/default", message_ttl_in_seconds=9)
    await until(lambda: topic.policies.message_ttl_s == 9, "the change reaches the topic")


async def test_one_topic_failing_a_change_leaves_the_others_changed(
    service: BrokerService, store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await service.get_topic(TopicName.parse("persistent://public/default/a"))
    second = await service.get_topic(TopicName.parse("persistent://public/default/b"))

    async def broken(_policies: object) -> None:
        raise ManagedLedgerError("cannot apply")

    monkeypatch.setattr(first, "apply_policies", broken)
    await change(store, "public/default", message_ttl_in_seconds=7)
    await until(lambda: second.policies.message_ttl_s == 7, "the other topic changes")


async def test_policies_are_watched_only_while_a_topic_of_the_namespace_is_served(
    service: BrokerService,
) -> None:
    watched = service.namespace_policies
    name = TopicName.parse("persistent://public/default/watched")
    await service.partitions(name)  # a client asking: read, not watched
    assert watched.watched == set()
    await service.get_topic(name)
    assert watched.watched == {"public/default"}
    await service.unload_topic(name)
    assert watched.watched == set()
    await service.get_topic(name)
    await service.delete_topic(name)
    assert watched.watched == set()
