"""Placeholder: the lookup resource's routes (being written)."""

from __future__ import annotations

from aiohttp import web

from stripemq.broker.admin.rest import AdminContext


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    """Add this resource's routes to ``router``."""
