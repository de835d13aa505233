"""``/admin/v2/brokers`` over HTTP (aiohttp's test server) on a
memory:// store with a real ``BrokerService`` over an in-memory ledger client; and the
leader election itself, between brokers on separate metadata sessions."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer
from ledger_fakes import FakeBookKeeper
from yarl import URL

from stripemq.bookie.client import BookKeeper
from stripemq.broker.admin.brokers import heartbeat_topic, internal_configuration, package_version
from stripemq.broker.admin.rest import AdminContext
from stripemq.broker.config import BrokerConfig
from stripemq.broker.leader import (
    LEADER_PATH,
    LeaderBroker,
    LeaderElection,
    current_leader,
    lookup_id,
)
from stripemq.broker.ownership import BROKERS_ROOT, BrokerInfo
from stripemq.broker.service import BrokerService
from stripemq.broker.web import build_app
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.testing.polling import until

ME = BrokerInfo("127.0.0.1:6650", "pulsar://127.0.0.1:6650", "http://127.0.0.1:8080")
REMOTE = BrokerInfo("10.0.0.2:6650", "pulsar://10.0.0.2:6650", "http://10.0.0.2:8080")


@dataclass
class Admin:
    client: TestClient
    service: BrokerService
    store: MetadataStore
    serving: list[BrokerService | None]

    async def call(self, method: str, path: str) -> tuple[int, Any]:
        return await self.call_with(method, path, None)

    async def call_with(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        response = await self.client.request(method, path, data=data, allow_redirects=False)
        raw = await response.read()
        if response.content_type == "application/json":
            return response.status, json.loads(raw)
        return response.status, raw.decode()


@pytest.fixture
async def admin(store: MetadataStore) -> AsyncIterator[Admin]:
    service = BrokerService(store, cast(BookKeeper, FakeBookKeeper()), ME)
    await service.start()
    serving: list[BrokerService | None] = [service]
    ctx = AdminContext(BrokerConfig(), "", lambda: serving[0], lambda: store)
    async with TestClient(TestServer(build_app(ctx))) as client:
        ctx.web_url = str(client.make_url("")).rstrip("/")
        yield Admin(client, service, store, serving)
    await service.close()


# --------------------------------------------------------------------------- election


async def test_lookup_ids() -> None:
    assert lookup_id("http://10.0.0.2:8080", "x:6650") == "10.0.0.2:8080"
    assert lookup_id("", "x:6650") == "x:6650"
    assert LeaderBroker.decode(b"not json") is None
    assert LeaderBroker.decode(b'{"serviceUrl": "http://a:1"}') == LeaderBroker("http://a:1", "")


async def test_one_leader_and_a_successor() -> None:
    url = f"memory://{uuid.uuid4().hex[:8]}"
    stores = [create_metadata_store(url), create_metadata_store(url)]
    for store in stores:
        await store.start()
    first = LeaderElection(stores[0], LeaderBroker("http://a:8080", "a:8080"))
    second = LeaderElection(stores[1], LeaderBroker("http://b:8080", "b:8080"))
    try:
        first.start()
        await until(lambda: first.is_leader, timeout=5)
        second.start()
        assert await current_leader(stores[1]) == LeaderBroker("http://a:8080", "a:8080")
        assert not second.is_leader
        await first.stop()  # gives the node up: the other takes over at once
        await until(lambda: second.is_leader, timeout=5)
        assert await current_leader(stores[0]) == LeaderBroker("http://b:8080", "b:8080")
        # The leader's session ends: its node goes with it, and a new candidate wins.
        first = LeaderElection(stores[0], LeaderBroker("http://a:8080", "a:8080"))
        first.start()
        await stores[1].close()
        await until(lambda: first.is_leader, timeout=5)
    finally:
        await first.stop()
        await second.stop(release=False)
        await stores[0].close()


async def test_a_stale_node_is_not_taken_for_ours(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = json.dumps({"serviceUrl": "http://x:1", "brokerId": "a:8080", "token": "old"})
    await store.create(LEADER_PATH, other.encode())  # persistent: it stays
    reads = 0
    real_get = store.get

    async def counting_get(path: str) -> object:
        nonlocal reads
        reads += path == LEADER_PATH
        return await real_get(path)

    monkeypatch.setattr(store, "get", counting_get)
    election = LeaderElection(store, LeaderBroker("http://a:8080", "a:8080"))
    election.start()
    try:
        await until(lambda: reads >= 1, "the election reads the node it could not take")
        assert not election.is_leader
        await store.delete(LEADER_PATH)
        await until(lambda: election.is_leader, timeout=5)
    finally:
        await election.stop()
    assert await store.exists(LEADER_PATH) is None


# --------------------------------------------------------------------------- brokers


async def test_brokers_and_the_leader(admin: Admin) -> None:
    await admin.store.create(f"{BROKERS_ROOT}/{REMOTE.broker_id}", REMOTE.encode(), ephemeral=True)
    expected = ["10.0.0.2:8080", "127.0.0.1:8080"]
    assert await admin.call("GET", "/admin/v2/brokers") == (200, expected)
    assert await admin.call("GET", "/admin/v2/brokers/standalone") == (200, expected)
    assert (await admin.call("GET", "/admin/v2/brokers/nowhere"))[0] == 404
    await until(lambda: admin.service.leader_election.is_leader, timeout=5)
    assert await admin.call("GET", "/admin/v2/brokers/leaderBroker") == (
        200,
        {"serviceUrl": "http://127.0.0.1:8080", "brokerId": "127.0.0.1:8080"},
    )


async def test_another_clusters_brokers_are_asked_of_that_cluster(admin: Admin) -> None:
    """Pulsar's validateClusterOwnership: 307 to the cluster's serviceUrl, same path."""
    east = {"serviceUrl": "http://east-1:8080", "brokerServiceUrl": "pulsar://east-1:6650"}
    assert (await admin.call_with("PUT", "/admin/v2/clusters/east", east))[0] == 204
    response = await admin.client.get("/admin/v2/brokers/east?x=1", allow_redirects=False)
    assert response.status == 307
    assert response.headers["Location"] == "http://east-1:8080/admin/v2/brokers/east?x=1"
    assert (await admin.call_with("PUT", "/admin/v2/clusters/bare", {}))[0] == 204
    assert (await admin.call("GET", "/admin/v2/brokers/bare"))[0] == 412  # no URL to ask
    status, body = await admin.call("GET", "/admin/v2/brokers/nowhere")
    assert status == 404 and body["reason"] == "Cluster does not exist"


async def test_the_runtime_configuration_names_the_cluster(admin: Admin) -> None:
    status, config = await admin.call("GET", "/admin/v2/brokers/configuration/runtime")
    assert status == 200
    assert config["clusterName"] == "standalone"
    assert config["webServicePort"] == "8080"
    assert config["brokerDeduplicationEnabled"] == "false"  # as Java prints a boolean
    assert all(isinstance(value, str) for value in config.values())


async def test_no_setting_is_dynamic(admin: Admin) -> None:
    """Pulsar's dynamic configuration: none here, and a change is refused, not ignored."""
    assert await admin.call("GET", "/admin/v2/brokers/configuration") == (200, [])
    assert await admin.call("GET", "/admin/v2/brokers/configuration/values") == (200, {})
    path = "/admin/v2/brokers/configuration/maxMessageSize"
    status, body = await admin.call("POST", f"{path}/1024")
    assert status == 412 and "non-dynamic" in body["reason"]
    assert (await admin.call("DELETE", path))[0] == 412
    status, config = await admin.call("GET", "/admin/v2/brokers/configuration/runtime")
    assert status == 200 and config["maxMessageSize"] != "1024"


async def test_the_internal_configuration_names_the_metadata_store(admin: Admin) -> None:
    status, internal = await admin.call("GET", "/admin/v2/brokers/internal-configuration")
    assert status == 200
    assert internal["metadataStoreUrl"] == internal["bookkeeperMetadataServiceUri"]
    assert internal["ledgersRootPath"] == "/ledgers"


async def test_the_backlog_quota_check_runs_on_request(
    admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[bool] = []

    async def check() -> None:
        checked.append(True)

    service = admin.serving[0]
    assert service is not None
    monkeypatch.setattr(service.policy_checks, "check_backlog_quotas", check)
    assert (await admin.call("GET", "/admin/v2/brokers/backlog-quota-check"))[0] == 204
    assert checked == [True]


def test_the_internal_configuration_of_zookeeper() -> None:
    internal = internal_configuration("zk://zk-0:2181,zk-1:2181/stripemq")
    assert internal["zookeeperServers"] == "zk-0:2181,zk-1:2181/stripemq"
    assert internal["metadataStoreUrl"] == "zk://zk-0:2181,zk-1:2181/stripemq"
    assert internal_configuration("local:///data")["zookeeperServers"] is None


async def test_a_cluster_name_that_is_no_name_is_412(admin: Admin) -> None:
    for name in ("%2e%2e", "%2e", "a%00b"):  # sent as they are, not resolved as ``..``
        url = URL(str(admin.client.make_url("/admin/v2/brokers/")) + name, encoded=True)
        response = await admin.client.session.get(url)
        assert response.status == 412
        assert (await response.json())["reason"] == "Cluster name is not valid"


async def test_ready_and_version(admin: Admin) -> None:
    assert await admin.call("GET", "/admin/v2/brokers/ready") == (200, "ok")
    assert await admin.call("GET", "/admin/v2/brokers/version") == (200, package_version())
    admin.serving[0] = None  # starting (over)
    status, body = await admin.call("GET", "/admin/v2/brokers/ready")
    assert status == 503 and body["reason"]
    assert (await admin.call("GET", "/admin/v2/brokers/health"))[0] == 503


async def test_health_check_writes_and_reads_a_heartbeat(admin: Admin) -> None:
    assert await admin.call("GET", "/admin/v2/brokers/health") == (200, "ok")
    assert await admin.call("GET", "/admin/v2/brokers/health") == (200, "ok")
    topic = heartbeat_topic(admin.client.make_url("").human_repr(), "x")
    assert topic.namespace_name.startswith("pulsar/127.0.0.1:")
    served = admin.service.topics[str(topic)]
    assert served.ml.chain.entries == 2


async def test_a_failing_health_check_says_why(admin: Admin) -> None:
    assert await admin.call("GET", "/admin/v2/brokers/health") == (200, "ok")
    topic = next(t for t in admin.service.topics.values() if t.name.endswith("/healthcheck"))
    await topic.ml.terminate()  # stores nothing more
    status, body = await admin.call("GET", "/admin/v2/brokers/health")
    assert status == 500
    assert "terminated" in body["reason"]
