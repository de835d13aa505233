"""The cluster's bookies as the metadata store lists them: writable, read-only, racks.

A children watch on ``/ledgers/available`` invalidates the cached view, so placement sees a
bookie leave as soon as its ephemeral node goes and never waits for a poll.
"""

from __future__ import annotations

import asyncio
import json
import logging

from stripemq.bookie.client.placement import DEFAULT_RACK, BookieInfo
from stripemq.bookie.registration import AVAILABLE, READONLY
from stripemq.metadata import MetadataStore
from stripemq.metadata.api import WatchEvent, WatchHandle

log = logging.getLogger(__name__)


class BookieWatcher:
    """Cached lists of registered bookies, refreshed when their registrations change."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._writable: dict[str, BookieInfo] | None = None
        self._readonly: set[str] | None = None
        self._generation = 0  # bumped by every registration change
        self._watches: list[WatchHandle] = []
        self._lock = asyncio.Lock()

    def start(self) -> None:
        self._watches = [
            self.store.watch_children(AVAILABLE, self._invalidate),
            self.store.watch_children(READONLY, self._invalidate),
        ]

    def close(self) -> None:
        for handle in self._watches:
            handle.cancel()
        self._watches = []

    def _invalidate(self, _event: WatchEvent) -> None:
        self._generation += 1
        self._writable = None
        self._readonly = None

    async def writable(self) -> dict[str, BookieInfo]:
        """Writable bookies by id (the ``readonly`` child is not a bookie)."""
        async with self._lock:
            while (cached := self._writable) is None:
                generation = self._generation
                loaded = await self._load()
                if generation == self._generation:  # no change while loading: keep it
                    self._writable = loaded
                    return loaded
                log.debug("bookies changed while listing them; listing again")
            return cached

    async def readonly(self) -> set[str]:
        async with self._lock:
            while (cached := self._readonly) is None:
                generation = self._generation
                loaded = set(await self.store.children(READONLY))
                if generation == self._generation:
                    self._readonly = loaded
                    return loaded
            return cached

    async def all_bookies(self) -> set[str]:
        """Every registered bookie, writable or read-only: the ones that can still serve."""
        return set(await self.writable()) | await self.readonly()

    async def _load(self) -> dict[str, BookieInfo]:
        bookies: dict[str, BookieInfo] = {}
        for name in await self.store.children(AVAILABLE):
            if name == "readonly":
                continue
            found = await self.store.get(f"{AVAILABLE}/{name}")
            if found is None:
                continue  # went away between the listing and the read
            rack = DEFAULT_RACK
            try:
                info = json.loads(found[0] or b"{}")
                rack = info.get("rack") or DEFAULT_RACK
            except (ValueError, AttributeError):
                log.warning("bookie %s has an unreadable registration", name)
            bookies[name] = BookieInfo(name, rack)
        return bookies
