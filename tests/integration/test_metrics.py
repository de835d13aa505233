"""Prometheus ``/metrics`` on a real standalone: after traffic from the official
pulsar-client, the broker's metrics (parsed with ``prometheus_client``) carry the values of
the admin API's ``/stats``; the bookie's metrics and probes are on the same web port, and a
standalone opens no other HTTP port, so two run side by side on one host."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pulsar
import pytest
from prometheus_client.core import Metric

from stripemq.testing.polling import until
from stripemq.testing.prometheus import families, value
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration

TOPIC = "persistent://public/default/metrics-traffic"
SENT = 20
ACKED = 12


@dataclass
class Traffic:
    """A client with a producer and a consumer still connected (the test reads the
    metrics while they are)."""

    client: pulsar.Client
    producer: pulsar.Producer
    consumer: pulsar.Consumer

    def close(self) -> None:
        self.client.close()


def make_traffic(url: str) -> Traffic:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    consumer = client.subscribe(TOPIC, "audit", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(
        TOPIC, producer_name="metrics-producer", batching_enabled=False
    )
    for i in range(SENT):
        producer.send(f"message {i}".encode())
    received = [consumer.receive(timeout_millis=10_000) for _ in range(SENT)]
    for message in received[:ACKED]:
        consumer.acknowledge(message)
    return Traffic(client, producer, consumer)


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            assert response.status == 200, await response.text()
            return await response.json()


async def get_text(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            return response.status, await response.text()


async def scrape(base: str) -> dict[str, Metric]:
    status, text = await get_text(f"{base}/metrics")
    assert status == 200
    return families(text)


@contextmanager
def running(standalone: StandaloneProcess) -> Iterator[StandaloneProcess]:
    try:
        yield standalone
    finally:
        standalone.terminate()


async def test_metrics_carry_the_stats_of_real_traffic(tmp_path: Path) -> None:
    standalone = StandaloneProcess(tmp_path / "data")
    await standalone.start()
    with running(standalone):
        base = standalone.web_url
        traffic = await asyncio.to_thread(make_traffic, standalone.service_url)
        try:
            stats_url = f"{base}/admin/v2/persistent/public/default/metrics-traffic/stats"

            async def acks_arrived() -> bool:
                stats = await get_json(stats_url)
                return bool(stats["subscriptions"]["audit"]["msgBacklog"] == SENT - ACKED)

            await until(acks_arrived, timeout=20)
            families = await scrape(base)
            stats = await get_json(stats_url)
        finally:
            await asyncio.to_thread(traffic.close)

        topic = {"cluster": "standalone", "namespace": "public/default", "topic": TOPIC}
        assert value(families, "pulsar_in_messages_total", **topic) == stats["msgInCounter"]
        assert stats["msgInCounter"] == SENT
        assert value(families, "pulsar_in_bytes_total", **topic) == stats["bytesInCounter"]
        assert value(families, "pulsar_storage_size", **topic) == stats["storageSize"]
        assert value(families, "pulsar_storage_backlog_size", **topic) == stats["backlogSize"]
        assert value(families, "pulsar_producers_count", **topic) == len(stats["publishers"]) == 1
        assert value(families, "pulsar_subscriptions_count", **topic) == 1
        assert value(families, "pulsar_consumers_count", **topic) == 1
        assert value(families, "pulsar_msg_backlog", **topic) == SENT - ACKED
        assert value(families, "pulsar_storage_write_latency_count", **topic) == SENT
        # Rates are over a sliding window and read a moment apart: loosely equal.
        assert value(families, "pulsar_rate_in", **topic) == pytest.approx(
            stats["msgRateIn"], rel=0.5
        )
        assert stats["msgRateIn"] > 0 and stats["msgRateOut"] > 0

        sub = {**topic, "subscription": "audit"}
        audit = stats["subscriptions"]["audit"]
        assert value(families, "pulsar_subscription_back_log", **sub) == audit["msgBacklog"]
        assert value(families, "pulsar_out_messages_total", **sub) == audit["msgOutCounter"]
        assert audit["msgOutCounter"] == SENT
        assert value(families, "pulsar_out_bytes_total", **sub) == audit["bytesOutCounter"]
        unacked = value(families, "pulsar_subscription_unacked_messages", **sub)
        assert unacked == audit["unackedMessages"] == SENT - ACKED
        assert audit["type"] == "Shared"
        [consumer] = audit["consumers"]
        assert consumer["unackedMessages"] == SENT - ACKED
        assert stats["publishers"][0]["producerName"] == "metrics-producer"
        assert stats["publishers"][0]["clientVersion"]

        assert value(families, "pulsar_broker_topics_count", cluster="standalone") >= 1
        assert value(families, "pulsar_broker_msg_backlog") >= SENT - ACKED
        assert value(families, "pulsar_active_connections") >= 1

        # The bookie's metrics, on the same port with BookKeeper's names.
        assert value(families, "bookie_SERVER_STATUS") == 1
        adds = value(families, "bookkeeper_server_ADD_ENTRY_REQUEST_count", success="true")
        assert adds >= SENT
        assert value(families, "bookie_journal_JOURNAL_SYNC_count", success="true") >= 1
        assert value(families, "bookie_WRITE_BYTES") > 0

        internal = await get_json(
            f"{base}/admin/v2/persistent/public/default/metrics-traffic/internalStats"
        )
        assert internal["entriesAddedCounter"] == SENT
        assert internal["cursors"]["audit"]["markDeletePosition"]


def listening_ports(pid: int) -> set[int]:
    return {
        c.laddr.port
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


async def test_one_web_port_serves_the_bookie_probes_and_two_standalones_coexist(
    tmp_path: Path,
) -> None:
    first = StandaloneProcess(tmp_path / "first")
    second = StandaloneProcess(tmp_path / "second")
    await first.start()
    with running(first):
        await second.start()  # no port of its own for the bookie: nothing clashes
        with running(second):
            for standalone in (first, second):
                assert standalone.proc is not None
                ports = listening_ports(standalone.proc.pid)
                assert ports == {standalone.port, standalone.web_port, standalone.bookie_port}
                base = standalone.web_url
                assert await get_text(f"{base}/heartbeat") == (200, "OK\n")
                assert await get_text(f"{base}/api/v1/bookie/is_ready") == (200, "OK")
                state = await get_json(f"{base}/api/v1/bookie/state")
                assert state["running"] is True and state["readOnly"] is False
                families = await scrape(base)
                assert value(families, "bookie_SERVER_STATUS") == 1
                assert value(families, "pulsar_broker_topics_count") >= 0


async def test_a_standalone_asked_for_a_bookie_stats_port_opens_it(tmp_path: Path) -> None:
    standalone = StandaloneProcess(tmp_path / "data", settings={"stats_http_port": 0})
    await standalone.start()
    with running(standalone):
        assert standalone.proc is not None
        known = {standalone.port, standalone.web_port, standalone.bookie_port}
        extra = listening_ports(standalone.proc.pid) - known
        assert len(extra) == 1  # the bookie's own /metrics and probes
        [port] = extra
        assert await get_text(f"http://127.0.0.1:{port}/heartbeat") == (200, "OK\n")
