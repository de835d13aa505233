"""The broker's protocol server: accepts client connections on the Pulsar port, and on the
TLS port (``pulsar+ssl://``) when it has one.

A connection on the TLS port is served as any other once its TLS handshake is done. A
failed handshake (a plain-text client, an untrusted or missing client certificate, a
client that says nothing for ``tls.HANDSHAKE_TIMEOUT_S``) is logged once and closes that
connection only. Both ports are bound before the broker registers (its registration
carries both URLs, with the ports port 0 picked) and serve once the service has started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

from stripemq.bookie.client import BookKeeper
from stripemq.broker.connection import DEFAULT_MAX_PENDING_PUBLISHES, ServerConnection
from stripemq.broker.ownership import BrokerInfo
from stripemq.broker.security import BrokerSecurity
from stripemq.broker.service import BrokerService, TopicPolicies
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.metadata import MetadataStore
from stripemq.proto.frames import DEFAULT_MAX_MESSAGE_SIZE
from stripemq.security.tls import accept_tls

log = logging.getLogger(__name__)


class BrokerServer:
    """Serves topics over the Pulsar binary protocol on ``host:port`` (0 picks a port), and
    over TLS on ``host:tls_port`` with ``ssl_context`` when ``tls_port`` is given."""

    def __init__(
        self,
        store: MetadataStore,
        bk: BookKeeper,
        *,
        host: str = "127.0.0.1",
        port: int = 6650,
        advertised_host: str | None = None,
        ml_config: ManagedLedgerConfig | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        policies: TopicPolicies | None = None,
        keepalive_s: float = 30.0,
        max_pending_publishes: int = DEFAULT_MAX_PENDING_PUBLISHES,
        web_url: str = "",
        web_url_tls: str = "",
        tls_port: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        cluster: str = "standalone",
        security: BrokerSecurity | None = None,
    ) -> None:
        self.store = store
        self.security = security
        self.bk = bk
        self.host = host
        self.port = port
        self.advertised_host = advertised_host or host
        self.ml_config = ml_config
        self.max_message_size = max_message_size
        self.policies = policies
        self.keepalive_s = keepalive_s
        self.max_pending_publishes = max_pending_publishes
        self.web_url = web_url
        if tls_port is not None and ssl_context is None:
            raise ValueError("a TLS port needs an SSL context")
        self.web_url_tls = web_url_tls
        self.tls_port = tls_port
        self.ssl_context = ssl_context
        self._tls_server: asyncio.Server | None = None
        self.cluster = cluster
        self.service: BrokerService | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.connections: set[ServerConnection] = set()  # the clients served now
        self.ready = False  # the service has started and the port serves

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised_host}:{self.port}"

    @property
    def service_url_tls(self) -> str:
        """``pulsar+ssl://`` URL of the TLS port ("" without one)."""
        if self.tls_port is None:
            return ""
        return f"pulsar+ssl://{self.advertised_host}:{self.tls_port}"

    async def start(self) -> None:
        # Bound first (the port may be chosen by the system), served once the service has
        # started: no client sees a broker without its default namespace.
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, start_serving=False
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.tls_port is not None:
            self._tls_server = await asyncio.start_server(
                self._accept_tls, self.host, self.tls_port, start_serving=False
            )
            self.tls_port = self._tls_server.sockets[0].getsockname()[1]
        me = BrokerInfo(
            f"{self.advertised_host}:{self.port}",
            self.service_url,
            self.web_url,
            self.service_url_tls,
            self.web_url_tls,
        )
        self.service = BrokerService(
            self.store, self.bk, me, self.ml_config, self.policies, cluster=self.cluster
        )
        await self.service.start()
        await self._server.start_serving()
        if self._tls_server is not None:
            await self._tls_server.start_serving()
        self.ready = True
        log.info(
            "broker serving %s", " and ".join(filter(None, (me.service_url, me.service_url_tls)))
        )

    async def _accept_tls(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A connection on the TLS port: the handshake, then served as on the plain port."""
        assert self.ssl_context is not None
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)  # a handshake under way is cancelled by stop() too
        peer = writer.get_extra_info("peername")
        try:
            try:
                reader, writer = await accept_tls(writer, self.ssl_context)
            except OSError as exc:
                log.info("TLS handshake with %s failed: %s", peer, exc)
                writer.close()
                return
            await self._accept(reader, writer)
        finally:
            self._connections.discard(task)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.service is not None
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        connection: ServerConnection | None = None
        try:
            connection = ServerConnection(
                self.service,
                reader,
                writer,
                self.max_message_size,
                self.keepalive_s,
                self.max_pending_publishes,
                self.security,
            )
            self.connections.add(connection)
            await connection.serve()
        except Exception:
            log.exception("connection from %s failed", writer.get_extra_info("peername"))
        finally:
            if connection is not None:
                self.connections.discard(connection)
            self._connections.discard(task)

    async def stop(self, *, abandon: bool = False) -> None:
        """Close every connection and topic; ``abandon`` writes nothing on the way out (the
        metadata session is gone and another broker may own the topics already)."""
        self.ready = False
        if self._server is not None:
            self._server.close()
        if self._tls_server is not None:
            self._tls_server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.service is not None:
            await (self.service.abandon() if abandon else self.service.close())
        if self._server is not None:
            await self._server.wait_closed()
        if self._tls_server is not None:
            await self._tls_server.wait_closed()
