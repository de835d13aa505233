"""Recently written entries kept in memory, so tailing readers need not ask the bookies.

One ``EntryCacheManager`` per broker holds every topic's cached entries under one byte
budget (Pulsar's ``managedLedgerCacheSizeMB`` is per broker, not per topic): the least
recently used entry goes first, whichever topic it belongs to. Each managed ledger sees
its own part through an ``EntryCache``.

Entries are keyed by plain integers (view, ledger, entry), not by ``Position`` objects: the
garbage collector stops tracking a tuple of integers, so a cache of a hundred thousand
entries adds nothing to the full collections that would otherwise pause the event loop
for tens of milliseconds.
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict

from stripemq.managed_ledger.position import Position

_Key = tuple[int, int, int]  # (view token, ledger id, entry id)


class EntryCacheManager:
    """The broker-wide least-recently-used entry cache, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[_Key, bytes] = OrderedDict()
        self._views: weakref.WeakValueDictionary[int, EntryCache] = weakref.WeakValueDictionary()
        self._tokens = itertools.count()

    def cache_for(self, name: str) -> EntryCache:
        """A new view for one opening of managed ledger ``name``: a view left by an earlier
        opening, cleared late, touches only its own entries."""
        view = EntryCache(self, name, next(self._tokens))
        self._views[view.token] = view
        return view

    def _put(self, cache: EntryCache, position: Position, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        key = (cache.token, position.ledger_id, position.entry_id)
        self._drop(key)
        self._entries[key] = data
        cache.size += len(data)
        cache.keys.add(key)
        self.size += len(data)
        while self.size > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def _get(self, cache: EntryCache, position: Position) -> bytes | None:
        key = (cache.token, position.ledger_id, position.entry_id)
        data = self._entries.get(key)
        if data is not None:
            self._entries.move_to_end(key)
        return data

    def _drop(self, key: _Key) -> None:
        data = self._entries.pop(key, None)
        if data is None:
            return
        self.size -= len(data)
        cache = self._views.get(key[0])
        if cache is not None:  # else its managed ledger is gone; the entry just ages out
            cache.size -= len(data)
            cache.keys.discard(key)

    def _forget(self, cache: EntryCache) -> None:
        for key in list(cache.keys):
            self._drop(key)


class EntryCache:
    """One managed ledger's entries in the broker-wide cache, with its own hit counts."""

    def __init__(self, manager: EntryCacheManager, name: str, token: int) -> None:
        self.manager = manager
        self.name = name
        self.token = token
        self.keys: set[_Key] = set()
        self.size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self.keys)

    def put(self, position: Position, data: bytes) -> None:
        self.manager._put(self, position, data)

    def get(self, position: Position) -> bytes | None:
        data = self.manager._get(self, position)
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def invalidate_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self.keys if k[1] == ledger_id]:
            self.manager._drop(key)

    def clear(self) -> None:
        """Drop every entry of this managed ledger (it is closing)."""
        self.manager._forget(self)
