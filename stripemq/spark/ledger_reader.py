"""The executor's side: read one split's entries from the bookies and yield Arrow batches.

Each task opens its own metadata store and ledger client (nothing is shared between
Python workers), opens the ledger read-only without recovery, and reads its entries in
windows while the previous window is decoded. A ledger deleted under the job raises
``DataLossError`` naming topic and ledger (or yields nothing when the options allow data
loss); a bad entry raises ``CorruptEntryError``.

Spark calls ``read_split`` in a Python worker and iterates it synchronously, so the asyncio
side (metadata store, ledger client, gRPC) runs on an event loop in a thread of its own,
one per split. The generator asks that loop for windows of entries and keeps at most
``PREFETCH_WINDOWS`` of them in flight ahead of the one it decodes: reading overlaps
decoding, and a consumer that stops reading stops the bookie reads too. Closing the
generator early (a ``LIMIT``) cancels what is in flight, closes the ledger client and the
store, and joins the thread.

The split's entries were confirmed when it was planned, so the reader never reads past
``split.last_entry``; if the LAC it learns on opening is lower (a bookie that has not yet
heard of the last confirmations), it asks again for a few seconds rather than read beyond.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
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
from stripemq.spark.catalog import connect
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


class _SplitReader:
    """One split's event-loop thread, connection and ledger handle."""

    def __init__(self, split: ReadSplit, options: SourceOptions) -> None:
        self.split = split
        self.options = options
        self.where = f"[{split.ref.topic}] ledger {split.ledger_id}"
        self._handle: ReadOnlyLedgerHandle | None = None
        self._stack = contextlib.AsyncExitStack()
        self._pending: deque[concurrent.futures.Future[list[LedgerEntry]]] = deque()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run_loop,
            name=f"{THREAD_PREFIX}-{split.ledger_id}-{split.first_entry}",
            daemon=True,  # never keeps a worker alive, though close() always joins it
        )
        self._thread.start()

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
        """Cancel reads in flight, close the connection, stop the loop and join its thread."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        try:
            closing = asyncio.run_coroutine_threadsafe(self._stack.aclose(), self._loop)
            closing.result(CLOSE_TIMEOUT_S)
        except Exception as exc:  # closing must not hide what ended the read
            log.warning("%s: closing the ledger client failed: %s", self.where, exc)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CLOSE_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning("%s: the reader's event loop did not stop", self.where)

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

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
        finally:
            self._loop.close()

    async def _open(self) -> None:
        """Connect, open the ledger read-only (never recovery: a live writer keeps
        writing), and wait until its LAC covers the split.

        Raises:
            DataLossError: the ledger is gone, or ends before the split does.
            SparkSourceError: the metadata store or every bookie failed.
        """
        split = self.split
        conn = await self._stack.enter_async_context(connect(self.options.metadata))
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
