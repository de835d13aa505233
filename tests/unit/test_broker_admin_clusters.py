"""``/admin/v2/clusters`` over HTTP (aiohttp's test server) on a memory:// store: list,
get, create, update, delete, and the refusals (bad names, bodies, unknown clusters), each
of which writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from stripemq.broker.admin.rest import AdminContext
from stripemq.broker.cluster_metadata import cluster_path, initialize_cluster_metadata
from stripemq.broker.config import BrokerConfig
from stripemq.broker.web import build_app
from stripemq.metadata import MetadataStore
from stripemq.testing.metadata import metadata_tree

CLUSTERS = "/admin/v2/clusters"
DATA = {"serviceUrl": "http://east:8080", "brokerServiceUrl": "pulsar://east:6650"}


@pytest.fixture
async def client(store: MetadataStore) -> AsyncIterator[TestClient]:
    await initialize_cluster_metadata(store, "standalone")
    ctx = AdminContext(BrokerConfig(), "", lambda: None, lambda: store)
    async with TestClient(TestServer(build_app(ctx))) as test_client:
        yield test_client


async def test_the_initial_cluster_is_listed_and_described(client: TestClient) -> None:
    response = await client.get(CLUSTERS)
    assert response.status == 200
    assert await response.json() == ["standalone"]
    response = await client.get(f"{CLUSTERS}/standalone")
    assert response.status == 200
    assert set(await response.json()) == {
        "serviceUrl",
        "serviceUrlTls",
        "brokerServiceUrl",
        "brokerServiceUrlTls",
    }


async def test_create_get_update_delete(client: TestClient) -> None:
    assert (await client.put(f"{CLUSTERS}/east", json=DATA)).status == 204
    assert await (await client.get(CLUSTERS)).json() == ["east", "standalone"]
    got = await (await client.get(f"{CLUSTERS}/east")).json()
    assert got["serviceUrl"] == "http://east:8080"
    assert got["brokerServiceUrl"] == "pulsar://east:6650"

    changed = {"serviceUrl": "http://east2:8080", "brokerServiceUrl": "pulsar://east2:6650"}
    assert (await client.post(f"{CLUSTERS}/east", json=changed)).status == 204
    got = await (await client.get(f"{CLUSTERS}/east")).json()
    assert got["serviceUrl"] == "http://east2:8080"

    assert (await client.delete(f"{CLUSTERS}/east")).status == 204
    response = await client.get(f"{CLUSTERS}/east")
    assert response.status == 404
    assert await response.json() == {"reason": "Cluster does not exist"}


async def test_creating_an_existing_cluster_is_a_conflict(
    client: TestClient, store: MetadataStore
) -> None:
    before = await metadata_tree(store)
    response = await client.put(f"{CLUSTERS}/standalone", json=DATA)
    assert response.status == 409
    assert "already exists" in (await response.json())["reason"]
    assert await metadata_tree(store) == before


@pytest.mark.parametrize("name", ["bad%20name", "a*b", "caf%C3%A9", "x%2Fy"])
async def test_a_bad_cluster_name_is_refused(
    client: TestClient, store: MetadataStore, name: str
) -> None:
    before = await metadata_tree(store)
    response = await client.put(f"{CLUSTERS}/{name}", json=DATA)
    assert response.status in (404, 412)  # "x/y" is no cluster path at all
    assert "reason" in await response.json()
    if "%2F" not in name:
        assert response.status == 412
    assert await metadata_tree(store) == before


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b"[1, 2]", 400),
        (b'{"serviceUrl": 5}', 400),
        (b"", 400),
    ],
)
async def test_a_bad_body_is_refused(
    client: TestClient, store: MetadataStore, body: bytes, status: int
) -> None:
    before = await metadata_tree(store)
    for method in ("PUT", "POST"):
        name = "fresh" if method == "PUT" else "standalone"
        response = await client.request(method, f"{CLUSTERS}/{name}", data=body)
        assert response.status == status, method
        assert (await response.json())["reason"]
    assert await metadata_tree(store) == before


async def test_updating_or_deleting_an_unknown_cluster_is_not_found(
    client: TestClient, store: MetadataStore
) -> None:
    before = await metadata_tree(store)
    assert (await client.post(f"{CLUSTERS}/nowhere", json=DATA)).status == 404
    assert (await client.delete(f"{CLUSTERS}/nowhere")).status == 404
    assert await metadata_tree(store) == before


async def test_a_cluster_tenants_allow_is_deleted_as_pulsar_deletes_it(
    client: TestClient, store: MetadataStore
) -> None:
    """Pulsar refuses ("Cluster not empty") only while V1 namespaces, named after their
    cluster, live in it; tenants that allow it do not keep it."""
    assert (await client.delete(f"{CLUSTERS}/standalone")).status == 204
    assert await (await client.get(CLUSTERS)).json() == []
    assert await store.get(cluster_path("standalone")) is None


async def test_the_global_cluster_is_not_listed(client: TestClient) -> None:
    assert (await client.put(f"{CLUSTERS}/global", json={})).status == 204
    assert await (await client.get(CLUSTERS)).json() == ["standalone"]
