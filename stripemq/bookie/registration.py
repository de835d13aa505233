"""A bookie's ephemeral registration under ``/ledgers/available`` (or ``.../readonly``)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable

from stripemq.errors import MetadataError, NodeExistsError, NotFoundError, SessionLostError
from stripemq.metadata import MetadataStore, SessionEvent
from stripemq.retry import Backoff

log = logging.getLogger(__name__)

AVAILABLE = "/ledgers/available"
READONLY = "/ledgers/available/readonly"


def registration_path(bookie_id: str, read_only: bool) -> str:
    return f"{READONLY if read_only else AVAILABLE}/{bookie_id}"


class BookieRegistration:
    """Keeps exactly one ephemeral node for this bookie, in the writable or read-only set.

    If the metadata session is lost, a new store is made with ``store_factory`` and the node
    is registered again, so the bookie reappears once the metadata service is reachable.
    """

    def __init__(
        self,
        store_factory: Callable[[], Awaitable[MetadataStore]],
        bookie_id: str,
        info: dict[str, object],
        *,
        owns_store: bool = True,
    ) -> None:
        self._store_factory = store_factory
        # False when the store is lent (standalone shares one with its other roles).
        self._owns_store = owns_store
        self.bookie_id = bookie_id
        self.info = info
        self.read_only = False
        self.store: MetadataStore | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._renew_task: asyncio.Task[None] | None = None

    async def start(self, read_only: bool = False) -> None:
        self.read_only = read_only
        async with self._lock:
            await self._connect_and_register()

    async def set_read_only(self, read_only: bool) -> None:
        """Move the registration between the writable and read-only sets."""
        async with self._lock:
            if read_only == self.read_only:
                return
            assert self.store is not None
            await self._create(self.store, read_only)
            try:
                await self.store.delete(registration_path(self.bookie_id, self.read_only))
            except NotFoundError:
                pass
            self.read_only = read_only
            log.warning("bookie %s is now %s", self.bookie_id, self._state_word())

    async def stop(self) -> None:
        """Unregister (clean shutdown) and close the store."""
        self._closed = True
        if self._renew_task is not None:
            self._renew_task.cancel()
        async with self._lock:
            if self.store is None:
                return
            try:
                await self.store.delete(registration_path(self.bookie_id, self.read_only))
            except MetadataError:
                pass
            if self._owns_store:
                await self.store.close()
            self.store = None

    def _state_word(self) -> str:
        return "read-only" if self.read_only else "writable"

    async def _connect_and_register(self) -> None:
        store = await self._store_factory()
        try:
            store.add_session_listener(self._on_session_event)
            await self._create(store, self.read_only)
        except BaseException:
            # Cancelled by stop() or failed half-way: the node may exist already, and
            # nobody else will ever remove it, so take it down with the new session.
            await self._abandon(store)
            raise
        self.store = store
        log.info("bookie %s registered as %s", self.bookie_id, self._state_word())

    async def _abandon(self, store: MetadataStore) -> None:
        try:
            if self._owns_store:
                await store.close()
            else:
                await store.delete(registration_path(self.bookie_id, self.read_only))
        except MetadataError:
            pass

    async def _create(self, store: MetadataStore, read_only: bool) -> None:
        path = registration_path(self.bookie_id, read_only)
        data = json.dumps({**self.info, "read_only": read_only, "pid": os.getpid()}).encode()
        for parent in (AVAILABLE, READONLY):
            if await store.exists(parent) is None:
                try:
                    await store.create(parent)
                except NodeExistsError:
                    pass
        try:
            await store.create(path, data, ephemeral=True)
        except NodeExistsError:
            # Left by our previous incarnation whose session has not expired yet: we hold the
            # bookie's port, so that process is gone and the node is stale.
            log.info("replacing stale registration %s", path)
            await store.delete(path)
            await store.create(path, data, ephemeral=True)

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.LOST and not self._closed:
            log.error("metadata session lost; bookie %s re-registers", self.bookie_id)
            self._renew_task = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        backoff = Backoff(initial=0.5, maximum=10.0)
        while not self._closed:
            try:
                async with self._lock:
                    old, self.store = self.store, None
                    if old is not None and self._owns_store:
                        try:
                            await old.close()
                        except MetadataError:
                            pass
                    await self._connect_and_register()
                return
            except (MetadataError, SessionLostError, OSError) as exc:
                log.warning("re-registration failed (%s); retrying", exc)
                await backoff.sleep()
