"""Bookie metrics in Prometheus text format, served on ``stats_http_port`` at ``/metrics``.

Counters kept by the request handlers live here; figures the storage engine already keeps
(fsyncs, memtable size, read-only state) are read from it at scrape time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from stripemq.bookie.storage.engine import BookieStorage

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _StorageCollector(Collector):
    """Reads the storage engine's own counters when Prometheus scrapes."""

    def __init__(self, storage: BookieStorage) -> None:
        self.storage = storage

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        storage = self.storage
        yield CounterMetricFamily(
            "bookie_journal_fsyncs",
            "Journal group commits (fdatasync calls)",
            value=storage.journal.fsync_count,
        )
        yield CounterMetricFamily(
            "bookie_entries_added", "Entries made durable", value=storage.entries_added
        )
        yield CounterMetricFamily(
            "bookie_checkpoints", "Memtable flushes with a LastLogMark", value=storage.checkpoints
        )
        yield GaugeMetricFamily(
            "bookie_memtable_bytes", "Bytes in the memtable", value=storage.memtable.size_bytes
        )
        yield GaugeMetricFamily(
            "bookie_read_only", "1 while the bookie refuses writes", value=int(storage.read_only)
        )
        yield GaugeMetricFamily(
            "bookie_ledgers_cached", "Ledgers with state in memory", value=storage.ledger_count
        )
        gc = storage.gc_stats
        yield CounterMetricFamily(
            "bookie_gc_ledgers_deleted",
            "Ledgers garbage-collected after their metadata was deleted",
            value=gc.ledgers_deleted,
        )
        yield CounterMetricFamily(
            "bookie_gc_entry_logs_compacted",
            "Entry logs removed by compaction after their live entries were moved",
            value=gc.entry_logs_compacted,
        )
        yield CounterMetricFamily(
            "bookie_gc_entry_logs_deleted",
            "Entry logs removed without copying because nothing in them was live",
            value=gc.entry_logs_deleted,
        )
        yield CounterMetricFamily(
            "bookie_gc_reclaimed_bytes",
            "Entry-log bytes freed by garbage collection and compaction",
            value=gc.bytes_reclaimed,
        )
        logs, total_bytes, live_bytes = storage.entry_log.usage()
        yield GaugeMetricFamily("bookie_entry_logs", "Entry log files", value=logs)
        yield GaugeMetricFamily(
            "bookie_entry_log_bytes", "Record bytes in all entry logs", value=total_bytes
        )
        yield GaugeMetricFamily(
            "bookie_entry_log_live_bytes",
            "Record bytes of ledgers that still exist, in all entry logs",
            value=live_bytes,
        )


class BookieMetrics:
    """The bookie's metric registry and its HTTP endpoint."""

    def __init__(self, storage: BookieStorage) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_StorageCollector(storage))
        self.add_latency = Histogram(
            "bookie_add_latency_seconds",
            "From an add request's arrival to its durable answer",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.request_errors = Counter(
            "bookie_request_errors",
            "Requests answered with an error, by operation and BookKeeper code",
            ["operation", "code"],
            registry=self.registry,
        )
        self.reads = Counter("bookie_reads", "Entries read", registry=self.registry)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def serve(self, host: str, port: int) -> int:
        """Start ``/metrics``; returns the bound port (``port`` 0 picks a free one)."""
        app = web.Application()
        app.router.add_get("/metrics", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server  # aiohttp exposes no public accessor for the bound socket
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        return self.port

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(self.render)
        return web.Response(body=body, content_type="text/plain", charset="utf-8")
