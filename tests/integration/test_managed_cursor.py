"""Durable cursors on real ZooKeeper and bookies: throttling, rollover, fallbacks, size."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stripemq.bookie.client import BookKeeper, ClientConfig
from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.errors import ManagedLedgerFencedError
from stripemq.managed_ledger.cursor.config import CursorConfig
from stripemq.managed_ledger.cursor.managed_cursor import CursorEnvironment, ManagedCursor
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.polling import until

pytestmark = pytest.mark.integration

PATH = "/stripemq/managed-ledgers/t/ns/persistent/topic/sub"
LEDGER = 7  # a synthetic topic ledger: the cursor only needs the chain to know its entries


@pytest.fixture
async def cluster(metadata_url: str, tmp_path: Path) -> AsyncIterator[BookieCluster]:
    async with BookieCluster(metadata_url, tmp_path / "bookies", 3) as running:
        yield running


@pytest.fixture
async def bk(store: MetadataStore, cluster: BookieCluster) -> AsyncIterator[BookKeeper]:
    client = BookKeeper(store, ClientConfig(add_entry_timeout_s=2.0))
    await client.start()
    yield client
    await client.close()


def chain_of(entries: int) -> LedgerChain:
    return LedgerChain([LedgerInfo(LEDGER, entries, closed=True)])


def env(
    store: MetadataStore, bk: BookKeeper, chain: LedgerChain, config: CursorConfig
) -> CursorEnvironment:
    return CursorEnvironment(store=store, bk=bk, chain=chain, config=config)


async def new_cursor(
    store: MetadataStore, bk: BookKeeper, chain: LedgerChain, config: CursorConfig
) -> ManagedCursor:
    return await ManagedCursor.create(
        "sub", PATH, env(store, bk, chain, config), Position(LEDGER, -1)
    )


async def recovered(
    store: MetadataStore, bk: BookKeeper, chain: LedgerChain, config: CursorConfig
) -> ManagedCursor:
    return await ManagedCursor.recover("sub", PATH, env(store, bk, chain, config))


async def snapshots_reach(cursor: ManagedCursor, count: int, timeout: float = 10.0) -> None:
    async def reached() -> bool:
        return cursor.snapshots >= count

    await until(reached, f"{count} snapshots", timeout=timeout)


async def node(store: MetadataStore) -> dict[str, object]:
    found = await store.get(PATH)
    assert found is not None
    return json.loads(found[0])


async def test_snapshots_are_throttled_by_time_and_by_unpersisted_acks(
    store: MetadataStore, bk: BookKeeper
) -> None:
    chain = chain_of(100)
    config = CursorConfig(snapshot_interval_ms=60_000, snapshot_max_unpersisted_acks=5)
    cursor = await new_cursor(store, bk, chain, config)
    cursor.ack([Position(LEDGER, i) for i in (1, 3, 5, 7)])  # four separate holes... one call
    cursor.ack([Position(LEDGER, 9)])
    await snapshots_reach(cursor, 1)  # the fifth unpersisted ack: at once
    # A witness acknowledged just after, with a 0.3 s interval: once its timer has fired
    # and its snapshot is written, a snapshot the ack had started (or due within 0.3 s)
    # would have been written too.
    witness_config = CursorConfig(snapshot_interval_ms=300, snapshot_max_unpersisted_acks=1000)
    witness = await ManagedCursor.create(
        "witness", f"{PATH}-witness", env(store, bk, chain, witness_config), Position(LEDGER, -1)
    )
    cursor.ack([Position(LEDGER, 11)])
    witness.ack([Position(LEDGER, 1)])
    await snapshots_reach(witness, 1)
    assert cursor.snapshots == 1  # one ack waits for the interval
    await witness.close()
    await cursor.close()

    config = CursorConfig(snapshot_interval_ms=100, snapshot_max_unpersisted_acks=1000)
    cursor = await recovered(store, bk, chain, config)
    assert cursor.state.holes.count == 6
    cursor.ack([Position(LEDGER, 13)])
    await snapshots_reach(cursor, 1, timeout=5)  # by time, without more acks
    cursor.ack([Position(LEDGER, 15)])
    assert cursor.snapshots == 1
    await snapshots_reach(cursor, 2, timeout=5)
    await cursor.close()


async def test_the_cursor_ledger_rolls_over_and_the_old_one_is_deleted(
    store: MetadataStore, bk: BookKeeper
) -> None:
    chain = chain_of(1000)
    config = CursorConfig(max_entries_per_ledger=6)
    cursor = await new_cursor(store, bk, chain, config)
    ledgers = set()
    for i in range(1, 600, 2):
        cursor.ack([Position(LEDGER, i)])
        if i % 40 == 1:
            await cursor.flush()
            ledgers.add((await node(store))["cursor_ledger"])
    await cursor.flush()
    current = (await node(store))["cursor_ledger"]
    ledgers.add(current)
    assert len(ledgers) >= 3
    existing = {i async for i in LedgerManager(store).ledger_ids()}
    assert existing & ledgers == {current}  # every earlier cursor ledger was deleted
    expected = cursor.state.holes
    await cursor.close()
    again = await recovered(store, bk, chain, config)
    assert again.state.holes == expected and again.mark_delete_position == Position(LEDGER, -1)


async def test_a_failing_cursor_ledger_falls_back_to_the_metadata_store(
    store: MetadataStore, bk: BookKeeper, cluster: BookieCluster
) -> None:
    chain = chain_of(100)
    config = CursorConfig(max_ranges_in_metadata=3)
    cursor = await new_cursor(store, bk, chain, config)
    cursor.ack([Position(LEDGER, i) for i in (0, 1, 2)])
    await cursor.flush()
    cluster.kill_all()
    cursor.ack([Position(LEDGER, i) for i in (3, 5, 7, 9, 11, 13)])
    await cursor.flush()  # the ledger cannot be written: the node takes the position
    info = await node(store)
    assert info["cursor_ledger"] == -1 and info["mark_delete"] == f"{LEDGER}:3"
    assert len(info["ranges"]) == 3  # bounded: holes 11 and 13 are not in it
    assert cursor.stats().persisted_in_metadata

    again = await recovered(store, bk, chain, config)
    assert again.mark_delete_position == Position(LEDGER, 3)
    assert [again.is_acked(Position(LEDGER, i)) for i in (5, 7, 9, 11, 13)] == [
        True,
        True,
        True,
        False,
        False,  # the last two come again: duplicates, not loss
    ]
    assert not again.is_acked(Position(LEDGER, 4))


async def test_a_cursor_whose_ledger_is_gone_restarts_from_its_mark_delete(
    store: MetadataStore, bk: BookKeeper
) -> None:
    chain = chain_of(100)
    config = CursorConfig()
    cursor = await new_cursor(store, bk, chain, config)
    cursor.ack_cumulative(Position(LEDGER, 9))
    await cursor.flush()  # first snapshot: a new ledger, whose id and position the node holds
    cursor.ack([Position(LEDGER, 20)])
    await cursor.flush()
    await bk.delete_ledger(int((await node(store))["cursor_ledger"]))

    again = await recovered(store, bk, chain, config)
    assert again.mark_delete_position == Position(LEDGER, 9)
    assert not again.is_acked(Position(LEDGER, 20))  # delivered again: never lost
    assert again.backlog == 90


async def test_a_cursor_changed_by_another_owner_stops(
    store: MetadataStore, bk: BookKeeper
) -> None:
    chain = chain_of(100)
    cursor = await new_cursor(store, bk, chain, CursorConfig())
    cursor.ack([Position(LEDGER, 0)])
    await cursor.flush()
    other = await recovered(store, bk, chain, CursorConfig())  # takes the cursor over
    other.ack([Position(LEDGER, 1)])
    await other.flush()
    cursor.ack([Position(LEDGER, 2)])
    with pytest.raises(ManagedLedgerFencedError):
        await cursor.flush()  # its ledger was fenced by the recovery; the node moved on
    with pytest.raises(ManagedLedgerFencedError):
        cursor.ack([Position(LEDGER, 3)])
    again = await recovered(store, bk, chain, CursorConfig())
    assert again.mark_delete_position == Position(LEDGER, 1)


async def test_a_million_entries_acked_every_other_one(
    store: MetadataStore, bk: BookKeeper
) -> None:
    chain = chain_of(1_000_000)
    config = CursorConfig(snapshot_max_unpersisted_acks=10_000_000)
    cursor = await new_cursor(store, bk, chain, config)
    cursor.ack([Position(LEDGER, i) for i in range(1, 1_000_000, 2)])
    held = cursor.state.memory_bytes()  # tracemalloc-checked in test_managed_ledger_range_set
    assert cursor.state.holes_count == 500_000
    await cursor.flush()
    snapshot = cursor.last_snapshot_bytes
    print(f"\n500,000 holes: {held / 1e6:.1f} MB held, snapshot {snapshot / 1e6:.2f} MB")
    assert held < 80_000_000
    assert snapshot < 2_000_000
    expected = cursor.state.holes
    await cursor.close()
    again = await recovered(store, bk, chain, config)
    assert again.state.holes == expected and again.backlog == 500_000
