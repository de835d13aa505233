"""The persistent-topics, brokers and lookup REST resources on a real ``stripemq
standalone``, driven over HTTP, with the official ``pulsar-client`` producing and consuming:
stats numbers, peek content, the effects of skip, expiry and reset-cursor on what a consumer
receives, termination, partitioned topics, deletion."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pulsar
import pytest

from stripemq.client.aio import Client as StripeClient
from stripemq.client.consumer import TopicConsumer as StripeConsumer
from stripemq.testing.polling import until
from stripemq.testing.standalone import StandaloneProcess

P = "/admin/v2/persistent/public/default"


class Http:
    def __init__(self, base: str, session: aiohttp.ClientSession) -> None:
        self.base = base
        self.session = session

    async def call(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        kwargs: dict[str, Any] = {"json": body} if body is not None else {"data": raw}
        async with self.session.request(method, self.base + path, **kwargs) as response:
            data = await response.read()
            if response.content_type == "application/json":
                return response.status, await response.json()
            return response.status, data

    async def ok(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Any:
        status, answer = await self.call(method, path, body, raw)
        assert status in (200, 204), (method, path, status, answer)
        return answer


@pytest.fixture
async def standalone(tmp_path: Path) -> AsyncIterator[StandaloneProcess]:
    process = StandaloneProcess(tmp_path / "data")
    await process.start()
    try:
        yield process
    finally:
        process.terminate()


@pytest.fixture
async def http(standalone: StandaloneProcess) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession() as session:
        yield Http(standalone.web_url, session)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def produce(service_url: str, topic: str, count: int, **options: Any) -> list[pulsar.MessageId]:
    """Send ``count`` messages (``m0``...; property ``i``) and close; their ids."""
    client = pulsar.Client(service_url)
    try:
        producer = client.create_producer(topic, **options)
        ids = [producer.send(f"m{i}".encode(), properties={"i": str(i)}) for i in range(count)]
        producer.close()
        return ids
    finally:
        client.close()


async def test_stats_follow_what_clients_do(standalone: StandaloneProcess, http: Http) -> None:
    name = unique("stats")
    topic = f"persistent://public/default/{name}"
    await http.ok("PUT", f"{P}/{name}")
    assert topic in await http.ok("GET", P)
    await http.ok("PUT", f"{P}/{name}/subscription/sub", {"ledgerId": -1, "entryId": -1})
    ids = await asyncio.to_thread(produce, standalone.service_url, topic, 10)

    def consume_three() -> None:
        client = pulsar.Client(standalone.service_url)
        try:
            consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
            for _ in range(3):
                consumer.acknowledge(consumer.receive(10_000))
            consumer.close()
        finally:
            client.close()

    await asyncio.to_thread(consume_three)
    stats = await http.ok("GET", f"{P}/{name}/stats")
    assert stats["msgInCounter"] == 10
    assert stats["bytesInCounter"] > 0
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 7
    internal = await http.ok("GET", f"{P}/{name}/internalStats")
    assert internal["numberOfEntries"] == 10
    assert "sub" in internal["cursors"]
    last = ids[-1]
    assert await http.ok("GET", f"{P}/{name}/lastMessageId") == {
        "ledgerId": last.ledger_id(),
        "entryId": last.entry_id(),
        "partitionIndex": -1,
    }
    assert await http.ok("GET", f"{P}/{name}/subscriptions") == ["sub"]


async def test_peek_skip_expire_and_reset(standalone: StandaloneProcess, http: Http) -> None:
    name = unique("cursor")
    topic = f"persistent://public/default/{name}"
    await http.ok("PUT", f"{P}/{name}")
    await http.ok("PUT", f"{P}/{name}/subscription/s", {"ledgerId": -1, "entryId": -1})
    before = int(time.time() * 1000)
    ids = await asyncio.to_thread(produce, standalone.service_url, topic, 6)

    async def backlog() -> int:
        stats = await http.ok("GET", f"{P}/{name}/stats")
        return int(stats["subscriptions"]["s"]["msgBacklog"])

    async with http.session.get(f"{http.base}{P}/{name}/subscription/s/position/2") as r:
        assert r.status == 200
        assert await r.read() == b"m1"
        assert r.headers["X-Pulsar-Message-ID"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
        assert r.headers["X-Pulsar-PROPERTY-i"] == "1"
        published = r.headers["X-Pulsar-publish-time"]
        assert published.endswith("Z") and "T" in published
    assert await backlog() == 6  # peeking takes nothing

    await http.ok("POST", f"{P}/{name}/subscription/s/skip/2")
    assert await backlog() == 4
    async with http.session.get(f"{http.base}{P}/{name}/subscription/s/position/1") as r:
        assert await r.read() == b"m2"
    await http.ok("POST", f"{P}/{name}/subscription/s/expireMessages/0")
    assert await backlog() == 0
    await http.ok("POST", f"{P}/{name}/subscription/s/resetcursor/{before}")
    assert await backlog() == 6
    target = {"ledgerId": ids[4].ledger_id(), "entryId": ids[4].entry_id()}
    await http.ok("POST", f"{P}/{name}/subscription/s/resetcursor", target)
    assert await backlog() == 2
    await http.ok("POST", f"{P}/{name}/subscription/s/skip_all")
    assert await backlog() == 0

    # A connected consumer is sent back to where the cursor is reset to.
    def reset_under_a_consumer() -> list[bytes]:
        client = pulsar.Client(standalone.service_url)
        try:
            consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
            loop_result = asyncio.run_coroutine_threadsafe(
                http.ok("POST", f"{P}/{name}/subscription/s/resetcursor/{before}"), loop
            )
            loop_result.result(30)
            got: list[bytes] = []
            while len(got) < 6:
                message = consumer.receive(15_000)
                consumer.acknowledge(message)
                got.append(message.data())
            consumer.close()
            return got
        finally:
            client.close()

    loop = asyncio.get_running_loop()
    received = await asyncio.to_thread(reset_under_a_consumer)
    assert sorted(set(received)) == [f"m{i}".encode() for i in range(6)]


async def test_terminate(standalone: StandaloneProcess, http: Http) -> None:
    name = unique("end")
    topic = f"persistent://public/default/{name}"
    await http.ok("PUT", f"{P}/{name}")
    await http.ok("PUT", f"{P}/{name}/subscription/s", {"ledgerId": -1, "entryId": -1})
    async with StripeClient(standalone.service_url) as client:
        consumer = cast(StripeConsumer, await client.subscribe(topic, "s"))

        def terminate_under_a_producer() -> tuple[pulsar.MessageId, str]:
            pulsar_client = pulsar.Client(standalone.service_url)
            try:
                producer = pulsar_client.create_producer(topic)
                last = producer.send(b"last")
                future = asyncio.run_coroutine_threadsafe(
                    http.ok("POST", f"{P}/{name}/terminate"), loop
                )
                answer = future.result(30)
                assert answer["entryId"] == last.entry_id()
                try:
                    producer.send(b"too late")
                except pulsar.TopicTerminated as exc:
                    return last, type(exc).__name__
                return last, "sent"
            finally:
                # The broker closed the producer on termination; the C++ client's close()
                # may then report that producer as AlreadyClosed, which is only cleanup.
                with contextlib.suppress(pulsar.AlreadyClosed):
                    pulsar_client.close()

        loop = asyncio.get_running_loop()
        last, outcome = await asyncio.to_thread(terminate_under_a_producer)
        assert outcome == "TopicTerminated"
        message = await consumer.receive()
        assert message.data() == b"last"
        await consumer.acknowledge(message)
        await until(lambda: consumer.end_of_topic, "the consumer hears the topic ended")
    assert await http.ok("GET", f"{P}/{name}/lastMessageId") == {
        "ledgerId": last.ledger_id(),
        "entryId": last.entry_id(),
        "partitionIndex": -1,
    }

    def new_producer() -> str:
        pulsar_client = pulsar.Client(standalone.service_url)
        try:
            pulsar_client.create_producer(topic)
            return "created"
        except pulsar.TopicTerminated:
            return "TopicTerminated"
        finally:
            pulsar_client.close()

    assert await asyncio.to_thread(new_producer) == "TopicTerminated"


async def test_partitioned_topic(standalone: StandaloneProcess, http: Http) -> None:
    name = unique("parts")
    topic = f"persistent://public/default/{name}"
    await http.ok("PUT", f"{P}/{name}/partitions", raw=b"3")
    assert await http.ok("GET", f"{P}/{name}/partitions") == {"partitions": 3}
    assert topic in await http.ok("GET", f"{P}/partitioned")
    await http.ok("PUT", f"{P}/{name}/subscription/s", {"ledgerId": -1, "entryId": -1})
    await asyncio.to_thread(
        produce,
        standalone.service_url,
        topic,
        30,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        batching_enabled=False,
    )
    stats = await http.ok("GET", f"{P}/{name}/partitioned-stats")
    assert stats["msgInCounter"] == 30
    assert stats["metadata"] == {"partitions": 3}
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 30
    assert stats["subscriptions"]["s"]["msgBacklog"] == 30
    internal = await http.ok("GET", f"{P}/{name}/partitioned-internalStats")
    assert sum(p["numberOfEntries"] for p in internal["partitions"].values()) == 30
    status, answer = await http.call("POST", f"{P}/{name}/partitions", raw=b"2")
    assert status == 422 and answer["reason"]
    await http.ok("POST", f"{P}/{name}/partitions", raw=b"4")
    assert await http.ok("GET", f"{P}/{name}-partition-3/subscriptions") == ["s"]
    await http.ok("POST", f"{P}/{name}/subscription/s/skip_all")
    stats = await http.ok("GET", f"{P}/{name}/partitioned-stats?perPartition=false")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0 and stats["partitions"] == {}
    await http.ok("DELETE", f"{P}/{name}/partitions")
    assert topic not in await http.ok("GET", f"{P}/partitioned")
    assert not [t for t in await http.ok("GET", P) if name in t]


async def test_delete_with_and_without_force(standalone: StandaloneProcess, http: Http) -> None:
    name = unique("gone")
    topic = f"persistent://public/default/{name}"
    client = pulsar.Client(standalone.service_url)
    try:
        producer = await asyncio.to_thread(client.create_producer, topic)
        await asyncio.to_thread(producer.send, b"x")
        status, answer = await http.call("DELETE", f"{P}/{name}")
        assert (status, answer) == (412, {"reason": "Topic has active producers/subscriptions"})
        await http.ok("DELETE", f"{P}/{name}?force=true")
        assert topic not in await http.ok("GET", P)
        assert (await http.call("GET", f"{P}/{name}/stats"))[0] == 404
    finally:
        await asyncio.to_thread(client.close)


async def test_brokers_and_lookup(standalone: StandaloneProcess, http: Http) -> None:
    me = standalone.web_url.removeprefix("http://")
    assert await http.ok("GET", "/admin/v2/brokers") == [me]
    assert await http.ok("GET", "/admin/v2/brokers/standalone") == [me]
    await until(lambda: _leader(http), "a leader is elected", timeout=10)
    assert await http.ok("GET", "/admin/v2/brokers/leaderBroker") == {
        "serviceUrl": standalone.web_url,
        "brokerId": me,
    }
    assert await http.ok("GET", "/admin/v2/brokers/health") == b"ok"
    assert await http.ok("GET", "/admin/v2/brokers/ready") == b"ok"
    assert (await http.ok("GET", "/admin/v2/brokers/version")).decode()
    data = await http.ok("GET", f"/lookup/v2/topic/persistent/public/default/{unique('l')}")
    assert data["brokerUrl"] == standalone.service_url
    assert data["nativeUrl"] == standalone.service_url
    assert data["httpUrl"] == standalone.web_url
    status, _ = await http.call("GET", "/lookup/v2/topic/persistent/public/nowhere/t")
    assert status == 404


async def _leader(http: Http) -> bool:
    status, _ = await http.call("GET", "/admin/v2/brokers/leaderBroker")
    return status == 200
