"""Recently written entries kept in memory, so tailing readers need not ask the bookies.

One ``EntryCacheManager`` per broker holds every topic's cached entries under one byte
budget (Pulsar's ``managedLedgerCacheSizeMB`` is per broker, not per topic): the least
recently used entry goes first, whichever topic it belongs to. Each managed ledger sees
its own part through an ``EntryCache``.
"""

from __future__ import annotations

from collections import OrderedDict

from stripemq.managed_ledger.position import Position

_Key = tuple["EntryCache", Position]


class EntryCacheManager:
    """The broker-wide least-recently-used entry cache, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[_Key, bytes] = OrderedDict()

    def cache_for(self, name: str) -> EntryCache:
        """A new view for one opening of managed ledger ``name``: a view left by an earlier
        opening, cleared late, touches only its own entries."""
        return EntryCache(self, name)

    def _put(self, cache: EntryCache, position: Position, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        key = (cache, position)
        self._drop(key)
        self._entries[key] = data
        cache.size += len(data)
        cache.positions.add(position)
        self.size += len(data)
        while self.size > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def _get(self, cache: EntryCache, position: Position) -> bytes | None:
        key = (cache, position)
        data = self._entries.get(key)
        if data is not None:
            self._entries.move_to_end(key)
        return data

    def _drop(self, key: _Key) -> None:
        data = self._entries.pop(key, None)
        if data is None:
            return
        cache = key[0]
        cache.size -= len(data)
        cache.positions.discard(key[1])
        self.size -= len(data)

    def _forget(self, cache: EntryCache) -> None:
        for position in list(cache.positions):
            self._drop((cache, position))


class EntryCache:
    """One managed ledger's entries in the broker-wide cache, with its own hit counts."""

    def __init__(self, manager: EntryCacheManager, name: str) -> None:
        self.manager = manager
        self.name = name
        self.positions: set[Position] = set()
        self.size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self.positions)

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
        for position in [p for p in self.positions if p.ledger_id == ledger_id]:
            self.manager._drop((self, position))

    def clear(self) -> None:
        """Drop every entry of this managed ledger (it is closing)."""
        self.manager._forget(self)
