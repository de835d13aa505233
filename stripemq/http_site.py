"""Serving an aiohttp application on a host and port, for the processes' small HTTP
endpoints (a bookie's, auto-recovery's and ZooKeeper's ``/metrics`` and probes)."""

from __future__ import annotations

from aiohttp import web


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Listen on ``host:port`` (0 picks a free port); the runner (``cleanup()`` stops it)
    and the bound port. The process's own signal handlers stay in place.

    Raises:
        OSError: the address cannot be bound (nothing is left open).
    """
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    server = site._server  # aiohttp exposes no public accessor for the bound socket
    sockets = getattr(server, "sockets", None) or []
    return runner, sockets[0].getsockname()[1] if sockets else port
