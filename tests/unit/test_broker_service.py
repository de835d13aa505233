"""``BrokerService`` refusals that need no bookies: a topic of a tenant or namespace that
does not exist, and non-persistent topics, are refused by lookup, partitioned metadata
and topic use, and nothing is written to the metadata store."""

from __future__ import annotations

import asyncio

import pytest

from stripemq.broker import service as service_module
from stripemq.broker.names import UnsupportedTopicError
from stripemq.broker.namespaces import (
    NamespaceNotFoundError,
    TenantInfo,
    check_namespace,
    create_namespace,
    create_tenant,
    namespace_exists,
)
from stripemq.broker.ownership import BrokerInfo, bundle_of
from stripemq.broker.partitions import create_partitioned_topic
from stripemq.broker.service import BrokerService, TopicPolicies
from stripemq.errors import NodeExistsError
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import TopicName
from stripemq.testing.metadata import metadata_tree

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
