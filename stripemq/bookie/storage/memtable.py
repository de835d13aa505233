"""The write cache: entries added since the last flush, by ``(ledger_id, entry_id)``.

A flush takes a snapshot (the active table becomes read-only and a fresh one takes new adds),
writes the snapshot to the entry log, and then drops it. Reads look at both tables, so an
entry is always readable from somewhere while it moves to disk.
"""

from __future__ import annotations

EntryKey = tuple[int, int]


class Memtable:
    """Two dictionaries (active and snapshot) of entry bytes with byte accounting."""

    def __init__(self) -> None:
        self._active: dict[EntryKey, bytes] = {}
        self._snapshot: dict[EntryKey, bytes] = {}
        self.active_bytes = 0
        self.snapshot_bytes = 0

    @property
    def size_bytes(self) -> int:
        return self.active_bytes + self.snapshot_bytes

    def put(self, ledger_id: int, entry_id: int, entry: bytes) -> None:
        key = (ledger_id, entry_id)
        old = self._active.get(key)
        if old is not None:
            self.active_bytes -= len(old)
        self._active[key] = entry
        self.active_bytes += len(entry)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        key = (ledger_id, entry_id)
        found = self._active.get(key)
        if found is None:
            found = self._snapshot.get(key)
        return found

    def drop_ledgers(self, ledger_ids: set[int]) -> int:
        """Forget every entry of the ledgers (garbage-collected); returns how many went.

        Only the active table is touched: call it when no flush holds a snapshot.
        """
        doomed = [key for key in self._active if key[0] in ledger_ids]
        for key in doomed:
            self.active_bytes -= len(self._active.pop(key))
        return len(doomed)

    def take_snapshot(self) -> dict[EntryKey, bytes]:
        """Freeze the active table for flushing and return it (read it, never change it)."""
        if self._snapshot:
            raise RuntimeError("a memtable snapshot is already being flushed")
        self._snapshot, self._active = self._active, {}
        self.snapshot_bytes, self.active_bytes = self.active_bytes, 0
        return self._snapshot

    def restore_snapshot(self) -> None:
        """Put a snapshot whose flush failed back under the newer active entries."""
        for key, entry in self._snapshot.items():
            if key not in self._active:
                self._active[key] = entry
                self.active_bytes += len(entry)
        self.drop_snapshot()

    def drop_snapshot(self) -> None:
        """Forget the snapshot once its entries are durable in the entry log and index."""
        self._snapshot = {}
        self.snapshot_bytes = 0
