"""Building what a producer sends, sans-IO: one message, or a batch of them, as the
``MessageMetadata`` and payload of one entry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from stripemq.client.message import Message, MessageId
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.compression import compress
from stripemq.proto.frames import BatchMessage, encode_batch

T = TypeVar("T")


@dataclass
class OutgoingMessage:
    """A message the application asked to send, with the sequence id it was given."""

    payload: bytes
    sequence_id: int = -1
    properties: dict[str, str] = field(default_factory=dict)
    partition_key: str | None = None
    ordering_key: bytes | None = None
    event_timestamp: int | None = None
    deliver_at: int | None = None  # ms since the epoch
    replication_clusters: list[str] | None = None
    disable_replication: bool = False

    @property
    def size(self) -> int:
        return len(self.payload)

    def as_message(self, topic: str) -> Message:
        """This message as a ``Message`` (what a custom message router is given)."""
        return Message(
            _data=self.payload,
            _message_id=MessageId(),
            _topic=topic,
            _properties=dict(self.properties),
            _partition_key=self.partition_key,
            _ordering_key=self.ordering_key,
            _publish_timestamp=0,
            _event_timestamp=self.event_timestamp or 0,
            _redelivery_count=0,
            _producer_name="",
        )


@dataclass
class BuiltEntry:
    """The metadata and (compressed) payload of one SEND, and the messages it carries."""

    metadata: pb.MessageMetadata
    payload: bytes
    messages: list[OutgoingMessage]
    batched: bool

    @property
    def sequence_id(self) -> int:
        return self.messages[0].sequence_id

    @property
    def highest_sequence_id(self) -> int:
        return self.messages[-1].sequence_id


def _describe(
    target: pb.MessageMetadata | pb.SingleMessageMetadata, message: OutgoingMessage
) -> None:
    """Properties, keys and event time: the fields both metadata types share."""
    for key, value in message.properties.items():
        target.properties.add(key=key, value=value)
    if message.partition_key is not None:
        target.partition_key = message.partition_key
    if message.ordering_key is not None:
        target.ordering_key = message.ordering_key
    if message.event_timestamp:
        target.event_time = message.event_timestamp


def _replication(metadata: pb.MessageMetadata, message: OutgoingMessage) -> None:
    if message.disable_replication:
        metadata.replicate_to.append("__local__")
    elif message.replication_clusters:
        metadata.replicate_to.extend(message.replication_clusters)


def build_single(
    message: OutgoingMessage, producer_name: str, compression: int, publish_time: int
) -> BuiltEntry:
    """One message as its own entry."""
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=message.sequence_id,
        publish_time=publish_time,
    )
    _describe(metadata, message)
    if message.deliver_at is not None:
        metadata.deliver_at_time = message.deliver_at
    _replication(metadata, message)
    payload = _compressed(metadata, compression, message.payload)
    return BuiltEntry(metadata, payload, [message], batched=False)


def build_batch(
    messages: list[OutgoingMessage], producer_name: str, compression: int, publish_time: int
) -> BuiltEntry:
    """Several messages as one batch entry; each keeps its key, properties and sequence id."""
    singles: list[BatchMessage] = []
    for message in messages:
        single = pb.SingleMessageMetadata(payload_size=len(message.payload))
        _describe(single, message)
        single.sequence_id = message.sequence_id
        singles.append(BatchMessage(single, message.payload))
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=messages[0].sequence_id,
        highest_sequence_id=messages[-1].sequence_id,
        publish_time=publish_time,
        num_messages_in_batch=len(messages),
    )
    # The batch is dispatched (Key_Shared) by the first message's keys, as the official
    # clients do.
    first = messages[0]
    if first.partition_key is not None:
        metadata.partition_key = first.partition_key
    if first.ordering_key is not None:
        metadata.ordering_key = first.ordering_key
    _replication(metadata, first)
    payload = _compressed(metadata, compression, encode_batch(singles))
    return BuiltEntry(metadata, payload, list(messages), batched=True)


def _compressed(metadata: pb.MessageMetadata, compression: int, payload: bytes) -> bytes:
    if compression == pb.NONE:
        return payload
    metadata.compression = compression  # type: ignore[assignment]
    metadata.uncompressed_size = len(payload)
    return compress(compression, payload)


def _key_of(message: OutgoingMessage) -> bytes | str | None:
    return message.ordering_key if message.ordering_key is not None else message.partition_key


class BatchContainer(Generic[T]):
    """Messages waiting to go out as batches, bounded by count and bytes, each with a
    ``token`` of the caller's (its future). A key-based container keeps one batch per key
    (so Key_Shared consumers get each key's messages); a default one a single batch."""

    def __init__(self, max_messages: int, max_bytes: int, key_based: bool = False) -> None:
        self.key_based = key_based
        self.max_messages = max(1, max_messages)
        self.max_bytes = max(1, max_bytes)
        self._groups: dict[bytes | str | None, list[tuple[OutgoingMessage, T]]] = {}
        self._count = 0
        self.bytes = 0

    def __len__(self) -> int:
        return self._count

    def has_room_for(self, message: OutgoingMessage) -> bool:
        """Whether ``message`` fits; an empty container takes any one message."""
        if not self._count:
            return True
        return self._count < self.max_messages and self.bytes + message.size <= self.max_bytes

    def add(self, message: OutgoingMessage, token: T) -> bool:
        """Add ``message``; true when the container is now full and should be sent."""
        key = _key_of(message) if self.key_based else None
        self._groups.setdefault(key, []).append((message, token))
        self._count += 1
        self.bytes += message.size
        return self._count >= self.max_messages or self.bytes >= self.max_bytes

    def drain(self) -> list[tuple[list[OutgoingMessage], list[T]]]:
        """The batches to send (one per key when key-based), emptying the container."""
        groups = [
            ([message for message, _ in group], [token for _, token in group])
            for group in self._groups.values()
        ]
        self._groups, self._count, self.bytes = {}, 0, 0
        return groups
