"""Stored entries to Arrow rows, sans-IO.

An entry is what the broker stored for one SEND: an optional ``0x0e01`` CRC32C, the
``MessageMetadata`` and the payload, possibly compressed (LZ4/ZLIB/ZSTD) and possibly a
batch of messages each with its ``SingleMessageMetadata``. Every entry's checksum is
verified; one that fails, or does not parse, raises ``CorruptEntryError`` naming topic,
ledger and entry: a reader never skips a message silently.
"""

from __future__ import annotations

from typing import Any

from stripemq.spark.planning import TopicPartitionRef


class RecordBatchBuilder:
    """Accumulates the rows of entries of one topic partition into Arrow record batches."""

    def __init__(self, ref: TopicPartitionRef) -> None:
        self.ref = ref

    def add_entry(self, ledger_id: int, entry_id: int, data: bytes) -> int:
        """Add the messages of one stored entry (``data`` without the bookie's header);
        how many rows it gave.

        Raises:
            CorruptEntryError: bad checksum, unreadable metadata, batch or compression.
        """
        raise NotImplementedError

    def __len__(self) -> int:
        """Rows added since the last ``build``."""
        raise NotImplementedError

    def build(self) -> Any:
        """The rows added since the last ``build`` as one ``pyarrow.RecordBatch`` with
        ``schema.arrow_schema()``; the builder is empty afterwards."""
        raise NotImplementedError


def entry_publish_time(data: bytes) -> int:
    """The publish time (ms) of a stored entry, from its metadata alone.

    Raises:
        CorruptEntryError: the entry's metadata does not parse (message without names:
        the caller adds the topic and ledger).
    """
    raise NotImplementedError
