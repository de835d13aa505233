"""``stripemq spark export`` against real processes: ZooKeeper, three bookie processes and a
broker process rolling ledgers over every few entries, written by the official client.

What the export wrote is read back with pyarrow and compared, message by message, with what
the broker acknowledged; exporting again after more messages adds exactly the new ones; a
run bounded by ``--until`` leaves the later messages to the next run, once; a run that
fails (in the commit, or killed during the Spark job) leaves no visible file and the next
run is complete; the command line's errors are one line."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulsar
import pyarrow.dataset as pads
import pytest
from pyspark.sql import SparkSession
from spark_cluster import (
    Cluster,
    Sent,
    client_fixture,
    cluster_fixture,
    fill_publish_times,
    holder,
    id_tuple,
    produce,
    spark_cluster_fixture,
    topic_name,
)

import stripemq
from stripemq.errors import UnknownTopicError
from stripemq.proto.topic_name import TopicName
from stripemq.spark import export as export_module
from stripemq.spark import manifest as mf
from stripemq.spark.catalog import LedgerCatalog, connect
from stripemq.spark.export import ExportRequest, run_export
from stripemq.spark.planning import TopicPartitionRef
from stripemq.testing.polling import next_millisecond, until_blocking

pytestmark = pytest.mark.integration


__all__ = ["client_fixture", "cluster_fixture", "spark_cluster_fixture"]  # fixtures, by name

REPO = Path(stripemq.__file__).resolve().parents[1]


def wait_readable(cluster: Cluster, topic: str, sent: list[Sent]) -> None:
    """Until planning sees every acknowledged entry: the open ledger's last entries count
    once its LAC (sent explicitly by an idle writer) has caught up."""
    newest = max(s.message_id[:2] for s in sent)
    ref = TopicPartitionRef(topic, -1, TopicName.parse(topic).managed_ledger_name)

    async def covered() -> bool:
        async with connect(cluster.metadata_url) as conn:
            snapshot = await LedgerCatalog(conn).snapshot(ref)
        ledger, entry = newest
        return any(
            span.ledger_id > ledger or (span.ledger_id == ledger and span.last_entry >= entry)
            for span in snapshot.ledgers
        )

    until_blocking(lambda: asyncio.run(covered()), f"{topic} is readable to its end", timeout=30)


def request(cluster: Cluster, topic: str, out: Path, **extra: Any) -> ExportRequest:
    return ExportRequest(metadata=cluster.metadata_url, out=out, topics=(topic,), **extra)


def exported(out: Path) -> list[dict[str, Any]]:
    """Every row the export directory holds, read the way a user would (pyarrow, hive
    partitioning; ``_``-prefixed paths are skipped by pyarrow itself)."""
    if not any(True for _ in mf.find_run_files(out)):
        return []
    dataset = pads.dataset(str(out), format="parquet", partitioning="hive")
    return dataset.to_table().to_pylist()


def row_id(row: dict[str, Any]) -> tuple[int, int, int, int]:
    return id_tuple(pulsar.MessageId.deserialize(bytes(row["__messageId"])))


def millis(moment: dt.datetime | None) -> int | None:
    if moment is None:
        return None
    return int((moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds() * 1000)


def check_rows(rows: list[dict[str, Any]], sent: list[Sent], topic: str) -> None:
    """Exactly the acknowledged messages, each once, with what they were sent with."""
    by_id: dict[tuple[int, int, int, int], dict[str, Any]] = {}
    for row in rows:
        assert row_id(row) not in by_id, f"message {row_id(row)} exported twice"
        by_id[row_id(row)] = row
    assert set(by_id) == {s.message_id for s in sent}
    for message in sent:
        row = by_id[message.message_id]
        assert row["value"] == message.value
        assert row["__key"] == message.key
        assert dict(row["__messageProperties"] or []) == message.properties
        assert millis(row["__eventTime"]) == message.event_time
        assert row["__sequenceId"] == message.sequence_id
        assert row["__producerName"] == message.producer_name
        assert row["__topic"] == topic
        assert (row["__ledgerId"], row["__entryId"]) == message.message_id[:2]
        if message.publish_time:
            published = row["__publishTime"]
            assert published.tzinfo is not None  # TIMESTAMP_MICROS, UTC-adjusted
            assert millis(published) == message.publish_time
            if "date" in row:
                assert str(row["date"]) == published.date().isoformat()


def test_export_reexport_only_new_then_nothing(
    spark: SparkSession, cluster: Cluster, client: pulsar.Client, tmp_path: Path
) -> None:
    topic = topic_name("orders")
    out = tmp_path / "export"
    keep = holder(client, topic)
    first = produce(
        client, topic, 250, tag="one", batching=True, compression=pulsar.CompressionType.LZ4
    )
    fill_publish_times(keep, first)
    wait_readable(cluster, topic, first)
    assert len({s.message_id[0] for s in first}) >= 3  # several ledgers

    result = run_export(request(cluster, topic, out, partition_by="date"), spark, progress=False)
    assert result.run_id is not None and result.messages == len(first)
    assert all(name.startswith("date=") for name in result.files)
    check_rows(exported(out), first, topic)
    assert not (out / mf.STAGING_DIR).exists()
    # Spark reads what pyarrow wrote, with the source's types and the date partitions.
    back = spark.read.parquet(str(out))
    types = dict(back.dtypes)
    assert types["__publishTime"] == "timestamp" and types["date"] == "date"
    assert types["__messageProperties"] == "map<string,string>"
    assert back.count() == len(first)

    second = produce(
        client,
        topic,
        120,
        tag="two",
        batching=True,
        compression=pulsar.CompressionType.ZSTD,
        first_sequence=250,
    )
    fill_publish_times(keep, second)
    wait_readable(cluster, topic, second)
    again = run_export(request(cluster, topic, out, partition_by="date"), spark, progress=False)
    assert again.messages == len(second)
    assert not set(again.files) & set(result.files)
    check_rows(exported(out), first + second, topic)

    manifest = mf.load(out)
    assert manifest is not None
    assert [run.run_id for run in manifest.runs] == [result.run_id, again.run_id]
    assert [run.messages for run in manifest.runs] == [len(first), len(second)]
    before = (out / mf.MANIFEST_NAME).read_bytes()
    nothing = run_export(request(cluster, topic, out, partition_by="date"), spark, progress=False)
    assert nothing.run_id is None and nothing.messages == 0
    assert (out / mf.MANIFEST_NAME).read_bytes() == before
    check_rows(exported(out), first + second, topic)
    keep.close()


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_until_leaves_later_messages_to_the_next_run_once(
    spark: SparkSession, cluster: Cluster, client: pulsar.Client, tmp_path: Path, writer: str
) -> None:
    """With both writers: pyarrow in the tasks, and the data source with Spark's writer
    (where the rows an earlier run wrote are filtered out by a Spark expression)."""
    topic = topic_name("daily")
    out = tmp_path / "export"
    keep = holder(client, topic)
    early = produce(
        client, topic, 30, tag="early", batching=False, compression=pulsar.CompressionType.LZ4
    )
    cutoff_ms = next_millisecond()
    late = produce(
        client,
        topic,
        30,
        tag="late",
        batching=False,
        compression=pulsar.CompressionType.LZ4,
        first_sequence=30,
    )
    fill_publish_times(keep, early + late)
    wait_readable(cluster, topic, late)
    assert max(s.publish_time for s in early) < cutoff_ms <= min(s.publish_time for s in late)
    # The cutoff falls inside a ledger: the first run reads past it and must not settle it.
    assert {s.message_id[0] for s in early} & {s.message_id[0] for s in late}

    bounded = request(cluster, topic, out, until_ms=cutoff_ms - 1, writer=writer)
    first = run_export(bounded, spark, progress=False)
    assert first.messages == len(early)
    check_rows(exported(out), early, topic)

    second = run_export(request(cluster, topic, out, writer=writer), spark, progress=False)
    assert second.messages == len(late)
    check_rows(exported(out), early + late, topic)
    manifest = mf.load(out)
    assert manifest is not None
    ledgers = manifest.topics[TopicName.parse(topic).managed_ledger_name][1]
    assert all(step.until_ms is None for record in ledgers.values() for step in record.steps)
    keep.close()


def test_a_run_failing_in_its_commit_leaves_nothing_visible(
    spark: SparkSession,
    cluster: Cluster,
    client: pulsar.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = topic_name("fails")
    out = tmp_path / "export"
    keep = holder(client, topic)
    sent = produce(
        client, topic, 200, tag="f", batching=True, compression=pulsar.CompressionType.LZ4
    )
    fill_publish_times(keep, sent)
    wait_readable(cluster, topic, sent)
    small = {"maxEntriesPerPartition": "4"}  # several files to move
    real_replace = os.replace
    moved: list[str] = []

    def replace_then_crash(src: Any, dst: Any) -> None:
        if len(moved) == 2 and str(dst).endswith(".parquet"):
            raise OSError("disk gone")  # after two data files moved into place
        real_replace(src, dst)
        if str(dst).endswith(".parquet"):
            moved.append(str(dst))

    monkeypatch.setattr(export_module.os, "replace", replace_then_crash)
    with pytest.raises(OSError, match="disk gone"):
        run_export(request(cluster, topic, out, source_options=small), spark, progress=False)
    monkeypatch.undo()
    assert len(moved) == 2 and not any(Path(name).exists() for name in moved)
    assert exported(out) == []
    assert mf.load(out) is None and not (out / mf.STAGING_DIR).exists()

    result = run_export(request(cluster, topic, out, source_options=small), spark, progress=False)
    assert result.messages == len(sent)
    check_rows(exported(out), sent, topic)
    keep.close()


# ---------------------------------------------------------------------- the command line


def cli(*args: str, **popen: Any) -> subprocess.Popen[str]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.Popen(
        [sys.executable, "-m", "stripemq", "spark", "export", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its JVM and Python workers share its process group
        **popen,
    )


def test_cli_errors_are_one_line(cluster: Cluster, tmp_path: Path) -> None:
    missing = topic_name("missing")
    for args, expected in [
        (["--topic", missing], f"topic {missing} does not exist"),
        (["--topic", missing, "--since", "last tuesday"], "--since 'last tuesday' is not"),
        (["--topic", missing, "--option", "maxEntriesPerPartition=-1"], "must be positive"),
    ]:
        proc = cli("--metadata", cluster.metadata_url, "--out", str(tmp_path / "x"), *args)
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 2, stderr
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert lines[-1].startswith("stripemq spark export: error: "), stderr
        assert expected in lines[-1], stderr
        assert "Traceback" not in stderr and stdout == ""
    # In-process, the same error is the typed one.
    with pytest.raises(UnknownTopicError, match=missing):
        run_export(request(cluster, missing, tmp_path / "y"), lambda: None, progress=False)


def test_cli_run_killed_midway_then_complete(
    cluster: Cluster, client: pulsar.Client, tmp_path: Path
) -> None:
    topic = topic_name("cli")
    out = tmp_path / "export"
    keep = holder(client, topic)
    sent = produce(
        client, topic, 300, tag="cli", batching=True, compression=pulsar.CompressionType.LZ4
    )
    fill_publish_times(keep, sent)
    wait_readable(cluster, topic, sent)
    args = ["--metadata", cluster.metadata_url, "--topic", topic, "--out", str(out)]
    args += ["--partition-by", "date", "--master", "local[2]", "--json"]

    # Killed (the whole process group, JVM included) once the Spark job is writing.
    proc = cli(*args, "--option", "maxEntriesPerPartition=2")
    try:
        until_blocking(
            lambda: (out / mf.STAGING_DIR).exists() or proc.poll() is not None,
            "the export's Spark job started writing",
            timeout=120,
        )
        assert proc.poll() is None, proc.communicate()[1]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    assert exported(out) == []  # staging only, which readers skip
    assert mf.load(out) is None

    proc = cli(*args)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    figures = json.loads(stdout.strip().splitlines()[-1])
    assert figures["messages"] == len(sent) and figures["files"] >= 1
    assert "stripemq export" in stderr and "MB/s" in stderr  # progress and summary table
    assert not (out / mf.STAGING_DIR).exists()
    check_rows(exported(out), sent, topic)
    keep.close()
