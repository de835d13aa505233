"""The writer's handle lifecycle (``HandleLifecycle``): adds in each state, closing (and a
close retried after a failed seal), a handle fenced by a recovering client, a recovering
handle's seal. Real ledger metadata on memory://; bookies answer from memory."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

import pytest

from stripemq.bookie.client import BookKeeper, ClientConfig, LedgerManager
from stripemq.bookie.client.ledger_handle import (
    HANDLE_TRANSITIONS,
    HandleLifecycle,
    LedgerHandle,
)
from stripemq.bookie.client.metadata import LedgerMetadata, LedgerState, master_key_for
from stripemq.bookie.client.reader import BookieHealth
from stripemq.errors import LedgerClosedError, LedgerFencedError, MetadataError
from stripemq.lifecycle import IllegalTransitionError
from stripemq.metadata import MetadataStore
from stripemq.testing.polling import until

H = HandleLifecycle
BOOKIES = ("b1:3181", "b2:3181")


class FakeBookie:
    """Acknowledges every add on the next loop turn, or holds them until ``release``; a
    fenced bookie answers ``LedgerFencedError``."""

    def __init__(self) -> None:
        self.hold = False
        self.fenced = False
        self.held: list[tuple[asyncio.Future[tuple[int, int]], int]] = []

    def add_entry(
        self, master_key: bytes, entry: bytes, *, recovery_add: bool = False
    ) -> asyncio.Future[tuple[int, int]]:
        future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        entry_id = int.from_bytes(entry[8:16], "big")
        if self.hold:
            self.held.append((future, entry_id))
        else:
            asyncio.get_running_loop().call_soon(self._answer, future, entry_id)
        return future

    def release(self) -> None:
        held, self.held = self.held, []
        for future, entry_id in held:
            self._answer(future, entry_id)

    def _answer(self, future: asyncio.Future[tuple[int, int]], entry_id: int) -> None:
        if self.fenced:
            future.set_exception(LedgerFencedError("fenced"))
        else:
            future.set_result((1, entry_id))


class Clients:
    def __init__(self, bookie: FakeBookie) -> None:
        self.bookie = bookie

    async def get(self, address: str) -> FakeBookie:
        return self.bookie


class FlakyLedgerManager(LedgerManager):
    """Fails the next ``fail_writes`` metadata writes."""

    fail_writes = 0

    async def write(self, ledger_id: int, metadata: LedgerMetadata, version: int) -> int:
        if self.fail_writes:
            self.fail_writes -= 1
            raise MetadataError("metadata store unreachable")
        return await super().write(ledger_id, metadata, version)


@dataclass
class FakeClient:
    """The parts of ``BookKeeper`` a handle uses."""

    ledger_manager: FlakyLedgerManager
    clients: Clients
    config: ClientConfig = field(default_factory=lambda: ClientConfig(explicit_lac_interval_ms=0))
    health: BookieHealth = field(default_factory=BookieHealth)
    closed: bool = False


async def new_handle(
    store: MetadataStore, bookie: FakeBookie, *, recovery: bool = False
) -> tuple[LedgerHandle, FlakyLedgerManager]:
    manager = FlakyLedgerManager(store)
    key = master_key_for(b"")
    metadata = LedgerMetadata(2, 2, 2, {0: BOOKIES}, password_hash=key.hex())
    ledger_id = await manager.create(metadata)
    metadata, version = await manager.read(ledger_id)
    bk = cast(BookKeeper, FakeClient(manager, Clients(bookie)))
    handle = LedgerHandle(bk, ledger_id, metadata, version, key, recovery=recovery)
    await handle.connect()
    assert handle.lifecycle is H.OPEN
    return handle, manager


async def test_close_seals_at_the_last_confirmed_entry(store: MetadataStore) -> None:
    handle, manager = await new_handle(store, FakeBookie())
    assert await handle.add_entry(b"a") == 0
    await handle.close()
    assert handle.lifecycle is H.CLOSED
    stored, _ = await manager.read(handle.ledger_id)
    assert stored.state is LedgerState.CLOSED and stored.last_entry_id == 0
    with pytest.raises(LedgerClosedError):
        handle.add_entry_async(b"b")
    await handle.close()  # twice: the same close
    assert handle.lifecycle is H.CLOSED


async def test_adds_are_refused_while_closing_and_pending_ones_complete(
    store: MetadataStore,
) -> None:
    bookie = FakeBookie()
    handle, manager = await new_handle(store, bookie)
    bookie.hold = True
    pending = handle.add_entry_async(b"a")
    closing = asyncio.ensure_future(handle.close())
    await until(lambda: handle.lifecycle is H.CLOSING, "the handle starts closing")
    with pytest.raises(LedgerClosedError):
        handle.add_entry_async(b"b")
    bookie.release()
    await closing
    assert await pending == 0 and handle.lifecycle is H.CLOSED
    stored, _ = await manager.read(handle.ledger_id)
    assert stored.last_entry_id == 0


async def test_a_failed_seal_stays_closing_and_the_next_close_retries(
    store: MetadataStore,
) -> None:
    handle, manager = await new_handle(store, FakeBookie())
    await handle.add_entry(b"a")
    manager.fail_writes = 1
    with pytest.raises(MetadataError):
        await handle.close()
    assert handle.lifecycle is H.CLOSING
    with pytest.raises(LedgerClosedError):
        handle.add_entry_async(b"b")
    await handle.close()
    assert handle.lifecycle is H.CLOSED


async def test_a_fenced_handle_closes_without_sealing(store: MetadataStore) -> None:
    bookie = FakeBookie()
    handle, manager = await new_handle(store, bookie)
    await handle.add_entry(b"a")
    bookie.fenced = True  # a recovering client fenced the ledger
    with pytest.raises(LedgerFencedError):
        await handle.add_entry(b"b")
    _, version = await manager.read(handle.ledger_id)
    await handle.close()
    assert handle.lifecycle is H.CLOSED
    stored, after = await manager.read(handle.ledger_id)
    assert stored.state is LedgerState.OPEN and after == version  # the recovering client seals


async def test_a_recovering_handle_is_closed_by_its_seal(store: MetadataStore) -> None:
    handle, manager = await new_handle(store, FakeBookie(), recovery=True)
    await handle.seal(-1, 0)
    assert handle.lifecycle is H.CLOSED
    await handle.close()  # nothing left to do
    stored, _ = await manager.read(handle.ledger_id)
    assert stored.state is LedgerState.CLOSED


async def test_illegal_moves_are_refused_and_change_nothing(store: MetadataStore) -> None:
    handle, _ = await new_handle(store, FakeBookie())
    await handle.close()
    for state in (H.OPEN, H.CLOSING):
        with pytest.raises(IllegalTransitionError, match=f"CLOSED -> {state.name}"):
            handle._move_to(state)
    assert handle.lifecycle is H.CLOSED


def test_the_transition_table() -> None:
    assert HANDLE_TRANSITIONS.targets(H.CLOSED) == frozenset()
    assert not HANDLE_TRANSITIONS.allows(H.CLOSING, H.OPEN)
