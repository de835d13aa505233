"""The broker's protocol server: accepts client connections on the Pulsar port."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from stripemq.bookie.client import BookKeeper
from stripemq.broker.connection import DEFAULT_MAX_PENDING_PUBLISHES, ServerConnection
from stripemq.broker.ownership import BrokerInfo
from stripemq.broker.service import BrokerService, TopicPolicies
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.metadata import MetadataStore
from stripemq.proto.frames import DEFAULT_MAX_MESSAGE_SIZE

log = logging.getLogger(__name__)


class BrokerServer:
    """Serves topics over the Pulsar binary protocol on ``host:port`` (0 picks a port)."""

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
        cluster: str = "standalone",
    ) -> None:
        self.store = store
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
        self.cluster = cluster
        self.service: BrokerService | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.connections: set[ServerConnection] = set()  # the clients served now
        self.ready = False  # the service has started and the port serves

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised_host}:{self.port}"

    async def start(self) -> None:
        # Bound first (the port may be chosen by the system), served once the service has
        # started: no client sees a broker without its default namespace.
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, start_serving=False
        )
        self.port = self._server.sockets[0].getsockname()[1]
        me = BrokerInfo(f"{self.advertised_host}:{self.port}", self.service_url, self.web_url)
        self.service = BrokerService(
            self.store, self.bk, me, self.ml_config, self.policies, cluster=self.cluster
        )
        await self.service.start()
        await self._server.start_serving()
        self.ready = True
        log.info("broker serving %s", self.service_url)

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
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.service is not None:
            await (self.service.abandon() if abandon else self.service.close())
        if self._server is not None:
            await self._server.wait_closed()
