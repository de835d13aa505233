"""``AutoRecoveryService``: one auditor election participant plus replication workers.

This is what ``stripemq autorecovery`` runs, and what a bookie runs inside with
``autorecovery_enabled``. Given a metadata URL it owns its store (its own ZooKeeper session);
when that session expires it tears everything down and starts again on a new session, since
its election node and ledger locks went with the old one.

Its ``metrics`` (``AutoRecoveryMetrics``) live as long as the service, across such restarts.
With ``serve_http`` (what ``stripemq autorecovery`` passes, unless ``enable_statistics`` is
false) it serves them with the probe ``/heartbeat`` on ``stats_http_address:stats_http_port``,
opened once the components run; a bookie running it inside passes nothing and shows the
metrics on its own endpoint instead.
"""

from __future__ import annotations

import asyncio
import logging

from stripemq.bookie.autorecovery.auditor import Auditor
from stripemq.bookie.autorecovery.config import AutoRecoveryConfig
from stripemq.bookie.autorecovery.metrics import AutoRecoveryMetrics
from stripemq.bookie.autorecovery.replication_worker import ReplicationWorker
from stripemq.bookie.autorecovery.underreplication import UnderReplicationManager
from stripemq.bookie.client.bookkeeper import BookKeeper
from stripemq.bookie.client.config import ClientConfig
from stripemq.errors import MetadataError, SessionLostError
from stripemq.metadata import MetadataStore, SessionEvent, create_metadata_store
from stripemq.retry import Backoff

log = logging.getLogger(__name__)


class AutoRecoveryService:
    """Auditor participant + ``config.replication_workers`` workers on one metadata store."""

    def __init__(
        self,
        metadata: str | MetadataStore,
        config: AutoRecoveryConfig | None = None,
        *,
        serve_http: bool = False,
    ) -> None:
        """``serve_http``: open the HTTP endpoint (``/metrics``, ``/heartbeat``) of the
        settings ``stats_http_*``, if ``enable_statistics``; otherwise whoever embeds the
        service may show ``metrics`` (a Prometheus collector) where it likes."""
        self.config = config or AutoRecoveryConfig()
        self.config.validate()
        self.metrics = AutoRecoveryMetrics(enabled=self.config.enable_statistics)
        self.serve_http = serve_http and self.config.enable_statistics
        if isinstance(metadata, str):
            self._url: str | None = metadata
            self._lent: MetadataStore | None = None
        else:
            self._url, self._lent = None, metadata
        self.store: MetadataStore | None = None
        self.bk: BookKeeper | None = None
        self.underreplication: UnderReplicationManager | None = None
        self.auditor: Auditor | None = None
        self.workers: list[ReplicationWorker] = []
        self._restart_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._stopped = False

    @property
    def participant_id(self) -> str:
        return self.config.participant_id

    async def start(self) -> None:
        """Start the components, then the HTTP endpoint (if ``serve_http``).

        Raises:
            MetadataError: the metadata store cannot be reached.
            OSError: the HTTP address cannot be bound (the components are stopped again).
        """
        async with self._lock:
            await self._start_components()
            if self.serve_http:
                try:
                    port = await self.metrics.serve(
                        self.config.stats_http_address, self.config.stats_http_port
                    )
                except BaseException:
                    await self._stop_components()
                    raise
                log.info(
                    "auto-recovery metrics on http://%s:%d/metrics",
                    self.config.stats_http_address,
                    port,
                )
            self.metrics.running = True
        log.info(
            "auto-recovery %s running: auditor candidate and %d replication worker(s)",
            self.participant_id,
            len(self.workers),
        )

    async def stop(self) -> None:
        self._stopped = True
        self.metrics.running = False
        if self._restart_task is not None:
            self._restart_task.cancel()
        async with self._lock:
            await self._stop_components()
        await self.metrics.close()
        log.info("auto-recovery %s stopped", self.participant_id)

    async def __aenter__(self) -> AutoRecoveryService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ----------------------------------------------------------------- internals

    async def _open_store(self) -> MetadataStore:
        if self._lent is not None:
            return self._lent
        assert self._url is not None
        store = create_metadata_store(self._url, session_timeout=self.config.zk_timeout_ms / 1000)
        await store.start()
        store.add_session_listener(self._on_session_event)
        return store

    async def _start_components(self) -> None:
        store = await self._open_store()
        self.store = store
        client_config = ClientConfig(
            add_entry_timeout_s=self.config.add_entry_timeout_s,
            read_entry_timeout_s=self.config.read_entry_timeout_s,
        )
        self.bk = BookKeeper(store, client_config)
        await self.bk.start()
        self.underreplication = UnderReplicationManager(store, owner=self.participant_id)
        self.auditor = Auditor(
            store, self.underreplication, self.config, stats=self.metrics.auditor
        )
        self.auditor.start()
        self.workers = [
            ReplicationWorker(
                self.bk,
                self.underreplication,
                self.config,
                name=f"{self.participant_id}/w{i}",
                stats=self.metrics.replication,
            )
            for i in range(self.config.replication_workers)
        ]
        for worker in self.workers:
            worker.start()

    async def _stop_components(self) -> None:
        workers, self.workers = self.workers, []
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
        if self.auditor is not None:
            await self.auditor.stop()
            self.auditor = None
        if self.underreplication is not None:
            self.underreplication.close()
            self.underreplication = None
        if self.bk is not None:
            await self.bk.close()
            self.bk = None
        store, self.store = self.store, None
        if store is not None and self._lent is None:
            try:
                await store.close()
            except MetadataError as exc:
                log.debug("closing the metadata store failed: %s", exc)

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.LOST and not self._stopped and self._restart_task is None:
            log.error("auto-recovery %s lost its metadata session; restarting", self.participant_id)
            self._restart_task = asyncio.ensure_future(self._restart())

    async def _restart(self) -> None:
        backoff = Backoff(initial=0.5, maximum=10.0)
        try:
            while not self._stopped:
                try:
                    async with self._lock:
                        await self._stop_components()
                        await self._start_components()
                    return
                except (MetadataError, SessionLostError, OSError) as exc:
                    log.warning("auto-recovery restart failed (%s); retrying", exc)
                    await backoff.sleep()
        finally:
            self._restart_task = None
