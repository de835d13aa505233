"""Entry logs: interleaved append-only files holding entries of every ledger.

A flush appends each memtable entry as ``size:u32 | entry`` to the current log and records the
location (``log_id << 32 | offset``) in the ledger's index. Logs rotate by size. After a
restart a new log is always started, so a torn tail of an old log is never written after.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from pathlib import Path

from stripemq.bookie.storage.files import create_with_header, pread_exact, write_all
from stripemq.errors import DigestMismatchError

log = logging.getLogger(__name__)

FILE_MAGIC = b"SMQE\x00\x01\x00\x00"
_SIZE = struct.Struct(">I")


def make_location(log_id: int, offset: int) -> int:
    return (log_id << 32) | offset


def split_location(location: int) -> tuple[int, int]:
    return location >> 32, location & 0xFFFFFFFF


class EntryLogger:
    """Writes entries to the current log (one flushing thread) and reads any log (any thread)."""

    def __init__(self, directory: Path, size_limit: int, max_record_size: int) -> None:
        self.directory = directory
        # Offsets are 32-bit inside a location, so a log never grows past 4 GiB.
        self.size_limit = min(size_limit, 0xFFFFFFFF - max_record_size - 16)
        self.max_record_size = max_record_size
        self._lock = threading.Lock()
        self._read_fds: dict[int, int] = {}
        self._fd = -1
        self._log_id = 0
        self._offset = 0
        self._dirty = False

    def open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        ids = self.log_ids()
        self._start_log((ids[-1] + 1) if ids else 1)

    def log_ids(self) -> list[int]:
        ids = []
        for path in self.directory.glob("*.log"):
            try:
                ids.append(int(path.stem, 16))
            except ValueError:
                continue
        return sorted(ids)

    def path(self, log_id: int) -> Path:
        return self.directory / f"{log_id:08x}.log"

    @property
    def current_log_id(self) -> int:
        return self._log_id

    def append_many(self, entries: list[bytes]) -> list[int]:
        """Append entries in order; returns their locations. Flushing thread only.

        Records are gathered into one write per log file, so a flush costs a few system
        calls rather than one per entry. If a write fails, the log is cut back to where it
        was and the error raised: no location handed out ever points past the real end.
        """
        locations: list[int] = []
        chunk: list[bytes] = []
        self._ensure_log()
        offset = self._offset
        for entry in entries:
            size = _SIZE.size + len(entry)
            if offset + size > self.size_limit and offset > len(FILE_MAGIC):
                self._write(chunk, offset)
                chunk = []
                self._rotate()
                offset = self._offset
            locations.append(make_location(self._log_id, offset))
            chunk += (_SIZE.pack(len(entry)), entry)
            offset += size
        self._write(chunk, offset)
        return locations

    def _write(self, chunk: list[bytes], end_offset: int) -> None:
        if chunk:
            write_all(self._fd, b"".join(chunk))
            self._dirty = True
        self._offset = end_offset

    def sync(self) -> None:
        """Make every appended entry durable."""
        if self._dirty and self._fd >= 0:
            os.fdatasync(self._fd)
            self._dirty = False

    def read(self, location: int) -> bytes:
        """The entry stored at ``location``; its digest is checked by the caller."""
        log_id, offset = split_location(location)
        fd = self._read_fd(log_id)
        head = pread_exact(fd, _SIZE.size, offset)
        if len(head) < _SIZE.size:
            raise DigestMismatchError(f"entry log {log_id:08x} truncated at {offset}")
        (size,) = _SIZE.unpack(head)
        if size > self.max_record_size:
            raise DigestMismatchError(
                f"entry log {log_id:08x} offset {offset}: corrupt record size {size}"
            )
        data = pread_exact(fd, size, offset + _SIZE.size)
        if len(data) != size:
            raise DigestMismatchError(f"entry log {log_id:08x} truncated at {offset}")
        return data

    def close(self) -> None:
        with self._lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
            self._fd = -1

    def _read_fd(self, log_id: int) -> int:
        with self._lock:
            fd = self._read_fds.get(log_id)
            if fd is None:
                fd = os.open(self.path(log_id), os.O_RDONLY)
                self._read_fds[log_id] = fd
            return fd

    def _rotate(self) -> None:
        self.sync()
        log.info("entry log %08x reached %d bytes; rotating", self._log_id, self._offset)
        fd, self._fd = self._fd, -1
        os.close(fd)
        self._start_log(self._log_id + 1)

    def _ensure_log(self) -> None:
        """Open the next log if the last rotation failed half-way (e.g. on a full disk)."""
        if self._fd < 0:
            self._start_log(self._log_id + 1)

    def _start_log(self, log_id: int) -> None:
        fd = create_with_header(self.path(log_id), FILE_MAGIC)
        self._fd, self._log_id, self._offset, self._dirty = fd, log_id, len(FILE_MAGIC), False
