"""A broker process: its metadata session, ledger client and protocol server."""

from __future__ import annotations

import logging

from stripemq.bookie.client import BookKeeper
from stripemq.broker.config import BrokerConfig
from stripemq.broker.server import BrokerServer
from stripemq.metadata import MetadataStore, create_metadata_store

log = logging.getLogger(__name__)


class BrokerApp:
    """``stripemq broker``: start, serve, stop (on a shared store for standalone)."""

    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None) -> None:
        config.validate()
        self.config = config
        self._shared_store = store
        self.store: MetadataStore | None = store
        self.bk: BookKeeper | None = None
        self.server: BrokerServer | None = None

    async def start(self) -> None:
        try:
            if self.store is None:
                self.store = create_metadata_store(
                    self.config.metadata_service_uri,
                    session_timeout=self.config.zk_session_timeout_ms / 1000,
                )
                await self.store.start()
            self.bk = BookKeeper(self.store)
            await self.bk.start()
            self.server = BrokerServer(
                self.store,
                self.bk,
                host=self.config.bind_address,
                port=self.config.broker_service_port,
                advertised_host=self.config.advertised_address,
                ml_config=self.config.managed_ledger_config(),
                max_message_size=self.config.max_message_size,
            )
            await self.server.start()
        except BaseException:
            await self.stop()
            raise
        log.info("broker ready on %s", self.server.service_url)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None
        if self.bk is not None:
            await self.bk.close()
            self.bk = None
        if self.store is not None and self._shared_store is None:
            await self.store.close()
            self.store = None
