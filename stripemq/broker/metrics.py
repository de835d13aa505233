"""Placeholder: the broker's Prometheus metrics (being written)."""

from __future__ import annotations

from aiohttp import web
from prometheus_client.registry import Collector

from stripemq.broker.admin.rest import AdminContext


def add_metrics_routes(
    router: web.UrlDispatcher, ctx: AdminContext, extra_collectors: list[Collector]
) -> None:
    """Add ``/metrics`` to ``router``."""
