"""Per-ledger index files: ledger state in a header, then one location slot per entry.

``index/<ledger_id & 0xff>/<ledger_id>.idx``: a 256-byte header (fenced flag, master key,
explicit LAC, CRC32C) followed by an 8-byte slot per entry id holding ``location + 1`` (0 means
absent), so a lookup is one ``pread`` and the file is sparse where ids were skipped. The
header is rewritten at each checkpoint; state changed since lives in the journal.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import crc32c

from stripemq.bookie.storage.files import fsync_dir, make_dirs, pread_exact, write_atomically
from stripemq.errors import DigestMismatchError

HEADER_SIZE = 256
MAX_MASTER_KEY = 200
# Entry ids above this are refused at add time: their slot would lie past what a file can hold.
MAX_ENTRY_ID = (1 << 40) - 1
_MAGIC = b"SMQI"
_HEADER = struct.Struct(">4sHHqH")
_CRC = struct.Struct(">I")
_SLOT = struct.Struct(">Q")
_FLAG_FENCED = 1
_FLAG_HAS_KEY = 2


@dataclass
class LedgerHeader:
    """What a bookie persists about a ledger besides its entries."""

    fenced: bool = False
    master_key: bytes | None = None
    explicit_lac: int = -1

    def encode(self) -> bytes:
        key = self.master_key or b""
        flags = (_FLAG_FENCED if self.fenced else 0) | (
            _FLAG_HAS_KEY if self.master_key is not None else 0
        )
        body = _HEADER.pack(_MAGIC, 1, flags, self.explicit_lac, len(key)) + key
        body = body.ljust(HEADER_SIZE - _CRC.size, b"\x00")
        return body + _CRC.pack(crc32c.crc32c(body))

    @classmethod
    def decode(cls, raw: bytes, ledger_id: int) -> LedgerHeader:
        body, (checksum,) = raw[: HEADER_SIZE - _CRC.size], _CRC.unpack_from(raw, HEADER_SIZE - 4)
        magic, _version, flags, lac, key_len = _HEADER.unpack_from(body, 0)
        if magic != _MAGIC or crc32c.crc32c(body) != checksum or key_len > MAX_MASTER_KEY:
            raise DigestMismatchError(f"index header of ledger {ledger_id} is corrupt")
        key = body[_HEADER.size : _HEADER.size + key_len] if flags & _FLAG_HAS_KEY else None
        return cls(fenced=bool(flags & _FLAG_FENCED), master_key=key, explicit_lac=lac)


class LedgerIndex:
    """Thread-safe access to the index files; writes come from the flushing thread."""

    def __init__(self, directory: Path, max_open_files: int = 1000) -> None:
        self.directory = directory
        self.max_open_files = max_open_files
        self._lock = threading.RLock()
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._dirty: set[int] = set()

    def path(self, ledger_id: int) -> Path:
        return self.directory / f"{ledger_id & 0xFF:02x}" / f"{ledger_id:x}.idx"

    def exists(self, ledger_id: int) -> bool:
        return self.path(ledger_id).exists()

    def ledger_ids(self) -> list[int]:
        ids = []
        for path in self.directory.glob("*/*.idx"):
            try:
                ids.append(int(path.stem, 16))
            except ValueError:
                continue
        return sorted(ids)

    def read_header(self, ledger_id: int) -> LedgerHeader | None:
        with self._lock:
            fd = self._existing_fd(ledger_id)
            if fd is None:
                return None
            raw = pread_exact(fd, HEADER_SIZE, 0)
        if len(raw) < HEADER_SIZE:
            raise DigestMismatchError(f"index header of ledger {ledger_id} is truncated")
        return LedgerHeader.decode(raw, ledger_id)

    def write_header(self, ledger_id: int, header: LedgerHeader) -> None:
        with self._lock:
            os.pwrite(self._fd(ledger_id, create=True), header.encode(), 0)
            self._dirty.add(ledger_id)

    def get_location(self, ledger_id: int, entry_id: int) -> int | None:
        if not 0 <= entry_id <= MAX_ENTRY_ID:
            return None
        with self._lock:
            fd = self._existing_fd(ledger_id)
            if fd is None:
                return None
            raw = pread_exact(fd, _SLOT.size, HEADER_SIZE + entry_id * _SLOT.size)
        if len(raw) < _SLOT.size:
            return None
        (slot,) = _SLOT.unpack(raw)
        return slot - 1 if slot else None

    def set_locations(self, ledger_id: int, first_entry_id: int, locations: list[int]) -> None:
        """Record the locations of consecutive entries starting at ``first_entry_id``."""
        slots = b"".join(_SLOT.pack(location + 1) for location in locations)
        with self._lock:
            fd = self._fd(ledger_id, create=True)
            os.pwrite(fd, slots, HEADER_SIZE + first_entry_id * _SLOT.size)
            self._dirty.add(ledger_id)

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest entry id with a location, or -1."""
        with self._lock:
            fd = self._existing_fd(ledger_id)
            return -1 if fd is None else self._last_entry_id(fd)

    def _last_entry_id(self, fd: int) -> int:
        size = os.fstat(fd).st_size
        slots = (size - HEADER_SIZE) // _SLOT.size
        step = 512
        while slots > 0:
            first = max(0, slots - step)
            raw = pread_exact(fd, (slots - first) * _SLOT.size, HEADER_SIZE + first * _SLOT.size)
            for i in range(len(raw) // _SLOT.size - 1, -1, -1):
                if _SLOT.unpack_from(raw, i * _SLOT.size)[0]:
                    return first + i
            slots = first
        return -1

    def points_into(self, ledger_id: int, log_id: int) -> bool:
        """Whether any entry of the ledger is located in entry log ``log_id`` (reads it all)."""
        with self._lock:
            fd = self._existing_fd(ledger_id)
            if fd is None:
                return False
            size = os.fstat(fd).st_size
            offset = HEADER_SIZE
            step = 8192 * _SLOT.size
            while offset < size:
                raw = pread_exact(fd, min(step, size - offset), offset)
                for (slot,) in _SLOT.iter_unpack(raw[: len(raw) - len(raw) % _SLOT.size]):
                    if slot and (slot - 1) >> 32 == log_id:
                        return True
                if not raw:
                    break
                offset += len(raw)
        return False

    def sync(self) -> None:
        """fsync every index file written since the last sync."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            for ledger_id in dirty:
                os.fsync(self._fd(ledger_id))

    def delete(self, ledger_ids: list[int]) -> None:
        """Remove ledgers' index files durably (their directories are fsynced once each)."""
        directories: set[Path] = set()
        for ledger_id in ledger_ids:
            with self._lock:
                fd = self._fds.pop(ledger_id, None)
                self._dirty.discard(ledger_id)
                if fd is not None:
                    os.close(fd)
                path = self.path(ledger_id)
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
            directories.add(path.parent)
        for directory in directories:
            fsync_dir(directory)

    def close(self) -> None:
        self.sync()
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def _existing_fd(self, ledger_id: int) -> int | None:
        """The descriptor of an existing index file, or ``None``; the caller holds ``_lock``.

        Checked under the lock that ``delete`` takes, so a concurrent deletion is seen whole.
        """
        if ledger_id not in self._fds and not self.exists(ledger_id):
            return None
        return self._fd(ledger_id)

    def _fd(self, ledger_id: int, create: bool = False) -> int:
        """The open descriptor for a ledger's index; the caller holds ``_lock``."""
        fd = self._fds.get(ledger_id)
        if fd is not None:
            self._fds.move_to_end(ledger_id)
            return fd
        path = self.path(ledger_id)
        flags = os.O_RDWR
        if create and not path.exists():
            # Made whole under another name, then renamed: a crash never leaves an index
            # file without its header.
            make_dirs(path.parent)
            write_atomically(path, LedgerHeader().encode())
        fd = os.open(path, flags)
        self._fds[ledger_id] = fd
        while len(self._fds) > self.max_open_files:
            old_id, old_fd = self._fds.popitem(last=False)
            if old_id in self._dirty:
                os.fsync(old_fd)
                self._dirty.discard(old_id)
            os.close(old_fd)
        return fd
