"""``stripemq spark export`` throughput next to this disk's sequential read rate.

Starts a real ZooKeeper, three ``stripemq bookie`` processes and a ``stripemq broker``
process on free 127.0.0.1 ports in a temp dir. Topics are written E=3, Qw=2, Qa=2, with a
ledger rolled over every ``--entries-per-ledger`` entries. It then produces ``--mb`` MB of
payload with the official ``pulsar-client``: ``--message-bytes`` messages in batches of
``--batch``, random bytes (incompressible, like most real payloads once compressed).
Then, in one run:

* **disk** (the physical reference): once the bookies have flushed their memtables, the
  entry-log files they hold (every replica: Qw copies of each entry) are synced, dropped
  from the page cache (``POSIX_FADV_DONTNEED``) and read sequentially in 4 MiB reads:
  ``disk_read_mb_per_s``. Read again from the page cache: ``cached_read_mb_per_s``.
* **export**: a SparkSession on ``--master`` is started and timed (``session_s``, not
  counted in the export figures). Then ``run_export`` exports the topic several times, each
  into a new directory after dropping the entry logs from the page cache again, so the
  bookies read them from disk:
  - ``cold_*``: the first run in the fresh session, with the default (arrow) writer, while
    Spark starts its Python workers;
  - ``export_*``: the same again. These are the figures.
  - ``spark_writer_cold_*`` and ``spark_writer_*``: the same export through the
    ``stripemq`` data source and Spark's own Parquet writer (``--writer spark``), for
    comparison.

  Each run is timed from planning to the committed manifest. ``export_mb_per_s`` counts
  the stored entry bytes read from the bookies (one replica of each entry), and
  ``export_payload_mb_per_s`` the message payloads. ``ratio`` is
  ``export_mb_per_s / disk_read_mb_per_s``; the goal is at least 0.5. ``*_cpu_s`` gives
  the CPU seconds used during each run by Spark's JVM, its Python workers, the bookies and
  this driver.

``--profile DIR`` samples the ``export`` run with py-spy (this process and its children,
which include the JVM's Python workers, and each bookie) and prints where the samples fall.

Prints progress to stderr and one JSON object on the last line of stdout:
``{"bench": "spark_export", "results": [{...}]}``. 1 MB = 1e6 bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pulsar

from stripemq.proto.topic_name import TopicName
from stripemq.spark.catalog import LedgerCatalog, connect
from stripemq.spark.planning import TopicPartitionRef
from stripemq.testing.bench import progress
from stripemq.testing.broker import BrokerProcess
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.zookeeper import ZooKeeperServer

MB = 1_000_000
READ_CHUNK = 4 * 1024 * 1024
TOPIC = "persistent://public/default/bench-export"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=256, help="payload MB to produce")
    parser.add_argument("--message-bytes", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=100, help="messages per batch (entry)")
    parser.add_argument("--entries-per-ledger", type=int, default=500)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--partition-by", default="none", choices=["none", "date"])
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a stripemq source option for the export (repeatable)",
    )
    parser.add_argument("--profile", type=Path, help="py-spy the second export; output here")
    parser.add_argument(
        "--skip-spark-writer",
        action="store_true",
        help="do not also time the export through the data source and Spark's writer",
    )
    return parser.parse_args()


# ---------------------------------------------------------------------- producing


def produce(service_url: str, total_bytes: int, message_bytes: int, batch: int) -> int:
    """Send ``total_bytes`` of random payload; the number of messages acknowledged."""
    client = pulsar.Client(
        service_url, operation_timeout_seconds=120, logger=logging.getLogger("pulsar")
    )
    try:
        client.subscribe(TOPIC, "keep").close()  # keeps the ledgers
        producer = client.create_producer(
            TOPIC,
            batching_enabled=True,
            batching_max_messages=batch,
            batching_max_allowed_size_in_bytes=batch * message_bytes + 1024,
            batching_max_publish_delay_ms=5,
            max_pending_messages=20_000,
            block_if_queue_full=True,
        )
        pool = os.urandom(4 * 1024 * 1024)
        count = total_bytes // message_bytes
        failures: list[Any] = []
        step = max(1, count // 10)
        for i in range(count):
            offset = (i * 7919) % (len(pool) - message_bytes)
            producer.send_async(
                pool[offset : offset + message_bytes],
                lambda result, _id: failures.append(result) if result != pulsar.Result.Ok else None,
            )
            if i % step == 0:
                progress(f"  produced {i:,}/{count:,} messages")
        producer.flush()
        producer.close()
        if failures:
            raise RuntimeError(f"{len(failures)} sends failed: {failures[0]}")
        return count
    finally:
        client.close()


async def wait_readable(metadata_url: str) -> tuple[int, int]:
    """Until planning sees every entry: the count stops moving between two looks a second
    apart (an idle writer sends its LAC within 0.5 s). The entries and their bytes."""
    ref = TopicPartitionRef(TOPIC, -1, TopicName.parse(TOPIC).managed_ledger_name)
    previous = -1
    deadline = time.monotonic() + 60
    while True:
        async with connect(metadata_url) as conn:
            snapshot = await LedgerCatalog(conn).snapshot(ref)
        entries = sum(span.entries for span in snapshot.ledgers)
        if entries == previous and entries > 0:
            return entries, sum(span.size for span in snapshot.ledgers)
        if time.monotonic() > deadline:
            raise TimeoutError(f"the topic's entries kept moving ({entries})")
        previous = entries
        await asyncio.sleep(1.0)


# ---------------------------------------------------------------------- the disk


def entry_logs(bookies: BookieCluster) -> list[Path]:
    return sorted(
        p for b in bookies.bookies for p in (b.data_dir / "ledgers" / "logs").glob("*.log")
    )


def wait_flushed(bookies: BookieCluster, stored_bytes: int, qw: int) -> int:
    """Until the entry logs hold every replica (memtables flushed); their total size."""
    wanted = stored_bytes * qw
    deadline = time.monotonic() + 120
    while True:
        total = sum(p.stat().st_size for p in entry_logs(bookies))
        if total >= wanted:
            return total
        if time.monotonic() > deadline:
            raise TimeoutError(f"entry logs hold {total:,} bytes of {wanted:,}")
        time.sleep(0.5)


def drop_from_page_cache(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def sequential_read(paths: list[Path]) -> tuple[int, float]:
    """Read every file front to back; (bytes, seconds)."""
    buffer = bytearray(READ_CHUNK)
    view = memoryview(buffer)
    total = 0
    start = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            while True:
                n = os.readv(fd, [view])
                if n == 0:
                    break
                total += n
        finally:
            os.close(fd)
    return total, time.perf_counter() - start


# ---------------------------------------------------------------------- profiling


def cpu_seconds(bookie_pids: list[int]) -> dict[str, float]:
    """CPU seconds used so far (user + system, with reaped children) by kind of process:
    this driver, Spark's JVM, the JVM's Python workers, the bookies."""
    totals: collections.Counter[str] = collections.Counter()

    def add(kind: str, process: psutil.Process) -> None:
        with contextlib.suppress(psutil.Error):
            t = process.cpu_times()
            totals[kind] += t.user + t.system + t.children_user + t.children_system

    me = psutil.Process()
    t = me.cpu_times()
    totals["driver"] += t.user + t.system
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            name = " ".join(child.cmdline())
            if "java" in child.name():
                t = child.cpu_times()
                totals["jvm"] += t.user + t.system  # its workers are counted below
            elif "pyspark.daemon" in name:
                add("python_workers", child)  # a daemon or a worker it forked
    for pid in bookie_pids:
        with contextlib.suppress(psutil.Error):
            add("bookies", psutil.Process(pid))
    return dict(totals)


@contextlib.contextmanager
def profiled(directory: Path | None, pids: dict[str, int]) -> Iterator[None]:
    """py-spy ``record`` of each pid (with its subprocesses) while the block runs."""
    if directory is None:
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    spies = {
        name: subprocess.Popen(
            [
                "py-spy",
                "record",
                "--pid",
                str(pid),
                "--subprocesses",
                "--rate",
                "100",
                "--format",
                "raw",
                "--output",
                str(directory / f"{name}.txt"),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    }
    try:
        yield
    finally:
        for spy in spies.values():
            spy.send_signal(signal.SIGINT)
        for spy in spies.values():
            spy.wait(60)
        for name in spies:
            summarize_profile(name, directory / f"{name}.txt")


def summarize_profile(name: str, path: Path, top: int = 20) -> None:
    """Per process (the innermost ``process`` frame py-spy records), the functions most
    often on the stack (inclusive) and on top of it (self), to stderr."""
    if not path.exists():
        progress(f"profile {name}: no output")
        return
    processes: collections.Counter[str] = collections.Counter()
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    own: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        where = max(i for i, frame in enumerate(frames) if frame.startswith("process "))
        process = frames[where].split(":", 1)[-1].strip('"')[:90]
        calls = frames[where + 1 :]
        processes[process] += int(count)
        for frame in set(calls):
            inclusive[process][frame] += int(count)
        if calls:
            own[process][calls[-1]] += int(count)
    progress(f"profile {name}: busy samples per process (100 a second)")
    for process, count in processes.most_common(6):
        progress(f"  {count:7d}  {process}")
        for frame, n in inclusive[process].most_common(top):
            progress(f"           {n:7d}  {frame[:110]}")
        progress("           self:")
        for frame, n in own[process].most_common(top // 2):
            progress(f"           {n:7d}  {frame[:110]}")


# ---------------------------------------------------------------------- main


def export_once(
    spark: Any, metadata_url: str, out: Path, args: argparse.Namespace, writer: str
) -> Any:
    from stripemq.spark.export import ExportRequest, run_export

    extra = dict(item.split("=", 1) for item in args.option)
    request = ExportRequest(
        metadata=metadata_url,
        out=out,
        topics=(TOPIC,),
        partition_by=args.partition_by,
        source_options=extra,
        writer=writer,
    )
    return run_export(request, spark, progress=None)


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("pulsar").setLevel(logging.WARNING)
    base = Path(tempfile.mkdtemp(prefix="stripemq-spark-export-"))
    qw = 2
    row: dict[str, Any] = {
        "payload_mb": args.mb,
        "message_bytes": args.message_bytes,
        "batch": args.batch,
        "master": args.master,
        "cpu_count": os.cpu_count(),
    }
    zk = ZooKeeperServer(data_dir=base / "zookeeper")
    bookies: BookieCluster | None = None
    broker: BrokerProcess | None = None
    spark = None
    try:
        progress("starting ZooKeeper, 3 bookies and a broker ...")
        zk.start()
        url = zk.url("/stripemq-bench")
        bookies = BookieCluster(url, base / "bookies", 3, settings={"flush_interval_ms": 1000})
        asyncio.run(bookies.start())
        broker = BrokerProcess(
            url,
            base,
            settings={
                "managed_ledger_default_ensemble_size": 3,
                "managed_ledger_default_write_quorum": qw,
                "managed_ledger_default_ack_quorum": 2,
                "managed_ledger_max_entries_per_ledger": args.entries_per_ledger,
                "managed_ledger_min_ledger_rollover_time_minutes": 0,
            },
        )
        asyncio.run(broker.start())

        progress(f"producing {args.mb} MB of {args.message_bytes} B messages ...")
        started = time.perf_counter()
        messages = produce(broker.service_url, args.mb * MB, args.message_bytes, args.batch)
        row["produce_s"] = round(time.perf_counter() - started, 1)
        entries, stored = asyncio.run(wait_readable(url))
        row.update(messages=messages, entries=entries, stored_mb=round(stored / MB, 1))
        logs_bytes = wait_flushed(bookies, stored, qw)
        logs = entry_logs(bookies)
        progress(f"entry logs: {len(logs)} files, {logs_bytes / MB:,.1f} MB (all replicas)")

        drop_from_page_cache(logs)
        read, seconds = sequential_read(logs)
        row["disk_read_mb_per_s"] = round(read / MB / seconds, 1)
        read, seconds = sequential_read(logs)
        row["cached_read_mb_per_s"] = round(read / MB / seconds, 1)
        progress(
            f"disk: {row['disk_read_mb_per_s']} MB/s cold, {row['cached_read_mb_per_s']} MB/s "
            "from the page cache"
        )

        from stripemq.spark.submit import export_session, workers_can_import_stripemq

        workers_can_import_stripemq()
        started = time.perf_counter()
        spark = export_session(args.master, "stripemq-bench-export")
        row["session_s"] = round(time.perf_counter() - started, 1)
        progress(f"Spark session on {args.master}: {row['session_s']}s")

        runs = [("cold", "arrow"), ("export", "arrow")]
        if not args.skip_spark_writer:
            runs += [("spark_writer_cold", "spark"), ("spark_writer", "spark")]
        for label, writer in runs:
            drop_from_page_cache(logs)
            out = base / f"out-{label}"
            pids: dict[str, int] = {}
            if label == "export" and args.profile is not None:
                pids = {"driver": os.getpid()}
                pids.update(
                    {f"bookie{i}": b.proc.pid for i, b in enumerate(bookies.bookies) if b.proc}
                )
            bookie_pids = [b.proc.pid for b in bookies.bookies if b.proc]
            before = cpu_seconds(bookie_pids)
            with profiled(args.profile if pids else None, pids):
                result = export_once(spark, url, out, args, writer)
            after = cpu_seconds(bookie_pids)
            row[f"{label}_cpu_s"] = {k: round(after.get(k, 0) - before.get(k, 0), 1) for k in after}
            if result.messages != messages:
                raise RuntimeError(f"exported {result.messages} messages of {messages}")
            run_s = result.seconds
            row[f"{label}_s"] = round(run_s, 2)
            row[f"{label}_write_s"] = round(result.write_seconds, 2)
            row[f"{label}_mb_per_s"] = round(result.stored_bytes / MB / run_s, 1)
            row[f"{label}_payload_mb_per_s"] = round(messages * args.message_bytes / MB / run_s, 1)
            if label == "export":
                row["plan_s"] = round(result.plan_seconds, 2)
                row["commit_s"] = round(result.commit_seconds, 2)
                row["files"] = len(result.files)
                row["splits"] = result.splits
                row["parquet_mb"] = round(result.parquet_bytes / MB, 1)
            progress(f"{label}: {json.dumps(result.to_json())}")
        row["ratio"] = round(row["export_mb_per_s"] / row["disk_read_mb_per_s"], 3)
        row["goal_met"] = row["ratio"] >= 0.5
        progress(json.dumps(row))
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.kill()
        if bookies is not None:
            bookies.kill_all()
        zk.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"bench": "spark_export", "results": [row]}))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
