"""Bookie metrics with BookKeeper's names, and BookKeeper's HTTP probes.

Served on ``stats_http_port`` (``/metrics``, ``/heartbeat``, ``/api/v1/bookie/is_ready``,
``/api/v1/bookie/state``) by a bookie process; a standalone serves the same on its broker's
web port instead (``BookieMetrics`` is a Prometheus collector with ``add_routes``).

Names follow BookKeeper's Prometheus provider where BookKeeper has the figure:

- ``bookie_SERVER_STATUS`` (1 writable, 0 read-only), ``bookie_ledgers_count``,
  ``bookie_write_cache_size``, ``bookie_ledger_writable_dirs``, the garbage collector's
  ``bookie_DELETED_LEDGER_TOTAL``, ``bookie_ACTIVE_ENTRY_LOG_TOTAL`` and
  ``bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES``, and the byte counters ``bookie_WRITE_BYTES`` and
  ``bookie_READ_BYTES``, all written as gauges so the sample carries BookKeeper's exact
  name (BookKeeper's counters have no ``_total``);
- operation latencies as BookKeeper's OpStatsLogger writes them: summaries in
  milliseconds with a ``success`` label, quantiles over the latest operations, ``_count``
  and ``_sum``: ``bookkeeper_server_ADD_ENTRY_REQUEST`` (an add request from its arrival on
  the stream to its answer, waiting for a slot included) and ``bookkeeper_server_ADD_ENTRY``
  (the bookie's processing, to the entry durable); ``bookkeeper_server_READ_ENTRY`` and
  ``..._REQUEST`` (a read); ``bookkeeper_server_READ_ENTRY_LONG_POLL_REQUEST`` (a read that
  may wait for the entry to be added: BookKeeper keeps those apart, since their latency is
  mostly waiting); ``bookie_journal_JOURNAL_SYNC`` (one journal fsync).

Figures BookKeeper has no name for keep stripemq's, under ``bookie_``: checkpoints, the
garbage collector's reclaimed bytes and entry logs, live entry-log bytes, and request
errors by operation and BookKeeper code.

``OpStats``, ``Figure`` (with ``figure_families``) and ``StatsHttpServer`` are shared with the
auto-recovery's metrics (``stripemq.bookie.autorecovery.metrics``), which follow the same
conventions.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from stripemq.bookie.storage.engine import BookieStorage
from stripemq.http_site import start_site

log = logging.getLogger(__name__)

S = TypeVar("S")

# BookKeeper's OpStatsLogger quantiles.
QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
# Latencies kept per outcome for the quantiles (the latest ones).
QUANTILE_WINDOW = 1024


class OpStats:
    """BookKeeper's OpStatsLogger: latencies of successful and failed operations, or (with
    ``record_value``) a distribution of other values, such as ledger counts per audit.

    Thread-safe (the journal records its syncs from its own thread). Quantiles are over the
    latest ``QUANTILE_WINDOW`` operations of each outcome; ``_count`` and ``_sum`` over all.
    """

    def __init__(self, name: str, help: str) -> None:
        self.name = name
        self.help = help
        self._lock = threading.Lock()
        self._count = {True: 0, False: 0}
        self._sum_ms = {True: 0.0, False: 0.0}
        self._recent: dict[bool, deque[float]] = {
            True: deque(maxlen=QUANTILE_WINDOW),
            False: deque(maxlen=QUANTILE_WINDOW),
        }

    def record(self, seconds: float, success: bool = True) -> None:
        """An operation that took ``seconds`` (written in milliseconds)."""
        self.record_value(seconds * 1000, success)

    def record_value(self, value: float, success: bool = True) -> None:
        """A value as it is (BookKeeper's ``registerSuccessfulValue``)."""
        with self._lock:
            self._count[success] += 1
            self._sum_ms[success] += value
            self._recent[success].append(value)

    def count(self, success: bool = True) -> int:
        with self._lock:
            return self._count[success]

    def family(self) -> Metric:
        """The summary, as BookKeeper writes it (``NaN`` quantiles before any operation)."""
        family = Metric(self.name, self.help, "summary")
        with self._lock:
            figures = [
                (ok, self._count[ok], self._sum_ms[ok], sorted(self._recent[ok]))
                for ok in (False, True)
            ]
        for ok, count, total, recent in figures:
            labels = {"success": "true" if ok else "false"}
            for q in QUANTILES:
                value = recent[min(int(q * len(recent)), len(recent) - 1)] if recent else math.nan
                family.add_sample(self.name, {**labels, "quantile": str(q)}, value)
            family.add_sample(f"{self.name}_count", labels, count)
            family.add_sample(f"{self.name}_sum", labels, total)
        return family


@dataclass(frozen=True)
class Figure(Generic[S]):
    """One metric read from its source (an ``S``) at scrape time: name, help, type, reader."""

    name: str
    help: str
    read: Callable[[S], float]
    type: str = "gauge"  # "counter": a stripemq counter, written with ``_total``


def figure_families(figures: Iterable[Figure[S]], source: S) -> Iterator[Metric]:
    """Each figure read from ``source``: BookKeeper's counters and gauges as gauges (the
    sample carries the exact name), stripemq's counters as counters (``_total``)."""
    for figure in figures:
        value = figure.read(source)
        if figure.type == "counter":
            yield CounterMetricFamily(figure.name, figure.help, value=value)
        else:
            family = Metric(figure.name, figure.help, "gauge")
            family.add_sample(figure.name, {}, value)
            yield family


class StatsHttpServer:
    """One aiohttp application: ``/metrics`` (a collector's Prometheus text, rendered off
    the event loop) and the probes ``add_routes`` adds. ``start``, later ``close``."""

    def __init__(
        self, collector: Collector, add_routes: Callable[[web.UrlDispatcher], None]
    ) -> None:
        self.collector = collector
        self.add_routes = add_routes
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, self.collector)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port``; returns the bound port (0 picks a free one).

        Raises:
            OSError: the address cannot be bound (nothing is left open).
        """
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self.add_routes(app.router)
        self._runner, self.port = await start_site(app, host, port)
        return self.port

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


class BookieMetrics(Collector):
    """The bookie's metrics (a Prometheus collector) and its HTTP resources."""

    def __init__(self, storage: BookieStorage, *, enabled: bool = True) -> None:
        """``enabled`` false (``enable_statistics``): ``/metrics`` shows nothing of it."""
        self.storage = storage
        self.enabled = enabled
        self.add_entry_request = OpStats(
            "bookkeeper_server_ADD_ENTRY_REQUEST",
            "ADD_ENTRY requests, from arrival to answer (ms)",
        )
        self.add_entry = OpStats(
            "bookkeeper_server_ADD_ENTRY", "ADD_ENTRY processing, to the entry durable (ms)"
        )
        self.read_entry_request = OpStats(
            "bookkeeper_server_READ_ENTRY_REQUEST",
            "READ_ENTRY requests, from arrival to answer (ms)",
        )
        self.read_entry = OpStats("bookkeeper_server_READ_ENTRY", "READ_ENTRY processing (ms)")
        self.read_entry_long_poll_request = OpStats(
            "bookkeeper_server_READ_ENTRY_LONG_POLL_REQUEST",
            "Long-poll READ_ENTRY requests, from arrival to answer, waiting included (ms)",
        )
        self.journal_sync = OpStats("bookie_journal_JOURNAL_SYNC", "Journal fsyncs (ms)")
        self.write_bytes = 0
        self.read_bytes = 0
        # Counters kept by the request handlers that need labels.
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_errors = Counter(
            "bookie_request_errors",
            "Requests answered with an error, by operation and BookKeeper code",
            ["operation", "code"],
            registry=self.registry,
        )
        # Set by the bookie server: for /api/v1/bookie/is_ready and /state.
        self.running = False
        self.shutting_down = False
        self._time_journal_syncs()
        self._http = StatsHttpServer(self, self.add_routes)

    def _time_journal_syncs(self) -> None:
        """Record each journal sync's latency and outcome, on the thread or in the kernel."""
        self.storage.journal.on_sync = self.journal_sync.record

    # ------------------------------------------------------------------ recording

    def added(self, seconds: float, size: int | None) -> None:
        """An add processed in ``seconds``: stored (``size`` bytes) or refused (None)."""
        self.add_entry.record(seconds, size is not None)
        if size is not None:
            self.write_bytes += size

    def add_answered(self, seconds: float, ok: bool) -> None:
        """An add request answered ``seconds`` after it arrived."""
        self.add_entry_request.record(seconds, ok)

    def read(self, seconds: float, size: int | None, *, long_poll: bool = False) -> None:
        """A read answered after ``seconds``: ``size`` bytes, or failed (None). A long-poll
        read (one that may wait for its entry) counts under its own name only."""
        ok = size is not None
        if long_poll:
            self.read_entry_long_poll_request.record(seconds, ok)
        else:
            self.read_entry_request.record(seconds, ok)
            self.read_entry.record(seconds, ok)
        if size is not None:
            self.read_bytes += size

    # ------------------------------------------------------------------ exposition

    def collect(self) -> Iterator[Metric]:
        if not self.enabled:
            return
        yield from figure_families(FIGURES, self)
        for op in (
            self.add_entry_request,
            self.add_entry,
            self.read_entry_request,
            self.read_entry,
            self.read_entry_long_poll_request,
            self.journal_sync,
        ):
            yield op.family()
        yield from self.registry.collect()

    def render(self) -> bytes:
        return generate_latest(self)

    def state(self) -> dict[str, bool]:
        """BookKeeper's ``/api/v1/bookie/state``."""
        return {
            "running": self.running,
            "readOnly": self.storage.read_only,
            "shuttingDown": self.shutting_down,
            "availableForHighPriorityWrites": self.running and not self.shutting_down,
        }

    @property
    def ready(self) -> bool:
        """Started and not stopping (BookKeeper's ``is_ready``; a read-only bookie is
        ready: it serves reads, and ``bookie_SERVER_STATUS`` says it takes no writes)."""
        return self.running and not self.shutting_down

    # ------------------------------------------------------------------ HTTP

    def add_routes(self, router: web.UrlDispatcher) -> None:
        """BookKeeper's probes: ``/heartbeat`` and ``/api/v1/bookie/is_ready``, and
        ``/api/v1/bookie/state``."""
        router.add_get("/heartbeat", self._heartbeat)
        router.add_get("/api/v1/bookie/is_ready", self._is_ready)
        router.add_get("/api/v1/bookie/state", self._state)

    async def _heartbeat(self, request: web.Request) -> web.Response:
        return web.Response(text="OK\n")

    async def _is_ready(self, request: web.Request) -> web.Response:
        if self.ready:
            return web.Response(text="OK")
        return web.Response(status=503, text="Bookie is not fully started yet")

    async def _state(self, request: web.Request) -> web.Response:
        return web.json_response(self.state())

    @property
    def port(self) -> int:
        """The HTTP port ``serve`` bound (0 before)."""
        return self._http.port

    async def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` and the probes; returns the bound port (0 picks one)."""
        return await self._http.start(host, port)

    async def close(self) -> None:
        await self._http.close()


def _entry_logs(metrics: BookieMetrics) -> tuple[int, int, int]:
    return metrics.storage.entry_log.usage()


# Read from storage and the metrics' own counters at each scrape.
FIGURES: tuple[Figure[BookieMetrics], ...] = (
    Figure(
        "bookie_SERVER_STATUS",
        "1 while the bookie is writable, 0 while it is read-only",
        lambda m: 0 if m.storage.read_only else 1,
    ),
    Figure(
        "bookie_ledger_writable_dirs",
        "Ledger directories taking writes",
        lambda m: 0 if m.storage.read_only else 1,
    ),
    Figure("bookie_ledgers_count", "Ledgers stored", lambda m: len(m.storage.index.ledger_ids())),
    Figure(
        "bookie_write_cache_size",
        "Bytes in the write cache (memtable)",
        lambda m: m.storage.memtable.size_bytes,
    ),
    Figure("bookie_WRITE_BYTES", "Entry bytes added", lambda m: m.write_bytes),
    Figure("bookie_READ_BYTES", "Entry bytes read", lambda m: m.read_bytes),
    Figure(
        "bookie_DELETED_LEDGER_TOTAL",
        "Ledgers garbage-collected after their metadata was deleted",
        lambda m: m.storage.gc_stats.ledgers_deleted,
    ),
    Figure("bookie_ACTIVE_ENTRY_LOG_TOTAL", "Entry log files", lambda m: _entry_logs(m)[0]),
    Figure(
        "bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES",
        "Record bytes in all entry logs",
        lambda m: _entry_logs(m)[1],
    ),
    Figure(
        "bookie_entry_log_live_bytes",
        "Record bytes of ledgers that still exist, in all entry logs",
        lambda m: _entry_logs(m)[2],
    ),
    Figure(
        "bookie_checkpoints",
        "Memtable flushes with a LastLogMark",
        lambda m: m.storage.checkpoints,
        "counter",
    ),
    Figure(
        "bookie_gc_entry_logs_compacted",
        "Entry logs removed by compaction after their live entries were moved",
        lambda m: m.storage.gc_stats.entry_logs_compacted,
        "counter",
    ),
    Figure(
        "bookie_gc_entry_logs_deleted",
        "Entry logs removed without copying because nothing in them was live",
        lambda m: m.storage.gc_stats.entry_logs_deleted,
        "counter",
    ),
    Figure(
        "bookie_gc_reclaimed_bytes",
        "Entry-log bytes freed by garbage collection and compaction",
        lambda m: m.storage.gc_stats.bytes_reclaimed,
        "counter",
    ),
)
