"""The admin web application of one broker for unit tests: a real ``BrokerService`` over an
in-memory ledger client (``ledger_fakes``) on a memory:// store, served by aiohttp's test
server, a client that does not follow redirects, and (``remote``) a stand-in for another
broker's web service where a bundle belongs to it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker.admin.rest import AdminContext
from stripemq.broker.config import BrokerConfig
from stripemq.broker.ownership import BrokerInfo
from stripemq.broker.service import BrokerService
from stripemq.broker.web import build_app
from stripemq.metadata import MetadataStore

ME = BrokerInfo("127.0.0.1:6650", "pulsar://127.0.0.1:6650", "http://127.0.0.1:8080")


@dataclass
class App:
    client: TestClient
    service: BrokerService
    store: MetadataStore
    ctx: AdminContext
    remote_url: str = ""  # the other broker's web service, when there is one

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, the JSON body, its text when it is not JSON, None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        response = await self.client.request(method, path, data=data, allow_redirects=False)
        raw = await response.read()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw.decode()


Remote = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def admin_app(
    store: MetadataStore, config: BrokerConfig | None = None, *, remote: Remote | None = None
) -> AsyncIterator[App]:
    """This broker's application; with ``remote``, another broker's web service (every
    request goes to that handler)."""
    service = BrokerService(store, cast(BookKeeper, FakeBookKeeper()), ME)
    await service.start()
    ctx = AdminContext(config or BrokerConfig(), "", lambda: service, lambda: store)
    remote_app = web.Application()
    if remote is not None:
        remote_app.router.add_route("*", "/{tail:.*}", remote)
    try:
        async with (
            TestClient(TestServer(build_app(ctx))) as client,
            TestServer(remote_app) as remote_server,
        ):
            ctx.web_url = str(client.make_url("")).rstrip("/")
            remote_url = str(remote_server.make_url("")).rstrip("/")
            yield App(client, service, store, ctx, remote_url)
    finally:
        await service.close()
