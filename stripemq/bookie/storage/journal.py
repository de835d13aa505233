"""The bookie's write-ahead journal: records, group commit, rotation and replay.

Every add, fence, master key and explicit LAC is appended here and made durable before it is
acknowledged. While one sync is on the disk the next group gathers: an idle journal syncs a
record at once, a busy one covers many records with each ``fdatasync``. With
``flush_when_queue_empty`` off (BookKeeper's default), a group also waits up to
``max_group_wait_ms`` for company (or until ``buffered_writes_threshold`` bytes are waiting).
Writes and syncs run on one dedicated thread so they keep their order and never block the
event loop. Where the kernel offers it (Linux AIO), a group is instead written from the loop
and synced by the kernel's asynchronous fdatasync, whose completion the loop hears through an
eventfd: no thread hand-offs, each of which waits for the GIL behind a busy loop
(``stripemq.bookie.storage.kernel_aio``). No waiter of a group is resolved before that group's
sync has returned: the sync (``JournalWriter.sync_file``, ``os.fdatasync`` by default, or the
kernel's) is the single point every acknowledgement waits behind.

Record: ``length:u32 | crc32c:u32 | type:u8 | ledger_id:u64 | body`` where the CRC and the
length cover everything after the CRC. A torn or corrupt record ends the replay of its file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import errno
import functools
import logging
import os
import struct
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from stripemq.bookie.storage.files import create_with_header, make_dirs, write_all
from stripemq.bookie.storage.kernel_aio import AsyncDataSync, open_async_datasync
from stripemq.errors import BookieError, DiskFullError

log = logging.getLogger(__name__)

FILE_MAGIC = b"SMQJ\x00\x01\x00\x00"  # magic + format version 1 + reserved
_RECORD_HEAD = struct.Struct(">II")
_RECORD_KIND = struct.Struct(">BQ")
_LAC = struct.Struct(">q")
MAX_RECORD_SIZE = 64 * 1024 * 1024


class RecordType(enum.IntEnum):
    ENTRY = 1  # body: the entry bytes as received
    FENCE = 2  # body: empty
    MASTER_KEY = 3  # body: the ledger's master key
    EXPLICIT_LAC = 4  # body: lac:i64


@dataclass(frozen=True, order=True, slots=True)
class LogMark:
    """A position in the journal: everything before it is covered."""

    journal_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class JournalRecord:
    type: RecordType
    ledger_id: int
    body: bytes


def encode_record(kind: RecordType, ledger_id: int, body: bytes = b"") -> bytes:
    """One journal record, ready to append."""
    rest = _RECORD_KIND.pack(kind, ledger_id) + body
    return _RECORD_HEAD.pack(len(rest), crc32c.crc32c(rest)) + rest


def encode_lac(lac: int) -> bytes:
    return _LAC.pack(lac)


def decode_lac(body: bytes) -> int:
    return _LAC.unpack(body)[0]


def decode_records(buf: bytes, start: int) -> Iterator[tuple[JournalRecord, int]]:
    """Yield ``(record, end_offset)`` from ``start`` until the end or the first bad record."""
    pos = start
    while pos + _RECORD_HEAD.size <= len(buf):
        length, checksum = _RECORD_HEAD.unpack_from(buf, pos)
        body_start = pos + _RECORD_HEAD.size
        end = body_start + length
        if length < _RECORD_KIND.size or length > MAX_RECORD_SIZE or end > len(buf):
            return
        rest = buf[body_start:end]
        if crc32c.crc32c(rest) != checksum:
            return
        kind, ledger_id = _RECORD_KIND.unpack_from(rest, 0)
        try:
            record_type = RecordType(kind)
        except ValueError:
            return
        yield JournalRecord(record_type, ledger_id, rest[_RECORD_KIND.size :]), end
        pos = end


def journal_path(directory: Path, journal_id: int) -> Path:
    return directory / f"{journal_id:016x}.txn"


def list_journals(directory: Path) -> list[int]:
    """Ids of the journal files in ``directory``, oldest first."""
    ids = []
    for path in directory.glob("*.txn"):
        try:
            ids.append(int(path.stem, 16))
        except ValueError:
            log.warning("ignoring stray file in journal directory: %s", path)
    return sorted(ids)


def replay_journals(directory: Path, mark: LogMark) -> Iterator[tuple[JournalRecord, LogMark]]:
    """Yield every intact record at or after ``mark`` with the position just after it."""
    for journal_id in list_journals(directory):
        if journal_id < mark.journal_id:
            continue
        data = journal_path(directory, journal_id).read_bytes()
        if not data.startswith(FILE_MAGIC):
            log.error("journal %016x has no valid header; skipping it", journal_id)
            continue
        start = mark.offset if journal_id == mark.journal_id else len(FILE_MAGIC)
        start = max(start, len(FILE_MAGIC))
        end = start
        for record, end in decode_records(data, start):
            yield record, LogMark(journal_id, end)
        if end < len(data):
            log.warning(
                "journal %016x: ignoring %d bytes of torn or corrupt tail at offset %d",
                journal_id,
                len(data) - end,
                end,
            )


@dataclass
class _Group:
    chunks: list[bytes] = field(default_factory=list)
    waiters: list[asyncio.Future[LogMark]] = field(default_factory=list)
    size: int = 0
    first_at: float = 0.0


# Makes a descriptor's written data durable (``os.fdatasync``); runs on the journal thread
# and raises ``OSError`` on failure.
SyncFile = Callable[[int], None]

# Told of every sync: its seconds and whether it succeeded (the bookie's metrics).
SyncObserver = Callable[[float, bool], None]


@dataclass(frozen=True, slots=True)
class _KernelSync:
    """A group written from the loop whose fdatasync the kernel is running."""

    token: int
    group: _Group
    mark: LogMark
    started: float


class JournalWriter:
    """Appends records and resolves each append's future once it is durable.

    ``sync_file`` makes each group durable on the journal thread; it is a plain attribute,
    read for every group, so an embedding process (or a test holding acknowledgements back)
    may swap it at run time. With ``kernel_aio`` the kernel's asynchronous fdatasync is used
    instead, but only while ``sync_file`` is the default ``os.fdatasync``: a swapped-in sync
    function always runs, on the thread. ``on_sync`` is told of every sync either way.
    """

    def __init__(
        self,
        directory: Path,
        *,
        max_group_wait_ms: float,
        buffered_writes_threshold: int,
        flush_when_queue_empty: bool = True,
        sync_data: bool,
        max_file_size: int,
        sync_file: SyncFile = os.fdatasync,
        kernel_aio: bool = True,
    ) -> None:
        self.directory = directory
        self.max_group_wait = max_group_wait_ms / 1000.0
        self.flush_when_queue_empty = flush_when_queue_empty
        self.threshold = buffered_writes_threshold
        self.sync_data = sync_data
        self.max_file_size = max_file_size
        self.sync_file = sync_file
        self.on_sync: SyncObserver | None = None
        self.kernel_aio = kernel_aio
        self.fsync_count = 0
        self._datasync: AsyncDataSync | None = None  # the kernel's fdatasync, if offered
        self._kernel_sync: _KernelSync | None = None  # the one it is running
        self._sync_tokens = 0
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._group = _Group()
        self._in_flight: _Group | None = None  # being written and synced
        self._timer: asyncio.TimerHandle | None = None  # ends a group's wait for company
        self._drained: asyncio.Future[None] | None = None  # close() waits on it
        self._schedule_pending = False
        self._fd = -1
        self._journal_id = 0
        self._offset = 0
        self._written = LogMark(0, 0)
        self._roll_next = False
        self._closing = False
        self._stopped = False  # closed or aborted: the writer thread is gone

    @property
    def written_mark(self) -> LogMark:
        """Position after the last record handed to the OS (maybe not yet synced)."""
        return self._written

    async def open(self) -> None:
        """Start a fresh journal file after every existing one."""
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(self._io, self._open_first_file)
        if self.kernel_aio and self.sync_data:
            self._datasync = await self._loop.run_in_executor(
                self._io, open_async_datasync, self._fd
            )
            if self._datasync is not None:
                self._loop.add_reader(self._datasync.eventfd, self._kernel_sync_done)

    @property
    def syncs_in_kernel(self) -> bool:
        """Whether groups are synced by the kernel's asynchronous fdatasync now."""
        return self._datasync is not None and self.sync_file is os.fdatasync

    def append(self, record: bytes) -> asyncio.Future[LogMark]:
        """Queue ``record`` (one or more encoded records); the future resolves when durable."""
        if self._closing:
            raise BookieError("journal is closed")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[LogMark] = loop.create_future()
        group = self._group
        if not group.chunks:
            group.first_at = loop.time()
        group.chunks.append(record)
        group.waiters.append(waiter)
        group.size += len(record)
        if not self._schedule_pending:
            # At the end of this loop turn, so the records of one turn share a group.
            self._schedule_pending = True
            loop.call_soon(self._schedule)
        return waiter

    async def close(self) -> None:
        """Write out what is queued, then stop the writer thread (nothing to do after
        ``abort``)."""
        if self._stopped:
            return
        self._closing = True
        loop = asyncio.get_running_loop()
        self._drained = loop.create_future()
        self._schedule()  # what waits for company goes now
        await self._drained
        if self._stopped:  # aborted meanwhile
            return
        await self._release_files()
        self._io.shutdown(wait=True)
        self._stopped = True

    async def abort(self) -> None:
        """Stop without writing what is queued (a simulated or fatal crash); waiters of
        the group being synced fail too, whatever the disk does next."""
        if self._stopped:
            return
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        error = BookieError("journal aborted")
        for group in (self._in_flight, self._group):
            for waiter in group.waiters if group is not None else ():
                if not waiter.done():
                    waiter.set_exception(error)
        self._group, self._in_flight, self._kernel_sync = _Group(), None, None
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)  # a close() waiting for the queue: nothing is left
        await self._release_files()
        self._io.shutdown(wait=True)
        self._stopped = True

    async def _release_files(self) -> None:
        """Close the journal file and the kernel sync context (which waits, off the loop,
        for a sync still running)."""
        datasync = self._stop_kernel_syncs()
        loop = asyncio.get_running_loop()  # open() may never have run
        await loop.run_in_executor(self._io, self._close_fd)
        if datasync is not None:
            await loop.run_in_executor(self._io, datasync.close)

    def _stop_kernel_syncs(self) -> AsyncDataSync | None:
        """Stop listening for kernel syncs; the context, for the caller to close."""
        datasync, self._datasync = self._datasync, None
        if datasync is not None and self._loop is not None:
            self._loop.remove_reader(datasync.eventfd)
        return datasync

    def delete_before(self, journal_id: int) -> list[int]:
        """Remove journal files older than ``journal_id`` (covered by a checkpoint)."""
        removed = []
        for old in list_journals(self.directory):
            if old >= journal_id or old == self._journal_id:
                continue
            try:
                journal_path(self.directory, old).unlink()
                removed.append(old)
            except FileNotFoundError:
                pass
        if removed:
            log.info("deleted %d journal file(s) before %016x", len(removed), journal_id)
        return removed

    # ------------------------------------------------------------------ group scheduling

    # A group goes to the journal thread at the end of the loop turn that queued it (or
    # from the previous group's completion, or its wait's timer), and its completion comes
    # back as one callback on the loop: no writer task to wake, no extra turns per sync.

    def _schedule(self) -> None:
        """Start the queued group if nothing is being synced and it need not wait."""
        self._schedule_pending = False
        if self._in_flight is not None:
            return  # its completion starts the next group
        group = self._group
        if not group.chunks:
            if self._closing and self._drained is not None and not self._drained.done():
                self._drained.set_result(None)
            return
        waits = not (self.flush_when_queue_empty or self._closing)
        if waits and group.size < self.threshold:
            assert self._loop is not None
            deadline = group.first_at + self.max_group_wait
            if deadline > self._loop.time():
                if self._timer is None:
                    self._timer = self._loop.call_at(deadline, self._wait_over)
                return
        self._start(group)

    def _wait_over(self) -> None:
        self._timer = None
        self._schedule()

    def _start(self, group: _Group) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._group = _Group()
        self._in_flight = group
        buf = b"".join(group.chunks)
        if self.syncs_in_kernel and not self._roll_next and self._offset < self.max_file_size:
            self._write_and_sync_in_kernel(group, buf)
        else:  # also rolls to a new file, which the thread does
            self._on_thread(group, functools.partial(self._write_and_sync, buf))

    def _on_thread(self, group: _Group, work: Callable[[], LogMark]) -> None:
        done = self._io.submit(work)
        done.add_done_callback(lambda future: self._hand_back(group, future))

    def _hand_back(self, group: _Group, future: concurrent.futures.Future[LogMark]) -> None:
        """On the journal thread: give the group's outcome to the loop."""
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._synced, group, future)
        except RuntimeError:  # the loop is gone (the process is ending): nobody waits
            pass

    def _synced(self, group: _Group, future: concurrent.futures.Future[LogMark]) -> None:
        exc = future.exception()
        self._group_done(group, future.result() if exc is None else exc)

    def _group_done(self, group: _Group, outcome: LogMark | BaseException) -> None:
        """Resolve a group's waiters with its mark or its failure, then start the next."""
        if group is not self._in_flight:
            return  # abort() failed its waiters already
        self._in_flight = None
        if isinstance(outcome, LogMark):
            for waiter in group.waiters:
                if not waiter.done():
                    waiter.set_result(outcome)
        else:
            exc = outcome
            if not isinstance(exc, BookieError):
                log.error("unexpected journal failure", exc_info=exc)
                exc = BookieError(f"journal failure: {exc}")
            for waiter in group.waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
        self._schedule()

    # ------------------------------------------------------------------ kernel syncs

    def _write_and_sync_in_kernel(self, group: _Group, buf: bytes) -> None:
        """Write ``group`` from the loop (into the page cache) and have the kernel sync it."""
        assert self._loop is not None and self._datasync is not None
        try:
            mark = self._write(buf)
        except BookieError as exc:
            self._loop.call_soon(self._group_done, group, exc)
            return
        self._sync_tokens += 1
        try:
            self._datasync.submit(self._fd, self._sync_tokens)
        except OSError as exc:
            log.warning("asynchronous fdatasync failed (%s): the journal syncs on a thread", exc)
            datasync = self._stop_kernel_syncs()
            if datasync is not None:
                self._io.submit(datasync.close)
            self._on_thread(group, functools.partial(self._sync_written, mark))
            return
        self._kernel_sync = _KernelSync(self._sync_tokens, group, mark, time.perf_counter())

    def _kernel_sync_done(self) -> None:
        """The eventfd says a kernel sync finished: complete its group."""
        assert self._datasync is not None
        for done in self._datasync.reap():
            sync = self._kernel_sync
            if sync is None or sync.token != done.token:
                continue  # abort() gave up on it
            self._kernel_sync = None
            self._observe(time.perf_counter() - sync.started, ok=not done.error)
            if done.error:
                failure = self._failure(OSError(done.error, os.strerror(done.error)))
                self._group_done(sync.group, failure)
            else:
                self.fsync_count += 1
                self._group_done(sync.group, sync.mark)

    def _observe(self, seconds: float, *, ok: bool) -> None:
        if self.on_sync is not None:
            self.on_sync(seconds, ok)

    # ------------------------------------------------------------------ writer thread

    def _open_first_file(self) -> None:
        """Create the directory if need be and open the file after every existing one."""
        make_dirs(self.directory)
        existing = list_journals(self.directory)
        self._new_file((existing[-1] + 1) if existing else 1)

    def _new_file(self, journal_id: int) -> None:
        """Switch to a fresh journal file; the current one stays in use if this fails."""
        path = journal_path(self.directory, journal_id)
        fd = create_with_header(path, FILE_MAGIC)
        self._close_fd()
        self._fd, self._journal_id, self._offset = fd, journal_id, len(FILE_MAGIC)
        self._written = LogMark(journal_id, self._offset)
        log.info("journal file %s opened", path.name)

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _write_and_sync(self, buf: bytes) -> LogMark:
        """On the journal thread: roll over if due, write ``buf``, sync it."""
        if self._roll_next or self._offset >= self.max_file_size:
            try:
                self._new_file(self._journal_id + 1)
            except OSError as exc:
                raise self._failure(exc) from exc
            self._roll_next = False
        mark = self._write(buf)
        return self._sync_written(mark) if self.sync_data else mark

    def _write(self, buf: bytes) -> LogMark:
        """Append ``buf`` to the current file (no sync); its end as a mark."""
        try:
            write_all(self._fd, buf)
        except OSError as exc:
            raise self._failure(exc) from exc
        self._offset += len(buf)
        self._written = LogMark(self._journal_id, self._offset)
        return self._written

    def _sync_written(self, mark: LogMark) -> LogMark:
        """On the journal thread: make what was written durable with ``sync_file``."""
        started = time.perf_counter()
        try:
            self.sync_file(self._fd)
        except OSError as exc:
            self._observe(time.perf_counter() - started, ok=False)
            raise self._failure(exc) from exc
        self._observe(time.perf_counter() - started, ok=True)
        self.fsync_count += 1
        return mark

    def _failure(self, exc: OSError) -> BookieError:
        """The error a failed journal write or sync becomes. Whatever went wrong, later
        records go to a fresh file: none may ever follow a torn record, where replay would
        stop before reaching it."""
        self._roll_next = True
        # EFBIG: a file size limit (RLIMIT_FSIZE) stops writes as a full disk does.
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return DiskFullError(f"journal disk is full: {exc}")
        return BookieError(f"journal write failed: {exc}")
