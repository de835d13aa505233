"""``spark.readStream.format("stripemq")`` against real processes (ZooKeeper, three bookie
processes, a broker rolling ledgers over every few entries): ``Trigger.AvailableNow`` runs
from one checkpoint read every acknowledged message exactly once across restarts, pick up
a new topic matching the pattern, and stop at ledgers trimmed under them unless
``failOnDataLoss=false``."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pulsar
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from spark_cluster import (
    NS,
    Cluster,
    Sent,
    client_fixture,
    cluster_fixture,
    create_partitioned,
    holder,
    id_tuple,
    ledger_chain,
    produce,
    spark_cluster_fixture,
)

from stripemq.testing.polling import until_blocking

pytestmark = pytest.mark.integration


__all__ = ["client_fixture", "cluster_fixture", "spark_cluster_fixture"]  # fixtures, by name


class Stream:
    """One streaming query definition, run with ``Trigger.AvailableNow`` from one
    checkpoint into a Parquet directory."""

    def __init__(self, spark: SparkSession, cluster: Cluster, pattern: str, base: Path) -> None:
        self.spark = spark
        self.cluster = cluster
        self.pattern = pattern
        self.checkpoint = base / "checkpoint"
        self.out = base / "out"

    def run(self, **options: str) -> StreamingQuery:
        reader = (
            self.spark.readStream.format("stripemq")
            .option("metadata", self.cluster.metadata_url)
            .option("topicsPattern", self.pattern)
        )
        for key, value in options.items():
            reader = reader.option(key, value)
        query = (
            reader.load()
            .writeStream.format("parquet")
            .option("path", str(self.out))
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(180), "the AvailableNow run did not finish"
        finally:
            query.stop()
        return query

    def read_ids(self) -> Counter[tuple[int, int, int]]:
        """Messages in the sink (through its commit log) by ledger, entry and batch index
        (unique across topics), counted."""
        rows = self.spark.read.parquet(str(self.out)).select("__messageId").collect()
        return Counter(
            short_id(id_tuple(pulsar.MessageId.deserialize(bytes(r["__messageId"])))) for r in rows
        )

    def last_offset(self) -> dict[str, dict[str, object]]:
        """The source's offset in the last batch of the checkpoint's offset log."""
        logs = sorted((self.checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
        offset: dict[str, dict[str, object]] = json.loads(logs[-1].read_text().splitlines()[-1])
        return offset


def short_id(message_id: tuple[int, int, int, int]) -> tuple[int, int, int]:
    """A message id without its partition: a producer on one partition's own name gets
    ids without it."""
    ledger, entry, _partition, batch_index = message_id
    return (ledger, entry, batch_index)


def exactly(sent: list[Sent]) -> Counter[tuple[int, int, int]]:
    return Counter(short_id(s.message_id) for s in sent)


def test_stream_reads_every_message_once_across_restarts(
    spark: SparkSession, cluster: Cluster, client: pulsar.Client, tmp_path: Path
) -> None:
    prefix = f"{NS}/stream-{uuid.uuid4().hex[:6]}"
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_partitioned(cluster.metadata_url, first, 2)
    keep = holder(client, first)
    stream = Stream(spark, cluster, f"{prefix}-.*", tmp_path)

    # Run 1: capped micro-batches up to what was there when the run began.
    sent = produce(
        client, first, 120, tag="s1", batching=True, compression=pulsar.CompressionType.LZ4
    )
    query = stream.run(maxEntriesPerTrigger="8")
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 2, "maxEntriesPerTrigger did not split the backlog"
    assert stream.read_ids() == exactly(sent)
    offset = stream.last_offset()
    assert set(offset) == {
        f"public/default/persistent/{first.rsplit('/', 1)[1]}-partition-{i}" for i in (0, 1)
    }
    assert all(set(pos) == {"ledger", "entry", "closed"} for pos in offset.values())

    # Run 2 from the same checkpoint: what came since (over new ledgers), and a new topic
    # matching the pattern, read from its beginning.
    keep_second = holder(client, second)
    sent += produce(
        client,
        first,
        60,
        tag="s2",
        batching=True,
        compression=pulsar.CompressionType.ZSTD,
        first_sequence=120,
    )
    sent += produce(
        client, second, 20, tag="s2b", batching=False, compression=pulsar.CompressionType.ZLib
    )
    stream.run()
    assert stream.read_ids() == exactly(sent)

    # The ledgers the checkpoint stands in are trimmed (nothing holds the topic, and new
    # entries rolled them over): run 3 stops with a data loss error naming the ledger;
    # with failOnDataLoss=false run 4 goes on from what exists.
    checkpoint = {name: int(pos["ledger"]) for name, pos in stream.last_offset().items()}
    partition_0 = f"{first}-partition-0"
    stuck = checkpoint[f"public/default/persistent/{first.rsplit('/', 1)[1]}-partition-0"]
    lost = produce(
        client,
        partition_0,
        3 * 8 + 3,  # not a multiple of the rollover: the open ledger keeps some
        tag="s3",
        batching=False,
        compression=pulsar.CompressionType.LZ4,
        first_sequence=1000,
    )
    keep.unsubscribe()
    until_blocking(
        lambda: stuck not in {i.ledger_id for i in ledger_chain(cluster.metadata_url, partition_0)},
        f"ledger {stuck} of {partition_0} was trimmed",
        timeout=60,
    )
    with pytest.raises(StreamingQueryException, match=f"ledger {stuck}") as info:
        stream.run()
    assert "DataLossError" in str(info.value) and partition_0 in str(info.value)
    assert stream.read_ids() == exactly(sent)

    stream.run(failOnDataLoss="false")
    remaining = {i.ledger_id for i in ledger_chain(cluster.metadata_url, partition_0)}
    readable = [s for s in lost if s.message_id[0] in remaining]
    assert readable, "every new ledger was trimmed too"
    got = stream.read_ids()
    assert got == exactly(sent) + exactly([s for s in lost if short_id(s.message_id) in got])
    assert set(got) >= set(exactly(readable))
    keep_second.close()
