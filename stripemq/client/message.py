"""Message ids and received messages, with the official ``pulsar-client`` accessors."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar

from stripemq.errors import InvalidMessageError
from stripemq.proto import pulsar_api_pb2 as pb

_U64 = (1 << 64) - 1
_LONG_MAX = (1 << 63) - 1


@functools.total_ordering
class MessageId:
    """Where a message is: ``ledger_id:entry_id``, its ``batch_index`` within the entry
    (-1 if the entry is not a batch) and the ``partition`` it came from (-1 if none).

    ``topic`` says which topic it belongs to when known; it is not part of the identity.
    Accessors are methods, as in the official client.
    """

    __slots__ = ("_batch_index", "_entry_id", "_ledger_id", "_partition", "batch_size", "topic")

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __init__(
        self,
        partition: int = -1,
        ledger_id: int = -1,
        entry_id: int = -1,
        batch_index: int = -1,
        batch_size: int = 0,
        topic: str | None = None,
    ) -> None:
        """Arguments in the official ``pulsar.MessageId``'s order."""
        self._ledger_id = ledger_id
        self._entry_id = entry_id
        self._partition = partition
        self._batch_index = batch_index
        self.batch_size = batch_size
        self.topic = topic

    def ledger_id(self) -> int:
        return self._ledger_id

    def entry_id(self) -> int:
        return self._entry_id

    def partition(self) -> int:
        return self._partition

    def batch_index(self) -> int:
        return self._batch_index

    @property
    def entry_key(self) -> tuple[int, int, int]:
        """The entry (not the message) it names, as a dictionary key."""
        return (self._partition, self._ledger_id, self._entry_id)

    def _order(self) -> tuple[int, int, int, int]:
        # Ledger and entry first, as the official clients compare; a whole entry sorts
        # after every message of it.
        batch = self._batch_index if self._batch_index >= 0 else _LONG_MAX
        return (self._ledger_id, self._entry_id, batch, self._partition)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return (self._ledger_id, self._entry_id, self._partition, self._batch_index) == (
            other._ledger_id,
            other._entry_id,
            other._partition,
            other._batch_index,
        )

    def __lt__(self, other: MessageId) -> bool:
        return self._order() < other._order()

    def __hash__(self) -> int:
        return hash((self._ledger_id, self._entry_id, self._partition, self._batch_index))

    def __str__(self) -> str:
        return f"({self._ledger_id},{self._entry_id},{self._partition},{self._batch_index})"

    def __repr__(self) -> str:
        return f"MessageId{self}"

    # ------------------------------------------------------------------ wire forms

    def to_proto(self) -> pb.MessageIdData:
        """The protocol's ``MessageIdData`` (negative ids as the all-ones uint64)."""
        data = pb.MessageIdData(ledgerId=self._ledger_id & _U64, entryId=self._entry_id & _U64)
        if self._partition >= 0:
            data.partition = self._partition
        if self._batch_index >= 0:
            data.batch_index = self._batch_index
        if self.batch_size > 0:
            data.batch_size = self.batch_size
        return data

    @classmethod
    def from_proto(cls, data: pb.MessageIdData, topic: str | None = None) -> MessageId:
        return cls(
            ledger_id=_signed(data.ledgerId),
            entry_id=_signed(data.entryId),
            partition=data.partition if data.HasField("partition") else -1,
            batch_index=data.batch_index if data.HasField("batch_index") else -1,
            batch_size=data.batch_size if data.HasField("batch_size") else 0,
            topic=topic,
        )

    def serialize(self) -> bytes:
        """Bytes the official clients' ``MessageId.deserialize`` reads, and back."""
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes, topic: str | None = None) -> MessageId:
        proto = pb.MessageIdData()
        try:
            proto.ParseFromString(data)
        except Exception as exc:  # protobuf raises DecodeError or RuntimeError
            raise InvalidMessageError(f"not a serialized message id: {exc}") from None
        if not proto.IsInitialized():
            raise InvalidMessageError("not a serialized message id: fields missing")
        return cls.from_proto(proto, topic)

    def with_topic(self, topic: str) -> MessageId:
        return MessageId(
            ledger_id=self._ledger_id,
            entry_id=self._entry_id,
            partition=self._partition,
            batch_index=self._batch_index,
            batch_size=self.batch_size,
            topic=topic,
        )

    def entry_id_only(self) -> MessageId:
        """The id of the whole entry this message is part of."""
        return MessageId(
            ledger_id=self._ledger_id,
            entry_id=self._entry_id,
            partition=self._partition,
            batch_index=-1,
            batch_size=0,
            topic=self.topic,
        )


def _signed(value: int) -> int:
    return value - (1 << 64) if value > _LONG_MAX else value


MessageId.earliest = MessageId(ledger_id=-1, entry_id=-1)
MessageId.latest = MessageId(ledger_id=_LONG_MAX, entry_id=_LONG_MAX)


@dataclass(eq=False)
class Message:
    """A received message. Accessors are methods, as in the official client."""

    _data: bytes
    _message_id: MessageId
    _topic: str
    _properties: dict[str, str]
    _partition_key: str | None
    _ordering_key: bytes | None
    _publish_timestamp: int
    _event_timestamp: int
    _redelivery_count: int
    _producer_name: str
    _consumer: Any = field(default=None, repr=False)  # which consumer it came through

    def data(self) -> bytes:
        return self._data

    def value(self) -> bytes:
        return self._data

    def message_id(self) -> MessageId:
        return self._message_id

    def topic_name(self) -> str:
        return self._topic

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def partition_key(self) -> str:
        return self._partition_key or ""

    def ordering_key(self) -> bytes:
        return self._ordering_key or b""

    def publish_timestamp(self) -> int:
        return self._publish_timestamp

    def event_timestamp(self) -> int:
        return self._event_timestamp

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def producer_name(self) -> str:
        return self._producer_name

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Message({self._topic} {self._message_id} {len(self._data)} bytes)"
