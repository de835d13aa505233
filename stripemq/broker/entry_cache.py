"""Recently written entries kept in memory, so tailing readers need not ask the bookies."""

from __future__ import annotations

from collections import OrderedDict

from stripemq.cursor.position import Position


class EntryCache:
    """Least-recently-used entries of one managed ledger, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Position, bytes] = OrderedDict()
        self.size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, position: Position, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        old = self._entries.pop(position, None)
        if old is not None:
            self.size -= len(old)
        self._entries[position] = data
        self.size += len(data)
        while self.size > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.size -= len(evicted)

    def get(self, position: Position) -> bytes | None:
        data = self._entries.get(position)
        if data is None:
            self.misses += 1
            return None
        self._entries.move_to_end(position)
        self.hits += 1
        return data

    def invalidate_ledger(self, ledger_id: int) -> None:
        for position in [p for p in self._entries if p.ledger_id == ledger_id]:
            self.size -= len(self._entries.pop(position))

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0
