"""An in-memory stand-in for the ledger client (``BookKeeper``), enough for a managed ledger
and its cursors to run without bookies (imported by name: pytest puts this directory on
``sys.path``). Adds complete on the next loop turn, in order; a fenced ledger fails them
with ``LedgerFencedError``; ``gate`` holds ``create_ledger`` until it is set."""

from __future__ import annotations

import asyncio
from typing import Any

from stripemq.bookie.client.reader import LedgerEntry
from stripemq.errors import LedgerClosedError, LedgerFencedError, NoSuchLedgerError


class FakeLedgerHandle:
    def __init__(self, bk: FakeBookKeeper, ledger_id: int) -> None:
        self.bk = bk
        self.ledger_id = ledger_id
        self.entries: list[bytes] = []
        self.last_add_pushed = -1
        self.last_add_confirmed = -1
        self.length = 0
        self.closes = 0

    def add_entry_async(self, data: bytes) -> asyncio.Future[int]:
        if self.closes:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.last_add_pushed += 1
        entry_id = self.last_add_pushed
        asyncio.get_running_loop().call_soon(self._complete, future, entry_id, bytes(data))
        return future

    def _complete(self, future: asyncio.Future[int], entry_id: int, data: bytes) -> None:
        if self.ledger_id in self.bk.fenced:
            future.set_exception(LedgerFencedError(f"ledger {self.ledger_id} is fenced"))
            return
        self.entries.append(data)
        self.last_add_confirmed = entry_id
        self.length += len(data)
        future.set_result(entry_id)

    async def add_entry(self, data: bytes) -> int:
        return await self.add_entry_async(data)

    async def read_entry(self, entry_id: int) -> LedgerEntry:
        return LedgerEntry(self.ledger_id, entry_id, self.entries[entry_id], self.length)

    async def read_entries(self, first: int, last: int) -> list[LedgerEntry]:
        return [await self.read_entry(i) for i in range(first, last + 1)]

    async def close(self) -> None:
        self.closes += 1


class FakeBookKeeper:
    def __init__(self) -> None:
        self.ledgers: dict[int, FakeLedgerHandle] = {}
        self.fenced: set[int] = set()
        self.deleted: list[int] = []
        self.gate: asyncio.Event | None = None  # when set, create_ledger waits for it
        self.held = 0  # create_ledger calls waiting at the gate now
        self._next_id = 1

    async def create_ledger(self, *args: Any, **kwargs: Any) -> FakeLedgerHandle:
        if self.gate is not None:
            self.held += 1
            try:
                await self.gate.wait()
            finally:
                self.held -= 1
        handle = FakeLedgerHandle(self, self._next_id)
        self._next_id += 1
        self.ledgers[handle.ledger_id] = handle
        return handle

    async def open_ledger(self, ledger_id: int, **kwargs: Any) -> FakeLedgerHandle:
        if ledger_id not in self.ledgers:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")
        return self.ledgers[ledger_id]

    async def delete_ledger(self, ledger_id: int) -> None:
        self.deleted.append(ledger_id)
