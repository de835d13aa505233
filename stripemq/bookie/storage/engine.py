"""``BookieStorage``: the journal, memtable, entry logs and index behind one async API.

Write path: validate, put in the memtable and the ledger's in-memory state, append to the
journal, acknowledge once the journal group is durable. A checkpoint flushes a memtable
snapshot to the entry log and index, syncs both, persists the LastLogMark and deletes the
journals it covers. Start-up replays the journal from the LastLogMark.

State always changes in memory *before* its journal record is queued, so every record that
lies before a checkpoint's mark is reflected in what that checkpoint writes.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from stripemq.bookie.config import BookieConfig
from stripemq.bookie.storage.entry_log import EntryLogger
from stripemq.bookie.storage.files import write_atomically
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
MARK_FILE = "lastMark"


@dataclass
class LedgerState:
    """A bookie's in-memory view of one ledger."""

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
            buffered_writes_threshold=config.journal_buffered_writes_threshold,
            sync_data=config.journal_sync_data,
            max_file_size=config.journal_max_size_mb * 1024 * 1024,
        )
        self._memtable_limit = config.write_cache_max_size_mb * 1024 * 1024
        self.read_only = False
        self.entries_added = 0
        self.checkpoints = 0
        self._ledgers: dict[int, LedgerState] = {}
        # Ledgers whose header (fence, key, explicit LAC) changed since the last checkpoint.
        self._dirty_headers: set[int] = set()
        self._read_cache: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._read_cache_bytes = 0
        self._read_io = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bookie-read")
        self._flush_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bookie-flush")
        self._flush_lock = asyncio.Lock()
        self._flush_task: asyncio.Task[None] | None = None
        self._timer_task: asyncio.Task[None] | None = None
        self._flushed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._mark = LogMark(0, 0)
        self._closed = False

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
        await loop.run_in_executor(self._flush_io, self._close_files)
        self._flush_io.shutdown(wait=True)

    def _open_and_replay(self) -> None:
        self.ledger_dir.mkdir(parents=True, exist_ok=True)
        self.entry_log.open()
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
        state = self._ledgers.get(record.ledger_id) or self._load_state_sync(record.ledger_id)
        if state is None:
            state = LedgerState(record.ledger_id)
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

    def _load_state_sync(self, ledger_id: int) -> LedgerState | None:
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
        state = LedgerState(
            ledger_id,
            master_key=header.master_key,
            fenced=header.fenced,
            explicit_lac=header.explicit_lac,
            lac=header.explicit_lac,
        )
        state.last_entry_id = self.index.last_entry_id(ledger_id)
        if state.last_entry_id >= 0:
            location = self.index.get_location(ledger_id, state.last_entry_id)
            if location is not None:
                try:
                    state.lac = max(state.lac, verify_entry(self.entry_log.read(location)).lac)
                except BookieError:
                    log.warning("last entry of ledger %d is unreadable", ledger_id)
        return state

    async def _state(self, ledger_id: int, create: bool = False) -> LedgerState:
        state = self._ledgers.get(ledger_id)
        if state is not None:
            return state
        loop = asyncio.get_running_loop()
        loaded = await loop.run_in_executor(self._read_io, self._load_state_sync, ledger_id)
        state = self._ledgers.get(ledger_id)  # another task may have loaded it meanwhile
        if state is not None:
            return state
        if loaded is None:
            if not create:
                raise NoSuchLedgerError(f"ledger {ledger_id} does not exist on this bookie")
            loaded = LedgerState(ledger_id)
        self._ledgers[ledger_id] = loaded
        return loaded

    def _check_key(self, state: LedgerState, master_key: bytes, records: list[bytes]) -> None:
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
            raise BookieReadOnlyError("bookie is read-only (disk usage over threshold)")

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
        touched: list[tuple[LedgerState, int]] = []
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
    ) -> tuple[EntryHeader, LedgerState]:
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

    async def fence(self, ledger_id: int, master_key: bytes) -> LedgerState:
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
            if not self.read_only:
                log.error("journal disk full: bookie turns read-only")
                self.read_only = True
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise BookieShuttingDownError("bookie is shutting down")

    # ------------------------------------------------------------------ reads

    async def read_entry(
        self, ledger_id: int, entry_id: int, long_poll_timeout_ms: int = 0
    ) -> tuple[bytes, LedgerState]:
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

    async def _wait_for_lac(self, state: LedgerState, entry_id: int, wait_s: float) -> None:
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
        location = self.index.get_location(ledger_id, entry_id)
        if location is None:
            raise NoSuchEntryError(f"entry {ledger_id}:{entry_id} is not on this bookie")
        entry = self.entry_log.read(location)
        header = verify_entry(entry)
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

    async def ledger_state(self, ledger_id: int) -> LedgerState:
        """LAC, last entry and fence state; ``NoSuchLedgerError`` if unknown here."""
        self._check_open()
        return await self._state(ledger_id)

    # ------------------------------------------------------------------ checkpoint

    async def checkpoint(self) -> LogMark:
        """Flush the memtable to entry logs and index, then persist and trim the journal."""
        async with self._flush_lock:
            mark = self.journal.written_mark
            snapshot = self.memtable.take_snapshot()
            dirty, self._dirty_headers = self._dirty_headers, set()
            headers = {ledger_id: self._ledgers[ledger_id].header() for ledger_id in dirty}
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(
                    self._flush_io, self._flush_sync, snapshot, headers, mark
                )
            except BaseException as exc:
                # Keep everything for the next attempt. Even if this coroutine was cancelled
                # while the thread still runs, a later flush queues behind it on _flush_io.
                self._dirty_headers |= dirty
                self.memtable.restore_snapshot()
                if isinstance(exc, Exception) and not self.read_only:
                    log.error("checkpoint failed (%s): bookie turns read-only", exc)
                    self.read_only = True
                raise
            self.memtable.drop_snapshot()
            self._mark = mark
            self.checkpoints += 1
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
            if self.memtable.active_bytes or self._dirty_headers:
                await self._flush_in_background()
