"""``spark.read.format("stripemq")`` against real processes: ZooKeeper, three bookie
processes and a broker process that rolls ledgers over every few entries, written by the
official ``pulsar`` client; and a running standalone read through its ``local://`` store.

Spark reads the bookies directly: what it returns is compared, message by message, with
what the broker acknowledged and delivered."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual
from spark_cluster import (
    Cluster,
    Sent,
    client_fixture,
    cluster_fixture,
    create_partitioned,
    fill_publish_times,
    holder,
    id_tuple,
    ledger_chain,
    produce,
    spark_cluster_fixture,
    topic_name,
)

from stripemq.errors import DataLossError, UnknownTopicError
from stripemq.spark import schema
from stripemq.spark.source import SplitPartition, StripeMQDataSource
from stripemq.testing.polling import next_millisecond, until_blocking
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration


__all__ = ["client_fixture", "cluster_fixture", "spark_cluster_fixture"]  # fixtures, by name


def load(spark: SparkSession, cluster: Cluster, **options: str) -> DataFrame:
    reader = spark.read.format("stripemq").option("metadata", cluster.metadata_url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def collect(df: DataFrame) -> list[dict[str, Any]]:
    """The rows as dicts, times as epoch milliseconds (no local-time conversion)."""
    timed = df.withColumn("__publishTime", F.unix_millis("__publishTime")).withColumn(
        "__eventTime", F.unix_millis("__eventTime")
    )
    return [row.asDict() for row in timed.collect()]


def stripemq_schema(spark: SparkSession) -> Any:
    return spark.createDataFrame([], schema.spark_ddl()).schema


def check_row(row: dict[str, Any], sent: Sent, topic: str) -> None:
    """One row against the message the broker acknowledged."""
    ledger, entry, partition, batch_index = sent.message_id
    assert bytes(row["value"]) == sent.value
    assert row["__key"] == sent.key
    assert (row["__messageProperties"] or {}) == sent.properties
    assert row["__publishTime"] == sent.publish_time
    assert row["__eventTime"] == sent.event_time
    assert row["__sequenceId"] == sent.sequence_id
    assert row["__producerName"] == sent.producer_name
    assert row["__topic"] == (topic if partition < 0 else f"{topic}-partition-{partition}")
    assert (row["__ledgerId"], row["__entryId"], row["__partition"]) == (ledger, entry, partition)
    assert row["__batchIndex"] == batch_index


class LiveProducer:
    """A producer in a thread sending one message at a time, about 50 a second (so the
    topic rolls over a few ledgers during a read, not hundreds), until stopped."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self.producer = client.create_producer(topic, batching_enabled=False)
        self.acked: list[bytes] = []
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            n = 0
            while not self.stopping.is_set():
                value = f"live {n}".encode()
                self.producer.send(value)
                self.acked.append(value)
                n += 1
                self.stopping.wait(0.02)
        except BaseException as exc:  # recorded for the test to raise
            self.error = exc

    def __enter__(self) -> LiveProducer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.producer.close()


def test_batch_read_matches_what_was_acknowledged(
    spark: SparkSession, cluster: Cluster, client: pulsar.Client
) -> None:
    """Batched LZ4, unbatched ZLIB and a partitioned ZSTD topic over several ledgers each,
    read in one query; then a topic a producer keeps writing during the read."""
    lz4, zlib, zstd, live = (topic_name(t) for t in ("lz4", "zlib", "zstd", "live"))
    create_partitioned(cluster.metadata_url, zstd, 3)
    holders = {t: holder(client, t) for t in (lz4, zlib, zstd, live)}
    sent = {
        lz4: produce(
            client, lz4, 200, tag="lz4", batching=True, compression=pulsar.CompressionType.LZ4
        ),
        zlib: produce(
            client, zlib, 30, tag="zlib", batching=False, compression=pulsar.CompressionType.ZLib
        ),
        zstd: produce(
            client, zstd, 150, tag="zstd", batching=True, compression=pulsar.CompressionType.ZSTD
        ),
    }
    for topic, messages in sent.items():
        fill_publish_times(holders[topic], messages)
    assert len(ledger_chain(cluster.metadata_url, lz4)) >= 3
    assert len(ledger_chain(cluster.metadata_url, zlib)) >= 3

    rows = collect(load(spark, cluster, topics=",".join([lz4, zlib, zstd])))

    with LiveProducer(client, live) as writer:
        until_blocking(lambda: len(writer.acked) >= 20, "the live producer got going", timeout=30)
        before = len(writer.acked)
        rows += collect(load(spark, cluster, topic=live))
        after = len(writer.acked)
        until_blocking(
            lambda: len(writer.acked) >= after + 10 or writer.error is not None,
            "the live producer kept going after the read",
            timeout=30,
        )
        assert writer.error is None, writer.error
    assert writer.error is None, writer.error

    by_topic: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        base = row["__topic"].split("-partition-")[0]
        by_topic.setdefault(base, []).append(row)
    for topic, messages in sent.items():
        got = by_topic.get(topic, [])
        assert len(got) == len(messages), topic
        ids = {}
        for row in got:
            mid = id_tuple(pulsar.MessageId.deserialize(bytes(row["__messageId"])))
            ids[mid] = row
        assert len(ids) == len(got), f"{topic}: duplicate message ids"
        for message in messages:
            assert message.message_id in ids, f"{topic}: {message.message_id} not read"
            check_row(ids[message.message_id], message, topic)
    assert len({r["__ledgerId"] for r in by_topic[lz4]}) >= 3
    assert {r["__partition"] for r in by_topic[zstd]} == {0, 1, 2}

    # The live topic: a prefix of what was acknowledged, in order, at least what was
    # acknowledged before the read began; the producer was never fenced.
    live_rows = sorted(by_topic.get(live, []), key=lambda r: (r["__ledgerId"], r["__entryId"]))
    values = [bytes(r["value"]) for r in live_rows]
    assert before <= len(values) <= len(writer.acked)
    assert values == writer.acked[: len(values)]
    for consumer in holders.values():
        consumer.close()


def test_publish_time_pushdown_prunes_and_keeps_the_right_rows(
    spark: SparkSession, cluster: Cluster, client: pulsar.Client
) -> None:
    topic, parted = topic_name("timed"), topic_name("parted")
    create_partitioned(cluster.metadata_url, parted, 3)
    keep = [holder(client, topic), holder(client, parted)]
    early = produce(
        client, topic, 40, tag="early", batching=False, compression=pulsar.CompressionType.LZ4
    )
    cutoff_ms = next_millisecond()
    late = produce(
        client,
        topic,
        40,
        tag="late",
        batching=False,
        compression=pulsar.CompressionType.LZ4,
        first_sequence=40,
    )
    fill_publish_times(keep[0], early + late)
    assert max(s.publish_time for s in early) < cutoff_ms <= min(s.publish_time for s in late)
    cutoff = dt.datetime.fromtimestamp(cutoff_ms / 1000, dt.UTC)
    options = {"topic": topic, "publishTimeSkewMs": "0", "maxEntriesPerPartition": "4"}

    rows = collect(load(spark, cluster, **options).where(F.col("__publishTime") >= cutoff))
    got = {id_tuple(pulsar.MessageId.deserialize(bytes(r["__messageId"]))) for r in rows}
    assert got == {s.message_id for s in late}

    # The same plan, from the reader object Spark uses: fewer partitions with the filter,
    # and still every late message inside one of them.
    source = StripeMQDataSource({"metadata": cluster.metadata_url, **options})
    struct = stripemq_schema(spark)
    everything = source.reader(struct).partitions()
    pruned_reader = source.reader(struct)
    time_filter = GreaterThanOrEqual(("__publishTime",), cutoff)
    assert [f for f in pruned_reader.pushFilters([time_filter])] == [time_filter]
    pruned = pruned_reader.partitions()
    assert pruned_reader.planned == pruned
    assert 0 < len(pruned) < len(everything)
    assert sum(p.split.entries for p in pruned) < sum(p.split.entries for p in everything)
    for s in late:
        ledger, entry, _, _ = s.message_id
        assert any(
            p.split.ledger_id == ledger and p.split.first_entry <= entry <= p.split.last_entry
            for p in pruned
        ), f"{s.message_id} pruned away"

    # Partition equality prunes the partitions of a partitioned topic.
    for index in range(3):  # the official client's routing may leave a partition empty
        produce(
            client,
            f"{parted}-partition-{index}",
            10,
            tag=f"parted{index}",
            batching=False,
            compression=pulsar.CompressionType.ZLib,
        )
    part_source = StripeMQDataSource({"metadata": cluster.metadata_url, "topic": parted})
    part_reader = part_source.reader(struct)
    part_reader.pushFilters([EqualTo(("__partition",), 1)])
    planned = part_reader.partitions()
    assert planned and {p.split.ref.partition for p in planned} == {1}
    assert {p.split.ref.partition for p in part_source.reader(struct).partitions()} == {0, 1, 2}
    for consumer in keep:
        consumer.close()


def test_trimmed_ledgers_fail_the_read_or_are_skipped(
    spark: SparkSession, cluster: Cluster, client: pulsar.Client
) -> None:
    topic = topic_name("trimmed")
    keep = holder(client, topic)
    produce(client, topic, 40, tag="trim", batching=False, compression=pulsar.CompressionType.LZ4)
    struct = stripemq_schema(spark)
    strict = StripeMQDataSource({"metadata": cluster.metadata_url, "topic": topic}).reader(struct)
    lenient = StripeMQDataSource(
        {"metadata": cluster.metadata_url, "topic": topic, "failOnDataLoss": "false"}
    ).reader(struct)
    planned: list[SplitPartition] = strict.partitions()
    first_ledger = planned[0].split.ledger_id

    # Nothing holds the topic any more: its closed ledgers are trimmed (and deleted).
    keep.unsubscribe()
    until_blocking(
        lambda: (
            first_ledger not in {i.ledger_id for i in ledger_chain(cluster.metadata_url, topic)}
        ),
        "the first ledger was trimmed",
        timeout=30,
    )
    remaining = {i.ledger_id for i in ledger_chain(cluster.metadata_url, topic)}

    def first_split_fails() -> bool:
        try:
            list(strict.read(planned[0]))
        except DataLossError:
            return True
        return False

    until_blocking(first_split_fails, "the trimmed ledger is gone from the bookies", timeout=30)
    with pytest.raises(DataLossError) as info:
        list(strict.read(planned[0]))
    assert topic in str(info.value) and str(first_ledger) in str(info.value)

    skipped = 0
    for partition in planned:
        rows = sum(batch.num_rows for batch in lenient.read(partition))
        if partition.split.ledger_id in remaining:
            assert rows == partition.split.entries
        else:
            skipped += rows == 0
    assert skipped >= 1
    # Planned now, only what exists is read.
    rows = collect(load(spark, cluster, topic=topic))
    assert {r["__ledgerId"] for r in rows} <= remaining

    # An unknown topic: a clear error naming it, at planning.
    missing = topic_name("missing")
    with pytest.raises(UnknownTopicError, match=missing):
        StripeMQDataSource({"metadata": cluster.metadata_url, "topic": missing}).reader(
            struct
        ).partitions()
    with pytest.raises(Exception, match="does not exist"):
        load(spark, cluster, topic=missing).collect()


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneProcess]:
    process = StandaloneProcess(tmp_path / "standalone")
    asyncio.run(process.start())
    try:
        yield process
    finally:
        process.kill()


def test_reads_a_running_standalone(spark: SparkSession, standalone: StandaloneProcess) -> None:
    topic = topic_name("standalone")
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=30)
    try:
        keep = holder(client, topic)
        sent = produce(
            client, topic, 60, tag="sa", batching=True, compression=pulsar.CompressionType.ZSTD
        )
        fill_publish_times(keep, sent)
        metadata = f"local://{standalone.data_dir / 'metadata'}"
        rows = collect(
            spark.read.format("stripemq").option("metadata", metadata).option("topic", topic).load()
        )
        by_id = {id_tuple(pulsar.MessageId.deserialize(bytes(r["__messageId"]))): r for r in rows}
        assert len(by_id) == len(rows) == len(sent)
        for message in sent:
            check_row(by_id[message.message_id], message, topic)
        # The standalone still serves (its store was only read).
        more = produce(
            client, topic, 5, tag="sa2", batching=False, compression=pulsar.CompressionType.LZ4
        )
        assert len(more) == 5
    finally:
        client.close()
