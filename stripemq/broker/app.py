"""A broker process: its metadata session, ledger client and protocol server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Iterable, Mapping

from prometheus_client.registry import Collector

from stripemq.bookie.bookie_client import BookieCalls
from stripemq.bookie.client import BookKeeper
from stripemq.broker.admin.rest import AdminContext
from stripemq.broker.config import BrokerConfig
from stripemq.broker.policies import (
    BacklogQuota,
    BacklogQuotaPolicy,
    DispatchRate,
    PublishRate,
    parse_subscription_types,
)
from stripemq.broker.schema import CompatibilityStrategy
from stripemq.broker.security import BrokerSecurity
from stripemq.broker.server import BrokerServer
from stripemq.broker.service import BrokerService, TopicPolicies
from stripemq.broker.web import WebService
from stripemq.errors import StripeMQError
from stripemq.metadata import MetadataStore, SessionEvent, create_metadata_store
from stripemq.security.tls import server_context
from stripemq.topic_limits import broker_limits

log = logging.getLogger(__name__)


def tls_server_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The context of the broker's TLS listeners (None when it has none), its certificate,
    key and trusted CAs read now (``config`` validated: both files are set). Raises
    ``ConfigError`` for a file it cannot use."""
    if config.broker_service_port_tls is None and config.web_service_port_tls is None:
        return None
    certificate, key = config.tls_certificate_file_path, config.tls_key_file_path
    assert certificate and key, "BrokerConfig.validate() requires both for a TLS listener"
    return server_context(
        certificate,
        key,
        config.tls_trust_certs_file_path,
        require_client_cert=config.tls_require_trusted_client_cert_on_connect,
    )


def topic_policies(config: BrokerConfig) -> TopicPolicies:
    """How the broker treats topics, from its settings: what namespace policies override,
    and the intervals of their periodic checks."""
    return TopicPolicies(
        deduplication=config.broker_deduplication_enabled,
        auto_create=config.allow_auto_topic_creation,
        auto_create_partitioned=config.allow_auto_topic_creation_type == "partitioned",
        default_partitions=config.default_num_partitions,
        delayed_delivery=config.delayed_delivery_config(),
        message_ttl_s=config.ttl_duration_default_in_seconds,
        subscription_expiration_minutes=config.subscription_expiration_time_minutes,
        backlog_quota=BacklogQuota(
            config.backlog_quota_default_limit_bytes,
            config.backlog_quota_default_limit_second,
            BacklogQuotaPolicy(config.backlog_quota_default_retention_policy),
        ),
        publish_rate=PublishRate(
            config.max_publish_rate_per_topic_in_messages,
            config.max_publish_rate_per_topic_in_bytes,
        ),
        dispatch_rate=DispatchRate(
            config.dispatch_throttling_rate_per_topic_in_msg,
            config.dispatch_throttling_rate_per_topic_in_byte,
        ),
        subscription_dispatch_rate=DispatchRate(
            config.dispatch_throttling_rate_per_subscription_in_msg,
            config.dispatch_throttling_rate_per_subscription_in_byte,
        ),
        message_expiry_check_interval_s=config.message_expiry_check_interval_in_minutes * 60,
        backlog_quota_check_interval_s=(
            config.backlog_quota_check_interval_in_seconds
            if config.backlog_quota_check_enabled
            else 0.0
        ),
        subscription_expiry_check_interval_s=(
            config.subscription_expiry_check_interval_in_minutes * 60
        ),
        schema_compatibility_strategy=CompatibilityStrategy.parse(
            config.schema_compatibility_strategy
        ),
        allow_auto_update_schema=config.is_allow_auto_update_schema_enabled,
        schema_validation_enforced=config.is_schema_validation_enforced,
        compaction_retain_null_key=config.topic_compaction_retain_null_key,
        compaction_threshold_bytes=config.broker_service_compaction_threshold_in_bytes,
        compaction_check_interval_s=config.broker_service_compaction_monitor_interval_in_seconds,
        limits=broker_limits(config),
        persistence=config.default_persistence(),
        subscription_types_enabled=parse_subscription_types(config.subscription_types_enabled),
        max_topics_per_namespace=config.max_topics_per_namespace,
        inactive_topic_policies=config.default_inactive_topic_policies(),
        inactive_topic_check_interval_s=config.broker_delete_inactive_topics_frequency_seconds,
        delete_inactive_partitioned_metadata=(
            config.broker_delete_inactive_partitioned_topic_metadata_enabled
        ),
    )


class BrokerApp:
    """``stripemq broker``: start, serve, stop (on a shared store for standalone)."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore | None = None,
        extra_collectors: Iterable[Collector] = (),
        local_bookies: Mapping[str, BookieCalls] | None = None,
    ) -> None:
        """``extra_collectors`` join the web port's ``/metrics`` (the standalone's bookie);
        ``local_bookies`` are clients of bookies in this process, by bookie id."""
        config.validate()
        self.config = config
        self._shared_store = store
        self._local_bookies = dict(local_bookies or {})
        self.store: MetadataStore | None = store
        # Keys are read here: a bad security setting stops the broker before it binds.
        self.security = BrokerSecurity(config, lambda: self.store)
        self.bk: BookKeeper | None = None
        self.server: BrokerServer | None = None
        # The TLS listeners' certificate and key are read here too, for the same reason.
        self.ssl_context = tls_server_context(config)
        self.web = WebService(
            self._admin_context,
            config.bind_address,
            config.web_service_port,
            config.advertised_address or config.bind_address,
            extra_collectors,
            tls_port=config.web_service_port_tls,
            ssl_context=self.ssl_context,
        )
        self._web_started = False
        self._restart: asyncio.Task[None] | None = None
        self._stopping = False

    def _admin_context(self, web_url: str) -> AdminContext:
        return AdminContext(
            self.config,
            web_url,
            self._serving,
            lambda: self.store,
            get_server=lambda: self.server,
            security=self.security,
        )

    def _serving(self) -> BrokerService | None:
        """The topic service while the broker serves (None while it starts or restarts)."""
        server = self.server
        if server is None or self._restart is not None:
            return None
        return server.service if server.ready else None

    async def start(self) -> None:
        try:
            if not self._web_started:
                # Bound first: the broker registers the web URL it really serves on.
                await self.web.start()
                self._web_started = True
                self.config.web_service_port = self.web.port
                self.config.web_service_port_tls = self.web.tls_port
            if self.store is None:
                self.store = create_metadata_store(
                    self.config.metadata_service_uri,
                    session_timeout=self.config.zk_session_timeout_ms / 1000,
                )
                await self.store.start()
            self.store.add_session_listener(self._on_session_event)
            self.bk = BookKeeper(
                self.store,
                self.config.bookkeeper_client_config(),
                local_bookies=self._local_bookies,
            )
            await self.bk.start()
            self.server = BrokerServer(
                self.store,
                self.bk,
                host=self.config.bind_address,
                port=self.config.broker_service_port,
                advertised_host=self.config.advertised_address,
                ml_config=self.config.managed_ledger_config(),
                max_message_size=self.config.max_message_size,
                policies=topic_policies(self.config),
                keepalive_s=self.config.keep_alive_interval_seconds,
                max_pending_publishes=self.config.max_pending_publish_requests_per_connection,
                web_url=self.web.web_url,
                web_url_tls=self.web.web_url_tls,
                tls_port=self.config.broker_service_port_tls,
                ssl_context=self.ssl_context,
                cluster=self.config.cluster_name,
                security=self.security,
            )
            await self.server.start()
            self.config.broker_service_port = self.server.port  # 0 picked one
            self.config.broker_service_port_tls = self.server.tls_port
        except BaseException:
            await self._release()
            raise
        log.info("broker ready on %s", self.server.service_url)

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.LOST and self._restart is None and not self._stopping:
            log.error("metadata session lost: no longer serving any topic; starting over")
            self._restart = asyncio.ensure_future(self._start_over())

    async def _start_over(self) -> None:
        """Stop serving at once (writing nothing), then join again on a new session."""
        try:
            await self._release(abandon=True)
            delay = 0.5
            while not self._stopping:
                try:
                    await self.start()
                    return
                except (StripeMQError, OSError) as exc:
                    log.warning("broker restart failed (%s); retrying in %.1fs", exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 10.0)
        finally:
            self._restart = None

    async def stop(self) -> None:
        self._stopping = True
        if self._restart is not None and self._restart is not asyncio.current_task():
            self._restart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._restart
        await self.web.stop()
        self._web_started = False
        await self._release()

    async def _release(self, abandon: bool = False) -> None:
        """Stop the server (``abandon``: writing nothing more), then its clients."""
        if self.server is not None:
            await self.server.stop(abandon=abandon)
            self.server = None
        if self.bk is not None:
            await self.bk.close()
            self.bk = None
        if self.store is not None and self._shared_store is None:
            await self.store.close()
            self.store = None
