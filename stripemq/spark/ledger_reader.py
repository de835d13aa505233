"""The executor's side: read one split's entries from the bookies and yield Arrow batches.

A Python worker keeps one event loop thread and one connection (metadata store and ledger
client) per metadata URL for the tasks it runs one after another, since Spark reuses
workers and connecting costs a few hundred milliseconds; a connection that failed is
dropped and the next task connects again. Each task opens its ledger read-only without
recovery, and reads its entries in windows while the previous window is decoded. A ledger
deleted under the job raises ``DataLossError`` naming topic and ledger (or yields nothing
when the options allow data loss); a bad entry raises ``CorruptEntryError``.

Spark calls ``read_split`` in a Python worker and iterates it synchronously, so the asyncio
side (metadata store, ledger client, gRPC) runs on the worker's event loop thread. The
generator asks that loop for windows of entries and keeps at most ``PREFETCH_WINDOWS`` of
them in flight ahead of the one it decodes: reading overlaps decoding, and a consumer that
stops reading stops the bookie reads too. Closing the generator early (a ``LIMIT``)
cancels what is in flight. ``shutdown()`` closes the connections and stops the thread (at
exit, or when a test wants a clean process).

The split's entries were confirmed when it was planned, so the reader never reads past
``split.last_entry``; if the LAC it learns on opening is lower (a bookie that has not yet
heard of the last confirmations), it asks again for a few seconds rather than read beyond.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from stripemq.bookie.client import LedgerEntry, ReadOnlyLedgerHandle
from stripemq.errors import (
    BookieError,
    CorruptEntryError,
    DataLossError,
    DigestMismatchError,
    MetadataError,
    NoSuchEntryError,
    NoSuchLedgerError,
    SparkSourceError,
)
from stripemq.spark.catalog import Connection, connect
from stripemq.spark.decode import RecordBatchBuilder
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import ReadSplit

log = logging.getLogger(__name__)

T = TypeVar("T")

WINDOW_ENTRIES = 256  # entries per read from the bookies, at most
WINDOW_BYTES = 8 * 1024 * 1024  # and about this many bytes (by the split's average entry)
PREFETCH_WINDOWS = 2  # windows read ahead of the one being decoded
# A batch is also cut at this many bytes of values: Arrow's binary arrays hold at most
# 2 GiB, and a Python worker should not hold more than a few windows at once.
MAX_BATCH_BYTES = 64 * 1024 * 1024
LAC_WAIT_S = 10.0  # how long to wait for the LAC to reach a planned entry
CLOSE_TIMEOUT_S = 10.0  # for the ledger client and store to close, then the thread to end
THREAD_PREFIX = "stripemq-split"


def read_split(split: ReadSplit, options: SourceOptions) -> Iterator[Any]:
    """The rows of ``split`` as ``pyarrow.RecordBatch``\\ es of at most
    ``options.max_records_per_batch`` rows, in entry order.

    Raises:
        DataLossError: the ledger was deleted (unless ``options.fail_on_data_loss`` is
        false: then a warning is logged and the rest of the split is skipped).
        CorruptEntryError: an entry fails its checksum or does not parse.
        SparkSourceError: the metadata store or the bookies cannot be reached.
    """
    if split.entries <= 0:
        return
    reader = _SplitReader(split, options)
    try:
        yield from reader.batches()
    finally:
        reader.close()


def window_ranges(split: ReadSplit) -> list[tuple[int, int]]:
    """``split``'s entries cut into read windows of at most ``WINDOW_ENTRIES`` entries and
    about ``WINDOW_BYTES`` bytes, judged by the split's estimated average entry size."""
    average = max(1, split.estimated_bytes // max(1, split.entries))
    size = max(1, min(WINDOW_ENTRIES, WINDOW_BYTES // average))
    return [
        (first, min(first + size - 1, split.last_entry))
        for first in range(split.first_entry, split.last_entry + 1, size)
    ]


class _WorkerLoop:
    """The process's event loop thread and its open connections, by metadata URL."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._connections: dict[str, tuple[Connection, contextlib.AsyncExitStack]] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self.thread = threading.Thread(
            target=self._run,
            name=THREAD_PREFIX,
            daemon=True,  # never keeps a worker alive
        )
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            tasks = asyncio.all_tasks(self.loop)
            for task in tasks:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()

    async def connection(self, url: str) -> Connection:
        """The open connection to ``url``, made on first use (one at a time per URL)."""
        found = self._connections.get(url)
        if found is not None:
            return found[0]
        pending = self._connecting.get(url)
        if pending is None:
            pending = asyncio.ensure_future(self._connect(url))
            self._connecting[url] = pending
            pending.add_done_callback(lambda _f: self._connecting.pop(url, None))
        return await asyncio.shield(pending)

    async def _connect(self, url: str) -> Connection:
        stack = contextlib.AsyncExitStack()
        conn = await stack.enter_async_context(connect(url))
        self._connections[url] = (conn, stack)
        return conn

    async def discard(self, conn: Connection) -> None:
        """Close ``conn`` and forget it (it failed: the next task connects again)."""
        for url, (known, stack) in list(self._connections.items()):
            if known is conn:
                del self._connections[url]
                await _close_quietly(stack, url)

    async def _close_all(self) -> None:
        connections, self._connections = self._connections, {}
        for url, (_conn, stack) in connections.items():
            await _close_quietly(stack, url)

    def shutdown(self) -> None:
        if self.loop.is_closed():
            return
        try:
            closing = asyncio.run_coroutine_threadsafe(self._close_all(), self.loop)
            closing.result(CLOSE_TIMEOUT_S)
        except Exception as exc:
            log.warning("closing the Spark reader's connections failed: %s", exc)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(CLOSE_TIMEOUT_S)


async def _close_quietly(stack: contextlib.AsyncExitStack, url: str) -> None:
    try:
        await stack.aclose()
    except Exception as exc:  # a broken connection may fail to close; it is gone either way
        # At interpreter exit the thread pools refuse work: the process ends the sessions.
        level = logging.DEBUG if sys.is_finalizing() or _exiting else logging.WARNING
        log.log(level, "closing the connection to %s failed: %s", url, exc)


_worker: _WorkerLoop | None = None
_worker_lock = threading.Lock()


def _worker_loop() -> _WorkerLoop:
    """This process's loop (a forked child makes its own: threads do not survive a fork)."""
    global _worker
    with _worker_lock:
        if _worker is None or _worker.pid != os.getpid() or not _worker.thread.is_alive():
            _worker = _WorkerLoop()
        return _worker


def shutdown() -> None:
    """Close this process's connections and stop its reader thread (run at exit)."""
    global _worker
    with _worker_lock:
        worker, _worker = _worker, None
    if worker is not None and worker.pid == os.getpid():
        worker.shutdown()


_exiting = False


@atexit.register
def _shutdown_at_exit() -> None:
    global _exiting
    _exiting = True
    shutdown()


class _SplitReader:
    """One split's reads, on the worker's loop and connection."""

    def __init__(self, split: ReadSplit, options: SourceOptions) -> None:
        self.split = split
        self.options = options
        self.where = f"[{split.ref.topic}] ledger {split.ledger_id}"
        self._handle: ReadOnlyLedgerHandle | None = None
        self._conn: Connection | None = None
        self._pending: deque[concurrent.futures.Future[list[LedgerEntry]]] = deque()
        self._worker = _worker_loop()
        self._loop = self._worker.loop

    # ------------------------------------------------------------------ caller's thread

    def batches(self) -> Iterator[Any]:
        """Open the ledger, then read windows ahead while decoding the current one."""
        try:
            self._call(self._open())
        except DataLossError as exc:
            self._lost(exc)
            return
        windows = deque(window_ranges(self.split))
        for _ in range(min(PREFETCH_WINDOWS, len(windows))):
            self._submit(*windows.popleft())
        builder = RecordBatchBuilder(self.split.ref)
        limit = self.options.max_records_per_batch
        while self._pending:
            try:
                entries = self._pending.popleft().result()
            except DataLossError as exc:
                self._lost(exc)
                break
            if windows:
                self._submit(*windows.popleft())
            for entry in entries:
                builder.add_entry(entry.ledger_id, entry.entry_id, entry.data)
                if len(builder) >= limit or builder.payload_bytes >= MAX_BATCH_BYTES:
                    yield from _slices(builder.build(), limit)
        if len(builder):
            yield from _slices(builder.build(), limit)

    def close(self) -> None:
        """Cancel reads in flight and wait until they have stopped (the connection stays
        open for the worker's next task)."""
        pending = list(self._pending)
        self._pending.clear()
        for future in pending:
            future.cancel()
        for future in pending:
            with contextlib.suppress(BaseException):
                future.result(CLOSE_TIMEOUT_S)

    def _lost(self, exc: DataLossError) -> None:
        if self.options.fail_on_data_loss:
            raise exc
        log.warning(
            "%s: skipping entries that are gone (failOnDataLoss=false): %s", self.where, exc
        )

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _submit(self, first: int, last: int) -> None:
        self._pending.append(asyncio.run_coroutine_threadsafe(self._read(first, last), self._loop))

    # ------------------------------------------------------------------ loop thread

    async def _open(self) -> None:
        """Connect, open the ledger read-only (never recovery: a live writer keeps
        writing), and wait until its LAC covers the split.

        Raises:
            DataLossError: the ledger is gone, or ends before the split does.
            SparkSourceError: the metadata store or every bookie failed.
        """
        split = self.split
        conn = self._conn = await self._worker.connection(self.options.metadata)
        try:
            handle = await conn.bk.open_ledger(split.ledger_id, password=None, recovery=False)
            deadline = asyncio.get_running_loop().time() + LAC_WAIT_S
            delay = 0.05
            while handle.last_add_confirmed < split.last_entry:
                if handle.is_closed:
                    raise DataLossError(
                        f"{self.where} ends at entry {handle.last_add_confirmed}; entries up "
                        f"to {split.last_entry} were planned"
                    )
                if asyncio.get_running_loop().time() > deadline:
                    raise SparkSourceError(
                        f"{self.where}: its last confirmed entry stays at "
                        f"{handle.last_add_confirmed}, below entry {split.last_entry} planned"
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                await handle.read_last_add_confirmed()
        except NoSuchLedgerError as exc:
            raise self._deleted() from exc
        except (BookieError, MetadataError) as exc:
            await self._worker.discard(conn)
            raise SparkSourceError(f"{self.where}: cannot open it: {exc}") from exc
        self._handle = handle
        log.debug("%s: reading entries %d..%d", self.where, split.first_entry, split.last_entry)

    async def _read(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` (inclusive), each verified against its bookie checksum.

        Raises:
            DataLossError: the ledger was deleted from metadata (its bookies answer that
            they have no such entry, or the metadata is gone).
            SparkSourceError: no bookie of the ensemble gave the entries.
        """
        assert self._handle is not None
        try:
            return await self._handle.read_entries(first, last)
        except NoSuchLedgerError as exc:
            raise self._deleted() from exc
        except NoSuchEntryError as exc:
            if not await self._ledger_exists():
                raise self._deleted() from exc
            raise SparkSourceError(
                f"{self.where}: entries {first}..{last} are on none of their bookies: {exc}"
            ) from exc
        except DigestMismatchError as exc:
            raise CorruptEntryError(f"{self.where}: {exc}") from exc
        except (BookieError, MetadataError) as exc:
            if isinstance(exc, BookieError) and not await self._ledger_exists():
                raise self._deleted() from exc
            if self._conn is not None:
                await self._worker.discard(self._conn)
            raise SparkSourceError(
                f"{self.where}: cannot read entries {first}..{last}: {exc}"
            ) from exc

    async def _ledger_exists(self) -> bool:
        assert self._handle is not None
        try:
            return await self._handle.bk.ledger_manager.exists(self.split.ledger_id)
        except MetadataError:
            return True  # cannot tell: report the read's own failure

    def _deleted(self) -> DataLossError:
        split = self.split
        return DataLossError(
            f"{self.where} was deleted: entries {split.first_entry}..{split.last_entry} "
            "planned to be read are gone"
        )


def _slices(batch: Any, limit: int) -> Iterator[Any]:
    """``batch`` in zero-copy slices of at most ``limit`` rows."""
    if batch.num_rows <= limit:
        yield batch
        return
    for offset in range(0, batch.num_rows, limit):
        yield batch.slice(offset, limit)
