"""Auto-recovery metrics with BookKeeper's names, and an HTTP endpoint for probes and scrapes.

``stripemq autorecovery`` serves them on ``stats_http_address:stats_http_port``:
``/metrics`` (Prometheus text) and ``/heartbeat`` (200 ``OK`` while the service runs, 503
once it stops). A bookie that runs auto-recovery inside (``autorecovery_enabled``) opens no
port for it: it registers ``AutoRecoveryMetrics`` with its own metrics, so the figures are on
the bookie's endpoint, as BookKeeper's in-bookie auto-recovery reports through the bookie's
stats provider.

One stats class per component, each a table of figures read at scrape time plus its
OpStatsLogger summaries (``stripemq.bookie.metrics.OpStats``: quantiles, ``_count``, ``_sum``,
a ``success`` label). Names are BookKeeper's, under its scopes as a Prometheus provider writes
them (BookKeeper's counters are written as gauges, so a sample carries the exact name):

- ``AuditorStats`` (scope ``auditor``, BookKeeper's ``AuditorStats``):
  ``auditor_AUDIT_BOOKIES_TIME`` (ms; one audit: every ledger's metadata read and checked
  against the registered bookies), ``auditor_NUM_UNDER_REPLICATED_LEDGERS`` and
  ``auditor_UNDER_REPLICATED_LEDGERS_TOTAL_SIZE`` (per audit that found ledgers on lost
  bookies: how many, and their bytes), ``auditor_NUM_FRAGMENTS_PER_LEDGER`` and
  ``auditor_NUM_BOOKIES_PER_LEDGER`` (per ledger checked), the counters
  ``auditor_NUM_LEDGERS_CHECKED``, ``auditor_NUM_BOOKIE_AUDITS_DELAYED`` (bookies gone whose
  audit waits ``lost_bookie_recovery_delay_s``), ``auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED``
  (such bookies back in time) and ``auditor_election_attempts``; and stripemq's gauge
  ``auditor_elected`` (1 while this process is the elected auditor, 0 while a candidate).
- ``ReplicationStats`` (scope ``replication_worker``, shared by the process's workers):
  ``replication_worker_rereplicate`` (ms; one attempt at a locked ledger),
  ``replication_worker_READ_DATA_LATENCY`` and ``..._WRITE_DATA_LATENCY`` (ms; one entry
  read from a surviving replica, one written to the new bookie), and the counters
  ``replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED`` (attempts that moved at
  least one fragment), ``..._NUM_ENTRIES_READ``, ``..._NUM_BYTES_READ``,
  ``..._NUM_ENTRIES_WRITTEN``, ``..._NUM_BYTES_WRITTEN``,
  ``..._NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION`` and
  ``..._NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER`` (failed attempts whose ledger stays
  locked for the back-off delay).

The stats objects outlive the components that count into them: the service keeps one
``AutoRecoveryMetrics`` across restarts after a lost metadata session.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from stripemq.bookie.metrics import Figure, OpStats, StatsHttpServer, figure_families

log = logging.getLogger(__name__)


class AuditorStats:
    """What the auditor counts (BookKeeper's ``AuditorStats``), for one process."""

    def __init__(self) -> None:
        self.elected = False
        self.election_attempts = 0
        self.ledgers_checked = 0
        self.bookie_audits_delayed = 0
        self.delayed_bookie_audits_cancelled = 0
        self.audit_bookies_time = OpStats(
            "auditor_AUDIT_BOOKIES_TIME",
            "Audits: every ledger's metadata checked against the registered bookies (ms)",
        )
        self.num_under_replicated_ledgers = OpStats(
            "auditor_NUM_UNDER_REPLICATED_LEDGERS",
            "Ledgers with a fragment on a lost bookie, per audit that found some",
        )
        self.under_replicated_ledgers_total_size = OpStats(
            "auditor_UNDER_REPLICATED_LEDGERS_TOTAL_SIZE",
            "Bytes of the ledgers with a fragment on a lost bookie, per audit that found some",
        )
        self.num_fragments_per_ledger = OpStats(
            "auditor_NUM_FRAGMENTS_PER_LEDGER", "Fragments of each ledger checked"
        )
        self.num_bookies_per_ledger = OpStats(
            "auditor_NUM_BOOKIES_PER_LEDGER", "Bookies named by each ledger checked"
        )

    def ledger_checked(self, fragments: int, bookies: int) -> None:
        """One ledger's metadata read and checked."""
        self.ledgers_checked += 1
        self.num_fragments_per_ledger.record_value(fragments)
        self.num_bookies_per_ledger.record_value(bookies)

    def audited(self, seconds: float, under_replicated: int, total_size: int) -> None:
        """An audit finished in ``seconds``, having found ``under_replicated`` ledgers
        (``total_size`` bytes) with a fragment on a lost bookie."""
        self.audit_bookies_time.record(seconds)
        if under_replicated:
            self.num_under_replicated_ledgers.record_value(under_replicated)
            self.under_replicated_ledgers_total_size.record_value(total_size)

    def audit_failed(self, seconds: float) -> None:
        self.audit_bookies_time.record(seconds, success=False)

    def families(self) -> Iterator[Metric]:
        yield from figure_families(AUDITOR_FIGURES, self)
        for op in (
            self.audit_bookies_time,
            self.num_under_replicated_ledgers,
            self.under_replicated_ledgers_total_size,
            self.num_fragments_per_ledger,
            self.num_bookies_per_ledger,
        ):
            yield op.family()


class ReplicationStats:
    """What the replication workers of one process count (BookKeeper's ``ReplicationWorker``
    and ``LedgerFragmentReplicator`` stats, scope ``replication_worker``)."""

    def __init__(self) -> None:
        self.ledgers_replicated = 0
        self.entries_read = 0
        self.bytes_read = 0
        self.entries_written = 0
        self.bytes_written = 0
        self.entries_unreadable = 0
        self.deferred_lock_releases = 0
        self.rereplicate = OpStats(
            "replication_worker_rereplicate",
            "Attempts at re-replicating a locked under-replicated ledger (ms)",
        )
        self.read_data_latency = OpStats(
            "replication_worker_READ_DATA_LATENCY",
            "Reads of one entry from a surviving replica, for re-replication (ms)",
        )
        self.write_data_latency = OpStats(
            "replication_worker_WRITE_DATA_LATENCY",
            "Writes of one entry to its new bookie, until durable (ms)",
        )

    def entry_read(self, seconds: float, size: int | None) -> None:
        """An entry read for copying in ``seconds``: ``size`` bytes, or failed (None)."""
        self.read_data_latency.record(seconds, size is not None)
        if size is None:
            self.entries_unreadable += 1
        else:
            self.entries_read += 1
            self.bytes_read += size

    def entry_written(self, seconds: float, size: int | None) -> None:
        """An entry written to its new bookie in ``seconds``: ``size`` bytes, or failed."""
        self.write_data_latency.record(seconds, size is not None)
        if size is not None:
            self.entries_written += 1
            self.bytes_written += size

    def families(self) -> Iterator[Metric]:
        yield from figure_families(REPLICATION_FIGURES, self)
        for op in (self.rereplicate, self.read_data_latency, self.write_data_latency):
            yield op.family()


class AutoRecoveryMetrics(Collector):
    """The auto-recovery's metrics (a Prometheus collector) and its HTTP endpoint."""

    def __init__(self, *, enabled: bool = True) -> None:
        """``enabled`` false (``enable_statistics``): ``/metrics`` shows nothing of it."""
        self.enabled = enabled
        self.auditor = AuditorStats()
        self.replication = ReplicationStats()
        self.running = False  # set by the service: /heartbeat
        self._http = StatsHttpServer(self, self.add_routes)

    def collect(self) -> Iterator[Metric]:
        if not self.enabled:
            return
        yield from self.auditor.families()
        yield from self.replication.families()

    def render(self) -> bytes:
        return generate_latest(self)

    # ------------------------------------------------------------------ HTTP

    @property
    def port(self) -> int:
        """The HTTP port ``serve`` bound (0 before)."""
        return self._http.port

    def add_routes(self, router: web.UrlDispatcher) -> None:
        """The probe ``/heartbeat`` (BookKeeper's)."""
        router.add_get("/heartbeat", self._heartbeat)

    async def _heartbeat(self, request: web.Request) -> web.Response:
        if self.running:
            return web.Response(text="OK\n")
        return web.Response(status=503, text="auto-recovery is not running\n")

    async def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` and ``/heartbeat``; returns the bound port (0 picks one).

        Raises:
            OSError: the address cannot be bound.
        """
        return await self._http.start(host, port)

    async def close(self) -> None:
        await self._http.close()


AUDITOR_FIGURES: tuple[Figure[AuditorStats], ...] = (
    Figure(
        "auditor_elected",
        "1 while this process is the elected auditor, 0 while it is a candidate",
        lambda s: 1 if s.elected else 0,
    ),
    Figure(
        "auditor_election_attempts",
        "Times this candidate checked whether it leads the auditor election",
        lambda s: s.election_attempts,
    ),
    Figure(
        "auditor_NUM_LEDGERS_CHECKED",
        "Ledgers whose metadata audits checked",
        lambda s: s.ledgers_checked,
    ),
    Figure(
        "auditor_NUM_BOOKIE_AUDITS_DELAYED",
        "Bookies gone whose audit waited lost_bookie_recovery_delay_s",
        lambda s: s.bookie_audits_delayed,
    ),
    Figure(
        "auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED",
        "Bookies back before lost_bookie_recovery_delay_s ran out (their audit cancelled)",
        lambda s: s.delayed_bookie_audits_cancelled,
    ),
)

REPLICATION_FIGURES: tuple[Figure[ReplicationStats], ...] = (
    Figure(
        "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED",
        "Attempts that moved at least one fragment of their ledger to a new bookie",
        lambda s: s.ledgers_replicated,
    ),
    Figure(
        "replication_worker_NUM_ENTRIES_READ",
        "Entries read from surviving replicas for re-replication",
        lambda s: s.entries_read,
    ),
    Figure(
        "replication_worker_NUM_BYTES_READ",
        "Bytes of the entries read for re-replication (headers and digests included)",
        lambda s: s.bytes_read,
    ),
    Figure(
        "replication_worker_NUM_ENTRIES_WRITTEN",
        "Entries written to new bookies",
        lambda s: s.entries_written,
    ),
    Figure(
        "replication_worker_NUM_BYTES_WRITTEN",
        "Bytes of the entries written to new bookies (headers and digests included)",
        lambda s: s.bytes_written,
    ),
    Figure(
        "replication_worker_NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION",
        "Entries no replica could be read from while copying",
        lambda s: s.entries_unreadable,
    ),
    Figure(
        "replication_worker_NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER",
        "Failed attempts whose ledger stayed locked for the back-off delay before release",
        lambda s: s.deferred_lock_releases,
    ),
)
