"""Two broker processes over real bookies and ZooKeeper: a topic operation asked of the
broker that does not own the topic's bundle answers 307 to the owner's web service, and
following it works (with the request's method, body and query); partitioned stats gather
partitions served by both brokers; both brokers agree on the active brokers and the leader,
and the leadership moves when the leader stops."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pulsar
import pytest

from stripemq.broker.ownership import bundle_of
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName
from stripemq.testing.broker import BrokerProcess, broker_pair_on_bookies, owner_url
from stripemq.testing.polling import until

pytestmark = pytest.mark.integration

P = "/admin/v2/persistent/public/default"
SETTINGS = {
    "zk_session_timeout_ms": 4000,
    "managed_ledger_default_ensemble_size": 2,
    "managed_ledger_default_write_quorum": 2,
    "managed_ledger_default_ack_quorum": 2,
}


@pytest.fixture
async def brokers(
    metadata_url: str, tmp_path: Path
) -> AsyncIterator[tuple[BrokerProcess, BrokerProcess]]:
    async with broker_pair_on_bookies(metadata_url, tmp_path, SETTINGS, bookies=2) as pair:
        yield pair


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Any = None,
    *,
    follow: bool = True,
) -> tuple[int, Any, str | None]:
    """(status, JSON or bytes, Location)."""
    async with session.request(method, url, json=body, allow_redirects=follow) as response:
        raw = await response.read()
        data: Any = await response.json() if response.content_type == "application/json" else raw
        return response.status, data, response.headers.get("Location")


def produce(service_url: str, topic: str, count: int, **options: Any) -> None:
    client = pulsar.Client(service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False, **options)
        for i in range(count):
            producer.send(f"m{i}".encode())
        producer.close()
    finally:
        client.close()


async def test_the_non_owner_redirects_to_the_owner(
    brokers: tuple[BrokerProcess, BrokerProcess],
    store: MetadataStore,
    session: aiohttp.ClientSession,
) -> None:
    name = f"r-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://public/default/{name}"
    a, b = brokers
    assert (await call(session, "PUT", f"{a.web_url}{P}/{name}"))[0] == 204
    await asyncio.to_thread(produce, a.service_url, topic, 5)
    owner_service = await owner_url(store, topic)
    owner, other = (a, b) if owner_service == a.service_url else (b, a)
    assert owner.service_url == owner_service

    stats_path = f"{P}/{name}/stats"
    status, _, location = await call(session, "GET", f"{other.web_url}{stats_path}", follow=False)
    assert (status, location) == (307, f"{owner.web_url}{stats_path}")
    status, stats, _ = await call(session, "GET", f"{other.web_url}{stats_path}")
    assert status == 200 and stats["msgInCounter"] == 5

    # A write with a body, followed: the owner creates the subscription where it was asked.
    earliest = {"ledgerId": -1, "entryId": -1}
    sub_path = f"{P}/{name}/subscription/s"
    status, _, location = await call(
        session, "PUT", f"{other.web_url}{sub_path}?replicated=false", earliest, follow=False
    )
    assert (status, location) == (307, f"{owner.web_url}{sub_path}?replicated=false")
    assert (await call(session, "PUT", f"{other.web_url}{sub_path}", earliest))[0] == 204
    _, stats, _ = await call(session, "GET", f"{owner.web_url}{stats_path}")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 5
    assert (await call(session, "POST", f"{other.web_url}{sub_path}/skip/2"))[0] == 204
    _, stats, _ = await call(session, "GET", f"{other.web_url}{stats_path}")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 3

    # Lookup over HTTP answers the owner from either broker.
    for broker in brokers:
        status, data, _ = await call(
            session, "GET", f"{broker.web_url}/lookup/v2/topic/persistent/public/default/{name}"
        )
        assert status == 200
        assert (data["brokerUrl"], data["httpUrl"]) == (owner.service_url, owner.web_url)

    status, _, location = await call(
        session, "DELETE", f"{other.web_url}{P}/{name}?force=true", follow=False
    )
    assert (status, location) == (307, f"{owner.web_url}{P}/{name}?force=true")
    assert (await call(session, "DELETE", f"{other.web_url}{P}/{name}?force=true"))[0] == 204
    assert (await call(session, "GET", f"{a.web_url}{stats_path}"))[0] == 404


async def test_partitioned_stats_gather_partitions_from_both_brokers(
    brokers: tuple[BrokerProcess, BrokerProcess],
    store: MetadataStore,
    session: aiohttp.ClientSession,
) -> None:
    a, b = brokers
    name = f"p-{uuid.uuid4().hex[:6]}"
    topic = TopicName.parse(f"persistent://public/default/{name}")
    partitions = 8
    # Partitions falling in at least two bundles: lookups spread bundles over both brokers.
    assert len({bundle_of(topic.partition(i)) for i in range(partitions)}) >= 2
    assert (await call(session, "PUT", f"{a.web_url}{P}/{name}/partitions", partitions))[0] == 204
    # Looked up one by one, the bundles go to the least-loaded broker in turn.
    for i in range(partitions):
        lookup = f"/lookup/v2/topic/persistent/public/default/{name}-partition-{i}"
        assert (await call(session, "GET", f"{a.web_url}{lookup}"))[0] == 200
    earliest = {"ledgerId": -1, "entryId": -1}
    assert (await call(session, "PUT", f"{b.web_url}{P}/{name}/subscription/s", earliest))[0] == 204
    await asyncio.to_thread(
        produce,
        a.service_url,
        str(topic),
        40,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    owners = {await owner_url(store, str(topic.partition(i))) for i in range(partitions)}
    assert owners == {a.service_url, b.service_url}
    for broker in brokers:
        status, stats, _ = await call(
            session, "GET", f"{broker.web_url}{P}/{name}/partitioned-stats"
        )
        assert status == 200
        assert stats["msgInCounter"] == 40
        assert stats["subscriptions"]["s"]["msgBacklog"] == 40
        assert len(stats["partitions"]) == partitions
    assert (await call(session, "POST", f"{b.web_url}{P}/{name}/subscription/s/skip_all"))[0] == 204
    _, stats, _ = await call(session, "GET", f"{a.web_url}{P}/{name}/partitioned-stats")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0
    assert (await call(session, "DELETE", f"{b.web_url}{P}/{name}/partitions"))[0] == 204
    _, listed, _ = await call(session, "GET", f"{a.web_url}{P}")
    assert not [t for t in listed if name in t]


async def test_brokers_agree_on_the_leader_and_it_moves(
    brokers: tuple[BrokerProcess, BrokerProcess], session: aiohttp.ClientSession
) -> None:
    a, b = brokers
    ids = sorted(broker.web_url.removeprefix("http://") for broker in brokers)
    for broker in brokers:
        assert await call(session, "GET", f"{broker.web_url}/admin/v2/brokers") == (200, ids, None)

    async def leader(broker: BrokerProcess) -> dict[str, str] | None:
        status, data, _ = await call(
            session, "GET", f"{broker.web_url}/admin/v2/brokers/leaderBroker"
        )
        return data if status == 200 else None

    await until(lambda: _has_leader(leader, a), "a leader is elected")
    first = await leader(a)
    assert first is not None and first == await leader(b)
    current = a if first["serviceUrl"] == a.web_url else b
    survivor = b if current is a else a
    assert first == {"serviceUrl": current.web_url, "brokerId": current.web_url[len("http://") :]}
    assert current.terminate() == 0  # a clean stop gives the leadership up at once

    async def survivor_leads() -> bool:
        return await leader(survivor) == {
            "serviceUrl": survivor.web_url,
            "brokerId": survivor.web_url[len("http://") :],
        }

    await until(survivor_leads, "the other broker takes the leadership", timeout=15)
    status, data, _ = await call(session, "GET", f"{survivor.web_url}/admin/v2/brokers")
    assert (status, data) == (200, [survivor.web_url.removeprefix("http://")])


async def _has_leader(leader: Any, broker: BrokerProcess) -> bool:
    return await leader(broker) is not None
