"""Building what a producer sends, sans-IO: one message, or a batch of them, as the
``MessageMetadata`` and payload of one entry."""

from __future__ import annotations

from dataclasses import dataclass, field

from stripemq.client.compression import compress
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import BatchMessage, encode_batch


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
    _replication(metadata, messages[0])
    payload = _compressed(metadata, compression, encode_batch(singles))
    return BuiltEntry(metadata, payload, list(messages), batched=True)


def _compressed(metadata: pb.MessageMetadata, compression: int, payload: bytes) -> bytes:
    if compression == pb.NONE:
        return payload
    metadata.compression = compression  # type: ignore[assignment]
    metadata.uncompressed_size = len(payload)
    return compress(compression, payload)


class BatchContainer:
    """Messages waiting to go out as one batch, bounded by count and bytes."""

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max(1, max_messages)
        self.max_bytes = max(1, max_bytes)
        self.messages: list[OutgoingMessage] = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.messages)

    def has_room_for(self, message: OutgoingMessage) -> bool:
        """Whether ``message`` fits; an empty container takes any one message."""
        if not self.messages:
            return True
        return (
            len(self.messages) < self.max_messages and self.bytes + message.size <= self.max_bytes
        )

    def add(self, message: OutgoingMessage) -> bool:
        """Add ``message``; true when the container is now full and should be sent."""
        self.messages.append(message)
        self.bytes += message.size
        return len(self.messages) >= self.max_messages or self.bytes >= self.max_bytes

    def drain(self) -> list[OutgoingMessage]:
        messages, self.messages, self.bytes = self.messages, [], 0
        return messages
