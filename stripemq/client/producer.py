"""Producers: one topic's (``Producer``) and a partitioned topic's (``PartitionedProducer``).

Every message gets a sequence id. Sent entries stay pending until the broker's receipt;
after a reconnect they are sent again, in order, with the same sequence ids, so that a
broker with deduplication stores each exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from stripemq.client.batching import (
    BatchContainer,
    BuiltEntry,
    OutgoingMessage,
    build_batch,
    build_single,
)
from stripemq.client.connection import ClientConnection
from stripemq.client.handler import ConnectionHandler
from stripemq.client.message import MessageId
from stripemq.client.options import (
    BatchingType,
    CompressionType,
    HashingScheme,
    PartitionsRoutingMode,
    ProducerAccessMode,
    Result,
)
from stripemq.client.routing import MessageRouter
from stripemq.clock import now_ms
from stripemq.errors import (
    AlreadyClosedError,
    AuthenticationError,
    AuthorizationError,
    ChecksumClientError,
    ClientTimeoutError,
    ConnectError,
    InvalidConfigurationError,
    MessageTooBigError,
    NotAllowedError,
    PersistenceClientError,
    ProducerFencedError,
    ProducerQueueIsFullError,
    StripeMQError,
    TopicNotFoundError,
    TopicTerminatedError,
    error_for_server_error,
)
from stripemq.lifecycle import Transitions
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import DEFAULT_MAX_MESSAGE_SIZE, encode_entry, encode_payload_command

if TYPE_CHECKING:
    from stripemq.client.client import AsyncClient

log = logging.getLogger(__name__)

SendCallback = Callable[[BaseException | None, MessageId | None], None]


class ProducerLifecycle(enum.Enum):
    """Where a producer is in its life (after Pulsar's ``HandlerState.State``).

    ``CONNECTING``: not attached, or attached with its pending entries not yet sent again;
    sends queue. ``READY``: attached and caught up; sends go out at once. ``FAILED``:
    reconnecting gave up for good (the reason is ``failure``). ``CLOSED``: sends raise.
    """

    CONNECTING = "connecting"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


_P = ProducerLifecycle
PRODUCER_TRANSITIONS = Transitions[ProducerLifecycle](
    {
        _P.CONNECTING: {_P.READY, _P.FAILED, _P.CLOSED},
        _P.READY: {_P.CONNECTING, _P.CLOSED},
        _P.FAILED: {_P.CLOSED},
        _P.CLOSED: set(),
    }
)


@dataclass
class ProducerConfig:
    """A producer's settings, named as the official client's ``create_producer`` arguments."""

    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30_000
    compression_type: CompressionType = CompressionType.NONE
    max_pending_messages: int = 1000
    max_pending_messages_across_partitions: int = 50_000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: int = 10
    message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution
    hashing_scheme: HashingScheme = HashingScheme.BoostHash
    message_router: Callable[[Any, int], int] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared
    initial_subscription_name: str | None = None
    batching_type: BatchingType = BatchingType.Default

    def __post_init__(self) -> None:
        if self.max_pending_messages < 1:
            raise InvalidConfigurationError("max_pending_messages must be at least 1")
        if self.send_timeout_millis < 0:
            raise InvalidConfigurationError("send_timeout_millis must not be negative")


@dataclass
class _PendingEntry:
    """One SEND waiting for its receipt."""

    built: BuiltEntry
    futures: list[asyncio.Future[MessageId]]
    created: float
    frame: bytes = b""

    @property
    def sequence_id(self) -> int:
        return self.built.sequence_id


def _to_millis(when: int | float | timedelta | None) -> int | None:
    if when is None:
        return None
    if isinstance(when, timedelta):
        return int(when.total_seconds() * 1000)
    return int(when)


def outgoing_message(
    content: bytes,
    *,
    properties: dict[str, str] | None = None,
    partition_key: str | None = None,
    ordering_key: str | bytes | None = None,
    sequence_id: int | None = None,
    replication_clusters: list[str] | None = None,
    disable_replication: bool = False,
    event_timestamp: int | None = None,
    deliver_at: int | None = None,
    deliver_after: int | float | timedelta | None = None,
) -> OutgoingMessage:
    """The message ``send`` was asked for, validated; ``deliver_after`` is a ``timedelta``
    or milliseconds, ``deliver_at`` milliseconds since the epoch."""
    if not isinstance(content, bytes | bytearray | memoryview):
        raise TypeError(f"message content must be bytes, not {type(content).__name__}")
    at = _to_millis(deliver_at)
    after = _to_millis(deliver_after)
    if after is not None:
        at = now_ms() + after
    if isinstance(ordering_key, str):
        ordering_key = ordering_key.encode()
    return OutgoingMessage(
        payload=bytes(content),
        sequence_id=-1 if sequence_id is None else sequence_id,
        properties={str(k): str(v) for k, v in (properties or {}).items()},
        partition_key=partition_key,
        ordering_key=ordering_key,
        event_timestamp=event_timestamp,
        deliver_at=at,
        replication_clusters=replication_clusters,
        disable_replication=disable_replication,
    )


def result_of(error: BaseException | None) -> Result:
    """The ``Result`` a ``send_async`` callback is given for ``error``."""
    if error is None:
        return Result.Ok
    for kind, result in _RESULTS:
        if isinstance(error, kind):
            return result
    return Result.UnknownError


_RESULTS: list[tuple[type[BaseException], Result]] = [
    (ClientTimeoutError, Result.Timeout),
    (AlreadyClosedError, Result.AlreadyClosed),
    (ProducerQueueIsFullError, Result.ProducerQueueIsFull),
    (MessageTooBigError, Result.MessageTooBig),
    (ConnectError, Result.ConnectError),
    (ProducerFencedError, Result.ProducerFenced),
    (TopicTerminatedError, Result.TopicTerminated),
    (NotAllowedError, Result.NotAllowedError),
    (ChecksumClientError, Result.ChecksumError),
    (PersistenceClientError, Result.BrokerPersistenceError),
    (InvalidConfigurationError, Result.InvalidConfiguration),
    (TopicNotFoundError, Result.TopicNotFound),
    (AuthenticationError, Result.AuthenticationError),
    (AuthorizationError, Result.AuthorizationError),
]


class SendApi:
    """``send`` and ``send_async`` as the official client offers them, over
    ``send_message``."""

    topic_name: str

    async def send_message(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        raise NotImplementedError

    def send_message_nowait(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        raise NotImplementedError

    def send_message_in_line(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        raise NotImplementedError

    @property
    def capacity(self) -> int:
        raise NotImplementedError

    def topic(self) -> str:
        return self.topic_name

    async def send(self, content: bytes, **options: Any) -> MessageId:
        """Send and wait until the message is durable; its id. Options: ``properties``,
        ``partition_key``, ``ordering_key``, ``sequence_id``, ``event_timestamp``,
        ``deliver_at`` (ms since the epoch), ``deliver_after`` (``timedelta`` or ms),
        ``replication_clusters``, ``disable_replication``."""
        future = await self.send_message(outgoing_message(content, **options))
        return await future

    async def send_async(
        self,
        content: bytes,
        callback: Callable[[Result, MessageId | None], Any] | None,
        **options: Any,
    ) -> asyncio.Future[MessageId]:
        """Queue the message (waiting for room if the producer blocks when full) and
        return; ``callback(result, message_id)`` is called once it is durable or failed."""
        try:
            future = await self.send_message(outgoing_message(content, **options))
        except StripeMQError as exc:
            if callback is None:
                raise
            callback(result_of(exc), None)
            failed: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            failed.exception()
            return failed
        if callback is not None:
            notify_when_done(future, callback)
        return future


def notify_when_done(
    future: asyncio.Future[MessageId], callback: Callable[[Result, MessageId | None], Any]
) -> None:
    """Call ``callback(result, message_id)`` once ``future`` settles."""

    def done(f: asyncio.Future[MessageId]) -> None:
        error = AlreadyClosedError("send cancelled") if f.cancelled() else f.exception()
        try:
            callback(result_of(error), None if error else f.result())
        except Exception:  # the application's callback must not break the client
            log.exception("send_async callback failed")

    future.add_done_callback(done)


class Producer(ConnectionHandler, SendApi):
    """A producer on one topic (or one partition)."""

    def __init__(
        self,
        client: AsyncClient,
        topic: str,
        config: ProducerConfig,
        partition: int = -1,
        max_pending: int | None = None,
    ) -> None:
        super().__init__(client, topic)
        self.lifecycle = ProducerLifecycle.CONNECTING  # changed only by _move_to
        self.config = config
        self.partition = partition
        self.producer_id = client.new_producer_id()
        self.name = config.producer_name or ""
        self._user_named = config.producer_name is not None
        self._max_pending = max_pending or config.max_pending_messages
        self._next_sequence = (
            config.initial_sequence_id + 1 if config.initial_sequence_id is not None else 0
        )
        self._last_published = (
            config.initial_sequence_id if config.initial_sequence_id is not None else -1
        )
        self._first_attach = True
        self._pending: deque[_PendingEntry] = deque()
        self._pending_messages = 0  # in _pending and in the batch
        self._space = asyncio.Condition()
        self._batch: BatchContainer[asyncio.Future[MessageId]] = BatchContainer(
            config.batching_max_messages,
            config.batching_max_allowed_size_in_bytes,
            key_based=config.batching_type is BatchingType.KeyBased,
        )
        self._batch_timer: asyncio.TimerHandle | None = None
        self._timeout_task: asyncio.Task[None] | None = None
        # Messages waiting (in order) for room, from send_message_in_line.
        self._waiting: deque[tuple[OutgoingMessage, asyncio.Future[MessageId]]] = deque()
        self._line_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"Producer({self.topic_name}, {self.name or '?'})"

    # ------------------------------------------------------------------ lifecycle

    @property
    def closed(self) -> bool:
        return self.lifecycle is ProducerLifecycle.CLOSED

    def mark_closed(self) -> None:
        self._move_to(ProducerLifecycle.CLOSED)

    def _move_to(self, new: ProducerLifecycle) -> None:
        """The one place the lifecycle changes; ``IllegalTransitionError`` if it may not."""
        owner = f"producer on {self.topic_name}"
        self.lifecycle = PRODUCER_TRANSITIONS.check(owner, self.lifecycle, new)

    # ------------------------------------------------------------------ attaching

    async def attach(self, connection: ClientConnection) -> None:
        request_id = connection.new_request_id()
        command = pb.CommandProducer(
            topic=self.topic_name,
            producer_id=self.producer_id,
            request_id=request_id,
            user_provided_producer_name=self._user_named,
            producer_access_mode=self.config.access_mode.value,
        )
        if self.name:
            command.producer_name = self.name
        if self.config.initial_subscription_name:
            command.initial_subscription_name = self.config.initial_subscription_name
        for key, value in self.config.properties.items():
            command.metadata.add(key=key, value=value)
        response = await connection.register(
            connection.producers,
            self.producer_id,
            self,
            command,
            request_id,
            lambda rid: pb.CommandCloseProducer(producer_id=self.producer_id, request_id=rid),
        )
        success = response.producer_success
        self.name = success.producer_name
        if self._first_attach:
            self._first_attach = False
            broker_last = success.last_sequence_id
            if self.config.initial_sequence_id is None and broker_last >= 0 and not self._pending:
                self._next_sequence = broker_last + 1
                self._last_published = broker_last
        self._resend(connection)
        if self._timeout_task is None and self.config.send_timeout_millis > 0:
            self._timeout_task = asyncio.get_running_loop().create_task(self._expire_loop())

    def _resend(self, connection: ClientConnection) -> None:
        if self._pending:
            log.info("%r: resending %d pending entries", self, len(self._pending))
        for entry in self._pending:
            connection.send_raw(entry.frame)
        if not self.closed:  # closed while attaching: it stays closed
            self._move_to(ProducerLifecycle.READY)

    def detached(self) -> None:
        if self.lifecycle is ProducerLifecycle.READY:
            self._move_to(ProducerLifecycle.CONNECTING)

    def failed(self, exc: StripeMQError) -> None:
        if not self.closed:
            self._move_to(ProducerLifecycle.FAILED)
        self._fail_all(exc)

    # ------------------------------------------------------------------ sending

    @property
    def max_message_size(self) -> int:
        connection = self.connection
        return connection.max_message_size if connection else DEFAULT_MAX_MESSAGE_SIZE

    def last_sequence_id(self) -> int:
        return self._last_published

    def producer_name(self) -> str:
        return self.name

    def _check_open(self) -> None:
        if self.closed:
            raise AlreadyClosedError(f"producer on {self.topic_name} is closed")
        if self.failure is not None:
            raise self.failure

    async def _reserve(self) -> None:
        if self._pending_messages < self._max_pending:
            return
        if not self.config.block_if_queue_full:
            raise ProducerQueueIsFullError(
                f"{self._pending_messages} messages pending on {self.topic_name}"
            )
        async with self._space:
            await self._space.wait_for(
                lambda: self._pending_messages < self._max_pending or self.closed
            )
        self._check_open()

    @property
    def capacity(self) -> int:
        """How many messages may wait for receipts at once."""
        return self._max_pending

    def _admit(self, message: OutgoingMessage) -> None:
        self._check_open()
        if message.size > self.max_message_size:
            raise MessageTooBigError(
                f"message of {message.size} bytes exceeds the maximum {self.max_message_size}"
            )

    async def send_message(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        """Queue ``message`` (waiting for room if the producer blocks when full); the
        returned future resolves to its id once durable."""
        self._admit(message)
        await self._reserve()
        return self._queue_message(message)

    def send_message_nowait(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        """Queue ``message`` now; ``ProducerQueueIsFullError`` if there is no room."""
        self._admit(message)
        if self._pending_messages >= self._max_pending:
            raise ProducerQueueIsFullError(
                f"{self._pending_messages} messages pending on {self.topic_name}"
            )
        return self._queue_message(message)

    def send_message_in_line(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        """Queue ``message`` now if there is room and nothing waits before it; otherwise
        it waits in line (in order) for room. For a blocking caller on another thread."""
        self._admit(message)
        if not self._waiting and self._pending_messages < self._max_pending:
            return self._queue_message(message)
        future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        self._waiting.append((message, future))
        if self._line_task is None or self._line_task.done():
            self._line_task = asyncio.get_running_loop().create_task(self._serve_line())
        return future

    async def _serve_line(self) -> None:
        while self._waiting:
            try:
                async with self._space:
                    await self._space.wait_for(
                        lambda: self._pending_messages < self._max_pending or self.closed
                    )
                self._check_open()
            except StripeMQError as exc:
                while self._waiting:
                    _, future = self._waiting.popleft()
                    if not future.done():
                        future.set_exception(exc)
                return
            message, future = self._waiting.popleft()
            _chain_future(self._queue_message(message), future)

    def _queue_message(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        if message.sequence_id < 0:
            message.sequence_id = self._next_sequence
        self._next_sequence = max(self._next_sequence, message.sequence_id + 1)
        future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        self._pending_messages += 1
        if self.config.batching_enabled and message.deliver_at is None:
            if not self._batch.has_room_for(message):
                self._flush_batch()
            if self._batch.add(message, future):
                self._flush_batch()
            elif self._batch_timer is None:
                delay = self.config.batching_max_publish_delay_ms / 1000
                self._batch_timer = asyncio.get_running_loop().call_later(delay, self._flush_batch)
        else:
            self._flush_batch()  # keep order: what was batched goes first
            built = build_single(message, self.name, self._compression, now_ms())
            self._enqueue(built, [future])
        return future

    @property
    def _compression(self) -> int:
        return self.config.compression_type.value

    def _flush_batch(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        if not len(self._batch):
            return
        for messages, futures in self._batch.drain():
            built = build_batch(messages, self.name, self._compression, now_ms())
            self._enqueue(built, futures)

    def _enqueue(self, built: BuiltEntry, futures: list[asyncio.Future[MessageId]]) -> None:
        entry = encode_entry(built.metadata, built.payload)
        if len(entry) > self.max_message_size:
            error = MessageTooBigError(
                f"entry of {len(entry)} bytes exceeds the maximum {self.max_message_size}"
            )
            self._settle(futures, error)
            return
        command = pb.CommandSend(
            producer_id=self.producer_id,
            sequence_id=built.sequence_id,
            num_messages=len(built.messages),
        )
        if built.batched:
            command.highest_sequence_id = built.highest_sequence_id
        pending = _PendingEntry(built, futures, time.monotonic())
        pending.frame = encode_payload_command(command, entry)
        self._pending.append(pending)
        if self.lifecycle is ProducerLifecycle.READY and self.connection is not None:
            try:
                self.connection.send_raw(pending.frame)
            except StripeMQError:
                pass  # resent after the reconnect

    def _settle(self, futures: list[asyncio.Future[MessageId]], error: BaseException) -> None:
        """Fail ``futures`` with ``error``; their room in the queue is free again."""
        self._pending_messages -= len(futures)
        for future in futures:
            if not future.done():
                future.set_exception(error)
        self._wake_senders()

    def _wake_senders(self) -> None:
        async def notify() -> None:
            async with self._space:
                self._space.notify_all()

        if self.config.block_if_queue_full:
            asyncio.get_running_loop().create_task(notify())

    # ------------------------------------------------------------------ receipts

    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        if not self._pending:
            log.debug("%r: receipt for %d with nothing pending", self, receipt.sequence_id)
            return
        head = self._pending[0]
        if receipt.sequence_id < head.sequence_id:
            log.debug("%r: late receipt for %d (timed out)", self, receipt.sequence_id)
            return
        if receipt.sequence_id > head.sequence_id:
            # Receipts come in order; a gap means the broker lost track: resend all.
            log.warning(
                "%r: receipt for %d while %d is first pending; reconnecting",
                self,
                receipt.sequence_id,
                head.sequence_id,
            )
            if self.connection is not None:
                asyncio.get_running_loop().create_task(self.connection.close())
            return
        self._pending.popleft()
        ledger, entry = receipt.message_id.ledgerId, receipt.message_id.entryId
        ids = _ids_of(ledger, entry, self.partition, head, self.topic_name)
        for future, message_id in zip(head.futures, ids, strict=True):
            if not future.done():
                future.set_result(message_id)
        self._last_published = head.built.highest_sequence_id
        self._pending_messages -= len(head.futures)
        self._wake_senders()

    def on_send_error(self, error: pb.CommandSendError) -> None:
        if not self._pending or self._pending[0].sequence_id != error.sequence_id:
            return
        if error.error == pb.ChecksumError:
            head = self._pending.popleft()
            self._settle(head.futures, ChecksumClientError(error.message))
            return
        log.warning(
            "%r: send of %d failed (%s: %s); reconnecting to resend",
            self,
            error.sequence_id,
            pb.ServerError.Name(error.error),
            error.message,
        )
        if error.error in (pb.TopicTerminatedError, pb.ProducerFenced, pb.NotAllowedError):
            failure = error_for_server_error(error.error, error.message)
            self._fail_all(failure)
            return
        if self.connection is not None:
            asyncio.get_running_loop().create_task(self.connection.close())

    async def _expire_loop(self) -> None:
        """Fail entries that waited longer than the send timeout."""
        timeout = self.config.send_timeout_millis / 1000
        while not self.closed:
            await asyncio.sleep(min(timeout, 1.0) / 2)
            now = time.monotonic()
            while self._pending and now - self._pending[0].created >= timeout:
                head = self._pending.popleft()
                self._settle(
                    head.futures,
                    ClientTimeoutError(
                        f"no receipt for sequence id {head.sequence_id} on {self.topic_name} "
                        f"within {timeout:g} s"
                    ),
                )

    def _fail_all(self, error: BaseException) -> None:
        self._flush_batch()
        while self._pending:
            head = self._pending.popleft()
            self._settle(head.futures, error)

    # ------------------------------------------------------------------ flush / close

    async def flush(self) -> None:
        """Send what is batched and wait until everything sent so far is durable."""
        self._flush_batch()
        futures = [f for entry in self._pending for f in entry.futures]
        if futures:
            await asyncio.wait(futures)  # never cancels them, even if this wait is

    async def close(self) -> None:
        """Flush, then leave the broker; later sends raise ``AlreadyClosedError``."""
        if self.closed:
            return
        with contextlib.suppress(StripeMQError, TimeoutError):
            if self.attached:
                async with asyncio.timeout(self.client.operation_timeout_s):
                    await self.flush()
        self._move_to(ProducerLifecycle.CLOSED)
        await self.stop_reconnecting()
        self._fail_all(AlreadyClosedError(f"producer on {self.topic_name} closed"))
        if self._timeout_task is not None:
            self._timeout_task.cancel()
        connection = self.connection
        self.connection = None
        if connection is not None and not connection.is_closed:
            connection.producers.pop(self.producer_id, None)
            request_id = connection.new_request_id()
            with contextlib.suppress(StripeMQError):
                await connection.request(
                    pb.CommandCloseProducer(producer_id=self.producer_id, request_id=request_id),
                    request_id,
                )
        async with self._space:
            self._space.notify_all()
        self.client.forget(self)


def _chain_future(source: asyncio.Future[MessageId], target: asyncio.Future[MessageId]) -> None:
    """Settle ``target`` as ``source`` settles."""

    def copy(f: asyncio.Future[MessageId]) -> None:
        if target.done():
            return
        if f.cancelled():
            target.cancel()
        elif f.exception() is not None:
            target.set_exception(f.exception())  # type: ignore[arg-type]
        else:
            target.set_result(f.result())

    source.add_done_callback(copy)


def _ids_of(
    ledger: int, entry: int, partition: int, pending: _PendingEntry, topic: str
) -> list[MessageId]:
    unknown = (1 << 64) - 1
    if ledger == unknown:  # a duplicate the broker stored before
        ledger = entry = -1
    count = len(pending.futures)
    if not pending.built.batched:
        return [
            MessageId(
                ledger_id=ledger,
                entry_id=entry,
                partition=partition,
                batch_index=-1,
                batch_size=0,
                topic=topic,
            )
        ]
    return [
        MessageId(
            ledger_id=ledger,
            entry_id=entry,
            partition=partition,
            batch_index=i,
            batch_size=count,
            topic=topic,
        )
        for i in range(count)
    ]


class PartitionedProducer(SendApi):
    """A producer on every partition of a partitioned topic, routing each message."""

    def __init__(
        self, client: AsyncClient, topic: str, partitions: int, config: ProducerConfig
    ) -> None:
        self.client = client
        self.topic_name = topic
        self.config = config
        per_partition = max(
            1,
            min(
                config.max_pending_messages,
                config.max_pending_messages_across_partitions // partitions,
            ),
        )
        self.producers = [
            Producer(client, f"{topic}-partition-{i}", config, i, per_partition)
            for i in range(partitions)
        ]
        window = config.batching_max_publish_delay_ms / 1000 if config.batching_enabled else 0
        self._router = MessageRouter(config.message_routing_mode, config.hashing_scheme, window)
        self.closed = False

    @property
    def name(self) -> str:
        return self.producers[0].name

    def producer_name(self) -> str:
        return self.name

    def is_connected(self) -> bool:
        return all(p.attached for p in self.producers)

    async def connect_first(self) -> None:
        try:
            await asyncio.gather(*(p.connect_first() for p in self.producers))
        except BaseException:
            await asyncio.gather(*(p.close() for p in self.producers), return_exceptions=True)
            raise

    def choose(self, message: OutgoingMessage) -> Producer:
        count = len(self.producers)
        if self.config.message_router is not None:
            try:
                index = self.config.message_router(message.as_message(self.topic_name), count)
            except Exception as exc:  # the application's router
                raise InvalidConfigurationError(f"message router failed: {exc!r}") from exc
            if not isinstance(index, int) or not 0 <= index < count:
                raise InvalidConfigurationError(f"message router chose partition {index}")
            return self.producers[index]
        return self.producers[self._router.choose(message.partition_key, count)]

    @property
    def capacity(self) -> int:
        return sum(p.capacity for p in self.producers)

    async def send_message(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        if self.closed:
            raise AlreadyClosedError(f"producer on {self.topic_name} is closed")
        return await self.choose(message).send_message(message)

    def send_message_nowait(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        if self.closed:
            raise AlreadyClosedError(f"producer on {self.topic_name} is closed")
        return self.choose(message).send_message_nowait(message)

    def send_message_in_line(self, message: OutgoingMessage) -> asyncio.Future[MessageId]:
        if self.closed:
            raise AlreadyClosedError(f"producer on {self.topic_name} is closed")
        return self.choose(message).send_message_in_line(message)

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id() for p in self.producers)

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.producers))

    async def close(self) -> None:
        self.closed = True
        await asyncio.gather(*(p.close() for p in self.producers), return_exceptions=True)
        self.client.forget(self)
