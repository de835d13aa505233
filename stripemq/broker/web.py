"""The broker's HTTP service on its web port: one aiohttp application serving the admin
REST API (``/admin/v2``), lookups (``/lookup/v2``) and Prometheus metrics (``/metrics``).

A path with a trailing slash is served as the same path without it (``GET
/admin/v2/tenants/`` lists the tenants, as Jersey serves it), rewritten, not redirected.

The service is bound before the broker registers itself (so the registration carries the
real web URL, even when port 0 picked one) and lives as long as the broker process: while
the broker starts, or starts over after losing its metadata session, resources that need
topics answer 503 and ``/admin/v2/brokers/ready`` says it is not ready.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.registry import Collector

from stripemq.broker.admin import (
    brokers,
    clusters,
    lookup,
    namespaces,
    persistent,
    schemas,
    tenants,
    topic_policies,
)
from stripemq.broker.admin.access import access_middleware
from stripemq.broker.admin.rest import (
    AdminContext,
    Handler,
    error_middleware,
    without_trailing_slash,
)
from stripemq.broker.metrics import add_metrics_routes

log = logging.getLogger(__name__)

# Largest request body accepted (policies, ResetCursorData, a partition count).
MAX_BODY_BYTES = 1024 * 1024


@web.middleware
async def trailing_slash_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A path no route matches that ends with ``/`` is served as the path without it."""
    found = await without_trailing_slash(request)
    if found is None:
        return await handler(request)
    stripped, match = found
    # What aiohttp's own normalize_path_middleware does (the route found for the rewritten
    # path); this middleware is the innermost, so calling the route's handler skips none.
    match.add_app(request.app)
    stripped._match_info = match
    return await match.handler(stripped)


def build_app(ctx: AdminContext, extra_collectors: Iterable[Collector] = ()) -> web.Application:
    """The application with every resource; ``extra_collectors`` join ``/metrics`` (the
    standalone's bookie)."""
    middlewares: list[Middleware] = [error_middleware]
    if ctx.security is not None and ctx.security.authenticating:
        middlewares.append(access_middleware(ctx.security))
    middlewares.append(trailing_slash_middleware)
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    for module in (
        clusters,
        tenants,
        namespaces,
        persistent,
        topic_policies,
        schemas,
        brokers,
        lookup,
    ):
        module.add_routes(app.router, ctx)
    add_metrics_routes(app.router, ctx, list(extra_collectors))
    return app


class WebService:
    """Binds the web port and serves ``build_app`` until stopped; with ``tls_port`` and
    ``ssl_context``, serves the same application over HTTPS on ``tls_port`` too (Pulsar's
    webServicePortTls). Both are bound before the broker registers its URLs."""

    def __init__(
        self,
        ctx_factory: Callable[[str], AdminContext],
        host: str,
        port: int,
        advertised_host: str,
        extra_collectors: Iterable[Collector] = (),
        *,
        tls_port: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if tls_port is not None and ssl_context is None:
            raise ValueError("an HTTPS port needs an SSL context")
        self._ctx_factory = ctx_factory
        self.host = host
        self.port = port
        self.tls_port = tls_port
        self.ssl_context = ssl_context
        self.advertised_host = advertised_host
        self._extra_collectors = list(extra_collectors)
        self._runner: web.AppRunner | None = None
        self.ctx: AdminContext | None = None

    @property
    def web_url(self) -> str:
        return f"http://{self.advertised_host}:{self.port}"

    @property
    def web_url_tls(self) -> str:
        """``https://`` URL of the HTTPS port ("" without one)."""
        if self.tls_port is None:
            return ""
        return f"https://{self.advertised_host}:{self.tls_port}"

    async def start(self) -> None:
        """Bind (port 0 picks a free one) and serve."""
        # The URL is fixed once the socket is bound (port 0 lets the system pick one).
        self.ctx = self._ctx_factory(self.web_url)
        app = build_app(self.ctx, self._extra_collectors)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        addresses = self._runner.addresses  # (host, port, ...) of each bound socket
        if addresses:
            self.port = addresses[0][1]
        if self.tls_port is not None:
            bound = len(addresses)  # the runner lists its sites' sockets in order
            site = web.TCPSite(self._runner, self.host, self.tls_port, ssl_context=self.ssl_context)
            await site.start()
            self.tls_port = self._runner.addresses[bound][1]
        self.ctx.web_url = self.web_url
        log.info("web service on %s", " and ".join(filter(None, (self.web_url, self.web_url_tls))))

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
