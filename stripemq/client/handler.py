"""Keeping a producer or consumer attached to the broker that serves its topic: look the
topic up, connect, register; after the connection or the broker goes, do it again with
back-off until it works or fails for good."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from stripemq.client.connection import ClientConnection
from stripemq.errors import AlreadyClosedError, StripeMQError, is_retriable
from stripemq.retry import Backoff

if TYPE_CHECKING:
    from stripemq.client.client import AsyncClient

log = logging.getLogger(__name__)


class ConnectionHandler:
    """The part of a producer or consumer that keeps it attached. Subclasses say how to
    attach on a connection (``attach``) and what to do when detached (``detached``)."""

    def __init__(self, client: AsyncClient, topic: str) -> None:
        self.client = client
        self.topic_name = topic
        self.connection: ClientConnection | None = None
        self._closed = False
        self.failure: StripeMQError | None = None  # why it gave up reconnecting
        self._reconnect_task: asyncio.Task[None] | None = None
        self._attached = asyncio.Event()

    @property
    def closed(self) -> bool:
        """Closed by its user: it attaches no more."""
        return self._closed

    def mark_closed(self) -> None:
        """Record that it is closing (subclasses with a lifecycle record it there)."""
        self._closed = True

    @property
    def attached(self) -> bool:
        return self.connection is not None and not self.connection.is_closed

    def is_connected(self) -> bool:
        return self.attached

    async def attach(self, connection: ClientConnection) -> None:
        """Register on ``connection`` (PRODUCER, SUBSCRIBE); raise if the broker refuses."""
        raise NotImplementedError

    def detached(self) -> None:
        """The attachment is gone (connection lost, or the broker closed this end)."""

    async def _attach_once(self) -> None:
        address = await self.client.lookup.lookup(self.topic_name)
        connection = await self.client.pool.get(address.logical, address.physical)
        await self.attach(connection)
        self.connection = connection
        self._attached.set()

    async def connect_first(self) -> None:
        """The first attachment: retried within the operation timeout, then raised."""
        backoff = Backoff(0.1, 2.0, deadline=self.client.operation_timeout_s)
        while True:
            if self.closed:
                raise AlreadyClosedError(f"{self.topic_name}: closed while connecting")
            try:
                await self._attach_once()
                return
            except StripeMQError as exc:
                if not is_retriable(exc, reconnecting=False) or backoff.expired:
                    raise
                log.info("%s: attach failed (%s); retrying", self.topic_name, exc)
            await backoff.sleep()

    def on_connection_closed(self, connection: ClientConnection) -> None:
        """The connection went (its listener callback)."""
        if connection is self.connection:
            self.connection_lost()

    def on_closed_by_broker(self) -> None:
        """The broker closed this producer or consumer (an unload, a seek)."""
        log.info("%r closed by the broker; reconnecting", self)
        self.connection_lost()

    def connection_lost(self) -> None:
        """Detach and start reconnecting in the background."""
        self.connection = None
        self._attached.clear()
        self.detached()
        if self.closed or self.failure is not None:
            return
        if self._reconnect_task is None or self._reconnect_task.done():
            self._reconnect_task = asyncio.get_running_loop().create_task(
                self._reconnect(), name=f"reconnect {self.topic_name}"
            )

    async def _reconnect(self) -> None:
        backoff = Backoff(0.1, 30.0)
        while not self.closed:
            await backoff.sleep()
            if self.closed:
                return
            try:
                await self._attach_once()
                log.info("%s: reconnected to %s", self.topic_name, self.connection)
                return
            except StripeMQError as exc:
                if not is_retriable(exc, reconnecting=True):
                    log.error("%s: giving up reconnecting: %s", self.topic_name, exc)
                    self.failure = exc
                    self.failed(exc)
                    return
                log.info("%s: reconnect failed (%s); retrying", self.topic_name, exc)
            except Exception:  # a bug must not end reconnecting for good
                log.exception("%s: reconnect attempt failed", self.topic_name)

    def failed(self, exc: StripeMQError) -> None:
        """Reconnecting failed for good: fail whatever waits."""

    async def wait_attached(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._attached.wait()
        return self._attached.is_set()

    async def stop_reconnecting(self) -> None:
        self.mark_closed()
        task = self._reconnect_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
