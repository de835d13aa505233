"""``/admin/v2/tenants`` over HTTP (aiohttp's test server) on a memory:// store: list, get,
create, update, delete (and ``?force``), and Pulsar's refusals, each writing nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp.test_utils import TestClient, TestServer

from stripemq.broker.admin.rest import AdminContext
from stripemq.broker.cluster_metadata import initialize_cluster_metadata
from stripemq.broker.config import BrokerConfig
from stripemq.broker.namespaces import (
    NamespaceNotEmptyError,
    TenantInfo,
    TenantNotEmptyError,
    create_namespace,
    create_tenant,
    delete_namespace,
    delete_tenant,
    namespace_exists,
    tenant_exists,
)
from stripemq.broker.partitions import create_partitioned_topic
from stripemq.broker.web import build_app
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName
from stripemq.testing.metadata import metadata_tree

StoreFactory = Callable[[], Awaitable[MetadataStore]]
TENANTS = "/admin/v2/tenants"
INFO = {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}


@pytest.fixture
async def client(store: MetadataStore) -> AsyncIterator[TestClient]:
    await initialize_cluster_metadata(store, "standalone")
    ctx = AdminContext(BrokerConfig(), "", lambda: None, lambda: store)
    async with TestClient(TestServer(build_app(ctx))) as test_client:
        ctx.web_url = str(test_client.make_url("")).rstrip("/")
        yield test_client


async def test_create_list_get_update_delete(client: TestClient) -> None:
    assert await (await client.get(TENANTS)).json() == ["public", "pulsar"]
    assert (await client.put(f"{TENANTS}/acme", json=INFO)).status == 204
    assert await (await client.get(TENANTS)).json() == ["acme", "public", "pulsar"]
    response = await client.get(f"{TENANTS}/acme")
    assert response.status == 200
    assert await response.json() == INFO

    assert (await client.put("/admin/v2/clusters/east", json={})).status == 204
    changed = {"adminRoles": ["ops", "dev"], "allowedClusters": ["standalone", "east"]}
    assert (await client.post(f"{TENANTS}/acme", json=changed)).status == 204
    assert await (await client.get(f"{TENANTS}/acme")).json() == changed

    assert (await client.delete(f"{TENANTS}/acme")).status == 204
    response = await client.get(f"{TENANTS}/acme")
    assert response.status == 404
    assert await response.json() == {"reason": "Tenant does not exist"}


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"adminRoles": [], "allowedClusters": ["nowhere"]}, 412, "do not exist"),
        ({"adminRoles": ["x"]}, 412, "Clusters can not be empty"),
        ({"allowedClusters": [""]}, 412, "Clusters can not be empty"),
        ({"allowedClusters": "standalone"}, 400, "allowedClusters"),
        ({"adminRoles": [1], "allowedClusters": ["standalone"]}, 400, "adminRoles"),
        ([1], 400, "JSON object"),
    ],
)
async def test_bad_tenant_info_is_refused(
    client: TestClient, store: MetadataStore, body: object, status: int, reason: str
) -> None:
    before = await metadata_tree(store)
    for method, name in (("PUT", "fresh"), ("POST", "public")):
        response = await client.request(method, f"{TENANTS}/{name}", json=body)
        assert response.status == status, method
        assert reason in (await response.json())["reason"]
    assert await metadata_tree(store) == before


async def test_malformed_json_is_a_bad_request(client: TestClient, store: MetadataStore) -> None:
    before = await metadata_tree(store)
    response = await client.put(f"{TENANTS}/fresh", data=b'{"adminRoles": [')
    assert response.status == 400
    assert await metadata_tree(store) == before


@pytest.mark.parametrize("name", ["bad%20name", "a*b", "t%C3%A9"])
async def test_a_bad_tenant_name_is_refused(
    client: TestClient, store: MetadataStore, name: str
) -> None:
    before = await metadata_tree(store)
    response = await client.put(f"{TENANTS}/{name}", json=INFO)
    assert response.status == 412
    assert await response.json() == {"reason": "Tenant name is not valid"}
    assert await metadata_tree(store) == before


async def test_a_name_with_pulsars_punctuation_is_valid(client: TestClient) -> None:
    assert (await client.put(f"{TENANTS}/a-b_c=d:e.f", json=INFO)).status == 204
    assert (await client.get(f"{TENANTS}/a-b_c=d:e.f")).status == 200


async def test_an_existing_tenant_is_a_conflict(client: TestClient, store: MetadataStore) -> None:
    before = await metadata_tree(store)
    response = await client.put(f"{TENANTS}/public", json=INFO)
    assert response.status == 409
    assert await metadata_tree(store) == before


async def test_unknown_tenants_are_not_found(client: TestClient, store: MetadataStore) -> None:
    before = await metadata_tree(store)
    assert (await client.get(f"{TENANTS}/nobody")).status == 404
    assert (await client.post(f"{TENANTS}/nobody", json=INFO)).status == 404
    assert (await client.delete(f"{TENANTS}/nobody")).status == 404
    assert await metadata_tree(store) == before


async def test_a_tenant_with_namespaces_is_not_deleted(
    client: TestClient, store: MetadataStore
) -> None:
    before = await metadata_tree(store)
    response = await client.delete(f"{TENANTS}/public")
    assert response.status == 409
    assert await response.json() == {"reason": "The tenant still has active namespaces"}
    assert await metadata_tree(store) == before


async def test_force_deletes_the_tenants_empty_namespaces(
    client: TestClient, store: MetadataStore
) -> None:
    assert (await client.put(f"{TENANTS}/acme", json=INFO)).status == 204
    for ns in ("a", "b"):
        assert (await client.put(f"/admin/v2/namespaces/acme/{ns}")).status == 204
    assert (await client.delete(f"{TENANTS}/acme")).status == 409
    assert (await client.delete(f"{TENANTS}/acme?force=true")).status == 204
    assert not await tenant_exists(store, "acme")
    assert not await namespace_exists(store, "acme/a")
    assert await store.children("/stripemq/policies/acme") == []


async def test_a_cluster_namespaces_use_can_be_dropped_as_in_pulsar(
    client: TestClient, store: MetadataStore
) -> None:
    """Pulsar's canUpdateCluster only looks at V1 namespaces (named after their cluster):
    the namespaces of a V2 tenant do not keep a cluster in its allowed clusters."""
    assert (await client.put("/admin/v2/clusters/east", json={})).status == 204
    both = {"adminRoles": [], "allowedClusters": ["standalone", "east"]}
    assert (await client.put(f"{TENANTS}/acme", json=both)).status == 204
    assert (await client.put("/admin/v2/namespaces/acme/ns")).status == 204  # on standalone
    response = await client.post(f"{TENANTS}/acme", json={"allowedClusters": ["east"]})
    assert response.status == 204
    assert await (await client.get(f"{TENANTS}/acme")).json() == {
        "adminRoles": [],
        "allowedClusters": ["east"],
    }


async def test_unknown_clusters_are_named_as_pulsar_names_them(client: TestClient) -> None:
    response = await client.put(f"{TENANTS}/acme", json={"allowedClusters": ["nope", "x"]})
    assert response.status == 412
    assert (await response.json())["reason"] == "Clusters [nope, x] do not exist"


async def test_deletions_are_one_transaction_on_every_store(new_store: StoreFactory) -> None:
    """On memory:// and on ZooKeeper: a tenant with a namespace, a namespace with a topic or
    a partitioned topic, are refused whole; emptied, they go with their container nodes."""
    store = await new_store()
    await create_tenant(store, "acme", TenantInfo(allowed_clusters=("standalone",)))
    await create_namespace(store, "acme/ns")
    await store.create("/stripemq/managed-ledgers/acme/ns/persistent/t", b"")
    await create_partitioned_topic(store, TopicName.parse("acme/ns/p"), 2)
    before = await metadata_tree(store)
    with pytest.raises(TenantNotEmptyError):
        await delete_tenant(store, "acme")
    with pytest.raises(NamespaceNotEmptyError):
        await delete_namespace(store, "acme/ns")
    await store.delete("/stripemq/managed-ledgers/acme/ns/persistent/t")
    with pytest.raises(NamespaceNotEmptyError):  # the partitioned topic is left
        await delete_namespace(store, "acme/ns")
    assert await metadata_tree(store, "/stripemq/policies") == {
        k: v for k, v in before.items() if k.startswith("/stripemq/policies")
    }
    await store.delete("/stripemq/partitioned-topics/acme/ns/persistent/p")
    await delete_namespace(store, "acme/ns")
    await delete_tenant(store, "acme")
    assert not await tenant_exists(store, "acme")
    for root in ("policies", "managed-ledgers", "partitioned-topics"):
        assert "acme" not in await store.children(f"/stripemq/{root}")
