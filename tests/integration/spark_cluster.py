"""Helpers of the Spark integration tests: a cluster (ZooKeeper chroot, three bookie
processes, a broker process rolling ledgers over every few entries), producing with the
official client while recording what was acknowledged, and reading ledger lists."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar
import pytest

from stripemq.broker.partitions import create_partitioned_topic
from stripemq.managed_ledger.ledger_chain import LedgerInfo
from stripemq.managed_ledger.ledger_list import LedgerList, managed_ledger_path
from stripemq.metadata import create_metadata_store
from stripemq.proto.topic_name import TopicName
from stripemq.testing.broker import BrokerProcess
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.zookeeper import ZooKeeperServer

ENTRIES_PER_LEDGER = 8
BROKER_SETTINGS: dict[str, object] = {
    "managed_ledger_default_ensemble_size": 3,
    "managed_ledger_default_write_quorum": 2,
    "managed_ledger_default_ack_quorum": 2,
    "managed_ledger_max_entries_per_ledger": ENTRIES_PER_LEDGER,
    "managed_ledger_min_ledger_rollover_time_minutes": 0,
}
# Retention stays 0: every topic gets a "holder" subscription before it is written, which
# keeps its ledgers until the test acknowledges them (and so trims them on purpose).
HOLDER = "holder"


@dataclass
class Cluster:
    """Three bookie processes and a broker process on a ZooKeeper chroot of their own."""

    metadata_url: str
    bookies: BookieCluster
    broker: BrokerProcess

    @property
    def service_url(self) -> str:
        return self.broker.service_url

    def stop(self) -> None:
        self.broker.kill()
        self.bookies.kill_all()


def start_cluster(zookeeper: ZooKeeperServer, base: Path, name: str) -> Cluster:
    metadata_url = zookeeper.url(f"/{name}-{uuid.uuid4().hex[:8]}")
    bookies = BookieCluster(metadata_url, base / "bookies", 3)
    broker = BrokerProcess(metadata_url, base, settings=BROKER_SETTINGS)
    try:
        asyncio.run(bookies.start())
        asyncio.run(broker.start())
    except BaseException:
        broker.kill()
        bookies.kill_all()
        raise
    return Cluster(metadata_url, bookies, broker)


def create_partitioned(metadata_url: str, topic: str, partitions: int) -> None:
    async def create() -> None:
        store = create_metadata_store(metadata_url)
        await store.start()
        try:
            await create_partitioned_topic(store, TopicName.parse(topic), partitions)
        finally:
            await store.close()

    asyncio.run(create())


def ledger_chain(metadata_url: str, topic: str) -> list[LedgerInfo]:
    """The ledgers the metadata store lists for ``topic`` (a non-partitioned topic or one
    partition)."""
    name = TopicName.parse(topic).managed_ledger_name

    async def read() -> list[LedgerInfo]:
        store = create_metadata_store(metadata_url)
        await store.start()
        try:
            found = await store.get(managed_ledger_path(name))
        finally:
            await store.close()
        return [] if found is None else list(LedgerList.decode(found[0], name).chain)

    return asyncio.run(read())


def id_tuple(message_id: pulsar.MessageId) -> tuple[int, int, int, int]:
    """(ledger, entry, partition, batch index) of an official client's message id."""
    return (
        message_id.ledger_id(),
        message_id.entry_id(),
        message_id.partition(),
        message_id.batch_index(),
    )


@dataclass
class Sent:
    """One acknowledged message and what it was sent with."""

    value: bytes
    key: str | None
    properties: dict[str, str]
    event_time: int | None
    sequence_id: int
    producer_name: str
    message_id: tuple[int, int, int, int] = (-1, -1, -1, -1)
    publish_time: int = 0  # filled in from a consumer that received it


@dataclass
class Producing:
    """Sends with the official client from a callback thread, recording acknowledgements."""

    acked: list[Sent] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def callback(self, sent: Sent, done: threading.Semaphore) -> Any:
        def on_send(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            with self.lock:
                if result == pulsar.Result.Ok:
                    sent.message_id = id_tuple(message_id)
                    self.acked.append(sent)
                else:
                    self.errors.append(str(result))
            done.release()

        return on_send


def produce(
    client: pulsar.Client,
    topic: str,
    count: int,
    *,
    tag: str,
    batching: bool,
    compression: pulsar.CompressionType,
    batch_size: int = 10,
    first_sequence: int = 0,
) -> list[Sent]:
    """Send ``count`` messages (keys, properties, every third with an event time) and wait
    for every acknowledgement; in batches of ``batch_size`` when batching (one entry each),
    so the topic spreads over several ledgers."""
    name = f"{tag}-{uuid.uuid4().hex[:6]}"
    producer = client.create_producer(
        topic,
        producer_name=name,
        batching_enabled=batching,
        batching_max_messages=batch_size,
        batching_max_publish_delay_ms=1000,
        compression_type=compression,
        block_if_queue_full=True,
    )
    tracker = Producing()
    done = threading.Semaphore(0)
    try:
        for i in range(count):
            sequence = first_sequence + i
            sent = Sent(
                value=f"{tag} message {sequence} ".encode() * (1 + i % 5),
                key=f"key-{i % 7}" if i % 4 else None,
                properties={"n": str(sequence), "tag": tag} if i % 3 else {},
                event_time=1_700_000_000_000 + sequence if i % 3 == 0 else None,
                sequence_id=sequence,
                producer_name=name,
            )
            extra: dict[str, Any] = {}
            if sent.key is not None:
                extra["partition_key"] = sent.key
            if sent.event_time is not None:
                extra["event_timestamp"] = sent.event_time
            producer.send_async(
                sent.value,
                tracker.callback(sent, done),
                properties=sent.properties,
                sequence_id=sequence,
                **extra,
            )
            if batching and (i + 1) % batch_size == 0:
                producer.flush()
        producer.flush()
        for _ in range(count):
            assert done.acquire(timeout=30), f"{topic}: an acknowledgement did not come"
    finally:
        producer.close()
    assert not tracker.errors, tracker.errors
    return sorted(tracker.acked, key=lambda s: s.sequence_id)


def holder(client: pulsar.Client, topic: str) -> pulsar.Consumer:
    """The subscription that keeps ``topic``'s ledgers (subscribe before producing)."""
    return client.subscribe(
        topic,
        HOLDER,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )


def fill_publish_times(consumer: pulsar.Consumer, sent: list[Sent]) -> None:
    """Receive ``sent`` through ``consumer`` (not acknowledging) and record the publish
    time the broker delivered for each."""
    by_id = {s.message_id: s for s in sent}
    seen = 0
    while seen < len(sent):
        message = consumer.receive(timeout_millis=15_000)
        found = by_id.get(id_tuple(message.message_id()))
        if found is not None and found.publish_time == 0:
            found.publish_time = message.publish_timestamp()
            seen += 1


NS = "persistent://public/default"


@pytest.fixture(scope="session", name="spark_cluster")
def spark_cluster_fixture(
    zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """One cluster for every Spark test module that reads through a broker process (each
    test uses topics of its own)."""
    running = start_cluster(zookeeper_server, tmp_path_factory.mktemp("spark"), "spark")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(name="cluster")
def cluster_fixture(spark_cluster: Cluster) -> Cluster:
    """The session's Spark cluster under the name the test modules use."""
    return spark_cluster


@pytest.fixture(name="client")
def client_fixture(spark_cluster: Cluster) -> Iterator[pulsar.Client]:
    c = pulsar.Client(spark_cluster.service_url, operation_timeout_seconds=30)
    yield c
    c.close()


def topic_name(tag: str) -> str:
    """A topic of the default namespace no other test uses."""
    return f"{NS}/{tag}-{uuid.uuid4().hex[:6]}"
