"""What topic compaction keeps (sans-IO): the latest message of every key, by Pulsar's rules.

Compaction reads a topic twice up to its horizon (Pulsar's two-phase compactor). Phase one
feeds every entry to ``LatestByKey``, which remembers where each key was last written; a
tombstone (an empty or null value) forgets the key. Phase two asks ``compact_entry`` what
each entry becomes in the compacted ledger: kept as it is, a batch rewritten with its
obscured messages marked ``compacted_out`` (so batch indexes, which consumers acknowledge
by, stay what they were), or dropped. Messages without a key are dropped unless the broker
retains them (``topicCompactionRetainNullKey``).

A batch that cannot be opened (encrypted, or in a codec this broker lacks) is compacted as
one message, under the key its entry's metadata carries, as Pulsar does with batches it
cannot read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from stripemq.errors import StripeMQError
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.compression import compress, decompress
from stripemq.proto.frames import (
    BatchMessage,
    decode_batch,
    encode_batch,
    encode_entry,
    parse_entry,
)

log = logging.getLogger(__name__)

__all__ = [
    "EntryMessages",
    "Kept",
    "LatestByKey",
    "compact_entry",
    "compacted_out",
    "read_messages",
]

WHOLE_ENTRY = -1  # the batch index of a message that is its entry (or an unopened batch)


@dataclass(frozen=True, slots=True)
class KeyedMessage:
    """One message of an entry as compaction sees it."""

    index: int  # in its batch, or WHOLE_ENTRY
    key: str | None  # the partition key; None: the message has none
    tombstone: bool  # an empty or null value: the key is deleted


@dataclass(frozen=True)
class EntryMessages:
    """An entry's metadata and live messages; ``batch`` holds the opened batch (``None``
    for a single message or a batch that cannot be opened)."""

    metadata: pb.MessageMetadata
    messages: list[KeyedMessage]
    batch: list[BatchMessage] | None


def _key_of(has_key: bool, key: str) -> str | None:
    return key if has_key else None


def read_messages(data: bytes) -> EntryMessages | None:
    """The messages of a stored entry; ``None`` for an entry without readable metadata
    (which has no key either, and is dropped)."""
    metadata, payload, problem = parse_entry(data)
    if metadata is None or problem is not None:
        return None
    entry_key = _key_of(metadata.HasField("partition_key"), metadata.partition_key)
    if not metadata.HasField("num_messages_in_batch"):
        empty = len(payload) == 0 or (
            metadata.compression != pb.NONE and metadata.uncompressed_size == 0
        )
        tombstone = metadata.null_value or empty
        return EntryMessages(metadata, [KeyedMessage(WHOLE_ENTRY, entry_key, tombstone)], None)
    batch = _open_batch(metadata, payload)
    if batch is None:
        return EntryMessages(metadata, [KeyedMessage(WHOLE_ENTRY, entry_key, False)], None)
    messages = [
        KeyedMessage(
            i,
            _key_of(m.metadata.HasField("partition_key"), m.metadata.partition_key),
            m.metadata.null_value or m.metadata.payload_size == 0,
        )
        for i, m in enumerate(batch)
        if not m.metadata.compacted_out  # removed by an earlier compaction
    ]
    return EntryMessages(metadata, messages, batch)


def _open_batch(metadata: pb.MessageMetadata, payload: bytes) -> list[BatchMessage] | None:
    if metadata.encryption_keys:
        return None
    try:
        raw = decompress(metadata.compression, payload, metadata.uncompressed_size)
        return decode_batch(raw, metadata.num_messages_in_batch)
    except StripeMQError as exc:
        log.debug("a batch compaction cannot open is kept whole: %s", exc)
        return None


def compacted_out(data: bytes) -> tuple[int, list[int]] | None:
    """A compacted batch entry's size and the indexes of its messages compaction marked
    out (``None``: not a batch, or none marked). They go to consumers as acknowledged: the
    C++ client (the official Python client's) does not look at ``compacted_out``, but
    skips what the MESSAGE ack set says is acknowledged."""
    metadata, payload, problem = parse_entry(data)
    if metadata is None or problem is not None or not metadata.HasField("num_messages_in_batch"):
        return None
    batch = _open_batch(metadata, payload)
    if batch is None:
        return None
    out = [i for i, m in enumerate(batch) if m.metadata.compacted_out]
    return (len(batch), out) if out else None


@dataclass(frozen=True, slots=True)
class MessageRef:
    position: Position
    index: int


class LatestByKey:
    """Phase one: where every key was last written (tombstones forget it), and Pulsar's
    count of removed events: a value replaced, a tombstone, a message without a key that
    is not retained (so ``a=1, a=2, a=<tombstone>`` is two, not the three messages left
    out)."""

    def __init__(self, *, retain_null_key: bool = False) -> None:
        self._latest: dict[str, MessageRef] = {}
        self.retain_null_key = retain_null_key
        self.messages_read = 0
        self.removed_events = 0

    def add(self, position: Position, entry: EntryMessages | None) -> None:
        if entry is None:
            self.removed_events += 1  # unreadable: left out, as a message without a key
            return
        for message in entry.messages:
            self.messages_read += 1
            if message.key is None:
                self.removed_events += not self.retain_null_key
            elif message.tombstone:
                self._latest.pop(message.key, None)
                self.removed_events += 1
            else:
                replaced = self._latest.get(message.key)
                self._latest[message.key] = MessageRef(position, message.index)
                self.removed_events += replaced is not None

    def is_latest(self, position: Position, message: KeyedMessage) -> bool:
        if message.key is None:
            return False
        return self._latest.get(message.key) == MessageRef(position, message.index)

    def __len__(self) -> int:
        return len(self._latest)


@dataclass(frozen=True, slots=True)
class Kept:
    """What phase two makes of an entry: its bytes in the compacted ledger (``None``: it
    is dropped) and how many of its messages went."""

    data: bytes | None
    removed: int


def compact_entry(
    position: Position,
    data: bytes,
    entry: EntryMessages | None,
    latest: LatestByKey,
    *,
    retain_null_key: bool = False,
) -> Kept:
    """Phase two for one entry (``entry`` is ``read_messages(data)``)."""
    if entry is None:
        return Kept(None, 1)
    keep = [
        (m.key is None and retain_null_key) or latest.is_latest(position, m) for m in entry.messages
    ]
    kept = sum(keep)
    removed = len(keep) - kept
    if kept == 0:
        return Kept(None, removed)
    if entry.batch is None or removed == 0:
        return Kept(data, 0)
    dropped = {m.index for m, k in zip(entry.messages, keep, strict=True) if not k}
    return Kept(_rewrite_batch(entry.metadata, entry.batch, dropped), removed)


def _rewrite_batch(
    metadata: pb.MessageMetadata, batch: list[BatchMessage], dropped: set[int]
) -> bytes:
    """The batch with the ``dropped`` messages marked compacted out, payloads emptied;
    compressed again with its own codec."""
    messages: list[BatchMessage] = []
    for i, message in enumerate(batch):
        if i in dropped:
            single = pb.SingleMessageMetadata()
            single.CopyFrom(message.metadata)
            single.compacted_out = True
            messages.append(BatchMessage(single, b""))
        else:
            messages.append(message)
    raw = encode_batch(messages)
    rewritten = pb.MessageMetadata()
    rewritten.CopyFrom(metadata)
    if metadata.compression != pb.NONE or metadata.HasField("uncompressed_size"):
        rewritten.uncompressed_size = len(raw)
    return encode_entry(rewritten, compress(metadata.compression, raw))
