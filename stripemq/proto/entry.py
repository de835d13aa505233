"""The entry record as it travels to a bookie and sits on its disks (sans-IO).

``ledger_id:u64 | entry_id:u64 | lac:i64 | length:u64 | crc32c:u32 | data``, big-endian.
As in BookKeeper, ``length`` is the ledger's length in bytes up to and including this entry,
so the last entry alone tells a recovering client the ledger's length. The writer computes
the CRC32C over the 32 header bytes before it and the data; bookies store the bytes
unchanged and every reader verifies them, so corruption anywhere is caught.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from stripemq.errors import DigestMismatchError, InvalidEntryError

_PREFIX = struct.Struct(">QQqQ")
_CRC = struct.Struct(">I")
HEADER_SIZE = _PREFIX.size + _CRC.size  # 36 bytes


@dataclass(frozen=True, slots=True)
class EntryHeader:
    ledger_id: int
    entry_id: int
    lac: int
    length: int  # the ledger's length through this entry
    data_length: int


def encode_entry(
    ledger_id: int, entry_id: int, lac: int, data: bytes, length: int | None = None
) -> bytes:
    """Frame ``data`` as an entry with its header and checksum.

    ``length`` is the ledger's length through this entry (default: ``len(data)``, right for
    a ledger's first entry and for tests of single entries).
    """
    if ledger_id < 0 or entry_id < 0:
        raise InvalidEntryError(f"negative id in entry {ledger_id}:{entry_id}")
    if length is None:
        length = len(data)
    if length < len(data):
        raise InvalidEntryError(f"ledger length {length} is less than the entry's {len(data)}")
    prefix = _PREFIX.pack(ledger_id, entry_id, lac, length)
    checksum = crc32c.crc32c(data, crc32c.crc32c(prefix))
    return b"".join((prefix, _CRC.pack(checksum), data))


def parse_header(entry: bytes | memoryview) -> EntryHeader:
    """Read the header and check the ledger length against the data; no CRC check."""
    if len(entry) < HEADER_SIZE:
        raise InvalidEntryError(f"entry of {len(entry)} bytes is shorter than its header")
    ledger_id, entry_id, lac, length = _PREFIX.unpack_from(entry, 0)
    data_length = len(entry) - HEADER_SIZE
    if length < data_length:
        raise InvalidEntryError(
            f"entry {ledger_id}:{entry_id} declares a ledger length of {length} bytes, "
            f"less than its own {data_length}"
        )
    return EntryHeader(ledger_id, entry_id, lac, length, data_length)


def verify_entry(entry: bytes | memoryview) -> EntryHeader:
    """Parse the header and verify the checksum; ``DigestMismatchError`` if they disagree."""
    header = parse_header(entry)
    (expected,) = _CRC.unpack_from(entry, _PREFIX.size)
    view = memoryview(entry)
    actual = crc32c.crc32c(view[HEADER_SIZE:], crc32c.crc32c(view[: _PREFIX.size]))
    if actual != expected:
        raise DigestMismatchError(
            f"digest mismatch for entry {header.ledger_id}:{header.entry_id}: "
            f"stored {expected:#010x}, computed {actual:#010x}"
        )
    return header


def entry_data(entry: bytes) -> bytes:
    """The payload of a verified entry."""
    return entry[HEADER_SIZE:]
