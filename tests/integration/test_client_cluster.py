"""The stripemq client on real clusters: partitioned topics next to the official client,
and a producer riding through the SIGKILL of its broker with deduplication on."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

import stripemq.client as smq
from stripemq.broker.partitions import create_partitioned_topic
from stripemq.broker.server import BrokerServer
from stripemq.client import aio
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName
from stripemq.testing.broker import (
    BrokerProcess,
    broker_pair_on_bookies,
    cluster_service_url,
    owner_killer,
    owner_url,
)
from stripemq.testing.polling import until

pytestmark = pytest.mark.integration

SETTINGS = {
    "zk_session_timeout_ms": 4000,  # a killed broker's bundles free up after this
    "managed_ledger_default_ensemble_size": 2,
    "managed_ledger_default_write_quorum": 2,
    "managed_ledger_default_ack_quorum": 2,
    "broker_deduplication_enabled": True,
}


def official_partitions(url: str, topic: str, keys: list[str]) -> dict[str, int]:
    client = pulsar.Client(url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        return {key: producer.send(b"official", partition_key=key).partition() for key in keys}
    finally:
        client.close()


async def test_partitioned_topic_routing_matches_the_official_client(
    broker: BrokerServer,
) -> None:
    topic = "persistent://public/default/routed"
    assert broker.service is not None
    await create_partitioned_topic(broker.service.store, TopicName.parse(topic), 5)
    keys = [f"customer-{i}" for i in range(40)]
    loop = asyncio.get_running_loop()
    theirs = await loop.run_in_executor(None, official_partitions, broker.service_url, topic, keys)
    async with aio.Client(broker.service_url, operation_timeout_seconds=15) as client:
        assert await client.get_topic_partitions(topic) == [
            f"{topic}-partition-{i}" for i in range(5)
        ]
        consumer = await client.subscribe(
            topic,
            "all",
            consumer_type=smq.ConsumerType.Shared,
            initial_position=smq.InitialPosition.Earliest,
        )
        producer = await client.create_producer(topic, batching_enabled=True)
        ours = {key: (await producer.send(b"ours", partition_key=key)).partition() for key in keys}
        assert ours == theirs  # the same key lands on the same partition
        unkeyed = {(await producer.send(b"spread")).partition() for _ in range(20)}
        assert len(unkeyed) > 1  # round robin over the partitions
        seen = []
        for _ in range(len(keys) * 2 + 20):
            message = await consumer.receive(timeout_millis=10_000)
            seen.append(message.message_id().partition())
            await consumer.acknowledge(message)
        assert set(seen) == set(range(5))
        # Nothing more: an end marker on every partition (by a key routed there) comes next.
        key_for = {partition: key for key, partition in ours.items()}
        assert sorted(key_for) == list(range(5))
        for key in key_for.values():
            await producer.send(b"end", partition_key=key)
        after = []
        while after.count(b"end") < 5:
            message = await consumer.receive(timeout_millis=10_000)
            after.append(message.data())
            await consumer.acknowledge(message)
        assert after == [b"end"] * 5


async def test_producer_and_consumer_follow_a_bundle_unload(broker: BrokerServer) -> None:
    from stripemq.broker.ownership import bundle_of

    topic = "persistent://public/default/unloaded"
    assert broker.service is not None
    async with aio.Client(broker.service_url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(topic, "sub")
        producer = await client.create_producer(topic)
        await producer.send(b"before")
        first = await consumer.receive(timeout_millis=5000)
        assert first.data() == b"before"
        await consumer.acknowledge(first)
        closed = await broker.service.unload(bundle_of(TopicName.parse(topic)))
        assert closed == [topic]
        await producer.send(b"after")  # looked up again and re-attached
        message = await consumer.receive(timeout_millis=10_000)
        if message.data() == b"before":  # its ack may not have arrived before the unload
            message = await consumer.receive(timeout_millis=10_000)
        assert message.data() == b"after"
        await consumer.acknowledge(message)
        assert producer.is_connected() and consumer.is_connected()


@pytest.fixture
async def dedup_brokers(
    metadata_url: str, tmp_path: Path
) -> AsyncIterator[tuple[BrokerProcess, BrokerProcess]]:
    async with broker_pair_on_bookies(metadata_url, tmp_path, SETTINGS) as pair:
        yield pair


TOTAL = 20_000
KEYS = 16


def produce_through_a_kill(url: str, topic: str, kill) -> tuple[list[smq.Result], list[str]]:  # type: ignore[no-untyped-def]
    """Send TOTAL keyed messages; SIGKILL the owner after a quarter are acknowledged."""
    client = smq.Client(url, operation_timeout_seconds=30)
    results: list[smq.Result] = []
    acked = threading.Event()
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_publish_delay_ms=2,
            block_if_queue_full=True,
            send_timeout_millis=120_000,
        )

        def done(result: smq.Result, _id: smq.MessageId | None) -> None:
            results.append(result)
            if len(results) == TOTAL // 4:
                acked.set()

        brokers = [producer._impl.connection.physical_address]  # type: ignore[union-attr]
        for i in range(TOTAL):
            key = f"k{i % KEYS}"
            producer.send_async(f"{key} {i // KEYS}".encode(), done, partition_key=key)
            if i == TOTAL // 2:
                assert acked.wait(60), "a quarter were not acknowledged in time"
                kill()
        producer.flush()
        brokers.append(producer._impl.connection.physical_address)  # type: ignore[union-attr]
        producer.close()
        return results, brokers
    finally:
        client.close()


def consume_live(url: str, topic: str) -> list[str]:
    """Receive (and acknowledge) until every message was seen at least once."""
    client = smq.Client(url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "live", initial_position=smq.InitialPosition.Earliest)
        got: list[str] = []
        distinct: set[str] = set()
        deadline = time.monotonic() + 180
        while len(distinct) < TOTAL and time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=5000)
            except TimeoutError:
                continue
            text = message.data().decode()
            got.append(text)
            distinct.add(text)
            consumer.acknowledge(message)
        return got
    finally:
        client.close()


def consume_everything(url: str, topic: str) -> list[str]:
    client = smq.Client(url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "audit", initial_position=smq.InitialPosition.Earliest)
        got = []
        while True:
            try:
                message = consumer.receive(timeout_millis=5000)
            except TimeoutError:
                return got
            got.append(message.data().decode())
            consumer.acknowledge(message)
    finally:
        client.close()


async def test_failover_with_deduplication_is_exactly_once(
    dedup_brokers: tuple[BrokerProcess, BrokerProcess], store: MetadataStore
) -> None:
    topic = "persistent://public/default/exactly-once"
    loop = asyncio.get_running_loop()
    url = cluster_service_url(dedup_brokers)
    kill_owner, killed = owner_killer(store, topic, dedup_brokers, loop)

    live = loop.run_in_executor(None, consume_live, url, topic)  # through the kill too
    results, brokers = await loop.run_in_executor(
        None, produce_through_a_kill, url, topic, kill_owner
    )
    assert killed and brokers[0] != brokers[1], "the producer did not move to another broker"
    assert results == [smq.Result.Ok] * TOTAL  # nothing failed: all resent and receipted
    survivor = next(b for b in dedup_brokers if b is not killed[0])

    async def moved() -> bool:
        return await owner_url(store, topic) == survivor.service_url

    await until(moved, "the survivor owns the topic", timeout=30)
    got = await loop.run_in_executor(None, consume_everything, survivor.service_url, topic)
    assert len(got) == TOTAL and len(set(got)) == TOTAL  # each exactly once
    per_key: dict[str, list[int]] = {}
    for text in got:
        key, number = text.split()
        per_key.setdefault(key, []).append(int(number))
    assert sorted(per_key) == sorted(f"k{i}" for i in range(KEYS))
    for numbers in per_key.values():
        assert numbers == list(range(TOTAL // KEYS))  # in order, none missing
    # The consumer that was reading while its broker died got everything, in order per key
    # (what it saw again after the failover was unacknowledged there, and repeats only).
    seen = await live
    firsts: dict[str, list[int]] = {}
    known: set[str] = set()
    for text in seen:
        if text not in known:
            known.add(text)
            key, number = text.split()
            firsts.setdefault(key, []).append(int(number))
    assert len(known) == TOTAL
    assert all(numbers == list(range(TOTAL // KEYS)) for numbers in firsts.values())
