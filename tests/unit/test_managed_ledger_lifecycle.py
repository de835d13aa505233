"""The managed ledger's lifecycle (``ManagedLedgerLifecycle``): what each state takes and
refuses, the moves between them, and that closing a fenced or abandoned ledger writes
nothing. On memory:// metadata and an in-memory ledger client (``ledger_fakes``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.errors import ManagedLedgerClosedError, ManagedLedgerFencedError
from stripemq.lifecycle import IllegalTransitionError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.cursor.managed_cursor import CursorLifecycle
from stripemq.managed_ledger.managed_ledger import (
    MANAGED_LEDGER_TRANSITIONS,
    ManagedLedger,
    ManagedLedgerLifecycle,
)
from stripemq.metadata import MetadataStore
from stripemq.proto.initial_position import InitialPosition
from stripemq.testing.polling import until

L = ManagedLedgerLifecycle
CONFIG = ManagedLedgerConfig(max_entries_per_ledger=1000, min_rollover_time_s=0)


async def opened(
    store: MetadataStore, bk: FakeBookKeeper, config: ManagedLedgerConfig = CONFIG
) -> ManagedLedger:
    ml = ManagedLedger("tenant/ns/persistent/t", store, cast(BookKeeper, bk), config)
    assert ml.lifecycle is L.OPENING
    await ml.open(create=True)
    return ml


async def node_version(store: MetadataStore, path: str) -> int:
    found = await store.get(path)
    assert found is not None
    return found[1].version


@dataclass
class HeldClose:
    """A cursor close held back: it starts waiting (``waiting``) until ``release`` is set."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: bool = False


def hold_cursor_close(ml: ManagedLedger, name: str) -> HeldClose:
    """Make closing cursor ``name`` wait until the returned hold is released."""
    cursor = ml.cursors[name]
    real_close = cursor.close
    hold = HeldClose()

    async def held_close() -> None:
        hold.waiting = True
        await hold.release.wait()
        await real_close()

    cursor.close = held_close  # type: ignore[method-assign]
    return hold


async def test_opening_until_open_then_open(store: MetadataStore) -> None:
    ml = await opened(store, FakeBookKeeper())
    assert ml.lifecycle is L.OPEN and not ml.closed and not ml.fenced
    await ml.add_entry(b"a")
    await ml.close()


async def test_close_seals_the_ledger_once_and_refuses_from_then_on(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    ml = await opened(store, bk)
    await ml.add_entry(b"a")
    handle = bk.ledgers[ml.current_ledger_id]
    await ml.close()
    assert ml.lifecycle is L.CLOSED and ml.closed and not ml.fenced
    assert handle.closes == 1
    with pytest.raises(ManagedLedgerClosedError):
        ml.add_entry_async(b"b")
    with pytest.raises(ManagedLedgerClosedError):
        await ml.read_entries(ml.last_confirmed, 1)
    await ml.close()  # closing twice: nothing more happens
    assert handle.closes == 1


async def test_appends_are_refused_while_closing(store: MetadataStore) -> None:
    ml = await opened(store, FakeBookKeeper())
    await ml.open_cursor("sub", InitialPosition.Earliest)
    hold = hold_cursor_close(ml, "sub")
    closing = asyncio.ensure_future(ml.close())
    await until(lambda: hold.waiting, "the close waits for its cursor")
    assert ml.lifecycle is L.CLOSING and not ml.closed
    with pytest.raises(ManagedLedgerClosedError, match="closing"):
        ml.add_entry_async(b"late")
    hold.release.set()
    await closing
    assert ml.lifecycle is L.CLOSED


async def test_fenced_by_the_bookies_refuses_appends_and_close_does_not_seal(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    ml = await opened(store, bk)
    cursor = await ml.open_cursor("sub", InitialPosition.Earliest)
    await ml.add_entry(b"a")
    bk.fenced.add(ml.current_ledger_id)  # another owner recovered the ledger
    with pytest.raises(ManagedLedgerFencedError):
        await ml.add_entry(b"b")
    assert ml.lifecycle is L.FENCED and ml.fenced and not ml.closed
    assert cursor.lifecycle is CursorLifecycle.FENCED
    with pytest.raises(ManagedLedgerFencedError):
        ml.add_entry_async(b"c")
    version = await node_version(store, ml.path)
    handle = bk.ledgers[ml.current_ledger_id]
    await ml.close()
    assert ml.lifecycle is L.CLOSED and ml.closed and not ml.fenced
    assert handle.closes == 0  # the new owner's to seal
    assert await node_version(store, ml.path) == version


async def test_a_takeover_in_the_metadata_fences_at_the_next_ledger_list_write(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    config = ManagedLedgerConfig(max_entries_per_ledger=1, min_rollover_time_s=0)
    ml = await opened(store, bk, config)
    await ml.add_entry(b"a")
    found = await store.get(ml.path)
    assert found is not None
    await store.put(ml.path, found[0], -1)  # another owner wrote the ledger list
    with pytest.raises(ManagedLedgerFencedError):
        await ml.add_entry(b"b")  # rolls over: the list write finds a newer version
    assert ml.lifecycle is L.FENCED
    await ml.close()
    assert ml.lifecycle is L.CLOSED


async def test_abandon_closes_at_once_and_writes_nothing(store: MetadataStore) -> None:
    bk = FakeBookKeeper()
    ml = await opened(store, bk)
    cursor = await ml.open_cursor("sub", InitialPosition.Earliest)
    position = await ml.add_entry(b"a")
    cursor.ack([position])  # not yet persisted
    handle = bk.ledgers[ml.current_ledger_id]
    versions = (await node_version(store, ml.path), await node_version(store, cursor.path))
    ml.abandon()
    assert ml.lifecycle is L.CLOSED and cursor.lifecycle is CursorLifecycle.CLOSED
    await ml.close()
    ml.abandon()  # both stay no-ops on a closed ledger
    assert handle.closes == 0
    assert (await node_version(store, ml.path), await node_version(store, cursor.path)) == (
        versions
    )
    with pytest.raises(ManagedLedgerClosedError):
        ml.add_entry_async(b"b")


async def test_abandoned_while_closing_the_close_seals_nothing(store: MetadataStore) -> None:
    bk = FakeBookKeeper()
    ml = await opened(store, bk)
    await ml.open_cursor("sub", InitialPosition.Earliest)
    await ml.add_entry(b"a")
    handle = bk.ledgers[ml.current_ledger_id]
    hold = hold_cursor_close(ml, "sub")
    closing = asyncio.ensure_future(ml.close())
    await until(lambda: hold.waiting, "the close waits for its cursor")
    assert ml.lifecycle is L.CLOSING
    ml.abandon()  # the metadata session went meanwhile
    assert ml.lifecycle is L.CLOSED
    hold.release.set()
    await closing
    assert handle.closes == 0


async def test_two_closes_at_once_both_wait_for_the_seal(store: MetadataStore) -> None:
    bk = FakeBookKeeper()
    ml = await opened(store, bk)
    await ml.open_cursor("sub", InitialPosition.Earliest)
    handle = bk.ledgers[ml.current_ledger_id]
    hold = hold_cursor_close(ml, "sub")
    first, second = asyncio.ensure_future(ml.close()), asyncio.ensure_future(ml.close())
    await until(lambda: hold.waiting, "the first close waits for its cursor")
    hold.release.set()
    await asyncio.gather(first, second)
    # Each close waits for the seal (a real handle's closes share one seal).
    assert ml.lifecycle is L.CLOSED and handle.closes == 2


async def test_illegal_moves_are_refused_and_change_nothing(store: MetadataStore) -> None:
    ml = await opened(store, FakeBookKeeper())
    with pytest.raises(IllegalTransitionError, match="OPEN -> OPENING"):
        ml._move_to(L.OPENING)
    assert ml.lifecycle is L.OPEN
    await ml.close()
    for state in (L.OPENING, L.OPEN, L.FENCED, L.CLOSING):
        with pytest.raises(IllegalTransitionError):
            ml._move_to(state)
        assert ml.lifecycle is L.CLOSED


def test_the_transition_table() -> None:
    t = MANAGED_LEDGER_TRANSITIONS
    assert t.targets(L.CLOSED) == frozenset()  # terminal
    assert not t.allows(L.FENCED, L.OPEN) and not t.allows(L.FENCED, L.CLOSING)
    assert not t.allows(L.CLOSING, L.OPEN)
    assert not t.allows(L.OPEN, L.CLOSED)  # only through CLOSING or FENCED
    for state in L:
        assert (
            state is L.CLOSED
            or L.CLOSED in t.targets(state)
            or any(L.CLOSED in t.targets(s) for s in t.targets(state))
        )


async def test_a_terminated_ledger_is_opened_without_a_ledger_to_write(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    ml = await opened(store, bk)
    await ml.add_entry(b"last")
    last = await ml.terminate()
    await ml.close()
    before = [(info.ledger_id, info.entries) for info in ml.chain]
    created = len(bk.ledgers)
    for _ in range(3):  # loaded again and again (unloads, restarts)
        ml = ManagedLedger("tenant/ns/persistent/t", store, cast(BookKeeper, bk), CONFIG)
        await ml.open(create=False)
        assert ml.terminated_position == last and ml.current_ledger_id == -1
        assert [(info.ledger_id, info.entries) for info in ml.chain] == before
        assert [e.data for e in await ml.read_entries(ml.chain.first_position(), 10)] == [b"last"]
        await ml.close()
    assert len(bk.ledgers) == created  # no ledger made (and dropped) per load


async def test_a_terminated_ledger_read_to_its_end_keeps_its_last_ledger(
    store: MetadataStore,
) -> None:
    """Trimming (retention 0) drops what every cursor passed, but a terminated managed
    ledger keeps its last ledger: its end, where its readers stand, is a position there."""
    bk = FakeBookKeeper()
    ml = await opened(store, bk)
    await ml.open_cursor("s", InitialPosition.Earliest)
    last = await ml.add_entry(b"only")
    await ml.terminate()
    await ml.close()
    ml = ManagedLedger("tenant/ns/persistent/t", store, cast(BookKeeper, bk), CONFIG)
    await ml.open(create=False)
    cursor = ml.cursors["s"]
    cursor.ack([last])
    await cursor.flush()
    await ml.trim()
    assert [info.ledger_id for info in ml.chain] == [last.ledger_id]
    assert ml.chain.last_confirmed() == last == ml.terminated_position
    assert cursor.state.first_unacked_from(cursor.read_position) > last  # at the end
    await ml.close()
