"""stripemq's own Python client next to the official ``pulsar-client``, against one broker.

One ``stripemq standalone`` process (embedded metadata, one bookie, one broker, journal fsync
on) on free 127.0.0.1 ports in a temp dir. For each client -- ``stripemq`` (the blocking
facade, ``stripemq.client``), ``stripemq-aio`` (the asyncio API, ``stripemq.client.aio``)
and ``pulsar-client`` (the official C++-based client) -- with a fresh topic per measurement:

* ``publish_msgs_per_s``: ``--messages`` messages of 1 KiB, batching on (10 ms publish delay,
  default batch limits, ``--max-pending`` messages in flight, blocking when full), each sent
  with ``send_async`` and a callback, then ``flush``; timed after ``--warmup`` messages sent
  and flushed on the same producer;
* ``consume_msgs_per_s``: a topic pre-filled by the same client with ``--messages`` messages,
  then an Exclusive consumer (initial position Earliest, default receiver queue of 1000)
  receiving and acknowledging each one, timed from the first ``receive`` to the last;
* ``latency_p50_ms`` / ``latency_p99_ms``: ``--rate`` messages a second for ``--seconds``,
  batching on (``--latency-batch-delay-ms``), the send time in each payload's first 20 bytes;
  a consumer on a client of its own (a thread; a task for the asyncio API) takes receive time
  minus send time (one process, one clock).

The measurements are interleaved (every client's publish run, then every client's consume
run, ...) so that whatever the broker accumulates weighs on each client alike. The
physical reference is the official client itself: each stripemq row also carries its ratio
to the ``pulsar-client`` row (``publish_x_pulsar_client``, ...).

Prints progress to stderr and one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pulsar

import stripemq.client
import stripemq.client.aio
from stripemq.testing.bench import percentile, progress
from stripemq.testing.standalone import running_standalone

MESSAGE_BYTES = 1024
STAMP_BYTES = 20
PUBLISH_DELAY_MS = 10
RECEIVE_TIMEOUT_MS = 30_000
CLIENTS = ("stripemq", "stripemq-aio", "pulsar-client")


def topic_name(kind: str, client: str) -> str:
    return f"bench-client-{kind}-{client}-{time.monotonic_ns()}"


def stamped(padding: bytes) -> bytes:
    return str(time.perf_counter_ns()).rjust(STAMP_BYTES, "0").encode() + padding


def latency_ms(payload: bytes) -> float:
    return (time.perf_counter_ns() - int(payload[:STAMP_BYTES])) / 1e6


def latency_figures(samples: list[float], expected: int) -> dict[str, Any]:
    if len(samples) < expected:
        progress(f"  only {len(samples)} of {expected} latency samples arrived")
    return {
        "latency_p50_ms": round(percentile(samples, 0.50), 2) if samples else None,
        "latency_p99_ms": round(percentile(samples, 0.99), 2) if samples else None,
        "latency_samples": len(samples),
    }


class SendTally:
    """What the ``send_async`` callbacks reported, from whichever thread calls them."""

    def __init__(self, ok: Any) -> None:
        self._ok = ok
        self._lock = threading.Lock()
        self.done = 0
        self.failures: list[Any] = []
        self.all_done = threading.Event()
        self.expected = -1

    def callback(self, result: Any, _message_id: Any) -> None:
        with self._lock:
            self.done += 1
            if result != self._ok:
                self.failures.append(result)
            if self.done == self.expected:
                self.all_done.set()

    def expect(self, count: int) -> None:
        with self._lock:
            self.expected = count
            if self.done >= count:
                self.all_done.set()

    def check(self, count: int, what: str) -> None:
        """Raise unless ``count`` callbacks reported success (waits a little for stragglers
        and says so: ``flush`` should return only after every callback ran)."""
        self.expect(count)
        if not self.all_done.is_set():
            progress(f"  {what}: flush returned with {self.done} of {count} callbacks run")
            self.all_done.wait(30)
        if self.failures:
            raise RuntimeError(f"{what}: {len(self.failures)} sends failed: {self.failures[0]}")
        if self.done != count:
            raise RuntimeError(f"{what}: {self.done} of {count} send callbacks ran")


# ---------------------------------------------------------------- blocking clients


def open_client(api: ModuleType, url: str) -> Any:
    options: dict[str, Any] = {"operation_timeout_seconds": 60}
    if api is pulsar:
        options["logger"] = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    return api.Client(url, **options)


def throughput_producer(client: Any, topic: str, max_pending: int) -> Any:
    return client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_publish_delay_ms=PUBLISH_DELAY_MS,
        max_pending_messages=max_pending,
        block_if_queue_full=True,
    )


def publish_all(api: ModuleType, producer: Any, count: int, what: str) -> float:
    """Send ``count`` messages with ``send_async`` and flush; the seconds it took."""
    payload = b"x" * MESSAGE_BYTES
    tally = SendTally(api.Result.Ok)
    callback = tally.callback
    send_async = producer.send_async
    start = time.perf_counter()
    for _ in range(count):
        send_async(payload, callback)
    producer.flush()
    elapsed = time.perf_counter() - start
    tally.check(count, what)
    return elapsed


def sync_publish(api: ModuleType, url: str, name: str, count: int, args: Any) -> dict[str, Any]:
    client = open_client(api, url)
    try:
        producer = throughput_producer(client, topic_name("publish", name), args.max_pending)
        if args.warmup:
            publish_all(api, producer, args.warmup, f"{name} warm-up")
        elapsed = publish_all(api, producer, count, f"{name} publish")
        producer.close()
        return {
            "publish_msgs_per_s": round(count / elapsed),
            "publish_mb_per_s": round(count * MESSAGE_BYTES / elapsed / 1e6, 1),
        }
    finally:
        client.close()


def sync_consume(api: ModuleType, url: str, name: str, count: int, args: Any) -> dict[str, Any]:
    client = open_client(api, url)
    try:
        topic = topic_name("consume", name)
        producer = throughput_producer(client, topic, args.max_pending)
        publish_all(api, producer, count, f"{name} pre-fill")
        producer.close()
        consumer = client.subscribe(
            topic,
            "bench",
            consumer_type=api.ConsumerType.Exclusive,
            initial_position=api.InitialPosition.Earliest,
        )
        receive, acknowledge = consumer.receive, consumer.acknowledge
        first = receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        start = time.perf_counter()
        acknowledge(first)
        for _ in range(count - 1):
            acknowledge(receive(timeout_millis=RECEIVE_TIMEOUT_MS))
        elapsed = time.perf_counter() - start
        if len(first.data()) != MESSAGE_BYTES:
            raise RuntimeError(f"{name}: received {len(first.data())} bytes")
        consumer.close()
        return {"consume_msgs_per_s": round((count - 1) / elapsed)}
    finally:
        client.close()


def sync_latency(api: ModuleType, url: str, name: str, rate: int, args: Any) -> dict[str, Any]:
    topic = topic_name("latency", name)
    total = int(rate * args.seconds)
    samples: list[float] = []
    consuming = open_client(api, url)
    producing = open_client(api, url)
    try:
        consumer = consuming.subscribe(
            topic,
            "latency",
            consumer_type=api.ConsumerType.Exclusive,
            initial_position=api.InitialPosition.Earliest,
        )
        failure: list[BaseException] = []

        def receive() -> None:
            try:
                for _ in range(total):
                    message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
                    samples.append(latency_ms(message.data()))
                    consumer.acknowledge(message)
            except BaseException as exc:
                failure.append(exc)

        producer = producing.create_producer(
            topic,
            batching_enabled=True,
            batching_max_publish_delay_ms=args.latency_batch_delay_ms,
            block_if_queue_full=True,
        )
        tally = SendTally(api.Result.Ok)
        receiver = threading.Thread(target=receive, name=f"{name}-latency-consumer")
        receiver.start()
        padding = b"x" * (MESSAGE_BYTES - STAMP_BYTES)
        start = time.perf_counter()
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send_async(stamped(padding), tally.callback)
        producer.flush()
        receiver.join(60)
        tally.check(total, f"{name} latency")
        if failure:
            progress(f"  {name} latency consumer failed: {failure[0]!r}")
        return latency_figures(samples, total)
    finally:
        producing.close()
        consuming.close()


# ---------------------------------------------------------------- the asyncio client


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def aio_publish_all(producer: Any, count: int, what: str) -> float:
    payload = b"x" * MESSAGE_BYTES
    tally = SendTally(stripemq.client.aio.Result.Ok)
    callback = tally.callback
    send_async = producer.send_async
    start = time.perf_counter()
    for _ in range(count):
        await send_async(payload, callback)
    await producer.flush()
    elapsed = time.perf_counter() - start
    tally.check(count, what)
    return elapsed


async def aio_producer(client: Any, topic: str, max_pending: int) -> Any:
    return await client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_publish_delay_ms=PUBLISH_DELAY_MS,
        max_pending_messages=max_pending,
        block_if_queue_full=True,
    )


def aio_client(url: str) -> Any:
    return stripemq.client.aio.Client(url, operation_timeout_seconds=60)


async def aio_publish(url: str, name: str, count: int, args: Any) -> dict[str, Any]:
    async with aio_client(url) as client:
        producer = await aio_producer(client, topic_name("publish", name), args.max_pending)
        if args.warmup:
            await aio_publish_all(producer, args.warmup, f"{name} warm-up")
        elapsed = await aio_publish_all(producer, count, f"{name} publish")
        await producer.close()
    return {
        "publish_msgs_per_s": round(count / elapsed),
        "publish_mb_per_s": round(count * MESSAGE_BYTES / elapsed / 1e6, 1),
    }


async def aio_consume(url: str, name: str, count: int, args: Any) -> dict[str, Any]:
    aio = stripemq.client.aio
    async with aio_client(url) as client:
        topic = topic_name("consume", name)
        producer = await aio_producer(client, topic, args.max_pending)
        await aio_publish_all(producer, count, f"{name} pre-fill")
        await producer.close()
        consumer = await client.subscribe(
            topic,
            "bench",
            consumer_type=aio.ConsumerType.Exclusive,
            initial_position=aio.InitialPosition.Earliest,
        )
        receive, acknowledge = consumer.receive, consumer.acknowledge
        first = await receive(RECEIVE_TIMEOUT_MS)
        start = time.perf_counter()
        await _maybe_await(acknowledge(first))
        for _ in range(count - 1):
            await _maybe_await(acknowledge(await receive(RECEIVE_TIMEOUT_MS)))
        elapsed = time.perf_counter() - start
        if len(first.data()) != MESSAGE_BYTES:
            raise RuntimeError(f"{name}: received {len(first.data())} bytes")
        await consumer.close()
    return {"consume_msgs_per_s": round((count - 1) / elapsed)}


async def aio_latency(url: str, name: str, rate: int, args: Any) -> dict[str, Any]:
    aio = stripemq.client.aio
    topic = topic_name("latency", name)
    total = int(rate * args.seconds)
    samples: list[float] = []
    async with aio_client(url) as consuming, aio_client(url) as producing:
        consumer = await consuming.subscribe(
            topic,
            "latency",
            consumer_type=aio.ConsumerType.Exclusive,
            initial_position=aio.InitialPosition.Earliest,
        )

        async def receive() -> None:
            for _ in range(total):
                message = await consumer.receive(RECEIVE_TIMEOUT_MS)
                samples.append(latency_ms(message.data()))
                await _maybe_await(consumer.acknowledge(message))

        producer = await producing.create_producer(
            topic,
            batching_enabled=True,
            batching_max_publish_delay_ms=args.latency_batch_delay_ms,
            block_if_queue_full=True,
        )
        tally = SendTally(aio.Result.Ok)
        receiver = asyncio.create_task(receive())
        padding = b"x" * (MESSAGE_BYTES - STAMP_BYTES)
        start = time.perf_counter()
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await producer.send_async(stamped(padding), tally.callback)
        await producer.flush()
        try:
            async with asyncio.timeout(60):
                await receiver
        except Exception as exc:
            progress(f"  {name} latency consumer failed: {exc!r}")
            receiver.cancel()
        tally.check(total, f"{name} latency")
    return latency_figures(samples, total)


# ---------------------------------------------------------------- running it


Measure = Callable[[str, str, int, Any], dict[str, Any]]


def measurement(client: str, kind: str) -> Measure:
    """The blocking function measuring ``kind`` with ``client``: (url, name, n, args)."""
    if client == "stripemq-aio":
        coroutine = {"publish": aio_publish, "consume": aio_consume, "latency": aio_latency}[kind]
        return lambda *a: asyncio.run(coroutine(*a))
    api = stripemq.client if client == "stripemq" else pulsar
    function = {"publish": sync_publish, "consume": sync_consume, "latency": sync_latency}[kind]
    return lambda *a: function(api, *a)


def add_ratios(rows: list[dict[str, Any]]) -> None:
    reference = next((r for r in rows if r["client"] == "pulsar-client"), None)
    if reference is None:
        return
    for row in rows:
        if row is reference:
            continue
        for key, label in [
            ("publish_msgs_per_s", "publish_x_pulsar_client"),
            ("consume_msgs_per_s", "consume_x_pulsar_client"),
            ("latency_p50_ms", "latency_p50_x_pulsar_client"),
        ]:
            if row.get(key) and reference.get(key):
                row[label] = round(row[key] / reference[key], 2)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--messages", type=int, default=50_000, help="per throughput run")
    parser.add_argument("--warmup", type=int, default=5_000, help="messages before timing")
    parser.add_argument("--max-pending", type=int, default=10_000, help="producer queue")
    parser.add_argument("--rate", type=int, default=1000, help="messages/s in the latency run")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the latency run")
    parser.add_argument("--latency-batch-delay-ms", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.warmup, args.seconds = 5_000, 500, 2.0
    unknown = set(args.clients.split(",")) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; choose from {list(CLIENTS)}")
    return args


async def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    clients = args.clients.split(",")
    rows: dict[str, dict[str, Any]] = {
        name: {"client": name, "message_bytes": MESSAGE_BYTES} for name in clients
    }
    loop = asyncio.get_running_loop()
    base = Path(tempfile.mkdtemp(prefix="stripemq-bench-client-"))
    started = time.perf_counter()
    try:
        progress("starting stripemq standalone ...")
        async with running_standalone(base) as url:
            for kind, size in [
                ("publish", args.messages),
                ("consume", args.messages),
                ("latency", args.rate),
            ]:
                for name in clients:
                    what = (
                        f"{args.rate} messages/s for {args.seconds:g} s"
                        if kind == "latency"
                        else f"{size} messages"
                    )
                    progress(f"{name}: {kind}, {what} ...")
                    figures = await loop.run_in_executor(
                        None, measurement(name, kind), url, name, size, args
                    )
                    progress(f"  {json.dumps(figures)}")
                    rows[name].update(figures)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results = list(rows.values())
    for row in results:
        row.update(
            {
                "messages": args.messages,
                "rate": args.rate,
                "seconds": args.seconds,
                "batching_max_publish_delay_ms": PUBLISH_DELAY_MS,
                "latency_batch_delay_ms": args.latency_batch_delay_ms,
                "max_pending_messages": args.max_pending,
            }
        )
    add_ratios(results)
    progress(f"done in {time.perf_counter() - started:.0f} s")
    print(
        json.dumps(
            {
                "bench": "client",
                "target": "standalone",
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
                "pulsar_client_version": getattr(pulsar, "__version__", None),
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
