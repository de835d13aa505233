"""``BookieStorage``: the journal, memtable, entry logs and index behind one async API.

Write path: validate, put in the memtable and the ledger's in-memory state, append to the
journal, acknowledge once the journal group is durable. A checkpoint flushes a memtable
snapshot to the entry log and index, syncs both, persists the LastLogMark and deletes the
journals it covers. Start-up replays the journal from the LastLogMark.

A failed checkpoint turns the bookie read-only until a later checkpoint succeeds (the flush
timer keeps retrying); disk checks cannot end that early (see ``stripemq.bookie.disk``).

Garbage collection drops ledgers deleted from metadata (``drop_ledgers``/``run_gc``) and
``compact`` moves the live entries out of mostly dead entry logs. Both change files only on the
flush thread while holding the flush lock, so they never interleave with a checkpoint.

State always changes in memory *before* its journal record is queued, so every record that
lies before a checkpoint's mark is reflected in what that checkpoint writes.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from stripemq.bookie.config import BookieConfig
from stripemq.bookie.disk import DiskUsagePolicy, ReadOnlyReason, ReadOnlyState
from stripemq.bookie.storage.deleted import DeletedLedgers
from stripemq.bookie.storage.entry_log import (
    EntryLogger,
    LogScan,
    MissingEntryLogError,
    make_location,
    record_size,
)
from stripemq.bookie.storage.files import make_dirs, write_atomically
from stripemq.bookie.storage.index import MAX_ENTRY_ID, MAX_MASTER_KEY, LedgerHeader, LedgerIndex
from stripemq.bookie.storage.journal import (
    JournalRecord,
    JournalWriter,
    LogMark,
    RecordType,
    decode_lac,
    encode_lac,
    encode_record,
    replay_journals,
)
from stripemq.bookie.storage.memtable import Memtable
from stripemq.errors import (
    BookieError,
    BookieReadOnlyError,
    BookieShuttingDownError,
    DigestMismatchError,
    DiskFullError,
    EntryTooLargeError,
    InvalidEntryError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadTimeoutError,
    UnauthorizedAccessError,
)
from stripemq.proto.entry import HEADER_SIZE, EntryHeader, verify_entry

log = logging.getLogger(__name__)

_MARK = struct.Struct(">QQ")
_MARK_CRC = struct.Struct(">I")
_ENTRY_IDS = struct.Struct(">QQ")
MARK_FILE = "lastMark"
# Compaction copies at most this many bytes per hold of the flush lock, so checkpoints wait
# for one batch, never for a whole entry log.
COMPACTION_BATCH_BYTES = 8 * 1024 * 1024


@dataclass
class LedgerDescriptor:
    """A bookie's in-memory view of one ledger: its key, fence bit and LACs (BookKeeper's
    ``LedgerDescriptor``). Not the ledger's metadata state, which is ``LedgerState``."""

    ledger_id: int
    master_key: bytes | None = None
    fenced: bool = False
    explicit_lac: int = -1
    lac: int = -1
    last_entry_id: int = -1
    lac_changed: asyncio.Event | None = field(default=None, repr=False)

    def header(self) -> LedgerHeader:
        return LedgerHeader(self.fenced, self.master_key, self.explicit_lac)

    def advance_lac(self, lac: int) -> None:
        if lac > self.lac:
            self.lac = lac
            if self.lac_changed is not None:
                self.lac_changed.set()
                self.lac_changed = None


@dataclass(frozen=True, slots=True)
class AddOp:
    """One entry to add, as it arrives from a client."""

    entry: bytes
    master_key: bytes
    recovery_add: bool = False


@dataclass
class GcResult:
    """One garbage-collection pass over ledgers deleted from metadata."""

    ledgers_deleted: list[int] = field(default_factory=list)
    dead_bytes: int = 0  # entry-log bytes of those ledgers, now garbage
    logs_deleted: int = 0  # entry logs with nothing live left, removed without copying
    bytes_reclaimed: int = 0


@dataclass
class CompactionResult:
    """One compaction pass: logs rewritten and what it cost and freed."""

    logs_compacted: int = 0
    entries_moved: int = 0
    bytes_moved: int = 0
    bytes_reclaimed: int = 0  # file bytes removed minus bytes copied


@dataclass
class GcStats:
    """Cumulative garbage-collection figures, exported as Prometheus counters."""

    ledgers_deleted: int = 0
    entry_logs_deleted: int = 0
    entry_logs_compacted: int = 0
    bytes_reclaimed: int = 0


def encode_mark(mark: LogMark) -> bytes:
    """The LastLogMark file: journal id, offset and a CRC32C over both."""
    body = _MARK.pack(mark.journal_id, mark.offset)
    return body + _MARK_CRC.pack(crc32c.crc32c(body))


def decode_mark(raw: bytes) -> LogMark | None:
    """The mark in ``raw``, or ``None`` if it is torn or corrupt."""
    if len(raw) != _MARK.size + _MARK_CRC.size:
        return None
    body = raw[: _MARK.size]
    if crc32c.crc32c(body) != _MARK_CRC.unpack_from(raw, _MARK.size)[0]:
        return None
    return LogMark(*_MARK.unpack(body))


class BookieStorage:
    """Durable entry storage for one bookie. Use from a single event loop."""

    def __init__(self, config: BookieConfig) -> None:
        self.config = config
        self.journal_dir = Path(config.journal_dir)
        self.ledger_dir = Path(config.ledger_dir)
        self.memtable = Memtable()
        self.entry_log = EntryLogger(
            self.ledger_dir / "logs", config.entry_log_size_limit, config.max_entry_size + 4096
        )
        self.index = LedgerIndex(self.ledger_dir / "index")
        self.journal = JournalWriter(
            self.journal_dir,
            max_group_wait_ms=config.journal_max_group_wait_ms,
            flush_when_queue_empty=config.journal_flush_when_queue_empty,
            buffered_writes_threshold=config.journal_buffered_writes_threshold,
            sync_data=config.journal_sync_data,
            max_file_size=config.journal_max_size_mb * 1024 * 1024,
            kernel_aio=config.journal_kernel_aio_sync,
        )
        self._memtable_limit = config.write_cache_max_size_mb * 1024 * 1024
        self.read_only_state = ReadOnlyState(
            DiskUsagePolicy(config.disk_usage_threshold, config.disk_usage_lwm_threshold)
        )
        self.entries_added = 0
        self.checkpoints = 0
        self._ledgers: dict[int, LedgerDescriptor] = {}
        # Garbage-collected ledgers; replaced (never changed) on the event loop.
        self.deleted = DeletedLedgers()
        self._deleted_unsaved = False  # the last save failed (full disk): retry next round
        # Ledgers whose header (fence, key, explicit LAC) changed since the last checkpoint.
        self._dirty_headers: set[int] = set()
        self._read_cache: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._read_cache_bytes = 0
        self._read_io = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bookie-read")
        # Batch reads (bulk scans such as Spark's) get threads of their own, so a scan never
        # queues the brokers' catch-up reads behind it.
        self._scan_io = ThreadPoolExecutor(max_workers=2, thread_name_prefix="bookie-scan")
        self._flush_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bookie-flush")
        self._flush_lock = asyncio.Lock()
        self._flush_task: asyncio.Task[None] | None = None
        self._timer_task: asyncio.Task[None] | None = None
        self._flushed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._mark = LogMark(0, 0)
        self._closed = False
        self.gc_stats = GcStats()
        # Bumped each time garbage collection drops ledgers from memory: a state loaded from
        # disk while that happened may describe a ledger that is gone, so it is loaded again.
        self._gc_generation = 0

    @property
    def read_only(self) -> bool:
        """True while the bookie refuses adds; ``read_only_state`` holds the reasons."""
        return self.read_only_state.read_only

    @read_only.setter
    def read_only(self, short_of_space: bool) -> None:
        # Assigning records the disks' verdict (what the disk monitor used to assign); a
        # failed checkpoint still holds the bookie read-only until a checkpoint succeeds.
        self._change_read_only(lambda: self.read_only_state.set_space_verdict(short_of_space))

    def disk_usage_checked(self, usage: float) -> bool:
        """Apply a disk check's usage (0..1) of the fullest disk; returns ``read_only``."""
        self._change_read_only(lambda: self.read_only_state.disk_checked(usage))
        return self.read_only

    def _change_read_only(self, change: Callable[[], None]) -> None:
        """Apply ``change`` to the read-only state and log the bookie turning either way."""
        was = self.read_only
        change()
        if self.read_only and not was:
            log.error("bookie turns read-only: %s", self.read_only_state.describe())
        elif was and not self.read_only:
            log.warning("bookie is writable again")

    @property
    def ledger_count(self) -> int:
        """Ledgers whose state is held in memory."""
        return len(self._ledgers)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the files, replay the journal from the LastLogMark, start the writers."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._flush_io, self._open_and_replay)
        await self.journal.open()
        # Make what was replayed durable in entry logs and index, so the old journals go.
        await self.checkpoint()
        self._timer_task = asyncio.create_task(self._flush_timer(), name="bookie-flush-timer")

    async def stop(self) -> None:
        """Checkpoint everything and close files (clean shutdown)."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        # Let a flush in progress finish rather than cancel it half-way.
        pending = [t for t in (self._timer_task, self._flush_task) if t is not None]
        await asyncio.gather(*pending, return_exceptions=True)
        await self.journal.close()
        try:
            await self.checkpoint()
        finally:
            await self._release()

    async def abort(self) -> None:
        """Stop at once without flushing, leaving the disks as a crash would."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        for task in (self._timer_task, self._flush_task):
            if task is not None:
                task.cancel()
        await self.journal.abort()
        await self._release()

    async def _release(self) -> None:
        loop = asyncio.get_running_loop()
        self._read_io.shutdown(wait=True)  # no read may use a descriptor after it is closed
        self._scan_io.shutdown(wait=True)
        await loop.run_in_executor(self._flush_io, self._close_files)
        self._flush_io.shutdown(wait=True)

    def _open_and_replay(self) -> None:
        make_dirs(self.ledger_dir)
        self.deleted = DeletedLedgers.load(self.ledger_dir)
        self.entry_log.open()
        # A ledger without an index file was garbage-collected (or never flushed: its bytes in
        # old logs are not pointed at, and the journal replay below writes them again).
        self.entry_log.forget_ledgers(lambda ledger_id: not self.index.exists(ledger_id))
        mark_path = self.ledger_dir / MARK_FILE
        if mark_path.exists():
            mark = decode_mark(mark_path.read_bytes())
            if mark is None:
                raise BookieError(f"{mark_path} is corrupt; refusing to guess where to replay")
            self._mark = mark
        replayed = 0
        for record, _end in replay_journals(self.journal_dir, self._mark):
            self._apply_replayed(record)
            replayed += 1
        log.info(
            "replayed %d journal records from %016x:%d (%d ledgers in memory)",
            replayed,
            self._mark.journal_id,
            self._mark.offset,
            len(self._ledgers),
        )

    def _apply_replayed(self, record: JournalRecord) -> None:
        if record.ledger_id in self.deleted:
            return  # garbage-collected after this record was journalled
        state = self._ledgers.get(record.ledger_id) or self._load_state_sync(record.ledger_id)
        if state is None:
            state = LedgerDescriptor(record.ledger_id)
        self._ledgers[record.ledger_id] = state
        if record.type is RecordType.ENTRY:
            try:
                header = verify_entry(record.body)
            except BookieError:
                log.error("journal holds a corrupt entry for ledger %d; skipped", record.ledger_id)
                return
            self.memtable.put(header.ledger_id, header.entry_id, record.body)
            state.last_entry_id = max(state.last_entry_id, header.entry_id)
            state.lac = max(state.lac, header.lac)
        elif record.type is RecordType.FENCE:
            state.fenced = True
        elif record.type is RecordType.MASTER_KEY:
            state.master_key = record.body
        elif record.type is RecordType.EXPLICIT_LAC:
            lac = decode_lac(record.body)
            state.explicit_lac = max(state.explicit_lac, lac)
            state.lac = max(state.lac, lac)
        self._dirty_headers.add(state.ledger_id)

    def _close_files(self) -> None:
        self.entry_log.close()
        self.index.close()

    # ------------------------------------------------------------------ ledger state

    def _load_state_sync(self, ledger_id: int) -> LedgerDescriptor | None:
        """Rebuild a ledger's state from its index file (blocking; off the loop)."""
        try:
            header = self.index.read_header(ledger_id)
        except DigestMismatchError as exc:
            # Whether it was fenced is unknown: assume it was, so no old writer gets through.
            # Its entries stay readable; a recovery add may still re-replicate into it.
            log.error("%s; serving ledger %d as fenced", exc, ledger_id)
            header = LedgerHeader(fenced=True)
        if header is None:
            return None
        state = LedgerDescriptor(
            ledger_id,
            master_key=header.master_key,
            fenced=header.fenced,
            explicit_lac=header.explicit_lac,
            lac=header.explicit_lac,
        )
        state.last_entry_id = self.index.last_entry_id(ledger_id)
        if state.last_entry_id >= 0:
            try:
                last = self._read_located(ledger_id, state.last_entry_id)
                if last is not None:
                    state.lac = max(state.lac, verify_entry(last).lac)
            except BookieError:
                log.warning("last entry of ledger %d is unreadable", ledger_id)
        return state

    def _read_located(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The stored bytes the index points at (unverified), or ``None`` if not indexed.

        Compaction updates the index before it removes an old log, so a read that finds its
        log gone looks the location up again and finds the entry's new place.
        """
        while True:
            location = self.index.get_location(ledger_id, entry_id)
            if location is None:
                return None
            try:
                return self.entry_log.read(location)
            except MissingEntryLogError:
                if self.index.get_location(ledger_id, entry_id) == location:
                    raise  # not moved: the index points into a log that is gone

    async def _state(self, ledger_id: int, create: bool = False) -> LedgerDescriptor:
        state = self._ledgers.get(ledger_id)
        if state is not None:
            return state
        loop = asyncio.get_running_loop()
        while True:
            generation = self._gc_generation
            loaded = await loop.run_in_executor(self._read_io, self._load_state_sync, ledger_id)
            state = self._ledgers.get(ledger_id)  # another task may have loaded it meanwhile
            if state is not None:
                return state
            if generation == self._gc_generation:
                break
        if ledger_id in self.deleted:
            if create:
                # Its writer was fenced or is gone: never hand out a fresh, unfenced ledger.
                raise LedgerFencedError(f"ledger {ledger_id} was deleted; nothing can be added")
            raise NoSuchLedgerError(f"ledger {ledger_id} was deleted from this bookie")
        if loaded is None:
            if not create:
                raise NoSuchLedgerError(f"ledger {ledger_id} does not exist on this bookie")
            loaded = LedgerDescriptor(ledger_id)
        self._ledgers[ledger_id] = loaded
        return loaded

    def _check_key(self, state: LedgerDescriptor, master_key: bytes, records: list[bytes]) -> None:
        """Bind a new ledger to ``master_key`` or refuse a different one."""
        if len(master_key) > MAX_MASTER_KEY:
            raise InvalidEntryError(f"master key longer than {MAX_MASTER_KEY} bytes")
        if state.master_key is None:
            state.master_key = master_key
            self._dirty_headers.add(state.ledger_id)
            records.append(encode_record(RecordType.MASTER_KEY, state.ledger_id, master_key))
        elif state.master_key != master_key:
            raise UnauthorizedAccessError(f"wrong master key for ledger {state.ledger_id}")

    def _writable(self) -> None:
        if self._closed:
            raise BookieShuttingDownError("bookie is shutting down")
        if self.read_only:
            raise BookieReadOnlyError(f"bookie is read-only ({self.read_only_state.describe()})")

    # ------------------------------------------------------------------ writes

    async def add_entries(self, ops: list[AddOp]) -> list[BookieError | EntryHeader]:
        """Add a batch; one result per op: its header on success or the error it got."""
        try:
            await self._wait_for_memtable_room()
        except BookieError as exc:
            return [exc] * len(ops)
        results: list[BookieError | EntryHeader] = []
        records: list[bytes] = []
        accepted: list[int] = []
        touched: list[tuple[LedgerDescriptor, int]] = []
        for op in ops:
            try:
                header, state = await self._prepare_add(op, records)
            except BookieError as exc:
                results.append(exc)
                continue
            accepted.append(len(results))
            touched.append((state, header.lac))
            results.append(header)
        if not records:
            return results
        try:
            await self._journal_append(b"".join(records))
        except BookieError as exc:
            for i in accepted:
                results[i] = exc
            return results
        self.entries_added += len(accepted)
        for state, lac in touched:
            state.advance_lac(lac)
        self._maybe_flush()
        return results

    async def _prepare_add(
        self, op: AddOp, records: list[bytes]
    ) -> tuple[EntryHeader, LedgerDescriptor]:
        """Validate one add and apply it to the memtable; queue its journal records.

        Everything that awaits comes first. The checks that a concurrent fence or add could
        change, and the changes themselves, run without yielding to the loop, so an add can
        never slip in after a fence has been applied.
        """
        self._writable()
        if len(op.entry) > self.config.max_entry_size + HEADER_SIZE:
            raise EntryTooLargeError(
                f"entry of {len(op.entry)} bytes exceeds max_entry_size "
                f"{self.config.max_entry_size}"
            )
        header = verify_entry(op.entry)
        if header.entry_id > MAX_ENTRY_ID:
            raise InvalidEntryError(f"entry id {header.entry_id} is beyond {MAX_ENTRY_ID}")
        state = await self._state(header.ledger_id, create=True)
        if header.entry_id <= state.last_entry_id:
            await self._check_duplicate(header, op.entry)
        # ---- no await below this line
        self._writable()
        self._check_key(state, op.master_key, records)
        if state.fenced and not op.recovery_add:
            raise LedgerFencedError(f"ledger {header.ledger_id} is fenced")
        concurrent = self.memtable.get(header.ledger_id, header.entry_id)
        if concurrent is not None and concurrent[HEADER_SIZE:] != op.entry[HEADER_SIZE:]:
            raise InvalidEntryError(
                f"entry {header.ledger_id}:{header.entry_id} already exists with other data"
            )
        self.memtable.put(header.ledger_id, header.entry_id, op.entry)
        self._read_cache_drop((header.ledger_id, header.entry_id))
        state.last_entry_id = max(state.last_entry_id, header.entry_id)
        records.append(encode_record(RecordType.ENTRY, header.ledger_id, op.entry))
        return header, state

    async def _check_duplicate(self, header: EntryHeader, entry: bytes) -> None:
        """A re-add must carry the same data (recovery re-replicates); anything else is refused."""
        try:
            existing = await self._read_stored(header.ledger_id, header.entry_id)
        except NoSuchEntryError:
            return
        except DigestMismatchError:
            return  # a corrupt replica may be replaced by a good copy
        if existing[HEADER_SIZE:] != entry[HEADER_SIZE:]:
            raise InvalidEntryError(
                f"entry {header.ledger_id}:{header.entry_id} already exists with other data"
            )

    async def fence(self, ledger_id: int, master_key: bytes) -> LedgerDescriptor:
        """Fence a ledger durably: later adds from its writer are refused."""
        self._check_open()
        state = await self._state(ledger_id, create=True)
        records: list[bytes] = []
        self._check_key(state, master_key, records)
        if not state.fenced:
            state.fenced = True
            self._dirty_headers.add(state.ledger_id)
            records.append(encode_record(RecordType.FENCE, ledger_id))
        if records:
            await self._journal_append(b"".join(records))
        return state

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        """Record an explicit LAC sent by an idle writer."""
        self._writable()
        state = await self._state(ledger_id, create=True)
        records: list[bytes] = []
        self._check_key(state, master_key, records)
        if lac > state.explicit_lac:
            state.explicit_lac = lac
            self._dirty_headers.add(state.ledger_id)
            records.append(encode_record(RecordType.EXPLICIT_LAC, ledger_id, encode_lac(lac)))
        if records:
            await self._journal_append(b"".join(records))
        state.advance_lac(lac)

    async def _journal_append(self, data: bytes) -> None:
        try:
            await self.journal.append(data)
        except DiskFullError:
            self._change_read_only(self.read_only_state.disk_full)
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise BookieShuttingDownError("bookie is shutting down")

    # ------------------------------------------------------------------ reads

    async def read_entry(
        self, ledger_id: int, entry_id: int, long_poll_timeout_ms: int = 0
    ) -> tuple[bytes, LedgerDescriptor]:
        """The entry's verified bytes and the ledger state (for its LAC).

        ``entry_id == -1`` reads the last entry held. With a long poll, an entry beyond the
        LAC is awaited until the LAC reaches it or the timeout passes.
        """
        self._check_open()
        state = await self._state(ledger_id)
        if entry_id == -1:
            entry_id = state.last_entry_id
            if entry_id < 0:
                raise NoSuchEntryError(f"ledger {ledger_id} has no entries on this bookie")
        elif entry_id < 0:
            raise InvalidEntryError(f"invalid entry id {entry_id}")
        if long_poll_timeout_ms > 0 and entry_id > state.lac:
            timeout_s = min(long_poll_timeout_ms, self.config.max_long_poll_timeout_ms) / 1000
            await self._wait_for_lac(state, entry_id, timeout_s)
        entry = await self._read_stored(ledger_id, entry_id)
        return entry, state

    async def read_entries(
        self, ledger_id: int, entry_ids: list[int], max_bytes: int = 0
    ) -> tuple[list[bytes], LedgerDescriptor]:
        """The verified bytes of the first of ``entry_ids`` that fit in ``max_bytes`` (at
        least one; 0 is no limit), in order, up to the first entry this bookie lacks, and
        the ledger state. Entries on disk are read
        in one hop to the read thread and bypass the read cache (a bulk scan would evict
        what tailing readers need).

        Raises:
            NoSuchLedgerError, NoSuchEntryError: the ledger, or the first entry, is not here.
        """
        self._check_open()
        state = await self._state(ledger_id)
        if any(entry_id < 0 for entry_id in entry_ids):
            raise InvalidEntryError(f"invalid entry ids in a batch read of ledger {ledger_id}")
        found: dict[int, bytes] = {}
        missing: list[int] = []
        for entry_id in entry_ids:
            entry = self.memtable.get(ledger_id, entry_id) or self._read_cache.get(
                (ledger_id, entry_id)
            )
            if entry is None:
                missing.append(entry_id)
            else:
                found[entry_id] = entry
        if missing:
            loop = asyncio.get_running_loop()
            read = await loop.run_in_executor(
                self._scan_io, self._read_disk_many, ledger_id, missing, max_bytes
            )
            found.update(read)
        entries: list[bytes] = []
        total = 0
        for entry_id in entry_ids:
            entry = found.get(entry_id)
            if entry is None or (entries and max_bytes and total + len(entry) > max_bytes):
                break  # missing here, or beyond what the disk pass read under the byte limit
            entries.append(entry)
            total += len(entry)
        if entry_ids and not entries:
            raise NoSuchEntryError(f"entry {ledger_id}:{entry_ids[0]} is not on this bookie")
        return entries, state

    def _read_disk_many(
        self, ledger_id: int, entry_ids: list[int], max_bytes: int
    ) -> dict[int, bytes]:
        """``_read_disk`` for several entries, stopping at the first this bookie lacks or
        once ``max_bytes`` are read."""
        out: dict[int, bytes] = {}
        total = 0
        for entry_id in entry_ids:
            try:
                entry = self._read_disk(ledger_id, entry_id)
            except NoSuchEntryError:
                break
            out[entry_id] = entry
            total += len(entry)
            if max_bytes and total >= max_bytes:
                break
        return out

    async def _wait_for_lac(self, state: LedgerDescriptor, entry_id: int, wait_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while state.lac < entry_id:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ReadTimeoutError(
                    f"LAC of ledger {state.ledger_id} is {state.lac}; entry {entry_id} "
                    f"not confirmed within {wait_s:.3f}s"
                )
            if state.lac_changed is None:
                state.lac_changed = asyncio.Event()
            try:
                await asyncio.wait_for(state.lac_changed.wait(), remaining)
            except TimeoutError:
                continue

    async def _read_stored(self, ledger_id: int, entry_id: int) -> bytes:
        """The entry's bytes, already verified: on add (memtable) or on its disk read."""
        key = (ledger_id, entry_id)
        entry = self.memtable.get(ledger_id, entry_id)
        if entry is not None:
            return entry
        entry = self._read_cache.get(key)
        if entry is not None:
            self._read_cache.move_to_end(key)
            return entry
        loop = asyncio.get_running_loop()
        entry = await loop.run_in_executor(self._read_io, self._read_disk, ledger_id, entry_id)
        self._read_cache_put(key, entry)
        return entry

    def _read_disk(self, ledger_id: int, entry_id: int) -> bytes:
        entry = self._read_located(ledger_id, entry_id)
        if entry is None:
            raise NoSuchEntryError(f"entry {ledger_id}:{entry_id} is not on this bookie")
        try:
            header = verify_entry(entry)
        except InvalidEntryError as exc:  # these bytes were verified on add: the disk changed
            raise DigestMismatchError(
                f"stored entry {ledger_id}:{entry_id} is corrupt: {exc}"
            ) from None
        if (header.ledger_id, header.entry_id) != (ledger_id, entry_id):
            raise DigestMismatchError(
                f"index of ledger {ledger_id} points entry {entry_id} at "
                f"{header.ledger_id}:{header.entry_id}"
            )
        return entry

    def _read_cache_put(self, key: tuple[int, int], entry: bytes) -> None:
        limit = self.config.read_cache_max_size_mb * 1024 * 1024
        if len(entry) > limit // 4:
            return
        self._read_cache_drop(key)
        self._read_cache[key] = entry
        self._read_cache_bytes += len(entry)
        while self._read_cache_bytes > limit:
            _, old = self._read_cache.popitem(last=False)
            self._read_cache_bytes -= len(old)

    def _read_cache_drop(self, key: tuple[int, int]) -> None:
        old = self._read_cache.pop(key, None)
        if old is not None:
            self._read_cache_bytes -= len(old)

    async def ledger_state(self, ledger_id: int) -> LedgerDescriptor:
        """LAC, last entry and fence state; ``NoSuchLedgerError`` if unknown here."""
        self._check_open()
        return await self._state(ledger_id)

    # ------------------------------------------------------------------ checkpoint

    async def checkpoint(self) -> LogMark:
        """Flush the memtable to entry logs and index, then persist and trim the journal."""
        async with self._flush_lock:
            return await self._checkpoint_locked()

    async def _checkpoint_locked(self) -> LogMark:
        """The checkpoint itself; the caller holds the flush lock."""
        mark = self.journal.written_mark
        snapshot = self.memtable.take_snapshot()
        dirty, self._dirty_headers = self._dirty_headers, set()
        # A ledger garbage-collected after a late fence or add marked it has no header.
        headers = {
            ledger_id: self._ledgers[ledger_id].header()
            for ledger_id in dirty
            if ledger_id in self._ledgers
        }
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._flush_io, self._flush_sync, snapshot, headers, mark)
        except BaseException as exc:
            # Keep everything for the next attempt. Even if this coroutine was cancelled
            # while the thread still runs, a later flush queues behind it on _flush_io.
            self._dirty_headers |= dirty
            self.memtable.restore_snapshot()
            if isinstance(exc, Exception):
                log.error("checkpoint failed (%s); read-only until a checkpoint succeeds", exc)
                self._change_read_only(self.read_only_state.checkpoint_failed)
            raise
        self.memtable.drop_snapshot()
        self._mark = mark
        self.checkpoints += 1
        self._change_read_only(self.read_only_state.checkpoint_succeeded)
        await loop.run_in_executor(self._flush_io, self.journal.delete_before, mark.journal_id)
        self._flushed.set()
        self._flushed = asyncio.Event()
        return mark

    def _flush_sync(
        self,
        snapshot: dict[tuple[int, int], bytes],
        headers: dict[int, LedgerHeader],
        mark: LogMark,
    ) -> None:
        keys = sorted(snapshot)
        locations = self.entry_log.append_many([snapshot[key] for key in keys])
        # One index write per run of consecutive entries of a ledger.
        run_start = 0
        for i in range(1, len(keys) + 1):
            if i == len(keys) or keys[i] != (keys[i - 1][0], keys[i - 1][1] + 1):
                ledger_id, first_entry = keys[run_start]
                self.index.set_locations(ledger_id, first_entry, locations[run_start:i])
                run_start = i
        for ledger_id, header in headers.items():
            self.index.write_header(ledger_id, header)
        self.entry_log.sync()
        self.index.sync()
        if mark.journal_id:
            write_atomically(self.ledger_dir / MARK_FILE, encode_mark(mark))
        log.debug(
            "checkpoint: %d entries, mark %016x:%d", len(snapshot), mark.journal_id, mark.offset
        )

    def _maybe_flush(self) -> None:
        """Start a background checkpoint once the active memtable is full."""
        if self.memtable.active_bytes >= self._memtable_limit:
            self._start_background_flush()

    async def _wait_for_memtable_room(self) -> None:
        """Back-pressure: accept no add while two memtables' worth of entries wait to flush."""
        while self.memtable.size_bytes >= 2 * self._memtable_limit:
            self._writable()  # a failing checkpoint turns the bookie read-only: refuse
            self._start_background_flush()
            try:
                await asyncio.wait_for(asyncio.shield(self._flushed.wait()), 1.0)
            except TimeoutError:
                continue

    def _start_background_flush(self) -> None:
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.create_task(self._flush_in_background())

    async def _flush_in_background(self) -> None:
        try:
            await self.checkpoint()
        except Exception:
            log.exception("checkpoint failed; the memtable is kept and will be retried")

    async def _flush_timer(self) -> None:
        interval = self.config.flush_interval_ms / 1000
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), interval)
                return
            except TimeoutError:
                pass
            failed = ReadOnlyReason.CHECKPOINT_FAILED in self.read_only_state.reasons
            if failed or self.memtable.active_bytes or self._dirty_headers:
                await self._flush_in_background()

    # ------------------------------------------------------------------ garbage collection

    async def local_ledger_ids(self) -> set[int]:
        """Every ledger held here, in memory or with an index file: GC's local snapshot."""
        self._check_open()
        in_memory = set(self._ledgers)
        loop = asyncio.get_running_loop()
        on_disk = await loop.run_in_executor(self._read_io, self.index.ledger_ids)
        return in_memory | set(on_disk)

    async def run_gc(
        self, live_ledger_ids: Collection[int], local_snapshot: Collection[int] | None = None
    ) -> GcResult:
        """Drop the ledgers of ``local_snapshot`` (default: all held now) not in the live set.

        Safe only if ``live_ledger_ids`` was listed from metadata *after* ``local_snapshot``
        was taken (see ``GarbageCollector``), so a ledger created meanwhile is never dropped.
        """
        if local_snapshot is None:
            local_snapshot = await self.local_ledger_ids()
        live = set(live_ledger_ids)
        return await self.drop_ledgers(
            ledger_id for ledger_id in local_snapshot if ledger_id not in live
        )

    async def drop_ledgers(self, ledger_ids: Iterable[int]) -> GcResult:
        """Garbage-collect deleted ledgers, then remove entry logs with nothing live left.

        A ledger's index file goes (durably), its entries leave the memtable and read cache,
        its bytes count as dead in every entry log, and its in-memory state is forgotten.
        """
        doomed = set(ledger_ids)
        result = GcResult(ledgers_deleted=sorted(doomed))
        loop = asyncio.get_running_loop()
        async with self._flush_lock:  # no checkpoint snapshot exists while this is held
            self._check_open()
            if doomed:
                # Remembered before any file goes, so no add in between finds a fresh ledger.
                self.deleted = await loop.run_in_executor(
                    self._flush_io, self.deleted.union, doomed
                )
                result.dead_bytes = await loop.run_in_executor(
                    self._flush_io, self._drop_ledgers_sync, doomed, self.deleted
                )
                # Files first, memory second: a state loaded in between is caught by the
                # generation check in _state and loaded again (finding nothing).
                for ledger_id in doomed:
                    self._ledgers.pop(ledger_id, None)
                    self._dirty_headers.discard(ledger_id)
                self.memtable.drop_ledgers(doomed)
                for key in [k for k in self._read_cache if k[0] in doomed]:
                    self._read_cache_drop(key)
                self._gc_generation += 1
                if not self.read_only:
                    # Move the LastLogMark past the dropped ledgers' journal records, so a
                    # crash does not replay them back to life.
                    try:
                        await self._checkpoint_locked()
                    except Exception as exc:
                        log.warning("checkpoint after garbage collection failed: %s", exc)
                log.info(
                    "garbage-collected %d deleted ledgers (%d entry-log bytes now dead)",
                    len(doomed),
                    result.dead_bytes,
                )
            elif self._deleted_unsaved:
                await loop.run_in_executor(self._flush_io, self._save_deleted_sync, self.deleted)
            result.logs_deleted, result.bytes_reclaimed = await loop.run_in_executor(
                self._flush_io, self._remove_dead_logs_sync
            )
        self.gc_stats.ledgers_deleted += len(doomed)
        self.gc_stats.entry_logs_deleted += result.logs_deleted
        self.gc_stats.bytes_reclaimed += result.bytes_reclaimed
        return result

    def _drop_ledgers_sync(self, ledger_ids: set[int], deleted: DeletedLedgers) -> int:
        self._save_deleted_sync(deleted)
        self.index.delete(sorted(ledger_ids))
        return self.entry_log.drop_ledgers(ledger_ids)

    def _save_deleted_sync(self, deleted: DeletedLedgers) -> None:
        """Persist the dropped-ledger set; on a full disk, keep going and retry later.

        GC must still free space when nothing can be written (it is how a full bookie
        recovers), and the set held in memory protects the dropped ledgers meanwhile.
        """
        try:
            deleted.save(self.ledger_dir)
            self._deleted_unsaved = False
        except OSError as exc:
            self._deleted_unsaved = True
            log.error("cannot save the dropped-ledger set (%s); will retry next round", exc)

    def _remove_dead_logs_sync(self) -> tuple[int, int]:
        """Remove finished logs none of whose ledgers exist any more (nothing to copy)."""
        removed = reclaimed = 0
        for meta in self.entry_log.finished_metas():
            if meta.ledger_bytes:
                continue
            if meta.partial and self._ledger_pointing_into(meta.log_id) is not None:
                continue  # logged there; the unreadable record keeps the log on disk
            reclaimed += self.entry_log.remove_log(meta.log_id)
            removed += 1
        return removed, reclaimed

    def _ledger_pointing_into(self, log_id: int) -> int | None:
        """A ledger of the index with an entry in ``log_id``, asked of every ledger on disk.

        For logs whose metadata cannot be trusted to name every ledger they hold (a scan
        stopped at an unreadable record), this is the only safe test before removing them.
        """
        for ledger_id in self.index.ledger_ids():
            if self.index.points_into(ledger_id, log_id):
                log.error(
                    "entry log %08x has an unreadable record and ledger %d still points "
                    "into it: keeping the log",
                    log_id,
                    ledger_id,
                )
                return ledger_id
        return None

    async def compact(
        self, threshold: float, should_stop: Callable[[], bool] | None = None
    ) -> CompactionResult:
        """Compact every finished entry log whose live fraction is below ``threshold``.

        Live entries are copied to the current log, which is synced; the index is pointed at
        the copies and synced; only then is the old log deleted. A crash anywhere leaves every
        entry reachable through the index (at its old place or its new one).
        """
        result = CompactionResult()
        if threshold <= 0:
            return result
        self._check_open()
        if self.read_only:
            log.info("bookie is read-only: compaction skipped")
            return result
        candidates = sorted(
            (m for m in self.entry_log.finished_metas() if m.live_fraction < threshold),
            key=lambda m: m.live_fraction,
        )
        stop = should_stop or (lambda: False)
        for meta in candidates:
            if self._stopping.is_set() or self.read_only or stop():
                break
            try:
                await self._compact_log(meta.log_id, result, stop)
            except BookieShuttingDownError:
                break
            except Exception:
                log.exception("compaction of entry log %08x failed; it is kept", meta.log_id)
                break
        self.gc_stats.entry_logs_compacted += result.logs_compacted
        self.gc_stats.bytes_reclaimed += result.bytes_reclaimed
        return result

    async def _compact_log(
        self, log_id: int, result: CompactionResult, should_stop: Callable[[], bool]
    ) -> None:
        if not self.entry_log.is_finished(log_id):
            return  # removed meanwhile (nothing in it was live)
        loop = asyncio.get_running_loop()
        scan = LogScan()
        records = self.entry_log.scan(log_id, scan)
        moved_entries = moved_bytes = 0
        try:
            done = False
            while not done:
                if should_stop():
                    return  # the copies made so far are indexed; the old log stays
                async with self._flush_lock:
                    self._check_open()
                    done, entries, size = await loop.run_in_executor(
                        self._flush_io, self._compact_batch_sync, log_id, records
                    )
                moved_entries += entries
                moved_bytes += size
        finally:
            try:
                records.close()
            except ValueError:  # still running on the flush thread (we were cancelled)
                pass
        async with self._flush_lock:
            self._check_open()
            removed = await loop.run_in_executor(
                self._flush_io, self._remove_compacted_sync, log_id, scan
            )
        if removed is None:
            return
        result.logs_compacted += 1
        result.entries_moved += moved_entries
        result.bytes_moved += moved_bytes
        result.bytes_reclaimed += max(0, removed - moved_bytes)
        log.info(
            "compacted entry log %08x: moved %d entries (%d bytes), reclaimed %d bytes",
            log_id,
            moved_entries,
            moved_bytes,
            removed - moved_bytes,
        )

    def _compact_batch_sync(
        self, log_id: int, records: Iterator[tuple[int, bytes]]
    ) -> tuple[bool, int, int]:
        """Copy the next batch of live entries of a log; ``(log done, entries, bytes)``.

        An entry is live if its ledger still exists and the index still points at this very
        record (a later copy of the entry, or a deleted ledger, makes it garbage).
        """
        batch: list[tuple[int, int, bytes]] = []
        size = 0
        done = True
        for offset, entry in records:
            ledger_id, entry_id = _ENTRY_IDS.unpack_from(entry, 0)
            if not self.entry_log.has_ledger(log_id, ledger_id):
                continue
            if self.index.get_location(ledger_id, entry_id) != make_location(log_id, offset):
                continue
            try:
                verify_entry(entry)
            except BookieError as exc:  # moved as it is: readers keep seeing the corruption
                log.error("compaction moves a corrupt entry %d:%d: %s", ledger_id, entry_id, exc)
            batch.append((ledger_id, entry_id, entry))
            size += record_size(entry)
            if size >= COMPACTION_BATCH_BYTES:
                done = False
                break
        if batch:
            locations = self.entry_log.append_many([entry for _, _, entry in batch])
            self.entry_log.sync()  # the copies are durable before the index points at them
            for (ledger_id, entry_id, _), location in zip(batch, locations, strict=True):
                self.index.set_locations(ledger_id, entry_id, [location])
            self.index.sync()  # ... and the index is durable before the old log goes
        return done, len(batch), size

    def _remove_compacted_sync(self, log_id: int, scan: LogScan) -> int | None:
        """Delete a compacted log; its size, or ``None`` if something may still point at it."""
        if not scan.clean and self._ledger_pointing_into(log_id) is not None:
            # The copy stopped at an unreadable record: entries after it were not moved.
            # (After a crash it is usually a torn tail no index slot points into.)
            return None
        return self.entry_log.remove_log(log_id)
