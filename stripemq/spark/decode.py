"""Stored entries to Arrow rows, sans-IO.

An entry is what the broker stored for one SEND: an optional ``0x0e01`` CRC32C, the
``MessageMetadata`` and the payload, possibly compressed (LZ4/ZLIB/ZSTD/SNAPPY) and possibly
a batch of messages each with its ``SingleMessageMetadata``. Every entry's checksum is
verified; one that fails, or does not parse, raises ``CorruptEntryError`` naming topic,
ledger and entry: a reader never skips a message silently.

A row is what a Pulsar consumer would receive for the message, as the official Java client
builds it (``MessageImpl`` of a batch message):

- a batch gives one row per message, except those marked ``compacted_out`` (consumers never
  see them); an entry carrying a ``marker_type`` (transaction and replication markers) gives
  none, as brokers never dispatch markers;
- ``__key``, ``__messageProperties`` come from the message's own metadata in a batch, from
  the entry's otherwise; ``__eventTime`` from the message's, else the entry's, null when 0;
  ``value`` is null for a message sent with a null value;
- ``__sequenceId`` of batch message *i* is its own ``sequence_id`` when the producer wrote
  one, else the entry's plus *i* (Pulsar's ``RawMessageImpl``, which Pulsar SQL read);
- ``__messageId`` is ``MessageIdData`` serialized as ``MessageIdImpl.toByteArray`` and
  ``BatchMessageIdImpl`` write it: ledger and entry, the partition only when the topic is a
  partition, ``batch_index`` and ``batch_size`` only for batch entries. It is encoded by hand
  here (fields in number order, as protobuf serializes them), since decoding builds one per
  row; the unit tests check it byte for byte against ``MessageIdData.SerializeToString``.

Chunked and encrypted messages cannot be turned into rows without the other chunks or the
keys: such an entry raises ``SparkSourceError`` rather than yield a partial payload.

Columns are collected as Python lists and turned into Arrow arrays once per ``build``.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from google.protobuf.message import DecodeError

from stripemq.errors import CorruptEntryError, InvalidMessageError, SparkSourceError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.compression import decompress
from stripemq.proto.frames import ProtocolError, entry_metadata, parse_entry
from stripemq.spark.planning import TopicPartitionRef
from stripemq.spark.schema import arrow_schema

log = logging.getLogger(__name__)

_U64 = (1 << 64) - 1
_U32 = struct.Struct(">I")
_I64_LIMIT = 1 << 63
# Spark's timestamps end with the year 9999; later event times (a producer writing
# nanoseconds, say) cannot be represented and are read as null.
MAX_TIMESTAMP_MS = 253_402_300_799_999

# MessageIdData's field keys: (number << 3) | wire type 0 (varint).
_LEDGER_ID = b"\x08"
_ENTRY_ID = b"\x10"
_PARTITION = b"\x18"
_BATCH_INDEX = b"\x20"
_BATCH_SIZE = b"\x30"
_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative integer."""
    if value < 0x80:
        return _SMALL_VARINTS[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def message_id_prefix(ledger_id: int, entry_id: int, partition: int) -> bytes:
    """The serialized ``MessageIdData`` of a non-batch message; a batch message's id is
    this followed by ``batch_index_suffix``."""
    head = _LEDGER_ID + _varint(ledger_id & _U64) + _ENTRY_ID + _varint(entry_id & _U64)
    return head + _PARTITION + _varint(partition) if partition >= 0 else head


class RecordBatchBuilder:
    """Accumulates the rows of entries of one topic partition into Arrow record batches."""

    def __init__(self, ref: TopicPartitionRef) -> None:
        self.ref = ref
        self._clear()

    def _clear(self) -> None:
        self._values: list[bytes | None] = []
        self._keys: list[str | None] = []
        self._ids: list[bytes] = []
        self._publish: list[int] = []
        self._event: list[int | None] = []
        self._property_offsets: list[int] = [0]
        self._property_keys: list[str] = []
        self._property_values: list[str] = []
        self._ledgers: list[int] = []
        self._entries: list[int] = []
        self._batch_indexes: list[int] = []
        self._sequences: list[int] = []
        self._producers: list[str] = []
        self._bytes = 0

    def _where(self, ledger_id: int, entry_id: int) -> str:
        return f"[{self.ref.topic}] ledger {ledger_id} entry {entry_id}"

    def add_entry(self, ledger_id: int, entry_id: int, data: bytes) -> int:
        """Add the messages of one stored entry (``data`` without the bookie's header);
        how many rows it gave.

        Raises:
            CorruptEntryError: bad checksum, unreadable metadata, batch or compression.
            SparkSourceError: a chunk of a chunked message, or an encrypted entry.
        """
        metadata, payload, problem = parse_entry(data)
        if metadata is None:
            raise CorruptEntryError(f"{self._where(ledger_id, entry_id)}: {problem}")
        if metadata.HasField("marker_type"):
            return 0  # brokers never dispatch markers to consumers
        if metadata.num_chunks_from_msg > 1:
            raise SparkSourceError(
                f"{self._where(ledger_id, entry_id)} holds chunk {metadata.chunk_id} of "
                f"{metadata.num_chunks_from_msg} of a chunked message, which this source "
                "does not reassemble"
            )
        if metadata.encryption_keys:
            raise SparkSourceError(
                f"{self._where(ledger_id, entry_id)} is encrypted; this source cannot decrypt"
            )
        if metadata.compression:
            payload = self._decompress(metadata, payload, ledger_id, entry_id)
        publish_ms = metadata.publish_time
        if publish_ms > MAX_TIMESTAMP_MS:
            raise CorruptEntryError(
                f"{self._where(ledger_id, entry_id)}: publish time {publish_ms} is out of range"
            )
        if metadata.HasField("num_messages_in_batch"):
            rows = self._add_batch(metadata, payload, ledger_id, entry_id)
            if rows:
                self._publish.extend([publish_ms * 1000] * rows)
                self._ledgers.extend([ledger_id] * rows)
                self._entries.extend([entry_id] * rows)
                self._producers.extend([metadata.producer_name] * rows)
            return rows
        # One message: the per-row work inline, as this runs once per row.
        self._values.append(None if metadata.null_value else payload)
        key = metadata.partition_key
        self._keys.append(key if key or metadata.HasField("partition_key") else None)
        self._ids.append(message_id_prefix(ledger_id, entry_id, self.ref.partition))
        event_ms = metadata.event_time
        self._event.append(event_ms * 1000 if 0 < event_ms <= MAX_TIMESTAMP_MS else None)
        properties = metadata.properties
        if properties:
            self._add_properties(properties)
        self._property_offsets.append(len(self._property_keys))
        self._batch_indexes.append(-1)
        sequence = metadata.sequence_id
        self._sequences.append(sequence - (1 << 64) if sequence >= _I64_LIMIT else sequence)
        self._publish.append(publish_ms * 1000)
        self._ledgers.append(ledger_id)
        self._entries.append(entry_id)
        self._producers.append(metadata.producer_name)
        self._bytes += len(payload)
        return 1

    def _decompress(
        self, metadata: pb.MessageMetadata, payload: bytes, ledger_id: int, entry_id: int
    ) -> bytes:
        size = metadata.uncompressed_size
        try:
            return decompress(metadata.compression, payload, size)
        except InvalidMessageError as exc:
            name = pb.CompressionType.Name(metadata.compression)
            raise CorruptEntryError(f"{self._where(ledger_id, entry_id)}: {name}: {exc}") from None

    def _add_batch(
        self, metadata: pb.MessageMetadata, payload: bytes, ledger_id: int, entry_id: int
    ) -> int:
        """The batch's messages, parsed here rather than with ``frames.decode_batch`` (the
        same format and checks) because this loop runs once per row: one reused metadata
        object, no intermediate records, ``HasField`` asked only when a value is unset."""
        count = metadata.num_messages_in_batch
        where = self._where(ledger_id, entry_id)
        if count < 0:
            raise CorruptEntryError(f"{where}: batch of {count} messages")
        prefix = message_id_prefix(ledger_id, entry_id, self.ref.partition) + _BATCH_INDEX
        size_suffix = _BATCH_SIZE + _varint(count)
        entry_event_ms = metadata.event_time
        entry_null = metadata.null_value
        first_sequence = metadata.sequence_id
        values, keys, ids, events = self._values, self._keys, self._ids, self._event
        indexes, sequences = self._batch_indexes, self._sequences
        property_keys, offsets = self._property_keys, self._property_offsets
        add_properties = self._add_properties
        single = pb.SingleMessageMetadata()
        parse, has_field = single.ParseFromString, single.HasField
        unpack = _U32.unpack_from
        end = len(payload)
        offset = 0
        rows = 0
        added = 0
        try:
            for index in range(count):
                if offset + 4 > end:
                    raise ProtocolError(f"message {index} of {count} is missing")
                (length,) = unpack(payload, offset)
                offset += 4
                if offset + length > end:
                    raise ProtocolError(f"message {index}: metadata runs past the payload")
                parse(payload[offset : offset + length])
                offset += length
                size = single.payload_size
                if size <= 0 and (size < 0 or not has_field("payload_size")):
                    raise ProtocolError(f"message {index}: metadata lacks its payload size")
                if offset + size > end:
                    raise ProtocolError(f"message {index} runs past the payload")
                value = payload[offset : offset + size]
                offset += size
                if single.compacted_out:
                    continue  # consumers never see it
                rows += 1
                added += size
                values.append(None if entry_null or single.null_value else value)
                key = single.partition_key
                keys.append(key if key or has_field("partition_key") else None)
                ids.append(prefix + _varint(index) + size_suffix)
                event_ms = single.event_time or entry_event_ms
                events.append(event_ms * 1000 if 0 < event_ms <= MAX_TIMESTAMP_MS else None)
                properties = single.properties
                if properties:
                    add_properties(properties)
                offsets.append(len(property_keys))
                indexes.append(index)
                sequence = single.sequence_id
                if not sequence and not has_field("sequence_id"):
                    sequence = (first_sequence + index) & _U64
                sequences.append(sequence - (1 << 64) if sequence >= _I64_LIMIT else sequence)
            if offset != end:
                raise ProtocolError(f"{end - offset} stray bytes after {count} messages")
        except (ProtocolError, DecodeError, RuntimeError) as exc:
            self._truncate(len(self._values) - rows)
            raise CorruptEntryError(f"{where}: bad batch of {count}: {exc}") from None
        self._bytes += added
        return rows

    def _truncate(self, rows: int) -> None:
        """Drop the rows after the first ``rows`` (those of an entry that failed halfway)."""
        for column in (
            self._values,
            self._keys,
            self._ids,
            self._event,
            self._batch_indexes,
            self._sequences,
        ):
            del column[rows:]
        del self._property_offsets[rows + 1 :]
        del self._property_keys[self._property_offsets[-1] :]
        del self._property_values[self._property_offsets[-1] :]

    def _add_properties(self, properties: Any) -> None:
        """One row's map entries (its offset is the caller's); a key given twice keeps its
        last value, as consumers' maps do."""
        if len(properties) == 1:
            pair = properties[0]
            self._property_keys.append(pair.key)
            self._property_values.append(pair.value)
        else:
            merged = {pair.key: pair.value for pair in properties}
            self._property_keys.extend(merged)
            self._property_values.extend(merged.values())

    def __len__(self) -> int:
        """Rows added since the last ``build``."""
        return len(self._values)

    @property
    def payload_bytes(self) -> int:
        """Bytes of the values added since the last ``build`` (to bound a batch's size)."""
        return self._bytes

    def build(self) -> Any:
        """The rows added since the last ``build`` as one ``pyarrow.RecordBatch`` with
        ``schema.arrow_schema()``; the builder is empty afterwards."""
        import pyarrow as pa

        schema = arrow_schema()
        rows = len(self._values)
        timestamp = schema.field("__publishTime").type
        properties = pa.MapArray.from_arrays(
            pa.array(self._property_offsets, pa.int32()),
            pa.array(self._property_keys, pa.string()),
            pa.array(self._property_values, pa.string()),
            type=schema.field("__messageProperties").type,
        )
        columns = [
            pa.array(self._values, pa.binary()),
            pa.array(self._keys, pa.string()),
            pa.repeat(pa.scalar(self.ref.topic, pa.string()), rows),
            pa.array(self._ids, pa.binary()),
            pa.array(self._publish, timestamp),
            pa.array(self._event, timestamp),
            properties,
            pa.array(self._ledgers, pa.int64()),
            pa.array(self._entries, pa.int64()),
            pa.array(self._batch_indexes, pa.int32()),
            pa.repeat(pa.scalar(self.ref.partition, pa.int32()), rows),
            pa.array(self._sequences, pa.int64()),
            pa.array(self._producers, pa.string()),
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def entry_publish_time(data: bytes) -> int:
    """The publish time (ms) of a stored entry, from its metadata alone.

    Raises:
        CorruptEntryError: the entry's metadata does not parse (message without names:
        the caller adds the topic and ledger).
    """
    metadata = entry_metadata(data)
    if metadata is None:
        raise CorruptEntryError("the entry's metadata does not parse")
    return int(metadata.publish_time)
