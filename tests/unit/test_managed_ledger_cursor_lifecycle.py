"""The durable cursor's lifecycle (``CursorLifecycle``): acks and snapshots in each state,
the moves between them, and that a fenced or abandoned cursor writes nothing more. On
memory:// metadata and an in-memory ledger client (``ledger_fakes``)."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.errors import ManagedLedgerClosedError, ManagedLedgerFencedError
from stripemq.lifecycle import IllegalTransitionError
from stripemq.managed_ledger.cursor.config import CursorConfig
from stripemq.managed_ledger.cursor.managed_cursor import (
    CURSOR_TRANSITIONS,
    CursorEnvironment,
    CursorLifecycle,
    ManagedCursor,
)
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.testing.polling import until

C = CursorLifecycle
LEDGER = 7
PATH = "/cursors/sub"


async def new_cursor(store: MetadataStore, bk: FakeBookKeeper) -> ManagedCursor:
    """A cursor at the start of one ledger of 10 entries; snapshots only when asked."""
    config = CursorConfig(snapshot_interval_ms=60_000, snapshot_max_unpersisted_acks=1_000_000)
    chain = LedgerChain([LedgerInfo(LEDGER, 10)])
    env = CursorEnvironment(store, cast(BookKeeper, bk), chain, config)
    cursor = await ManagedCursor.create("sub", PATH, env, Position(LEDGER, -1))
    assert cursor.lifecycle is C.OPEN
    return cursor


async def node_version(store: MetadataStore) -> int:
    found = await store.get(PATH)
    assert found is not None
    return found[1].version


async def test_close_persists_then_refuses(store: MetadataStore) -> None:
    bk = FakeBookKeeper()
    cursor = await new_cursor(store, bk)
    cursor.ack([Position(LEDGER, 0)])
    await cursor.close()
    assert cursor.lifecycle is C.CLOSED
    assert cursor.persisted_mark_delete == Position(LEDGER, 0)  # the last snapshot went out
    with pytest.raises(ManagedLedgerClosedError):
        cursor.ack([Position(LEDGER, 1)])
    version = await node_version(store)
    await cursor.close()  # twice: nothing more
    await cursor.flush()  # closed: nothing to write
    assert await node_version(store) == version


async def test_acks_are_refused_while_closing(store: MetadataStore) -> None:
    bk = FakeBookKeeper()
    cursor = await new_cursor(store, bk)
    cursor.ack([Position(LEDGER, 0)])
    bk.gate = asyncio.Event()  # the closing snapshot waits for its new ledger
    closing = asyncio.ensure_future(cursor.close())
    await until(lambda: bk.held == 1, "the closing snapshot waits for its ledger")
    assert cursor.lifecycle is C.CLOSING
    with pytest.raises(ManagedLedgerClosedError):
        cursor.ack([Position(LEDGER, 1)])
    bk.gate.set()
    await closing
    assert cursor.lifecycle is C.CLOSED


async def test_fenced_refuses_acks_and_snapshots_and_close_writes_nothing(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    cursor = await new_cursor(store, bk)
    cursor.ack([Position(LEDGER, 0)])
    version = await node_version(store)
    cursor.fence()
    assert cursor.lifecycle is C.FENCED
    with pytest.raises(ManagedLedgerFencedError):
        cursor.ack([Position(LEDGER, 1)])
    with pytest.raises(ManagedLedgerFencedError):
        await cursor.flush()
    cursor.fence()  # twice: stays fenced
    await cursor.close()
    assert cursor.lifecycle is C.CLOSED
    assert await node_version(store) == version and not bk.ledgers


async def test_closes_racing_a_snapshot_of_a_fenced_cursor_close_its_ledger_once(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    config = CursorConfig(snapshot_interval_ms=60_000, snapshot_max_unpersisted_acks=1)
    env = CursorEnvironment(
        store, cast(BookKeeper, bk), LedgerChain([LedgerInfo(LEDGER, 10)]), config
    )
    cursor = await ManagedCursor.create("sub", PATH, env, Position(LEDGER, -1))
    bk.gate = asyncio.Event()
    cursor.ack([Position(LEDGER, 0)])  # a snapshot starts at once, and waits for its ledger
    await until(lambda: bk.held == 1, "the snapshot waits for its ledger")
    cursor.fence()
    closes = [asyncio.ensure_future(cursor.close()) for _ in range(3)]
    await asyncio.sleep(0)
    bk.gate.set()  # the snapshot gets its ledger while the closes wait for it
    await asyncio.gather(*closes)
    assert cursor.lifecycle is C.CLOSED
    assert [h.closes for h in bk.ledgers.values()] == [1]  # the snapshot's ledger, once


async def test_a_fenced_cursor_closes_its_ledger_once_however_often_it_is_closed(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    cursor = await new_cursor(store, bk)
    cursor.ack([Position(LEDGER, 0)])
    await cursor.flush()  # the cursor now has a ledger of its own
    (handle,) = bk.ledgers.values()
    cursor.fence()
    await asyncio.gather(cursor.close(), cursor.close(), cursor.close())
    await cursor.close()
    assert cursor.lifecycle is C.CLOSED
    assert handle.closes == 1


async def test_a_node_changed_by_another_owner_fences_at_the_next_snapshot(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    cursor = await new_cursor(store, bk)
    found = await store.get(PATH)
    assert found is not None
    await store.put(PATH, found[0], -1)  # another owner recovered the cursor
    cursor.ack([Position(LEDGER, 0)])
    with pytest.raises(ManagedLedgerFencedError):
        await cursor.flush()
    assert cursor.lifecycle is C.FENCED


async def test_fenced_while_closing(store: MetadataStore) -> None:
    bk = FakeBookKeeper()
    cursor = await new_cursor(store, bk)
    cursor.ack([Position(LEDGER, 0)])
    bk.gate = asyncio.Event()
    closing = asyncio.ensure_future(cursor.close())
    await until(lambda: bk.held == 1, "the closing snapshot waits for its ledger")
    cursor.fence()  # the managed ledger was taken over meanwhile
    assert cursor.lifecycle is C.FENCED
    with pytest.raises(ManagedLedgerFencedError):
        cursor.ack([Position(LEDGER, 1)])
    bk.gate.set()
    await closing
    assert cursor.lifecycle is C.CLOSED


async def test_abandon_stops_at_once(store: MetadataStore) -> None:
    bk = FakeBookKeeper()
    cursor = await new_cursor(store, bk)
    cursor.ack([Position(LEDGER, 0)])
    version = await node_version(store)
    cursor.abandon()
    assert cursor.lifecycle is C.CLOSED
    cursor.fence()  # closed stays closed
    assert cursor.lifecycle is C.CLOSED
    await cursor.flush()
    await cursor.close()
    assert await node_version(store) == version and not bk.ledgers
    with pytest.raises(ManagedLedgerClosedError):
        cursor.ack([Position(LEDGER, 1)])


async def test_delete_closes(store: MetadataStore) -> None:
    cursor = await new_cursor(store, FakeBookKeeper())
    await cursor.delete()
    assert cursor.lifecycle is C.CLOSED and await store.get(PATH) is None


async def test_illegal_moves_are_refused_and_change_nothing(store: MetadataStore) -> None:
    cursor = await new_cursor(store, FakeBookKeeper())
    cursor.fence()
    with pytest.raises(IllegalTransitionError, match="FENCED -> OPEN"):
        cursor._move_to(C.OPEN)
    with pytest.raises(IllegalTransitionError):
        cursor._move_to(C.CLOSING)
    assert cursor.lifecycle is C.FENCED
    cursor.abandon()
    for state in (C.OPEN, C.FENCED, C.CLOSING):
        with pytest.raises(IllegalTransitionError):
            cursor._move_to(state)
    assert cursor.lifecycle is C.CLOSED


def test_the_transition_table() -> None:
    t = CURSOR_TRANSITIONS
    assert t.targets(C.CLOSED) == frozenset()
    assert all(C.CLOSED in t.targets(s) for s in C if s is not C.CLOSED)
    assert not any(t.allows(s, C.OPEN) for s in C if s is not C.OPEN)


async def test_a_new_snapshot_interval_times_a_waiting_snapshot(store: MetadataStore) -> None:
    """An ack waiting on a minute's interval is persisted soon after the interval becomes
    0 (a namespace's persistence policies set no mark-delete throttle)."""
    bk = FakeBookKeeper()
    cursor = await new_cursor(store, bk)
    cursor.ack([Position(LEDGER, 0)])
    await asyncio.sleep(0.05)
    assert cursor.persisted_mark_delete == Position(LEDGER, -1)  # waiting on 60 s
    cursor.env.config = CursorConfig(snapshot_interval_ms=0)
    cursor.snapshot_interval_changed()
    await until(lambda: cursor.persisted_mark_delete == Position(LEDGER, 0), "persisted")
    await cursor.close()
