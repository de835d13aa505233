"""One connected ``BookieClient`` per bookie address, shared by every ledger handle."""

from __future__ import annotations

import asyncio

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.client.config import ClientConfig
from stripemq.errors import ClientClosedError


class BookieClientPool:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._clients: dict[str, BookieClient] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    async def get(self, address: str) -> BookieClient:
        client = self._clients.get(address)
        if client is not None:
            return client
        async with self._lock:
            if self._closed:
                raise ClientClosedError("the ledger client is closed")
            client = self._clients.get(address)
            if client is None:
                client = BookieClient(
                    address,
                    timeout=self.config.read_entry_timeout_s,
                    add_timeout=self.config.add_entry_timeout_s,
                )
                await client.connect()
                self._clients[address] = client
            return client

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
