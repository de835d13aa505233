"""The bookie watcher's cache against registration changes (a fake store, no bookies)."""

from __future__ import annotations

import asyncio
from typing import Any

from stripemq.bookie.client.bookie_watcher import BookieWatcher
from stripemq.bookie.registration import AVAILABLE, READONLY
from stripemq.metadata.api import EventType, WatchEvent


class _Handle:
    def cancel(self) -> None:
        pass


class SlowListingStore:
    """Just enough of a MetadataStore for BookieWatcher; ``children`` can be held."""

    def __init__(self, bookies: list[str]) -> None:
        self.bookies = list(bookies)
        self.callbacks: list[Any] = []
        self.listing_started = asyncio.Event()
        self.release_listing = asyncio.Event()
        self.hold = False

    def watch_children(self, path: str, callback: Any) -> _Handle:
        self.callbacks.append(callback)
        return _Handle()

    async def children(self, path: str) -> list[str]:
        if path == READONLY:
            return []
        snapshot = list(self.bookies)  # what ZooKeeper answered
        if self.hold:
            self.listing_started.set()
            await self.release_listing.wait()  # the answer is still on its way
        return snapshot

    async def get(self, path: str) -> tuple[bytes, object]:
        return b"{}", object()

    def register(self, bookie: str) -> None:
        self.bookies.append(bookie)
        for cb in self.callbacks:
            cb(WatchEvent(EventType.CHILDREN_CHANGED, AVAILABLE))


async def test_bookie_watcher_sees_a_change_made_while_it_was_listing() -> None:
    store = SlowListingStore(["b1:1", "b2:1", "b3:1"])
    watcher = BookieWatcher(store)  # type: ignore[arg-type]
    watcher.start()
    store.hold = True
    loading = asyncio.create_task(watcher.writable())
    await store.listing_started.wait()
    store.register("b4:1")  # the watch fires while the old listing is in flight
    store.hold = False
    store.release_listing.set()
    await loading
    # No further registration changes: the cache should now reflect b4.
    assert "b4:1" in await watcher.writable()
