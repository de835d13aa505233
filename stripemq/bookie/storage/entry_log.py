"""Entry logs: interleaved append-only files holding entries of every ledger.

A flush appends each memtable entry as ``size:u32 | entry`` to the current log and records the
location (``log_id << 32 | offset``) in the ledger's index. Logs rotate by size. After a
restart a new log is always started, so a torn tail of an old log is never written after.

Each log has *metadata*: its total record bytes and the bytes of each ledger in it, kept in
memory while the log is written and persisted next to it as ``<log_id>.meta`` once it is
finished (rotated, or closed at shutdown). A finished log never changes again, so its sidecar
stays true; a log without a valid sidecar (the current log at a crash) is scanned on start-up.
Garbage collection subtracts deleted ledgers from the metadata, which gives each log's live
fraction; compaction moves the live entries of a mostly dead log and then removes it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from stripemq.bookie.storage.files import (
    create_with_header,
    fsync_dir,
    make_dirs,
    pread_exact,
    write_all,
    write_atomically,
)
from stripemq.errors import DigestMismatchError
from stripemq.proto.entry import HEADER_SIZE as ENTRY_HEADER_SIZE

log = logging.getLogger(__name__)

FILE_MAGIC = b"SMQE\x00\x01\x00\x00"
_SIZE = struct.Struct(">I")
_LEDGER_ID = struct.Struct(">Q")

META_MAGIC = b"SMQL"
# Version 1 sidecars could not say they came from a scan that stopped early (no flags), so
# they are not trusted: a version-1 sidecar is rebuilt by scanning its log again.
META_VERSION = 2
_META_HEAD = struct.Struct(">4sHHQQI")  # magic, version, flags, log_id, total_bytes, count
_META_PARTIAL = 0x1  # flags: built by a scan that stopped at an unreadable record
_META_ITEM = struct.Struct(">QQ")  # ledger_id, bytes
_META_CRC = struct.Struct(">I")


class MissingEntryLogError(DigestMismatchError):
    """A location points into an entry log that was removed (compaction moved its entries)."""


def make_location(log_id: int, offset: int) -> int:
    return (log_id << 32) | offset


def split_location(location: int) -> tuple[int, int]:
    return location >> 32, location & 0xFFFFFFFF


def record_size(entry: bytes) -> int:
    """Bytes an entry takes in a log, with its size prefix."""
    return _SIZE.size + len(entry)


@dataclass
class EntryLogMeta:
    """What an entry log holds: total record bytes and the bytes of each ledger still alive.

    ``total_bytes`` never shrinks; a ledger garbage-collected is removed from
    ``ledger_bytes``, so ``live_bytes / total_bytes`` is the fraction compaction would keep.
    ``partial`` marks metadata rebuilt by a scan that stopped at an unreadable record: ledgers
    with records after it are missing, so only the index can say whether the log is dead.
    """

    log_id: int
    total_bytes: int = 0
    ledger_bytes: dict[int, int] = field(default_factory=dict)
    partial: bool = False

    @property
    def live_bytes(self) -> int:
        return sum(self.ledger_bytes.values())

    @property
    def live_fraction(self) -> float:
        return self.live_bytes / self.total_bytes if self.total_bytes else 0.0

    def add(self, ledger_id: int, size: int) -> None:
        self.total_bytes += size
        self.ledger_bytes[ledger_id] = self.ledger_bytes.get(ledger_id, 0) + size

    def encode(self) -> bytes:
        """``<log_id>.meta``: header, ``(ledger_id, bytes)`` pairs, CRC32C over all of it."""
        flags = _META_PARTIAL if self.partial else 0
        head = _META_HEAD.pack(
            META_MAGIC, META_VERSION, flags, self.log_id, self.total_bytes, len(self.ledger_bytes)
        )
        items = b"".join(_META_ITEM.pack(lid, n) for lid, n in sorted(self.ledger_bytes.items()))
        body = head + items
        return body + _META_CRC.pack(crc32c.crc32c(body))

    @classmethod
    def decode(cls, raw: bytes, log_id: int) -> EntryLogMeta | None:
        """The metadata in ``raw``, or ``None`` if it is torn, corrupt or another log's."""
        if len(raw) < _META_HEAD.size + _META_CRC.size:
            return None
        body, (checksum,) = raw[: -_META_CRC.size], _META_CRC.unpack_from(raw, len(raw) - 4)
        if crc32c.crc32c(body) != checksum:
            return None
        magic, version, flags, stored_id, total, count = _META_HEAD.unpack_from(body, 0)
        if (
            magic != META_MAGIC
            or version != META_VERSION
            or stored_id != log_id
            or len(body) != _META_HEAD.size + count * _META_ITEM.size
        ):
            return None
        ledger_bytes = dict(
            _META_ITEM.unpack_from(body, _META_HEAD.size + i * _META_ITEM.size)
            for i in range(count)
        )
        return cls(log_id, total, ledger_bytes, partial=bool(flags & _META_PARTIAL))


@dataclass
class LogScan:
    """How a scan of a log ended: ``end`` is where the last whole record finished."""

    end: int = len(FILE_MAGIC)
    clean: bool = True  # False when unreadable bytes followed ``end`` (a torn tail)


class EntryLogger:
    """Writes entries to the current log (one flushing thread) and reads any log (any thread).

    Metadata and log removal also belong to the flushing thread; a removal waits for reads
    in progress on that log, and later reads of it raise ``MissingEntryLogError``.
    """

    def __init__(self, directory: Path, size_limit: int, max_record_size: int) -> None:
        self.directory = directory
        # Offsets are 32-bit inside a location, so a log never grows past 4 GiB.
        self.size_limit = min(size_limit, 0xFFFFFFFF - max_record_size - 16)
        self.max_record_size = max_record_size
        self._lock = threading.Condition()
        self._read_fds: dict[int, int] = {}
        self._readers: dict[int, int] = {}  # log id -> reads in progress
        self._removed: set[int] = set()
        self._fd = -1
        self._log_id = 0
        self._offset = 0
        self._dirty = False
        self._meta_lock = threading.Lock()
        # Finished logs' metadata, and the current log's (kept as it is written).
        self._metas: dict[int, EntryLogMeta] = {}
        self._current = EntryLogMeta(0)

    def open(self) -> None:
        """Load (or rebuild) every finished log's metadata, then start a new log."""
        make_dirs(self.directory)
        ids = self.log_ids()
        for stray in self.directory.glob("*.meta"):
            try:
                orphan = int(stray.stem, 16) not in ids
            except ValueError:
                continue
            if orphan:  # its log was removed and a crash came before the sidecar went
                stray.unlink(missing_ok=True)
        for tmp in self.directory.glob("*.meta.tmp"):
            tmp.unlink(missing_ok=True)
        for log_id in ids:
            meta = self._load_meta(log_id)
            if meta is not None:
                self._metas[log_id] = meta
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

    def meta_path(self, log_id: int) -> Path:
        return self.directory / f"{log_id:08x}.meta"

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
        sizes: list[tuple[int, int]] = []  # (ledger_id, record size) of the chunk
        self._ensure_log()
        self._check_end()
        offset = self._offset
        for entry in entries:
            size = record_size(entry)
            if offset + size > self.size_limit and offset > len(FILE_MAGIC):
                self._write(chunk, sizes, offset)
                chunk, sizes = [], []
                self._rotate()
                offset = self._offset
            locations.append(make_location(self._log_id, offset))
            chunk += (_SIZE.pack(len(entry)), entry)
            sizes.append((_LEDGER_ID.unpack_from(entry, 0)[0], size))
            offset += size
        self._write(chunk, sizes, offset)
        return locations

    def _write(self, chunk: list[bytes], sizes: list[tuple[int, int]], end_offset: int) -> None:
        if chunk:
            write_all(self._fd, b"".join(chunk))
            self._dirty = True
            with self._meta_lock:  # counted only once the bytes are really in the file
                for ledger_id, size in sizes:
                    self._current.add(ledger_id, size)
        self._offset = end_offset

    def sync(self) -> None:
        """Make every appended entry durable."""
        if self._dirty and self._fd >= 0:
            os.fdatasync(self._fd)
            self._dirty = False

    def read(self, location: int) -> bytes:
        """The entry stored at ``location``; its digest is checked by the caller."""
        log_id, offset = split_location(location)
        fd = self._acquire(log_id)
        try:
            head = pread_exact(fd, _SIZE.size, offset)
            if len(head) < _SIZE.size:
                raise DigestMismatchError(f"entry log {log_id:08x} truncated at {offset}")
            (size,) = _SIZE.unpack(head)
            if size > self.max_record_size:
                raise DigestMismatchError(
                    f"entry log {log_id:08x} offset {offset}: corrupt record size {size}"
                )
            data = pread_exact(fd, size, offset + _SIZE.size)
        finally:
            self._release(log_id)
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
            self._finish_current()  # the next start begins a new log: this one is done

    # ------------------------------------------------------------------ scanning

    def scan(
        self, log_id: int, outcome: LogScan | None = None
    ) -> Generator[tuple[int, bytes], None, None]:
        """Yield ``(offset, entry)`` for every whole record of a log, in file order.

        Stops at the end of the file or at the first record that is cut short or has an
        impossible size (a torn tail after a crash); ``outcome`` tells which.
        """
        outcome = outcome if outcome is not None else LogScan()
        with open(self.path(log_id), "rb", buffering=1 << 20) as f:
            if f.read(len(FILE_MAGIC)) != FILE_MAGIC:
                outcome.clean = False
                log.error("entry log %08x has no valid header", log_id)
                return
            offset = len(FILE_MAGIC)
            while True:
                head = f.read(_SIZE.size)
                if not head:
                    return
                if len(head) < _SIZE.size:
                    outcome.clean = False
                    return
                (size,) = _SIZE.unpack(head)
                if not ENTRY_HEADER_SIZE <= size <= self.max_record_size:
                    outcome.clean = False
                    return
                data = f.read(size)
                if len(data) < size:
                    outcome.clean = False
                    return
                yield offset, data
                offset += _SIZE.size + size
                outcome.end = offset

    def _load_meta(self, log_id: int) -> EntryLogMeta | None:
        """A finished log's metadata from its sidecar, else by scanning the log.

        ``None`` for a log whose header is unreadable: what it holds is unknown, so garbage
        collection and compaction leave it alone.
        """
        path = self.meta_path(log_id)
        try:
            meta = EntryLogMeta.decode(path.read_bytes(), log_id)
        except FileNotFoundError:
            meta = None
        if meta is not None:
            return meta
        with open(self.path(log_id), "rb") as f:
            if f.read(len(FILE_MAGIC)) != FILE_MAGIC:
                log.error("entry log %08x has no valid header; it is never compacted", log_id)
                return None
        meta = EntryLogMeta(log_id)
        outcome = LogScan()
        for _offset, entry in self.scan(log_id, outcome):
            meta.add(_LEDGER_ID.unpack_from(entry, 0)[0], record_size(entry))
        meta.partial = not outcome.clean
        log.info(
            "rebuilt metadata of entry log %08x by scanning it: %d bytes, %d ledgers%s",
            log_id,
            meta.total_bytes,
            len(meta.ledger_bytes),
            "" if outcome.clean else f" (unreadable tail after offset {outcome.end})",
        )
        write_atomically(path, meta.encode())
        return meta

    # ------------------------------------------------------------------ metadata

    def forget_ledgers(self, is_dead: Callable[[int], bool]) -> None:
        """Count as dead every ledger ``is_dead`` says no longer exists (after a restart)."""
        verdicts: dict[int, bool] = {}
        with self._meta_lock:
            for meta in self._all_metas():
                for ledger_id in list(meta.ledger_bytes):
                    if ledger_id not in verdicts:
                        verdicts[ledger_id] = is_dead(ledger_id)
                    if verdicts[ledger_id]:
                        del meta.ledger_bytes[ledger_id]

    def drop_ledgers(self, ledger_ids: set[int]) -> int:
        """Count the ledgers' bytes in every log as dead; returns how many bytes that was."""
        dead = 0
        with self._meta_lock:
            for meta in self._all_metas():
                for ledger_id in ledger_ids & meta.ledger_bytes.keys():
                    dead += meta.ledger_bytes.pop(ledger_id)
        return dead

    def is_finished(self, log_id: int) -> bool:
        """Whether ``log_id`` is a finished log still on disk (compaction may take it)."""
        with self._meta_lock:
            return log_id in self._metas

    def has_ledger(self, log_id: int, ledger_id: int) -> bool:
        with self._meta_lock:
            meta = self._current if log_id == self._current.log_id else self._metas.get(log_id)
            return meta is not None and ledger_id in meta.ledger_bytes

    def finished_metas(self) -> list[EntryLogMeta]:
        """Copies of the metadata of every finished (non-current) log."""
        with self._meta_lock:
            return [
                EntryLogMeta(m.log_id, m.total_bytes, dict(m.ledger_bytes), m.partial)
                for m in self._metas.values()
            ]

    def usage(self) -> tuple[int, int, int]:
        """``(logs, total_bytes, live_bytes)`` over every log, the current one included."""
        with self._meta_lock:
            metas = self._all_metas()
            return (
                len(metas),
                sum(m.total_bytes for m in metas),
                sum(m.live_bytes for m in metas),
            )

    def _all_metas(self) -> list[EntryLogMeta]:
        return [*self._metas.values(), self._current]

    # ------------------------------------------------------------------ removal

    def remove_log(self, log_id: int) -> int:
        """Delete a finished log durably; returns its size. Flushing thread only.

        The caller must have made sure nothing points into it any more (the index moved and
        synced). Reads in progress on it finish first; later ones get ``MissingEntryLogError``.
        """
        if log_id == self._log_id:
            raise ValueError(f"entry log {log_id:08x} is being written")
        with self._lock:
            self._removed.add(log_id)
            while self._readers.get(log_id):
                self._lock.wait()
            fd = self._read_fds.pop(log_id, None)
        if fd is not None:
            os.close(fd)
        path = self.path(log_id)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        path.unlink(missing_ok=True)
        fsync_dir(self.directory)  # the removal is durable before the sidecar goes
        self.meta_path(log_id).unlink(missing_ok=True)
        with self._meta_lock:
            self._metas.pop(log_id, None)
        log.info("removed entry log %08x (%d bytes)", log_id, size)
        return size

    def _acquire(self, log_id: int) -> int:
        with self._lock:
            if log_id in self._removed:
                raise MissingEntryLogError(f"entry log {log_id:08x} was removed")
            fd = self._read_fds.get(log_id)
            if fd is None:
                try:
                    fd = os.open(self.path(log_id), os.O_RDONLY)
                except FileNotFoundError:
                    raise MissingEntryLogError(f"entry log {log_id:08x} does not exist") from None
                self._read_fds[log_id] = fd
            self._readers[log_id] = self._readers.get(log_id, 0) + 1
            return fd

    def _release(self, log_id: int) -> None:
        with self._lock:
            left = self._readers[log_id] - 1
            if left:
                self._readers[log_id] = left
            else:
                del self._readers[log_id]
                self._lock.notify_all()

    # ------------------------------------------------------------------ rotation

    def _rotate(self) -> None:
        self.sync()
        log.info("entry log %08x reached %d bytes; rotating", self._log_id, self._offset)
        fd, self._fd = self._fd, -1
        os.close(fd)
        self._finish_current()
        self._start_log(self._log_id + 1)

    def _finish_current(self) -> None:
        """The current log is complete: persist its metadata and list it as finished."""
        with self._meta_lock:
            meta = self._current
            self._metas[meta.log_id] = meta
            self._current = EntryLogMeta(0)
        try:
            write_atomically(self.meta_path(meta.log_id), meta.encode())
        except OSError as exc:  # a missing sidecar only costs a scan at the next start
            log.warning("cannot persist metadata of entry log %08x: %s", meta.log_id, exc)

    def _check_end(self) -> None:
        """Start a new log if the current one's real end is not where this logger left it.

        Locations are computed from ``_offset`` but appends land at the file's end
        (``O_APPEND``): in a log cut or extended by something else, every entry appended
        would be indexed at the wrong place, unreadable from this bookie.
        """
        end = os.lseek(self._fd, 0, os.SEEK_END)
        if end != self._offset:
            log.error(
                "entry log %08x is %d bytes long but %d were written to it: changed outside "
                "the bookie; appending to a new log",
                self._log_id,
                end,
                self._offset,
            )
            self._rotate()

    def _ensure_log(self) -> None:
        """Open the next log if the last rotation failed half-way (e.g. on a full disk)."""
        if self._fd < 0:
            self._start_log(self._log_id + 1)

    def _start_log(self, log_id: int) -> None:
        fd = create_with_header(self.path(log_id), FILE_MAGIC)
        self._fd, self._log_id, self._offset, self._dirty = fd, log_id, len(FILE_MAGIC), False
        with self._lock:
            self._removed.discard(log_id)
        with self._meta_lock:
            self._current = EntryLogMeta(log_id)
