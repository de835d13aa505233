"""End-to-end figures with the official pulsar-client: publish and consume throughput of
1 KiB messages (batching on), and publish-to-receive latency at a fixed rate.

Two targets, each started on free 127.0.0.1 ports in a temp dir, journal fsync on:

* ``standalone``: one ``stripemq standalone`` process (embedded metadata, one bookie, one
  broker; one copy of each entry);
* ``cluster``: real ZooKeeper, three bookie processes and one ``stripemq broker`` process,
  topics written E=3, Qw=2, Qa=2.

For each: ``--count`` messages published as fast as the client pipelines them
(``publish_msgs_per_s``, ``publish_mb_per_s`` of payload), the same messages read back
as a backlog by a consumer that starts once they are all published
(``consume_msgs_per_s``), then ``--rate`` messages a
second for ``--seconds`` with the send time in each payload: ``latency_p50_ms`` and
``latency_p99_ms`` from ``send_async`` to ``receive`` (one machine, one clock).

Prints progress to stderr and one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pulsar

from stripemq.testing.bench import bench_cluster, percentile, progress
from stripemq.testing.broker import BrokerProcess
from stripemq.testing.standalone import running_standalone

MESSAGE_BYTES = 1024


@contextlib.asynccontextmanager
async def cluster(base: Path) -> AsyncIterator[str]:
    async with bench_cluster(base, 3) as running:
        broker = BrokerProcess(
            running.url,
            base,
            settings={
                "managed_ledger_default_ensemble_size": 3,
                "managed_ledger_default_write_quorum": 2,
                "managed_ledger_default_ack_quorum": 2,
            },
        )
        progress("starting the broker ...")
        await broker.start()
        try:
            yield broker.service_url
        finally:
            broker.terminate()


def throughput(url: str, count: int) -> dict[str, float]:
    client = pulsar.Client(url, operation_timeout_seconds=60)
    try:
        topic = f"bench-throughput-{time.monotonic_ns()}"
        client.subscribe(topic, "drain").close()  # keeps the messages for the read below
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_publish_delay_ms=2,
            batching_max_messages=500,
            max_pending_messages=20_000,
            block_if_queue_full=True,
        )
        payload = b"x" * MESSAGE_BYTES
        failures = []
        start = time.perf_counter()
        for _ in range(count):
            producer.send_async(
                payload,
                lambda result, _id: failures.append(result) if result != pulsar.Result.Ok else None,
            )
        producer.flush()
        published = time.perf_counter() - start
        if failures:
            raise RuntimeError(f"{len(failures)} sends failed: {failures[0]}")
        start = time.perf_counter()  # the backlog, read by a consumer that starts now
        consumer = client.subscribe(topic, "drain", receiver_queue_size=5000)
        for _ in range(count):
            consumer.acknowledge(consumer.receive(timeout_millis=30_000))
        consumed = time.perf_counter() - start
        return {
            "publish_msgs_per_s": round(count / published),
            "publish_mb_per_s": round(count * MESSAGE_BYTES / published / 1e6, 1),
            "consume_msgs_per_s": round(count / consumed),
        }
    finally:
        client.close()


def latency(url: str, rate: int, seconds: float) -> dict[str, float]:
    client = pulsar.Client(url, operation_timeout_seconds=60)
    try:
        topic = f"bench-latency-{time.monotonic_ns()}"
        consumer = client.subscribe(topic, "latency")
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=1
        )
        total = int(rate * seconds)
        samples: list[float] = []

        def receive() -> None:
            for _ in range(total):
                message = consumer.receive(timeout_millis=30_000)
                samples.append((time.perf_counter_ns() - int(message.data()[:20])) / 1e6)
                consumer.acknowledge(message)

        receiver = threading.Thread(target=receive)
        receiver.start()
        start = time.perf_counter()
        padding = b"x" * (MESSAGE_BYTES - 20)
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            stamp = str(time.perf_counter_ns()).rjust(20, "0").encode()
            producer.send_async(stamp + padding, lambda result, _id: None)
        producer.flush()
        receiver.join(60)
        return {
            "rate": rate,
            "latency_p50_ms": round(percentile(samples, 0.50), 2),
            "latency_p99_ms": round(percentile(samples, 0.99), 2),
        }
    finally:
        client.close()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--targets", default="standalone,cluster")
    parser.add_argument("--count", type=int, default=100_000, help="messages per throughput run")
    parser.add_argument("--rate", type=int, default=1000, help="messages/s in the latency run")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency run")
    return parser.parse_args()


async def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    pulsar_logger = logging.getLogger("pulsar")
    pulsar_logger.setLevel(logging.WARNING)
    rows: list[dict[str, Any]] = []
    targets = {"standalone": running_standalone, "cluster": cluster}
    loop = asyncio.get_running_loop()
    for name in args.targets.split(","):
        base = Path(tempfile.mkdtemp(prefix=f"stripemq-e2e-{name}-"))
        try:
            progress(f"{name}: starting ...")
            async with targets[name](base) as url:
                progress(f"{name}: {args.count} messages of {MESSAGE_BYTES} B ...")
                row: dict[str, Any] = {"target": name, "message_bytes": MESSAGE_BYTES}
                row.update(await loop.run_in_executor(None, throughput, url, args.count))
                progress(f"{name}: {args.rate} messages/s for {args.seconds}s ...")
                row.update(await loop.run_in_executor(None, latency, url, args.rate, args.seconds))
                progress(json.dumps(row))
                rows.append(row)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"bench": "e2e", "results": rows}))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
