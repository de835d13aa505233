"""Consumers: the common interface (``ConsumerBase``) and the consumer of one topic or
partition (``TopicConsumer``), which holds its broker-side attachment, flow permits,
grouped acks, negative acks, the ack timeout and dead-lettering."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from stripemq.client.connection import ClientConnection
from stripemq.client.dead_letter import DeadLetters
from stripemq.client.handler import ConnectionHandler
from stripemq.client.message import Message, MessageId
from stripemq.client.options import (
    BatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    InitialPosition,
    KeySharedMode,
    RegexSubscriptionMode,
)
from stripemq.client.receiver_queue import ReceiverQueue
from stripemq.client.trackers import (
    AckGroupingTracker,
    BatchAcks,
    NegativeAckTracker,
    UnackedMessageTracker,
)
from stripemq.errors import (
    AlreadyClosedError,
    ClientTimeoutError,
    CumulativeAcknowledgementNotAllowedError,
    InvalidConfigurationError,
    InvalidMessageError,
    NotAllowedError,
    StripeMQError,
)
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import bits_of
from stripemq.proto.compression import decompress
from stripemq.proto.frames import Frame, ProtocolError, decode_batch

if TYPE_CHECKING:
    from stripemq.client.client import AsyncClient

log = logging.getLogger(__name__)

_SHARED = (ConsumerType.Shared, ConsumerType.KeyShared)


@dataclass
class ConsumerConfig:
    """A consumer's settings, named as the official client's ``subscribe`` arguments."""

    subscription_name: str
    consumer_type: ConsumerType = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    max_total_receiver_queue_size_across_partitions: int = 50_000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int | None = None
    negative_ack_redelivery_delay_ms: int = 60_000
    properties: dict[str, str] = field(default_factory=dict)
    pattern_auto_discovery_period: int = 60
    initial_position: InitialPosition = InitialPosition.Latest
    start_message_id_inclusive: bool = False
    batch_receive_policy: BatchReceivePolicy | None = None
    key_shared_policy: ConsumerKeySharedPolicy | None = None
    batch_index_ack_enabled: bool = False
    regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly
    dead_letter_policy: ConsumerDeadLetterPolicy | None = None
    retry_enable: bool = False
    ack_grouping_time_ms: int = 100
    ack_grouping_max_size: int = 1000
    priority_level: int = 0
    durable: bool = True  # False for a reader
    start_message_id: MessageId | None = None  # a reader's start
    is_read_compacted: bool = False  # read what topic compaction kept, then the rest

    def __post_init__(self) -> None:
        if not self.subscription_name:
            raise InvalidConfigurationError("a subscription name is required")
        if self.receiver_queue_size < 1:
            raise InvalidConfigurationError("receiver_queue_size must be at least 1")
        if self.unacked_messages_timeout_ms is not None and self.unacked_messages_timeout_ms < 1000:
            raise InvalidConfigurationError("unacked_messages_timeout_ms must be at least 1000")
        if self.is_read_compacted and self.consumer_type not in (
            ConsumerType.Exclusive,
            ConsumerType.Failover,
        ):
            raise InvalidConfigurationError(
                "is_read_compacted is only allowed on Exclusive or Failover subscriptions"
            )
        if self.retry_enable and self.dead_letter_policy is None:
            self.dead_letter_policy = ConsumerDeadLetterPolicy(max_redeliver_count=16)


def _delay_ms(delay: int | float | timedelta) -> int:
    if isinstance(delay, timedelta):
        return int(delay.total_seconds() * 1000)
    return int(delay)


class ConsumerBase:
    """What every consumer offers, in the official client's names."""

    topic_name: str
    config: ConsumerConfig
    queue: ReceiverQueue
    dead_letters: DeadLetters | None

    @property
    def closed(self) -> bool:
        raise NotImplementedError

    # ----------------------------------------------------------- what each kind provides

    def _consumer_of(self, target: Message | MessageId) -> TopicConsumer:
        raise NotImplementedError

    def consumer_name(self) -> str:
        raise NotImplementedError

    def is_connected(self) -> bool:
        raise NotImplementedError

    def redeliver_unacknowledged_messages(self) -> None:
        raise NotImplementedError

    async def seek(self, target: MessageId | int) -> None:
        raise NotImplementedError

    async def get_last_message_id(self) -> MessageId:
        raise NotImplementedError

    async def unsubscribe(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def _id_of(self, target: Message | MessageId) -> MessageId:
        if isinstance(target, Message):
            return target.message_id()
        if isinstance(target, MessageId):
            return target
        raise TypeError(f"expected a Message or MessageId, not {type(target).__name__}")

    def topic(self) -> str:
        return self.topic_name

    def subscription_name(self) -> str:
        return self.config.subscription_name

    def _check_open(self) -> None:
        if self.closed:
            raise AlreadyClosedError(f"consumer on {self.topic_name} is closed")

    # ----------------------------------------------------------- receiving

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; ``TimeoutError`` (``ClientTimeoutError``) after the timeout."""
        self._check_open()
        return await self.queue.take(None if timeout_millis is None else timeout_millis / 1000)

    async def batch_receive(self) -> list[Message]:
        """Messages up to the batch receive policy's limits (at least one unless it times
        out with none)."""
        self._check_open()
        policy = self.config.batch_receive_policy or BatchReceivePolicy()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + policy.timeout_ms / 1000 if policy.timeout_ms > 0 else None
        messages: list[Message] = []
        size = 0
        while True:
            if 0 < policy.max_num_messages <= len(messages):
                break
            if 0 < policy.max_num_bytes <= size:
                break
            message = self.queue.take_nowait()
            if message is None:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    message = await self.queue.take(remaining)
                except ClientTimeoutError:
                    break
            messages.append(message)
            size += len(message)
        return messages

    # ----------------------------------------------------------- acknowledging

    # Acks are coroutines, as in the official ``pulsar.asyncio``; they return once the ack
    # is queued (acks are sent grouped). The checks run first, in the caller's thread.

    def ack_target(self, target: Message | MessageId) -> tuple[TopicConsumer, MessageId]:
        """The consumer that must acknowledge ``target``, and its id; raises if none."""
        self._check_open()
        return self._consumer_of(target), self._id_of(target)

    def cumulative_ack_target(self, target: Message | MessageId) -> tuple[TopicConsumer, MessageId]:
        if self.config.consumer_type in _SHARED:
            raise CumulativeAcknowledgementNotAllowedError(
                f"cumulative acks are not allowed on a {self.config.consumer_type.name} "
                "subscription"
            )
        return self.ack_target(target)

    async def acknowledge(self, target: Message | MessageId) -> None:
        consumer, message_id = self.ack_target(target)
        consumer.ack_individual(message_id)

    async def acknowledge_cumulative(self, target: Message | MessageId) -> None:
        consumer, message_id = self.cumulative_ack_target(target)
        consumer.ack_cumulative(message_id)

    async def negative_acknowledge(self, target: Message | MessageId) -> None:
        consumer, message_id = self.ack_target(target)
        consumer.nack(message_id)

    async def reconsume_later(
        self,
        message: Message,
        delay: int | float | timedelta,
        properties: dict[str, str] | None = None,
    ) -> None:
        """Publish ``message`` to the retry-letter topic, to be received again after
        ``delay`` (ms or ``timedelta``), and acknowledge it here."""
        self._check_open()
        if not self.config.retry_enable or self.dead_letters is None:
            raise NotAllowedError("reconsume_later needs subscribe(..., retry_enable=True)")
        consumer = self._consumer_of(message)
        await self.dead_letters.send_to_retry(message, _delay_ms(delay), properties)
        consumer.ack_individual(message.message_id())


@dataclass
class StartFilter:
    """Messages a reader must not see: those before its start (or the start itself)."""

    start: MessageId
    inclusive: bool

    def drops(self, message_id: MessageId) -> bool:
        start = self.start
        key = (message_id.ledger_id(), message_id.entry_id())
        start_key = (start.ledger_id(), start.entry_id())
        if key != start_key:
            return key < start_key
        if start.batch_index() < 0:  # the whole start entry
            return not self.inclusive
        index = message_id.batch_index()
        return index < start.batch_index() or (index == start.batch_index() and not self.inclusive)


class TopicConsumer(ConnectionHandler, ConsumerBase):
    """A consumer of one topic or partition."""

    def __init__(
        self,
        client: AsyncClient,
        topic: str,
        config: ConsumerConfig,
        *,
        partition: int = -1,
        queue: ReceiverQueue | None = None,
        dead_letters: DeadLetters | None = None,
    ) -> None:
        ConnectionHandler.__init__(self, client, topic)
        self.topic_name = topic
        self.config = config
        self.partition = partition
        self.consumer_id = client.new_consumer_id()
        self.name = config.consumer_name or secrets.token_hex(5)
        self.queue = queue if queue is not None else ReceiverQueue(self._taken)
        if dead_letters is None and config.dead_letter_policy is not None:
            dead_letters = DeadLetters(
                client, topic, config.subscription_name, config.dead_letter_policy
            )
        self.dead_letters = dead_letters
        self._owns_dead_letters = queue is None
        self._permits = 0
        self._acks = AckGroupingTracker(
            group_time_s=config.ack_grouping_time_ms / 1000,
            max_size=config.ack_grouping_max_size,
        )
        self._batches: dict[tuple[int, int, int], BatchAcks] = {}
        self._nacks = NegativeAckTracker(config.negative_ack_redelivery_delay_ms / 1000)
        timeout = config.unacked_messages_timeout_ms
        self._unacked = UnackedMessageTracker(timeout / 1000) if timeout else None
        self._possible_dead: dict[MessageId, list[Message]] = {}  # entry -> its messages
        self._start: StartFilter | None = None
        if config.start_message_id is not None and config.start_message_id not in (
            MessageId.earliest,
            MessageId.latest,
        ):
            self._start = StartFilter(config.start_message_id, config.start_message_id_inclusive)
        self._last_taken: MessageId | None = None
        self._sought_time = False  # sought to a publish time; nothing taken since
        self._seeking = False
        self._active = True
        self._housekeeping: asyncio.Task[None] | None = None
        self._redelivering: set[asyncio.Task[None]] = set()
        self._last_ack_flush = time.monotonic()
        self.end_of_topic = False

    def __repr__(self) -> str:
        return f"Consumer({self.topic_name}, {self.config.subscription_name}, {self.name})"

    def consumer_name(self) -> str:
        return self.name

    def _consumer_of(self, target: Message | MessageId) -> TopicConsumer:
        message_id = self._id_of(target)
        if message_id.topic is not None and message_id.topic != self.topic_name:
            raise InvalidMessageError(
                f"message {message_id} is from {message_id.topic}, not {self.topic_name}"
            )
        return self

    # ------------------------------------------------------------------ attaching

    def _subscribe_command(self, request_id: int) -> pb.CommandSubscribe:
        config = self.config
        command = pb.CommandSubscribe(
            topic=self.topic_name,
            subscription=config.subscription_name,
            subType=config.consumer_type.value,
            consumer_id=self.consumer_id,
            request_id=request_id,
            consumer_name=self.name,
            priority_level=config.priority_level,
            durable=config.durable,
            initialPosition=config.initial_position.value,
            read_compacted=config.is_read_compacted,
        )
        for key, value in config.properties.items():
            command.metadata.add(key=key, value=value)
        if not config.durable:
            start = self._last_taken or config.start_message_id or MessageId.latest
            command.start_message_id.CopyFrom(start.entry_id_only().to_proto())
        policy = config.key_shared_policy
        if config.consumer_type is ConsumerType.KeyShared and policy is not None:
            meta = command.keySharedMeta
            meta.keySharedMode = policy.key_shared_mode.value
            meta.allowOutOfOrderDelivery = policy.allow_out_of_order_delivery
            if policy.key_shared_mode is KeySharedMode.Sticky:
                for first, last in policy.sticky_ranges:
                    meta.hashRanges.add(start=first, end=last)
        return command

    async def attach(self, connection: ClientConnection) -> None:
        request_id = connection.new_request_id()
        await connection.register(
            connection.consumers,
            self.consumer_id,
            self,
            self._subscribe_command(request_id),
            request_id,
            lambda rid: pb.CommandCloseConsumer(consumer_id=self.consumer_id, request_id=rid),
        )
        # Everything not acknowledged comes again: drop what is still queued from before.
        self._drop_queued()
        if self._last_taken is not None and not self.config.durable:
            self._start = StartFilter(self._last_taken, inclusive=False)
        self._seeking = False
        self._permits = 0
        self.flush_acks(connection)  # acks made while away go first: fewer come back
        connection.send_command(
            pb.CommandFlow(consumer_id=self.consumer_id, messagePermits=self._queue_size)
        )
        if self._housekeeping is None:
            self._housekeeping = asyncio.get_running_loop().create_task(
                self._housekeeping_loop(), name=f"{self!r} housekeeping"
            )

    @property
    def _queue_size(self) -> int:
        return self.config.receiver_queue_size

    def _drop_queued(self) -> int:
        dropped = self.queue.remove_if(lambda m: m._consumer is self)
        self._batches.clear()
        self._possible_dead.clear()
        return len(dropped)

    def failed(self, exc: StripeMQError) -> None:
        """Reconnecting failed for good: receivers get the reason instead of waiting."""
        self.queue.fail(exc)

    def on_active_change(self, active: bool) -> None:
        self._active = active

    def on_end_of_topic(self) -> None:
        self.end_of_topic = True

    # ------------------------------------------------------------------ receiving

    def on_message(self, command: pb.CommandMessage, frame: Frame) -> None:
        if self._seeking:
            return  # from before the seek
        entry_id = MessageId.from_proto(command.message_id, self.topic_name)
        if frame.metadata is None:
            log.error("%r: entry %s is unusable (%s); discarding", self, entry_id, frame.problem)
            self._discard(entry_id, pb.CommandAck.ChecksumMismatch, 1)
            return
        metadata = frame.metadata
        try:
            payload = decompress(metadata.compression, frame.payload, metadata.uncompressed_size)
            messages = self._unpack(command, metadata, payload, entry_id)
        except (InvalidMessageError, ProtocolError) as exc:
            log.error("%r: entry %s cannot be decoded (%s); discarding", self, entry_id, exc)
            self._discard(entry_id, pb.CommandAck.DecompressionError, _messages_in(metadata))
            return
        policy = self.config.dead_letter_policy
        dead = policy is not None and command.redelivery_count >= policy.max_redeliver_count
        delivered = [
            message
            for message in messages
            if not self._acks.is_duplicate(message.message_id())
            and not (self._start is not None and self._start.drops(message.message_id()))
        ]
        if dead and delivered:
            self._possible_dead[entry_id.entry_id_only()] = delivered
        for message in delivered:
            self.queue.put(message)
        # The broker counted every message of the entry against the permits; those not
        # handed on (acknowledged before, before a reader's start) are given back now.
        undelivered = _messages_in(metadata) - len(delivered)
        if undelivered > 0:
            self._add_permits(undelivered)

    def _unpack(
        self,
        command: pb.CommandMessage,
        metadata: pb.MessageMetadata,
        payload: bytes,
        entry_id: MessageId,
    ) -> list[Message]:
        ledger, entry = entry_id.ledger_id(), entry_id.entry_id()
        redeliveries = command.redelivery_count
        if not metadata.HasField("num_messages_in_batch"):
            message_id = MessageId(
                ledger_id=ledger,
                entry_id=entry,
                partition=self.partition,
                batch_index=-1,
                batch_size=0,
                topic=self.topic_name,
            )
            return [self._message(payload, message_id, metadata, redeliveries, None)]
        count = metadata.num_messages_in_batch
        singles = decode_batch(payload, count)
        words = command.ack_set or command.message_id.ack_set  # older brokers: the latter
        unacked = bits_of(words, count) if words else None
        if any(single.metadata.compacted_out for single in singles):
            # Left out by topic compaction: never delivered, counted as acknowledged (the
            # Java client's rule; the broker's ack set says so too).
            unacked = [
                (unacked is None or unacked[i]) and not single.metadata.compacted_out
                for i, single in enumerate(singles)
            ]
        messages = []
        for index, single in enumerate(singles):
            if unacked is not None and not unacked[index]:
                continue  # acknowledged before (batch-index ack), or compacted out
            message_id = MessageId(
                ledger_id=ledger,
                entry_id=entry,
                partition=self.partition,
                batch_index=index,
                batch_size=count,
                topic=self.topic_name,
            )
            messages.append(
                self._message(single.payload, message_id, metadata, redeliveries, single.metadata)
            )
        if messages:
            state = BatchAcks(count)
            if unacked is not None:
                state.unacked = list(unacked)
            self._batches[entry_id.entry_key] = state
        return messages

    def _message(
        self,
        payload: bytes,
        message_id: MessageId,
        metadata: pb.MessageMetadata,
        redeliveries: int,
        single: Any,
    ) -> Message:
        source = single if single is not None else metadata
        return Message(
            _data=payload,
            _message_id=message_id,
            _topic=self.topic_name,
            _properties={p.key: p.value for p in source.properties},
            _partition_key=source.partition_key if source.HasField("partition_key") else None,
            _ordering_key=source.ordering_key if source.HasField("ordering_key") else None,
            _publish_timestamp=metadata.publish_time,
            _event_timestamp=source.event_time if source.HasField("event_time") else 0,
            _redelivery_count=redeliveries,
            _producer_name=metadata.producer_name,
            _consumer=self,
        )

    def _discard(self, entry_id: MessageId, reason: int, messages: int) -> None:
        """Acknowledge an entry no application could read, so it is not sent forever."""
        if self.connection is not None:
            with contextlib.suppress(StripeMQError):
                self.connection.send_command(
                    pb.CommandAck(
                        consumer_id=self.consumer_id,
                        ack_type=pb.CommandAck.Individual,
                        message_id=[entry_id.to_proto()],
                        validation_error=reason,  # type: ignore[arg-type]
                    )
                )
        self._add_permits(messages)

    def _taken(self, message: Message) -> None:
        """The application took ``message``: one more permit for the broker."""
        consumer = message._consumer
        if isinstance(consumer, TopicConsumer):
            consumer.message_taken(message)

    def message_taken(self, message: Message) -> None:
        self._last_taken = message.message_id()
        self._sought_time = False
        if self._unacked is not None:
            self._unacked.add(message.message_id(), time.monotonic())
        self._add_permits(1)

    def _add_permits(self, count: int) -> None:
        self._permits += count
        if self._permits >= max(1, self._queue_size // 2):
            self._send_flow()

    def _send_flow(self) -> None:
        if self._permits and self.connection is not None and not self._seeking:
            try:
                self.connection.send_command(
                    pb.CommandFlow(consumer_id=self.consumer_id, messagePermits=self._permits)
                )
                self._permits = 0
            except StripeMQError:
                pass  # the re-attach asks for a full queue anyway

    # ------------------------------------------------------------------ acks

    def ack_individual(self, message_id: MessageId) -> None:
        entry = message_id.entry_id_only()
        if message_id.batch_index() >= 0 and message_id.batch_size > 1:
            state = self._batches.get(entry.entry_key)
            if state is None:
                state = BatchAcks(message_id.batch_size)
                self._batches[entry.entry_key] = state
            if not state.ack(message_id.batch_index()):
                if self.config.batch_index_ack_enabled:
                    self._acks.add_batch_index(entry, state.unacked)
                    self._after_ack()
                return
            del self._batches[entry.entry_key]
        self._acks.add_individual(entry)
        self._possible_dead.pop(entry, None)
        if self._unacked is not None:
            self._unacked.remove(entry)
        self._after_ack()

    def ack_cumulative(self, message_id: MessageId) -> None:
        entry = message_id.entry_id_only()
        target: MessageId | None = entry
        if message_id.batch_index() >= 0 and message_id.batch_size > 1:
            state = self._batches.get(entry.entry_key) or BatchAcks(message_id.batch_size)
            if not state.ack_up_to(message_id.batch_index()):
                self._batches[entry.entry_key] = state
                # The entry is not done: everything before it is.
                target = (
                    MessageId(
                        ledger_id=entry.ledger_id(),
                        entry_id=entry.entry_id() - 1,
                        partition=entry.partition(),
                    )
                    if entry.entry_id() > 0
                    else None
                )
            else:
                self._batches.pop(entry.entry_key, None)
        if target is not None:
            self._acks.add_cumulative(target)
        for key in [k for k in self._possible_dead if k <= entry]:
            del self._possible_dead[key]
        if self._unacked is not None and target is not None:
            self._unacked.remove_up_to(target)
        self._after_ack()

    def _after_ack(self) -> None:
        if self._acks.should_flush():
            self.flush_acks()

    def flush_acks(self, connection: ClientConnection | None = None) -> None:
        """Send the grouped acks (on ``connection``, else the current one)."""
        self._last_ack_flush = time.monotonic()
        connection = connection or self.connection
        if connection is None or not self._acks.has_pending:
            return
        commands = self._acks.flush(self.consumer_id)
        for command in commands:
            try:
                connection.send_command(command)
            except StripeMQError:
                log.debug("%r: acks lost with the connection; they come again", self)

    # ------------------------------------------------------------------ redelivery

    def nack(self, message_id: MessageId) -> None:
        self._nacks.add(message_id, time.monotonic())
        if self._unacked is not None:
            self._unacked.remove(message_id)

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to send again everything not acknowledged."""
        self._check_open()
        self._redeliver_all()

    def _redeliver_all(self) -> None:
        if self.connection is None:
            return
        dropped = self._drop_queued()
        if self._unacked is not None:
            self._unacked.clear()
        self._nacks.clear()
        with contextlib.suppress(StripeMQError):
            self.connection.send_command(
                pb.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id)
            )
        self._add_permits(dropped)

    async def _redeliver(self, entries: list[MessageId]) -> None:
        """Give ``entries`` back, sending those past the redelivery limit to the DLQ."""
        dead = [e for e in entries if e in self._possible_dead]
        if dead and self.dead_letters is not None:
            for entry in dead:
                messages = self._possible_dead.pop(entry)
                state = self._batches.get(entry.entry_key)
                if state is not None:  # those of a batch acknowledged already stay here
                    messages = [m for m in messages if state.unacked[m.message_id().batch_index()]]
                try:
                    for message in messages:
                        await self.dead_letters.send_to_dead_letter(message)
                except StripeMQError as exc:
                    log.warning("%r: dead-lettering %s failed (%s)", self, entry, exc)
                    continue
                self._batches.pop(entry.entry_key, None)
                self._acks.add_individual(entry)
                entries.remove(entry)
            self.flush_acks()
        if not entries or self.connection is None:
            return
        if self.config.consumer_type not in _SHARED:
            self._redeliver_all()  # one consumer, in order: the broker rewinds
            return
        for entry in entries:
            self._batches.pop(entry.entry_key, None)
        with contextlib.suppress(StripeMQError):
            self.connection.send_command(
                pb.CommandRedeliverUnacknowledgedMessages(
                    consumer_id=self.consumer_id, message_ids=[e.to_proto() for e in entries]
                )
            )

    async def _housekeeping_loop(self) -> None:
        """Grouped acks, due negative acks and the ack timeout, on one timer."""
        tick = max(0.01, min(0.1, self.config.ack_grouping_time_ms / 1000 or 0.1))
        while not self.closed:
            await asyncio.sleep(tick)
            try:
                now = time.monotonic()
                if now - self._last_ack_flush >= self._acks.group_time_s:
                    self.flush_acks()
                due = self._nacks.pop_due(now)
                if self._unacked is not None:
                    due += self._unacked.pop_expired(now)
                if due:  # dead-lettering may wait on a producer: not in this loop
                    task = asyncio.get_running_loop().create_task(self._redeliver(sorted(set(due))))
                    self._redelivering.add(task)
                    task.add_done_callback(self._redelivering.discard)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not stop acks from flowing
                log.exception("%r: housekeeping failed", self)

    # ------------------------------------------------------------------ seek

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id or a publish time (ms since the epoch);
        the next message is the one sought (or the first published at or after it)."""
        self._check_open()
        connection = await self._connection_when_attached()
        request_id = connection.new_request_id()
        command = pb.CommandSeek(consumer_id=self.consumer_id, request_id=request_id)
        if isinstance(target, MessageId):
            command.message_id.CopyFrom(target.entry_id_only().to_proto())
        else:
            command.message_publish_time = int(target)
        self._seeking = True
        try:
            await connection.request(command, request_id)
        except BaseException:
            self._seeking = False
            raise
        self._acks.reset()
        self._nacks.clear()
        if self._unacked is not None:
            self._unacked.clear()
        self._last_taken = None
        if isinstance(target, MessageId) and target not in (MessageId.earliest, MessageId.latest):
            self._start = StartFilter(target, inclusive=True)
        else:
            self._start = None
        self._sought_time = not isinstance(target, MessageId)
        if not self.config.durable and isinstance(target, MessageId):
            self.config.start_message_id = target.entry_id_only()
        self._drop_queued()
        # Brokers disconnect a subscription's consumers after a seek: stop listening for
        # that notice and subscribe again, to the subscription now at its new position.
        connection.consumers.pop(self.consumer_id, None)
        self.connection_lost()

    # ------------------------------------------------------------------ the rest

    async def _connection_when_attached(self) -> ClientConnection:
        """The connection, once (re)attached (a seek or a broker's restart detaches)."""
        if not await self.wait_attached(self.client.operation_timeout_s):
            raise ClientTimeoutError(f"{self!r} is not connected")
        assert self.connection is not None
        return self.connection

    async def _last_and_mark_delete(self) -> tuple[MessageId, MessageId]:
        connection = await self._connection_when_attached()
        request_id = connection.new_request_id()
        response = await connection.request(
            pb.CommandGetLastMessageId(consumer_id=self.consumer_id, request_id=request_id),
            request_id,
        )
        body = response.getLastMessageIdResponse
        last = MessageId.from_proto(body.last_message_id, self.topic_name)
        mark_delete = MessageId.from_proto(body.consumer_mark_delete_position, self.topic_name)
        return last, mark_delete

    async def get_last_message_id(self) -> MessageId:
        """The id of the topic's last entry."""
        self._check_open()
        return (await self._last_and_mark_delete())[0]

    async def has_message_available(self) -> bool:
        """Whether a message is queued or the topic holds one after the last taken."""
        self._check_open()
        if any(m._consumer is self for m in self.queue.snapshot()):
            return True
        last, mark_delete = await self._last_and_mark_delete()
        if last.entry_id() < 0:
            return False
        if self._last_taken is not None:
            return has_messages_after(last, self._last_taken)
        start = self.config.start_message_id
        if start is None or start in (MessageId.earliest, MessageId.latest) or self._sought_time:
            # Nothing read yet: is there an entry past where the subscription stands?
            return (last.ledger_id(), last.entry_id()) > (
                mark_delete.ledger_id(),
                mark_delete.entry_id(),
            )
        if self.config.start_message_id_inclusive:
            return (last.ledger_id(), last.entry_id()) >= (start.ledger_id(), start.entry_id())
        return has_messages_after(last, start)

    async def unsubscribe(self) -> None:
        """Delete the subscription on the broker, then close."""
        self._check_open()
        connection = await self._connection_when_attached()
        request_id = connection.new_request_id()
        await connection.request(
            pb.CommandUnsubscribe(consumer_id=self.consumer_id, request_id=request_id),
            request_id,
        )
        connection.consumers.pop(self.consumer_id, None)
        self.connection = None
        await self.close()

    async def close(self) -> None:
        """Send pending acks and leave the broker; receive then raises ``AlreadyClosedError``."""
        if self.closed:
            return
        self.flush_acks()
        self.mark_closed()
        await self.stop_reconnecting()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        for task in list(self._redelivering):
            task.cancel()
        connection = self.connection
        self.connection = None
        if connection is not None and not connection.is_closed:
            connection.consumers.pop(self.consumer_id, None)
            request_id = connection.new_request_id()
            with contextlib.suppress(StripeMQError):
                await connection.request(
                    pb.CommandCloseConsumer(consumer_id=self.consumer_id, request_id=request_id),
                    request_id,
                )
        if self.queue._on_taken == self._taken:  # the queue is this consumer's own
            self.queue.close()
        if self.dead_letters is not None and self._owns_dead_letters:
            await self.dead_letters.close()
        self.client.forget(self)


def has_messages_after(last: MessageId, seen: MessageId) -> bool:
    """Whether the topic's ``last`` entry holds something after message ``seen``."""
    if (last.ledger_id(), last.entry_id()) != (seen.ledger_id(), seen.entry_id()):
        return (last.ledger_id(), last.entry_id()) > (seen.ledger_id(), seen.entry_id())
    if seen.batch_index() < 0:
        return False  # the whole entry was seen
    if last.batch_index() >= 0:
        return seen.batch_index() < last.batch_index()  # the broker named the last index
    if seen.batch_size <= 0:
        return True  # a batch of unknown size (an id made by hand): maybe more in it
    return seen.batch_index() < seen.batch_size - 1


def _messages_in(metadata: pb.MessageMetadata) -> int:
    """Messages the broker counts for an entry (against the consumer's permits)."""
    if metadata.HasField("num_messages_in_batch"):
        return max(1, metadata.num_messages_in_batch)
    return 1


Listener = Callable[[Any, Message], Any]
