"""What a bookie does for a request, whatever carried it: storage calls plus their metrics.

The gRPC service (``stripemq.bookie.server.BookieService``) and the standalone's in-process
client (``stripemq.bookie.local_client.LocalBookieClient``) both serve requests through one
``BookieRequestHandler``, so a request costs and counts the same either way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from stripemq.bookie.config import BookieConfig
from stripemq.bookie.disk import fullest_disk
from stripemq.bookie.metrics import BookieMetrics
from stripemq.bookie.storage.engine import AddOp, BookieStorage, LedgerDescriptor
from stripemq.errors import BookieError
from stripemq.proto import bookie_pb2 as pb
from stripemq.proto.entry import EntryHeader

log = logging.getLogger(__name__)

AddResult = EntryHeader | BookieError


class BookieRequestHandler:
    """Adds, reads, fences and LACs on one ``BookieStorage``, counted in its metrics."""

    def __init__(
        self, storage: BookieStorage, config: BookieConfig, metrics: BookieMetrics
    ) -> None:
        self.storage = storage
        self.config = config
        self.metrics = metrics

    async def add(self, ops: list[AddOp]) -> list[AddResult]:
        """One result per op, in order: its header once durable, or the error it got."""
        started = time.perf_counter()
        try:
            results = await self.storage.add_entries(ops)
        except Exception as exc:  # one request never takes the others down with it
            log.exception("unexpected failure adding %d entries", len(ops))
            error = BookieError(f"internal error: {exc}")
            results = [error] * len(ops)
        took = time.perf_counter() - started
        for op, result in zip(ops, results, strict=True):
            if isinstance(result, EntryHeader):
                self.metrics.added(took, len(op.entry))
            else:
                self.metrics.added(took, None)
                self.count_error("add", result)
                log.debug("add refused: %s", result)
        return results

    def answered(self, outcomes: Iterable[bool], seconds: float) -> None:
        """Adds answered ``seconds`` after they arrived (queueing included); one outcome
        (stored or not) per add."""
        for ok in outcomes:
            self.metrics.add_answered(seconds, ok)

    async def read_entry(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes = b"",
        long_poll_timeout_ms: int = 0,
    ) -> tuple[bytes, LedgerDescriptor]:
        """One entry (fencing the ledger first if asked) and the ledger's state."""
        started = time.perf_counter()
        size: int | None = None
        try:
            if fence:
                await self.storage.fence(ledger_id, master_key)
            entry, state = await self.storage.read_entry(ledger_id, entry_id, long_poll_timeout_ms)
            size = len(entry)
            return entry, state
        finally:
            took = time.perf_counter() - started
            self.metrics.read(took, size, long_poll=long_poll_timeout_ms > 0)

    async def read_entries(
        self, ledger_id: int, entry_ids: list[int], max_bytes: int
    ) -> tuple[list[bytes], LedgerDescriptor]:
        """The first of ``entry_ids`` that fit in ``max_bytes`` and the ledger's state;
        counted per entry, each with its share of the batch's time."""
        started = time.perf_counter()
        entries: list[bytes] | None = None
        try:
            entries, state = await self.storage.read_entries(ledger_id, entry_ids, max_bytes)
            return entries, state
        finally:
            took = time.perf_counter() - started
            if entries is None:  # failed
                self.metrics.read(took, None)
            else:
                for entry in entries:
                    self.metrics.read(took / len(entries), len(entry))

    async def ledger_state(self, ledger_id: int) -> LedgerDescriptor:
        return await self.storage.ledger_state(ledger_id)

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        await self.storage.write_lac(ledger_id, master_key, lac)

    async def info(self) -> pb.GetInfoResponse:
        """The bookie's id, state, disk space and counters."""
        usage = await asyncio.to_thread(
            fullest_disk, [self.config.journal_dir, self.config.ledger_dir]
        )
        return pb.GetInfoResponse(
            bookie_id=self.config.bookie_id,
            read_only=self.storage.read_only,
            total_disk_bytes=usage.total_bytes,
            free_disk_bytes=usage.free_bytes,
            journal_fsyncs=self.storage.journal.fsync_count,
            entries_added=self.storage.entries_added,
            memtable_bytes=self.storage.memtable.size_bytes,
            rack=self.config.rack or "",
            binary_add_port=max(0, self.config.binary_add_port),
        )

    def count_error(self, operation: str, error: BookieError) -> None:
        self.metrics.request_errors.labels(operation, str(error.bk_code)).inc()
