"""The clusters, tenants and namespaces admin resources of a real ``stripemq standalone``,
over plain HTTP (aiohttp's client), with the official ``pulsar-client`` making topics and
backlogs: every endpoint's happy path and its main refusals, Pulsar's status codes and
``{"reason"}`` bodies, and the effects (clear-backlog empties a subscription, unload keeps
the topic working, a forced delete removes topics)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pulsar
import pytest

from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration

CLUSTERS = "/admin/v2/clusters"
TENANTS = "/admin/v2/tenants"
NS = "/admin/v2/namespaces"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    process = StandaloneProcess(Path(tmp_path_factory.mktemp("admin")) / "standalone")
    asyncio.run(process.start())
    try:
        yield process
    finally:
        process.kill()


class Http:
    """Requests to the standalone's web port: (status, decoded JSON body or None)."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def __call__(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"} if data is not None else None
        async with self.session.request(
            method, f"{self.base}{path}", data=data, headers=headers
        ) as response:
            text = await response.read()
            return response.status, (json.loads(text) if text.strip() else None)


@pytest.fixture
async def http(standalone: StandaloneProcess) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield Http(session, standalone.web_url)


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def refused(answer: tuple[int, Any], status: int) -> None:
    """The answer is ``status`` with a Pulsar-shaped reason."""
    assert answer[0] == status, answer
    assert isinstance(answer[1], dict) and answer[1].get("reason"), answer


def produce(url: str, topic: str, subscriptions: list[str], count: int) -> None:
    """Make ``topic`` with durable ``subscriptions`` (no consumer left) and ``count``
    messages in their backlogs."""
    client = pulsar.Client(url, operation_timeout_seconds=20)
    try:
        for sub in subscriptions:
            client.subscribe(topic, sub).close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send(f"m{i}".encode())
        producer.close()
    finally:
        client.close()


def drain(url: str, topic: str, subscription: str) -> int:
    """How many messages ``subscription`` still delivers (acknowledging them)."""
    client = pulsar.Client(url, operation_timeout_seconds=20)
    try:
        consumer = client.subscribe(topic, subscription)
        got = 0
        while True:
            try:
                message = consumer.receive(timeout_millis=2000)
            except pulsar.Timeout:
                break
            consumer.acknowledge(message)
            got += 1
        consumer.close()
        return got
    finally:
        client.close()


async def test_clusters(http: Http) -> None:
    status, clusters = await http("GET", CLUSTERS)
    assert status == 200 and "standalone" in clusters
    status, data = await http("GET", f"{CLUSTERS}/standalone")
    assert status == 200 and data["brokerServiceUrl"].startswith("pulsar://")

    name = f"c-{uuid.uuid4().hex[:6]}"
    body = {"serviceUrl": "http://elsewhere:8080", "brokerServiceUrl": "pulsar://elsewhere:6650"}
    assert (await http("PUT", f"{CLUSTERS}/{name}", body))[0] == 204
    refused(await http("PUT", f"{CLUSTERS}/{name}", body), 409)
    assert (await http("GET", f"{CLUSTERS}/{name}"))[1]["serviceUrl"] == "http://elsewhere:8080"
    body["serviceUrl"] = "http://moved:8080"
    assert (await http("POST", f"{CLUSTERS}/{name}", body))[0] == 204
    assert (await http("GET", f"{CLUSTERS}/{name}"))[1]["serviceUrl"] == "http://moved:8080"
    assert (await http("DELETE", f"{CLUSTERS}/{name}"))[0] == 204
    refused(await http("GET", f"{CLUSTERS}/{name}"), 404)
    refused(await http("POST", f"{CLUSTERS}/{name}", body), 404)
    refused(await http("DELETE", f"{CLUSTERS}/{name}"), 404)

    refused(await http("PUT", f"{CLUSTERS}/bad*name", body), 412)
    refused(await http("PUT", f"{CLUSTERS}/{name}", raw=b"{nope"), 400)


async def test_tenants(http: Http, tenant: str) -> None:
    info = {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    refused(await http("PUT", f"{TENANTS}/{tenant}", {"allowedClusters": ["nowhere"]}), 412)
    refused(await http("PUT", f"{TENANTS}/{tenant}", {"adminRoles": []}), 412)
    refused(await http("PUT", f"{TENANTS}/bad%20name", info), 412)
    refused(await http("PUT", f"{TENANTS}/{tenant}", raw=b"[oops"), 400)
    refused(await http("GET", f"{TENANTS}/{tenant}"), 404)

    assert (await http("PUT", f"{TENANTS}/{tenant}", info))[0] == 204
    refused(await http("PUT", f"{TENANTS}/{tenant}", info), 409)
    status, listed = await http("GET", f"{TENANTS}/")  # a trailing slash: the same list
    assert status == 200 and tenant in listed
    status, tenants = await http("GET", TENANTS)
    assert status == 200 and tenant in tenants and "public" in tenants
    assert await http("GET", f"{TENANTS}/{tenant}") == (200, info)
    info["adminRoles"] = ["ops", "dev"]
    assert (await http("POST", f"{TENANTS}/{tenant}", info))[0] == 204
    assert await http("GET", f"{TENANTS}/{tenant}") == (200, info)
    refused(await http("POST", f"{TENANTS}/nobody-{tenant}", info), 404)

    assert (await http("PUT", f"{NS}/{tenant}/ns"))[0] == 204
    status, answer = await http("DELETE", f"{TENANTS}/{tenant}")
    assert (status, answer) == (409, {"reason": "The tenant still has active namespaces"})
    assert (await http("DELETE", f"{NS}/{tenant}/ns"))[0] == 204
    assert (await http("DELETE", f"{TENANTS}/{tenant}"))[0] == 204
    refused(await http("DELETE", f"{TENANTS}/{tenant}"), 404)


async def test_namespaces_and_topics(
    http: Http, tenant: str, standalone: StandaloneProcess
) -> None:
    info = {"adminRoles": [], "allowedClusters": ["standalone"]}
    assert (await http("PUT", f"{TENANTS}/{tenant}", info))[0] == 204
    ns = f"{tenant}/orders"
    assert (await http("PUT", f"{NS}/{ns}", {"bundles": {"numBundles": 8}}))[0] == 204
    assert (await http("PUT", f"{NS}/{tenant}/empty"))[0] == 204
    assert await http("GET", f"{NS}/{tenant}") == (200, [f"{tenant}/empty", ns])
    status, policies = await http("GET", f"{NS}/{ns}")
    assert status == 200
    assert policies["bundles"]["numBundles"] == 8
    assert policies["replication_clusters"] == ["standalone"]

    refused(await http("PUT", f"{NS}/{ns}"), 409)
    refused(await http("PUT", f"{NS}/nobody-{tenant}/ns"), 404)
    refused(await http("PUT", f"{NS}/{tenant}/bad*ns"), 412)
    refused(await http("PUT", f"{NS}/{tenant}/x", {"bundles": {"numBundles": -3}}), 412)
    refused(await http("PUT", f"{NS}/{tenant}/x", raw=b"{"), 400)
    refused(await http("GET", f"{NS}/{tenant}/missing"), 404)
    refused(await http("GET", f"{NS}/nobody-{tenant}"), 404)

    assert await http("GET", f"{NS}/{ns}/topics") == (200, [])
    topic = f"persistent://{ns}/book"
    await asyncio.to_thread(produce, standalone.service_url, topic, ["s"], 2)
    assert await http("GET", f"{NS}/{ns}/topics") == (200, [topic])

    status, answer = await http("DELETE", f"{NS}/{ns}")
    assert (status, answer) == (409, {"reason": "Cannot delete non empty namespace"})
    assert (await http("GET", f"{NS}/{ns}"))[0] == 200
    assert (await http("DELETE", f"{NS}/{tenant}/empty"))[0] == 204
    refused(await http("DELETE", f"{NS}/{tenant}/empty"), 404)

    # Forced: its topics go first (through the topics resource), then the namespace.
    assert (await http("DELETE", f"{NS}/{ns}?force=true"))[0] == 204
    refused(await http("GET", f"{NS}/{ns}"), 404)
    assert (await http("DELETE", f"{TENANTS}/{tenant}"))[0] == 204


async def test_force_deleting_a_tenant_deletes_its_namespaces(
    http: Http, tenant: str, standalone: StandaloneProcess
) -> None:
    info = {"adminRoles": [], "allowedClusters": ["standalone"]}
    assert (await http("PUT", f"{TENANTS}/{tenant}", info))[0] == 204
    for ns in ("a", "b"):
        assert (await http("PUT", f"{NS}/{tenant}/{ns}"))[0] == 204
    await asyncio.to_thread(produce, standalone.service_url, f"{tenant}/a/t", ["s"], 1)
    refused(await http("DELETE", f"{TENANTS}/{tenant}"), 409)
    assert (await http("DELETE", f"{TENANTS}/{tenant}?force=true"))[0] == 204
    refused(await http("GET", f"{TENANTS}/{tenant}"), 404)
    refused(await http("GET", f"{NS}/{tenant}/a"), 404)


async def test_unload(http: Http, standalone: StandaloneProcess) -> None:
    topic = f"persistent://public/default/unload-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(produce, standalone.service_url, topic, ["s"], 3)
    assert (await http("PUT", f"{NS}/public/default/unload"))[0] == 204
    # The topic is taken up again on next use, its messages intact.
    await asyncio.to_thread(produce, standalone.service_url, topic, [], 2)
    assert await asyncio.to_thread(drain, standalone.service_url, topic, "s") == 5

    _, policies = await http("GET", f"{NS}/public/default")
    low, high = policies["bundles"]["boundaries"][:2]
    assert (await http("PUT", f"{NS}/public/default/{low}_{high}/unload"))[0] == 204
    refused(await http("PUT", f"{NS}/public/default/nonsense/unload"), 412)
    refused(await http("PUT", f"{NS}/public/default/0x00000000_0x00000001/unload"), 412)
    refused(await http("PUT", f"{NS}/public/missing/unload"), 404)


async def test_clear_backlog(http: Http, standalone: StandaloneProcess) -> None:
    url = standalone.service_url
    ns = f"public/cb-{uuid.uuid4().hex[:6]}"
    assert (await http("PUT", f"{NS}/{ns}"))[0] == 204
    topics = [f"persistent://{ns}/t{i}" for i in range(3)]
    for topic in topics:
        await asyncio.to_thread(produce, url, topic, ["s1", "s2"], 4)

    async def backlog(topic: str, subscription: str) -> int:
        status, stats = await http("GET", f"/admin/v2/{topic.replace('://', '/')}/stats")
        assert status == 200, stats
        return int(stats["subscriptions"][subscription]["msgBacklog"])

    assert (await http("POST", f"{NS}/{ns}/clearBacklog/s1"))[0] == 204
    for topic in topics:
        assert (await backlog(topic, "s1"), await backlog(topic, "s2")) == (0, 4), topic
    assert await asyncio.to_thread(drain, url, topics[0], "s1") == 0

    assert (await http("POST", f"{NS}/{ns}/clearBacklog"))[0] == 204
    for topic in topics:
        assert (await backlog(topic, "s1"), await backlog(topic, "s2")) == (0, 0), topic
    assert await asyncio.to_thread(drain, url, topics[1], "s2") == 0
    refused(await http("POST", f"{NS}/public/missing/clearBacklog"), 404)


# path, a body, what GET answers for it.
POLICIES: list[tuple[str, Any, Any]] = [
    (
        "retention",
        {"retentionTimeInMinutes": 120, "retentionSizeInMB": 64},
        {"retentionTimeInMinutes": 120, "retentionSizeInMB": 64},
    ),
    ("messageTTL", 3600, 3600),
    (
        "backlogQuota?backlogQuotaType=destination_storage",
        {"limitSize": 1048576, "limitTime": -1, "policy": "producer_request_hold"},
        {
            "limit": 1048576,
            "limitSize": 1048576,
            "limitTime": -1,
            "policy": "producer_request_hold",
        },
    ),
    ("deduplication", True, True),
    (
        "publishRate",
        {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": 10240},
        {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": 10240},
    ),
    (
        "dispatchRate",
        {
            "dispatchThrottlingRateInMsg": 50,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1,
            "relativeToPublishRate": False,
        },
        {
            "dispatchThrottlingRateInMsg": 50,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1,
            "relativeToPublishRate": False,
        },
    ),
    (
        "subscriptionDispatchRate",
        {"dispatchThrottlingRateInMsg": 20, "dispatchThrottlingRateInByte": 2048},
        {
            "dispatchThrottlingRateInMsg": 20,
            "dispatchThrottlingRateInByte": 2048,
            "ratePeriodInSecond": 1,
            "relativeToPublishRate": False,
        },
    ),
    (
        "autoTopicCreation",
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2},
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2},
    ),
]
BAD: list[tuple[str, Any]] = [
    ("retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 5}),
    ("messageTTL", -1),
    ("backlogQuota", {"limitSize": 10, "policy": "whatever"}),
    ("backlogQuota?backlogQuotaType=size", {"limitSize": 10, "policy": "producer_exception"}),
    ("deduplication", "on"),
    ("publishRate", {"publishThrottlingRateInMsg": "many"}),
    ("dispatchRate", {"dispatchThrottlingRateInMsg": 1, "ratePeriodInSecond": -1}),
    ("subscriptionDispatchRate", [1]),
    ("autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "partitioned"}),
]


async def test_policies(http: Http) -> None:
    ns = f"public/pol-{uuid.uuid4().hex[:6]}"
    assert (await http("PUT", f"{NS}/{ns}"))[0] == 204
    for path, body, answer in POLICIES:
        url = f"{NS}/{ns}/{path}"
        assert await http("GET", url) == (204, None), path
        assert (await http("POST", url, body))[0] == 204, path
        assert await http("GET", url) == (200, answer), path
    status, policies = await http("GET", f"{NS}/{ns}")
    assert status == 200
    assert policies["retention_policies"] == POLICIES[0][2]
    assert policies["message_ttl_in_seconds"] == 3600
    assert policies["deduplicationEnabled"] is True
    assert policies["publishMaxMessageRate"] == {"standalone": POLICIES[4][2]}
    status, quotas = await http("GET", f"{NS}/{ns}/backlogQuotaMap")
    assert (status, list(quotas)) == (200, ["destination_storage"])

    for path, body in BAD:
        refused(await http("POST", f"{NS}/{ns}/{path}", body), 412)
        refused(await http("POST", f"{NS}/{ns}/{path}", raw=b"{bad json"), 400)
        refused(await http("POST", f"{NS}/public/missing/{path}", body), 404)
    # A quota beyond the retention size, or a retention below the quota: 412 either way.
    too_big = {"limitSize": 128 * 1024 * 1024, "policy": "producer_exception"}
    refused(await http("POST", f"{NS}/{ns}/backlogQuota", too_big), 412)
    smaller = {"retentionTimeInMinutes": 120, "retentionSizeInMB": 1}
    refused(await http("POST", f"{NS}/{ns}/retention", smaller), 412)
    assert (await http("GET", f"{NS}/{ns}")) == (200, policies)  # nothing changed

    for path, _, _ in POLICIES:
        url = f"{NS}/{ns}/{path}"
        assert (await http("DELETE", url))[0] == 204, path
        assert await http("GET", url) == (204, None), path
    assert await http("GET", f"{NS}/{ns}/backlogQuotaMap") == (200, {})
    refused(await http("GET", f"{NS}/public/missing/retention"), 404)
    refused(await http("DELETE", f"{NS}/public/missing/messageTTL"), 404)
