"""The traffic a chaos run keeps up while faults land: keyed producers and consumers in every
subscription mode, each recording what happened into a ``History``.

Two topics: one in a namespace that deduplicates (stored exactly once is then the promise) and
one that does not (at least once). Each has producers sending at a steady rate, round robin
over a few keys, with ``(producer, key, seq)`` and the send time in the payload, and one
subscription per mode whose consumers acknowledge each message as they receive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import zlib
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from stripemq.chaos.history import (
    SUBSCRIPTION_MODES,
    Delivery,
    History,
    MessageKey,
    Outcome,
    SendRecord,
)
from stripemq.client.aio import Client, ConsumerType, InitialPosition, MessageId, Producer
from stripemq.client.consumer import ConsumerBase
from stripemq.client.message import Message
from stripemq.client.producer import outgoing_message
from stripemq.clock import now_ms
from stripemq.errors import (
    AlreadyClosedError,
    ClientTimeoutError,
    ProducerQueueIsFullError,
    StripeMQError,
)

log = logging.getLogger(__name__)

TENANT = "public"
DEDUP_NAMESPACE = "chaos-dedup"
PLAIN_NAMESPACE = "chaos-plain"
# Each subscription's mode and number of consumers, by the names in ``SUBSCRIPTION_MODES``.
SUBSCRIPTIONS: dict[str, tuple[ConsumerType, int]] = dict(
    zip(
        SUBSCRIPTION_MODES,
        [
            (ConsumerType.Exclusive, 1),
            (ConsumerType.Failover, 2),
            (ConsumerType.Shared, 2),
            (ConsumerType.KeyShared, 2),
        ],
        strict=True,
    )
)
SEND_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class WorkloadShape:
    """How much traffic: producers per topic, keys per producer, messages per second."""

    producers_per_topic: int = 2
    keys: int = 4
    rate: float = 200.0  # messages per second over every producer together
    payload_padding: int = 100  # bytes added to each payload


def topics() -> dict[str, bool]:
    """The run's topics, each with whether it deduplicates."""
    return {
        f"persistent://{TENANT}/{DEDUP_NAMESPACE}/events": True,
        f"persistent://{TENANT}/{PLAIN_NAMESPACE}/events": False,
    }


class CorruptPayloadError(ValueError):
    """A payload whose checksum does not match: the bytes changed on the way."""


def encode_payload(message: MessageKey, sent_ms: int, padding: int) -> bytes:
    """JSON naming the message and its send time, its CRC32 in hex, then ``padding`` bytes
    (covered by no checksum; the broker and bookies check their own)."""
    body = {"p": message.producer, "k": message.key, "s": message.seq, "t": sent_ms}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return raw + f" {zlib.crc32(raw):08x}".encode() + b" " * padding


def decode_payload(data: bytes) -> tuple[MessageKey, int]:
    """The message a payload names and its send time; ``CorruptPayloadError`` if its
    checksum fails, ``ValueError`` if it is no chaos payload at all."""
    raw, _, crc = data.rstrip(b" ").rpartition(b" ")
    try:
        expected = int(crc, 16)
    except ValueError:
        raise ValueError(f"not a chaos payload: {data[:60]!r}") from None
    if zlib.crc32(raw) != expected:
        raise CorruptPayloadError(f"payload fails its checksum: {data[:60]!r}")
    try:
        body = json.loads(raw)
        return MessageKey(str(body["p"]), str(body["k"]), int(body["s"])), int(body["t"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a chaos payload: {data[:60]!r}") from exc


def outcome_of(error: BaseException) -> Outcome:
    """A send that never left the client failed; any other error leaves it unknown."""
    if isinstance(error, ProducerQueueIsFullError):
        return Outcome.FAILED
    return Outcome.UNKNOWN


class Workload:
    """Producers and consumers on ``service_url``, recording into ``history``."""

    def __init__(self, service_url: str, history: History, shape: WorkloadShape) -> None:
        self.service_url = service_url
        self.history = history
        self.shape = shape
        self.client: Client | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._sending = asyncio.Event()
        self._pending: set[asyncio.Future[MessageId]] = set()
        self._producers: list[asyncio.Task[None]] = []
        self.errors: dict[str, int] = {}
        self.corrupt = 0  # payloads received or read back that failed their checksum
        self.crashed: list[str] = []  # workload tasks that ended on an unexpected error

    async def start(self) -> None:
        self.client = Client(
            self.service_url, operation_timeout_seconds=10, connection_timeout_ms=5000
        )
        self._sending.set()
        for topic, dedup in topics().items():
            for subscription, (kind, count) in SUBSCRIPTIONS.items():
                for i in range(count):
                    name = f"{subscription}-{i}"
                    self._spawn(self._consume(topic, subscription, kind, name))
            for i in range(self.shape.producers_per_topic):
                name = f"{'dedup' if dedup else 'plain'}-p{i}"
                self._producers.append(self._spawn(self._produce(topic, dedup, name)))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        task.add_done_callback(self._record_crash)
        self._tasks.append(task)
        return task

    def _record_crash(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("workload task ended on %r", exc, exc_info=exc)
            self.crashed.append(f"workload task ended on {type(exc).__name__}: {exc}")

    def _bad_payload(self, where: str, exc: ValueError) -> None:
        log.error("bad payload %s: %s", where, exc)
        self.corrupt += 1

    def _count_error(self, where: str, exc: BaseException) -> None:
        key = f"{where}: {type(exc).__name__}"
        self.errors[key] = self.errors.get(key, 0) + 1

    async def stop_sending(self, within_s: float = SEND_TIMEOUT_MS / 1000 + 10) -> None:
        """Stop starting sends and wait for the outcome of those in flight (once every
        producer loop has stopped, so none adds a send after the wait began)."""
        self._sending.clear()
        await asyncio.wait(self._producers, timeout=within_s)
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=within_s)

    async def close(self) -> None:
        self._sending.clear()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.client is not None:
            with contextlib.suppress(StripeMQError, OSError):
                await asyncio.wait_for(self.client.close(), 15)

    # ------------------------------------------------------------------ producing

    async def _produce(self, topic: str, dedup: bool, name: str) -> None:
        """Send at this producer's share of the rate until told to stop; a producer that
        fails for good is created again under the same name (so deduplication continues)."""
        assert self.client is not None
        interval = self.shape.producers_per_topic * len(topics()) / self.shape.rate
        seqs = [0] * self.shape.keys
        turn = 0
        producer: Producer | None = None
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while self._sending.is_set():
            if producer is None or producer.closed:
                producer = await self._create_producer(topic, name)
                if producer is None:
                    continue
            key_index = turn % self.shape.keys
            turn += 1
            record = SendRecord(
                topic, name, f"k{key_index}", seqs[key_index], dedup, sent_ms=now_ms()
            )
            seqs[key_index] += 1
            self.history.sends.append(record)
            payload = encode_payload(record.message, record.sent_ms, self.shape.payload_padding)
            try:
                future = await producer.send_message(
                    outgoing_message(payload, partition_key=record.key)
                )
            except StripeMQError as exc:
                self._settle(record, None, exc)
                if isinstance(exc, AlreadyClosedError):
                    producer = None
            else:
                self._pending.add(future)
                future.add_done_callback(functools.partial(self._on_done, record))
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if loop.time() - next_at > 5:  # fell far behind (a stall): do not burst
                next_at = loop.time()

    async def _create_producer(self, topic: str, name: str) -> Producer | None:
        assert self.client is not None
        try:
            producer = await self.client.create_producer(
                topic,
                producer_name=name,
                send_timeout_millis=SEND_TIMEOUT_MS,
                block_if_queue_full=False,
                max_pending_messages=2000,
            )
            assert isinstance(producer, Producer)
            return producer
        except StripeMQError as exc:
            self._count_error(f"create producer {name}", exc)
            await asyncio.sleep(0.5)
            return None

    def _on_done(self, record: SendRecord, future: asyncio.Future[MessageId]) -> None:
        self._pending.discard(future)
        if future.cancelled():
            self._settle(record, None, asyncio.CancelledError())
        else:
            exc = future.exception()
            self._settle(record, None if exc else future.result(), exc)

    def _settle(
        self, record: SendRecord, _message_id: MessageId | None, error: BaseException | None
    ) -> None:
        record.done_ms = now_ms()
        if error is None:
            record.outcome = Outcome.ACKED
            return
        record.outcome = outcome_of(error)
        record.error = f"{type(error).__name__}: {error}"[:200]

    # ------------------------------------------------------------------ consuming

    async def _consume(self, topic: str, subscription: str, kind: ConsumerType, name: str) -> None:
        """Receive, record and acknowledge until cancelled; subscribe again if the consumer
        fails for good."""
        consumer: ConsumerBase | None = None
        try:
            while True:
                if consumer is None or consumer.closed:
                    consumer = await self._subscribe(topic, subscription, kind, name)
                    if consumer is None:
                        continue
                try:
                    message = await consumer.receive(timeout_millis=1000)
                except ClientTimeoutError:
                    continue
                except StripeMQError as exc:
                    self._count_error(f"receive {subscription}", exc)
                    if isinstance(exc, AlreadyClosedError):
                        consumer = None
                    else:
                        await asyncio.sleep(0.2)
                    continue
                self._record_delivery(topic, subscription, name, message)
                try:
                    await consumer.acknowledge(message)
                except StripeMQError as exc:  # acks may be lost: it will come again
                    self._count_error(f"ack {subscription}", exc)
        finally:
            if consumer is not None:
                with contextlib.suppress(StripeMQError, OSError, asyncio.TimeoutError):
                    await asyncio.wait_for(consumer.close(), 5)

    async def _subscribe(
        self, topic: str, subscription: str, kind: ConsumerType, name: str
    ) -> ConsumerBase | None:
        assert self.client is not None
        try:
            return await self.client.subscribe(
                topic,
                subscription,
                consumer_type=kind,
                consumer_name=name,
                initial_position=InitialPosition.Earliest,
                receiver_queue_size=200,
            )
        except StripeMQError as exc:
            self._count_error(f"subscribe {subscription}", exc)
            await asyncio.sleep(0.5)
            return None

    def _record_delivery(
        self, topic: str, subscription: str, consumer: str, message: Message
    ) -> None:
        data = message.data()
        try:
            key, sent_ms = decode_payload(data)
        except ValueError as exc:
            self._bad_payload(f"received on {subscription}", exc)
            return
        self.history.deliveries.append(
            Delivery(
                topic,
                subscription,
                consumer,
                key.producer,
                key.key,
                key.seq,
                sent_ms=sent_ms,
                received_ms=now_ms(),
                redelivery_count=message.redelivery_count(),
            )
        )

    # ------------------------------------------------------------------ reading back

    async def read_back(self, topic: str, within_s: float = 120.0) -> list[MessageKey]:
        """Every message the topic stores, from the first, in order."""
        assert self.client is not None
        reader = await self.client.create_reader(topic, MessageId.earliest)
        stored: list[MessageKey] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        try:
            while await reader.has_message_available():
                if loop.time() > deadline:
                    raise TimeoutError(f"reading {topic} back took over {within_s:.0f}s")
                message = await reader.read_next(timeout_millis=30_000)
                try:
                    stored.append(decode_payload(message.data())[0])
                except ValueError as exc:
                    self._bad_payload(f"stored in {topic}", exc)
        finally:
            with contextlib.suppress(StripeMQError, OSError):
                await reader.close()
        return stored
