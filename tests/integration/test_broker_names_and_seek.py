"""Lookups and names, and seek by publish time, against a broker over real bookies.

- A topic of a tenant or namespace that does not exist is refused (``TopicNotFound``) by
  LOOKUP, PARTITIONED_METADATA, PRODUCER and SUBSCRIBE, and the metadata store is left as
  it was; ``non-persistent://`` topics and reserved subscription names are refused with
  ``NotAllowedError``. Both through raw frames and through the official ``pulsar-client``.
- ``consumer.seek(timestamp)`` lands on the first message published at or after it on a
  topic spanning several ledgers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from stripemq.broker.namespaces import TenantInfo, create_namespace, create_tenant
from stripemq.broker.server import BrokerServer
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import FrameDecoder, encode_command
from stripemq.testing.broker import broker_on_bookies
from stripemq.testing.metadata import metadata_tree
from stripemq.testing.polling import next_millisecond

pytestmark = pytest.mark.integration

MISSING = ["persistent://nobody/none/t", "persistent://public/none/t"]
NON_PERSISTENT = "non-persistent://public/default/np"
# Bookies and the auditor keep their own nodes up to date; nothing else may change.
VOLATILE = ("/ledgers/available", "/ledgers/auditor", "/ledgers/underreplication")


@pytest.fixture
async def broker(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[BrokerServer]:
    """A broker whose ledgers roll over every 20 entries."""
    config = ManagedLedgerConfig(max_entries_per_ledger=20, min_rollover_time_s=0)
    async with broker_on_bookies(metadata_url, store, tmp_path, ml_config=config) as server:
        yield server


async def snapshot(store: MetadataStore) -> dict[str, tuple[bytes, int]]:
    tree = await metadata_tree(store)
    return {path: node for path, node in tree.items() if not path.startswith(VOLATILE)}


class RawConnection:
    """One protocol connection, one request and its answer at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.request_id = 0

    @classmethod
    async def open(cls, port: int) -> RawConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        connection = cls(reader, writer)
        connected = await connection.ask(pb.CommandConnect(client_version="t", protocol_version=20))
        assert connected.type == pb.BaseCommand.CONNECTED
        return connection

    def next_id(self) -> int:
        self.request_id += 1
        return self.request_id

    async def ask(self, command: object) -> pb.BaseCommand:
        self.writer.write(encode_command(command))  # type: ignore[arg-type]
        while True:
            got = self.decoder.feed(await asyncio.wait_for(self.reader.read(65536), 10))
            if got:
                return got[0].command

    async def lookup(self, topic: str) -> tuple[int, int]:
        answer = await self.ask(pb.CommandLookupTopic(topic=topic, request_id=self.next_id()))
        return answer.lookupTopicResponse.response, answer.lookupTopicResponse.error

    async def partitions(self, topic: str) -> tuple[int, int]:
        answer = await self.ask(
            pb.CommandPartitionedTopicMetadata(topic=topic, request_id=self.next_id())
        )
        return answer.partitionMetadataResponse.response, answer.partitionMetadataResponse.error

    async def producer(self, topic: str) -> int:
        request_id = self.next_id()
        answer = await self.ask(
            pb.CommandProducer(topic=topic, producer_id=request_id, request_id=request_id)
        )
        assert answer.type == pb.BaseCommand.ERROR, answer
        return answer.error.error

    async def subscribe(self, topic: str, subscription: str, durable: bool = True) -> int:
        request_id = self.next_id()
        answer = await self.ask(
            pb.CommandSubscribe(
                topic=topic,
                subscription=subscription,
                subType=pb.CommandSubscribe.Exclusive,
                consumer_id=request_id,
                request_id=request_id,
                durable=durable,
            )
        )
        assert answer.type == pb.BaseCommand.ERROR, answer
        return answer.error.error

    def close(self) -> None:
        self.writer.close()


async def test_refusals_over_the_protocol_write_nothing(
    broker: BrokerServer, store: MetadataStore
) -> None:
    failed_lookup = pb.CommandLookupTopicResponse.Failed
    failed_partitions = pb.CommandPartitionedTopicMetadataResponse.Failed
    connection = await RawConnection.open(broker.port)
    try:
        before = await snapshot(store)
        for topic in MISSING:
            assert await connection.lookup(topic) == (failed_lookup, pb.TopicNotFound)
            assert await connection.partitions(topic) == (failed_partitions, pb.TopicNotFound)
            assert await connection.producer(topic) == pb.TopicNotFound
            assert await connection.subscribe(topic, "sub") == pb.TopicNotFound
        assert await connection.lookup(NON_PERSISTENT) == (failed_lookup, pb.NotAllowedError)
        assert await connection.partitions(NON_PERSISTENT) == (
            failed_partitions,
            pb.NotAllowedError,
        )
        assert await connection.producer(NON_PERSISTENT) == pb.NotAllowedError
        assert await connection.subscribe(NON_PERSISTENT, "sub") == pb.NotAllowedError
        assert await snapshot(store) == before
        # Reserved names, on a topic that exists: no cursor is made for them.
        topic = "persistent://public/default/reserved"
        assert (await connection.lookup(topic))[0] == pb.CommandLookupTopicResponse.Connect
        for name in ("pulsar.dedup", "pulsar.repl.elsewhere", ""):
            for durable in (True, False):
                assert await connection.subscribe(topic, name, durable) == pb.NotAllowedError
        assert broker.service is not None
        ml = broker.service.topics[topic].ml
        assert ml.cursors == {}
    finally:
        connection.close()


def client_outcome(url: str, work: str, topic: str, subscription: str = "sub") -> str:
    """``ok`` or the name of the official client's exception."""
    client = pulsar.Client(url, operation_timeout_seconds=20)
    try:
        if work == "produce":
            client.create_producer(topic).send(b"x")
        else:
            client.subscribe(topic, subscription).close()
        return "ok"
    except pulsar.PulsarException as exc:
        return type(exc).__name__
    finally:
        client.close()


async def in_thread(work, *args):  # type: ignore[no-untyped-def]
    return await asyncio.get_running_loop().run_in_executor(None, work, *args)


async def test_the_official_client_is_refused_clearly(
    broker: BrokerServer, store: MetadataStore
) -> None:
    url = broker.service_url
    before = await snapshot(store)
    for topic in MISSING:
        assert await in_thread(client_outcome, url, "produce", topic) == "TopicNotFound"
        assert await in_thread(client_outcome, url, "subscribe", topic) == "TopicNotFound"
    assert await snapshot(store) == before
    assert await in_thread(client_outcome, url, "produce", NON_PERSISTENT) == "NotAllowedError"
    assert await in_thread(client_outcome, url, "subscribe", NON_PERSISTENT) == "NotAllowedError"
    topic = "persistent://public/default/names"
    for name in ("pulsar.dedup", "pulsar.repl.x"):
        assert await in_thread(client_outcome, url, "subscribe", topic, name) == "NotAllowedError"
    assert await in_thread(client_outcome, url, "subscribe", topic, "pulsar.dedupe") == "ok"
    # Once the tenant and namespace exist, their topics are served.
    await create_tenant(store, "nobody", TenantInfo(allowed_clusters=("standalone",)))
    await create_namespace(store, "nobody/none")
    assert await in_thread(client_outcome, url, "subscribe", MISSING[0]) == "ok"
    assert await in_thread(client_outcome, url, "produce", MISSING[0]) == "ok"


def seek_by_time_round(url: str, topic: str, count: int, targets: list[int]) -> dict[str, object]:
    """Publish ``count`` messages a millisecond apart, then seek a consumer to the publish
    time of each target index (and past the last) and note what it receives first."""
    client = pulsar.Client(url, operation_timeout_seconds=20)
    try:
        # A subscription that acknowledges nothing keeps every ledger (no trimming).
        client.subscribe(topic, "holder", initial_position=pulsar.InitialPosition.Earliest)
        consumer = client.subscribe(
            topic, "timed", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(topic, batching_enabled=False)
        ledgers = set()
        for i in range(count):
            ledgers.add(str(producer.send(f"m{i}".encode())).split(",")[0])
            next_millisecond()
        published = []
        for _ in range(count):
            message = consumer.receive(timeout_millis=10_000)
            published.append(message.publish_timestamp())
            consumer.acknowledge(message)
        firsts = []
        for index in targets:
            consumer.seek(published[index])
            firsts.append(consumer.receive(timeout_millis=10_000).data().decode())
        consumer.seek(published[-1] + 1)  # after every message: the next one published
        producer.send(b"late")
        firsts.append(consumer.receive(timeout_millis=10_000).data().decode())
        return {"ledgers": len(ledgers), "firsts": firsts}
    finally:
        client.close()


async def test_seek_by_publish_time_across_ledgers(broker: BrokerServer) -> None:
    targets = [97, 0, 19, 20, 21, 59, 60, 61, 119, 45]
    outcome = await in_thread(
        seek_by_time_round, broker.service_url, "persistent://public/default/timed", 120, targets
    )
    assert outcome["ledgers"] >= 5  # rolled over every 20 entries
    assert outcome["firsts"] == [f"m{i}" for i in targets] + ["late"]
