"""The Spark source's executor side (``stripemq.spark.ledger_reader.read_split``) against what
a real broker stored: real ZooKeeper, bookie processes and a broker rolling its ledgers over
every few entries, fed by the official ``pulsar`` client with batching, every compression,
keys, properties and event times.

Splits are cut by hand from the managed-ledger list (several per ledger, the open ledger to
its LAC), read with ``read_split`` and compared with what the broker acknowledged, message
by message. A deleted ledger gives ``DataLossError`` naming it (nothing with
``failOnDataLoss=false``), dead bookies a ``SparkSourceError``, and closing the generator
early leaves no thread behind.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest

from stripemq.bookie.client import BookKeeper
from stripemq.broker.partitions import create_partitioned_topic
from stripemq.broker.server import BrokerServer
from stripemq.errors import DataLossError, SparkSourceError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.ledger_list import LedgerList, managed_ledger_path
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName
from stripemq.spark import ledger_reader
from stripemq.spark.ledger_reader import THREAD_PREFIX, WINDOW_ENTRIES, read_split, window_ranges
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import ReadSplit, TopicPartitionRef
from stripemq.spark.schema import arrow_schema
from stripemq.testing.broker import serving_broker
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.polling import until, until_blocking

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROLL_EVERY = 4  # entries per ledger
ENTRIES_PER_SPLIT = 3  # splits start and end inside ledgers
NS = "persistent://public/default"


@dataclass
class Cluster:
    broker: BrokerServer
    bookies: BookieCluster
    bk: BookKeeper  # the test's own ledger client (to read LACs and delete ledgers)
    metadata_url: str


@pytest.fixture
async def cluster(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[Cluster]:
    config = ManagedLedgerConfig(
        max_entries_per_ledger=ROLL_EVERY,
        min_rollover_time_s=0,
        retention_time_s=-1,  # no cursors: keep every ledger
        retention_size_bytes=-1,
    )
    async with (
        BookieCluster(metadata_url, tmp_path / "bookies", 2) as bookies,
        serving_broker(store, ml_config=config) as broker,
        BookKeeper(store) as bk,
    ):
        yield Cluster(broker, bookies, bk, metadata_url)


@dataclass
class Sent:
    """One acknowledged message: what was sent and the id the broker gave it."""

    payload: bytes
    key: str | None
    properties: dict[str, str]
    event_ms: int
    message_id: Any  # pulsar.MessageId

    @property
    def position(self) -> tuple[int, int, int, int]:
        mid = self.message_id
        return (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index())


def produce(
    url: str,
    topic: str,
    count: int,
    *,
    compression: Any = pulsar.CompressionType.NONE,
    batching: bool = True,
    name: str = "reader-test",
) -> list[Sent]:
    """Send ``count`` messages asynchronously (so batches fill) and wait for every receipt;
    ids of batched messages carry their batch index."""
    client = pulsar.Client(url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(
            topic,
            producer_name=name,
            batching_enabled=batching,
            batching_max_messages=5,
            batching_max_publish_delay_ms=5,
            compression_type=compression,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )
        sent: list[Sent] = []
        receipts: dict[int, tuple[Any, Any]] = {}
        for i in range(count):
            key = None if i % 3 == 0 else f"key-{i % 7}"
            properties = {"index": str(i), "even": str(i % 2 == 0)} if i % 4 else {}
            event_ms = 1_790_000_000_000 + i if i % 5 else 0
            payload = f"{name} message {i} ".encode() * (1 + i % 40)
            sent.append(Sent(payload, key, properties, event_ms, None))
            extra: dict[str, Any] = {"properties": properties}
            if key is not None:
                extra["partition_key"] = key
            if event_ms:
                extra["event_timestamp"] = event_ms

            def receipt(result: Any, mid: Any, i: int = i) -> None:
                receipts[i] = (result, mid)

            producer.send_async(payload, receipt, **extra)
        producer.flush()
        producer.close()
    finally:
        client.close()
    assert sorted(receipts) == list(range(count))
    for i, message in enumerate(sent):
        result, message.message_id = receipts[i]
        assert result == pulsar.Result.Ok, f"message {i}: {result}"
    return sent


def ref_of(topic: str) -> TopicPartitionRef:
    name = TopicName.parse(topic)
    return TopicPartitionRef(str(name), name.partition_index, name.managed_ledger_name)


async def plan(cluster: Cluster, ref: TopicPartitionRef, covering: list[Sent]) -> list[ReadSplit]:
    """Splits of ``ENTRIES_PER_SPLIT`` entries over every ledger of ``ref`` (the open one to
    its LAC), once the LAC covers every message in ``covering``."""
    last = max((s.message_id.ledger_id(), s.message_id.entry_id()) for s in covering)

    async def cut() -> list[ReadSplit] | None:
        found = await cluster.broker.store.get(managed_ledger_path(ref.managed_ledger))
        assert found is not None
        ledgers = LedgerList.decode(found[0], ref.managed_ledger).chain
        splits = []
        for info in ledgers:
            if info.closed:
                end = info.entries - 1
            else:
                handle = await cluster.bk.open_ledger(info.ledger_id, password=None, recovery=False)
                end = handle.last_add_confirmed
                if (info.ledger_id, end) < last:
                    return None  # the bookies have not heard of the last confirmation yet
            for first in range(0, end + 1, ENTRIES_PER_SPLIT):
                stop = min(first + ENTRIES_PER_SPLIT - 1, end)
                splits.append(ReadSplit(ref, info.ledger_id, first, stop, 1000 * (stop - first)))
        return splits

    result: list[list[ReadSplit]] = []

    async def ready() -> bool:
        splits = await cut()
        if splits is not None:
            result.append(splits)
        return splits is not None

    await until(ready, "the open ledger's LAC covers every acknowledged message", timeout=15)
    return result[0]


def source(cluster: Cluster, **raw: str) -> SourceOptions:
    return SourceOptions.parse({"metadata": cluster.metadata_url, "topic": f"{NS}/x", **raw})


def read_all(splits: list[ReadSplit], options: SourceOptions) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for split in splits:
        for batch in read_split(split, options):
            assert batch.schema == arrow_schema()
            assert batch.num_rows <= options.max_records_per_batch
            rows += batch.to_pylist()
    return rows


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def check_rows(rows: list[dict[str, Any]], sent: list[Sent], topic: str, started: float) -> None:
    """Every acknowledged message, once, in order, with what it was sent with."""
    assert len(rows) == len(sent)
    now = dt.datetime.now(dt.UTC)
    begin = dt.datetime.fromtimestamp(started - 1, dt.UTC)
    for index, (row, message) in enumerate(zip(rows, sent, strict=True)):
        mid = message.message_id
        assert (row["__partition"], row["__ledgerId"], row["__entryId"], row["__batchIndex"]) == (
            message.position
        ), f"message {index}"
        assert row["value"] == message.payload, f"message {index}"
        assert row["__key"] == message.key
        assert dict(row["__messageProperties"]) == message.properties
        expected_event = (
            dt.datetime.fromtimestamp(message.event_ms / 1000, dt.UTC) if message.event_ms else None
        )
        assert row["__eventTime"] == expected_event
        assert begin <= row["__publishTime"] <= now
        assert row["__topic"] == topic
        assert row["__producerName"] == "reader-test"
        assert row["__sequenceId"] == index  # the official producer numbers from 0
        official = pulsar.MessageId.deserialize(row["__messageId"])
        assert (
            official.partition(),
            official.ledger_id(),
            official.entry_id(),
            official.batch_index(),
        ) == (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index())


COMPRESSIONS = [
    pulsar.CompressionType.NONE,
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]


async def test_splits_read_back_every_acknowledged_message(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One topic per compression, batched, over several ledgers, split inside ledgers; the
    worker connects once for all of them."""
    ledger_reader.shutdown()
    connected: list[str] = []
    real_connect = ledger_reader.connect

    def counting_connect(url: str) -> Any:
        connected.append(url)
        return real_connect(url)

    monkeypatch.setattr(ledger_reader, "connect", counting_connect)
    started = time.time()
    topics = {kind: f"{NS}/reader-{str(kind).rsplit('.', 1)[-1].lower()}" for kind in COMPRESSIONS}
    produced = await asyncio.gather(
        *(
            asyncio.to_thread(produce, cluster.broker.service_url, topic, 120, compression=kind)
            for kind, topic in topics.items()
        )
    )
    options = source(cluster, maxRecordsPerBatch="7")
    for topic, sent in zip(topics.values(), produced, strict=True):
        assert len({s.message_id.ledger_id() for s in sent}) >= 3, "expected rollovers"
        assert any(s.message_id.batch_index() > 0 for s in sent), "expected batches"
        splits = await plan(cluster, ref_of(topic), sent)
        rows = await asyncio.to_thread(read_all, splits, options)
        check_rows(rows, sent, topic, started)
    assert connected == [options.metadata]
    ledger_reader.shutdown()
    assert reader_threads() == []


async def test_unbatched_messages_of_a_partition(cluster: Cluster, store: MetadataStore) -> None:
    """Each partition's rows carry its index, in the column and in the message id; the
    official producer numbers each partition's messages from 0."""
    topic = f"{NS}/reader-partitioned"
    await create_partitioned_topic(store, TopicName.parse(topic), 2)
    started = time.time()
    sent = await asyncio.to_thread(produce, cluster.broker.service_url, topic, 40, batching=False)
    assert {s.message_id.batch_index() for s in sent} == {-1}
    for index in (0, 1):
        partition = str(TopicName.parse(topic).partition(index))
        mine = [s for s in sent if s.message_id.partition() == index]
        assert mine, f"nothing went to partition {index}"
        splits = await plan(cluster, ref_of(partition), mine)
        rows = await asyncio.to_thread(read_all, splits, source(cluster))
        check_rows(rows, mine, partition, started)


async def test_a_deleted_ledger_is_data_loss_or_skipped(cluster: Cluster) -> None:
    topic = f"{NS}/reader-deleted"
    sent = await asyncio.to_thread(produce, cluster.broker.service_url, topic, 40)
    splits = await plan(cluster, ref_of(topic), sent)
    victim = splits[0].ledger_id
    await cluster.bk.delete_ledger(victim)
    lost = [s for s in splits if s.ledger_id == victim]
    with pytest.raises(DataLossError, match=rf"\[{topic}\] ledger {victim} was deleted"):
        await asyncio.to_thread(read_all, lost[:1], source(cluster))
    assert await asyncio.to_thread(read_all, lost, source(cluster, failOnDataLoss="false")) == []
    # The other ledgers still read in full.
    kept = [s for s in splits if s.ledger_id != victim]
    rows = await asyncio.to_thread(read_all, kept, source(cluster))
    assert len(rows) == sum(1 for s in sent if s.message_id.ledger_id() != victim)


def reads_in_flight() -> int:
    """Tasks on the worker's loop (reads of entries); none once a split is closed."""
    loop = ledger_reader._worker_loop().loop

    async def count() -> int:
        return sum(1 for task in asyncio.all_tasks() if task is not asyncio.current_task())

    return asyncio.run_coroutine_threadsafe(count(), loop).result(5)


async def test_closing_the_generator_early_cancels_its_reads(cluster: Cluster) -> None:
    topic = f"{NS}/reader-limit"
    sent = await asyncio.to_thread(produce, cluster.broker.service_url, topic, 60, batching=False)
    splits = await plan(cluster, ref_of(topic), sent)
    whole = ReadSplit(splits[0].ref, splits[0].ledger_id, 0, ROLL_EVERY - 1, 4000)

    def first_batch_then_close() -> int:
        options = source(cluster, maxRecordsPerBatch="1")
        # Connected first, so what the connection itself runs on the loop is the baseline.
        list(read_split(ReadSplit(whole.ref, whole.ledger_id, 0, 0, 100), options))
        baseline = reads_in_flight()
        batches = read_split(whole, options)
        batch = next(batches)
        batches.close()  # what Spark does on LIMIT 1
        until_blocking(lambda: reads_in_flight() == baseline, "the reads in flight stop")
        return batch.num_rows

    assert await asyncio.to_thread(first_batch_then_close) == 1
    assert len(reader_threads()) == 1  # the worker's loop stays for its next task
    ledger_reader.shutdown()
    assert reader_threads() == []


async def test_unreachable_bookies_are_a_source_error(cluster: Cluster) -> None:
    topic = f"{NS}/reader-no-bookies"
    sent = await asyncio.to_thread(produce, cluster.broker.service_url, topic, 12, batching=False)
    splits = await plan(cluster, ref_of(topic), sent)
    closed = [s for s in splits if s.last_entry == ROLL_EVERY - 1][:1]
    cluster.bookies.kill_all()
    with pytest.raises(SparkSourceError, match=rf"\[{topic}\] ledger {closed[0].ledger_id}") as err:
        await asyncio.to_thread(read_all, closed, source(cluster))
    assert not isinstance(err.value, DataLossError)


def test_an_empty_split_reads_nothing_without_connecting() -> None:
    split = ReadSplit(ref_of(f"{NS}/empty"), 1, 0, -1, 0)
    options = SourceOptions.parse({"metadata": "zk://127.0.0.1:1/none", "topic": "empty"})
    assert list(read_split(split, options)) == []


@pytest.mark.parametrize(
    ("first", "last", "average", "size"),
    [(0, 999, 100, WINDOW_ENTRIES), (5, 1004, 100_000, 83), (0, 9, 50 * 2**20, 1), (3, 3, 10, 1)],
)
def test_windows_cover_the_split_by_entries_and_bytes(
    first: int, last: int, average: int, size: int
) -> None:
    """At most ``WINDOW_ENTRIES`` entries and about 8 MB a window, end to end, no gaps."""
    split = ReadSplit(ref_of(f"{NS}/windows"), 1, first, last, average * (last - first + 1))
    windows = window_ranges(split)
    assert windows[0][0] == first and windows[-1][1] == last
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(windows))
    assert max(stop - start + 1 for start, stop in windows) == size
