"""One connected client per bookie address, shared by every ledger handle.

A bookie in the same process (the standalone's) is reached through the ``LocalBookieClient``
given for its address; every other one through a ``BookieClient`` (binary adds, gRPC calls).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from stripemq.bookie.bookie_client import BookieCalls, BookieClient
from stripemq.bookie.client.config import ClientConfig
from stripemq.errors import ClientClosedError


class BookieClientPool:
    def __init__(
        self, config: ClientConfig, local: Mapping[str, BookieCalls] | None = None
    ) -> None:
        self.config = config
        self._local = dict(local or {})
        self._clients: dict[str, BookieCalls] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    async def get(self, address: str) -> BookieCalls:
        client = self._clients.get(address) or self._local.get(address)
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
                    use_binary_adds=self.config.use_v2_wire_protocol,
                )
                await client.connect()
                self._clients[address] = client
            return client

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            # Local clients belong to whoever embeds the bookie; they outlive this pool.
            clients, self._clients, self._local = list(self._clients.values()), {}, {}
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
