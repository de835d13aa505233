"""Managed ledgers and durable cursors on real ZooKeeper and three real bookie processes."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from stripemq.bookie.client import BookKeeper, ClientConfig
from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.broker.managed_ledger import (
    InitialPosition,
    ManagedLedgerFactory,
    managed_ledger_path,
)
from stripemq.broker.managed_ledger_config import ManagedLedgerConfig
from stripemq.cursor.config import CursorConfig
from stripemq.cursor.position import Position
from stripemq.errors import (
    CursorNotFoundError,
    InvalidCursorPositionError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerNotFoundError,
)
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.testing.cluster import BookieCluster

pytestmark = pytest.mark.integration

CLIENT = ClientConfig(add_entry_timeout_s=5.0, explicit_lac_interval_ms=100)
SMALL_LEDGERS = ManagedLedgerConfig(
    max_entries_per_ledger=100,
    min_rollover_time_s=0,
    cursor=CursorConfig(snapshot_interval_ms=50),
)
# With no cursor and no retention a topic keeps nothing it has rolled past (as in Pulsar).
KEEP_ALL = replace(SMALL_LEDGERS, retention_time_s=-1, retention_size_bytes=-1)
TOPIC = "public/default/persistent/orders"


def payload(i: int) -> bytes:
    return f"message-{i:06d}".encode()


@pytest.fixture
async def cluster(metadata_url: str, tmp_path: Path) -> AsyncIterator[BookieCluster]:
    async with BookieCluster(metadata_url, tmp_path / "bookies", 3) as running:
        yield running


class Owner:
    """One broker's view: its own metadata session, ledger client and factory."""

    def __init__(self, metadata_url: str, config: ManagedLedgerConfig) -> None:
        self.metadata_url = metadata_url
        self.config = config

    async def __aenter__(self) -> ManagedLedgerFactory:
        self.store = create_metadata_store(self.metadata_url)
        await self.store.start()
        self.bk = BookKeeper(self.store, CLIENT)
        await self.bk.start()
        self.factory = ManagedLedgerFactory(self.store, self.bk, self.config)
        return self.factory

    async def __aexit__(self, *exc: object) -> None:
        await self.factory.close()
        await self.bk.close()
        await self.store.close()


async def append(ml, count: int, start: int = 0) -> list[Position]:  # type: ignore[no-untyped-def]
    return list(
        await asyncio.gather(*(ml.add_entry(payload(i)) for i in range(start, start + count)))
    )


async def test_appends_roll_over_and_read_back_across_ledgers(
    cluster: BookieCluster, metadata_url: str, store: MetadataStore
) -> None:
    async with Owner(metadata_url, KEEP_ALL) as factory:
        ml = await factory.open(TOPIC)
        positions = await append(ml, 1000)
        assert positions == sorted(positions)
        ledgers = sorted({p.ledger_id for p in positions})
        assert len(ledgers) >= 9  # 100 entries per ledger, rolled over as it went
        assert ml.chain.entries == 1000

        read = await ml.read_entries(positions[0], 1000)
        assert [e.data for e in read] == [payload(i) for i in range(1000)]
        assert [e.position for e in read] == positions
        ml.cache.clear()  # now from the bookies, across ledger boundaries
        read = await ml.read_entries(positions[150], 300)
        assert [e.data for e in read] == [payload(i) for i in range(150, 450)]
        assert await ml.read_entries(ml.chain.write_position(), 10) == []

        # The ledger list is in metadata, every ledger closed but the current one.
        manager = LedgerManager(store)
        for ledger_id in ledgers[:-1]:
            metadata, _ = await manager.read(ledger_id)
            assert metadata.is_closed
        assert await factory.exists(TOPIC)


async def test_tailing_reader_is_woken_by_new_entries(
    cluster: BookieCluster, metadata_url: str
) -> None:
    async with Owner(metadata_url, SMALL_LEDGERS) as factory:
        ml = await factory.open(TOPIC)
        end = ml.last_confirmed
        assert not await ml.wait_for_entries(end, timeout_s=0.1)
        waiter = asyncio.ensure_future(ml.wait_for_entries(end, timeout_s=10))
        await asyncio.sleep(0.05)
        position = await ml.add_entry(b"hello")
        assert await waiter
        [entry] = await ml.read_entries(position, 10)
        assert entry.data == b"hello"
        assert ml.cache.hits >= 1


async def test_a_second_owner_fences_the_first(cluster: BookieCluster, metadata_url: str) -> None:
    async with Owner(metadata_url, KEEP_ALL) as first:
        ml_a = await first.open(TOPIC)
        acked = await append(ml_a, 150)
        async with Owner(metadata_url, KEEP_ALL) as second:
            ml_b = await second.open(TOPIC)
            with pytest.raises(ManagedLedgerFencedError):
                await ml_a.add_entry(b"late")
            with pytest.raises(ManagedLedgerFencedError):
                await ml_a.add_entry(b"later")
            read = await ml_b.read_entries(acked[0], 1000)
            assert [e.data for e in read] == [payload(i) for i in range(150)]
            await ml_b.add_entry(b"new owner")
            assert ml_b.chain.entries == 151


async def test_ledgers_behind_every_cursor_are_trimmed_and_retention_keeps_them(
    cluster: BookieCluster, metadata_url: str, store: MetadataStore
) -> None:
    async with Owner(metadata_url, SMALL_LEDGERS) as factory:
        ml = await factory.open(TOPIC)
        slow = await ml.open_cursor("slow", InitialPosition.EARLIEST)
        fast = await ml.open_cursor("fast", InitialPosition.EARLIEST)
        positions = await append(ml, 550)
        first_ledgers = sorted({p.ledger_id for p in positions})
        fast.ack_cumulative(positions[-1])
        assert await ml.trim() == []  # the slow cursor still needs everything
        slow.ack_cumulative(positions[349])
        trimmed = await ml.trim()
        assert trimmed == first_ledgers[:3]  # ledgers 0-99, 100-199, 200-299
        existing = {i async for i in LedgerManager(store).ledger_ids()}
        assert [i for i in first_ledgers if i in existing] == first_ledgers[3:]
        read = await ml.read_entries(Position(0, 0), 10)  # before the first kept ledger
        assert [e.data for e in read] == [payload(i) for i in range(300, 310)]
        assert slow.backlog == 200 and fast.backlog == 0

    kept = replace(SMALL_LEDGERS, retention_time_s=3600, retention_size_bytes=-1)
    async with Owner(metadata_url, kept) as factory:
        ml = await factory.open(TOPIC)
        cursor = ml.cursors["slow"]
        cursor.ack_cumulative(ml.last_confirmed)
        assert await ml.trim() == []  # consumed, but within the retention time


async def test_cursor_acks_survive_close_and_reopen_by_another_owner(
    cluster: BookieCluster, metadata_url: str
) -> None:
    async with Owner(metadata_url, SMALL_LEDGERS) as factory:
        ml = await factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        positions = await append(ml, 300)
        acked = positions[:10] + positions[11:200:3] + [positions[250]]
        cursor.ack(acked)
        cursor.ack_batch(positions[10], [0, 2], 4)
        cursor.ack_cumulative(positions[5], properties={"checkpoint": 5})
        expected_holes = cursor.state.holes.count
        await ml.close()

    async with Owner(metadata_url, SMALL_LEDGERS) as factory:
        ml = await factory.open(TOPIC)
        cursor = ml.cursors["sub"]
        assert cursor.mark_delete_position == positions[9]
        assert cursor.state.holes.count == expected_holes
        assert all(cursor.is_acked(p) for p in acked)
        assert not cursor.is_acked(positions[10]) and not cursor.is_acked(positions[12])
        bits = cursor.state.ack_set(positions[10])
        assert bits is not None and bits.to01() == "0101"
        assert cursor.properties == {"checkpoint": 5}
        assert cursor.backlog == 300 - len(set(acked))
        assert cursor.read_position == positions[10]


async def test_bad_input_gets_typed_errors(cluster: BookieCluster, metadata_url: str) -> None:
    async with Owner(metadata_url, SMALL_LEDGERS) as factory:
        with pytest.raises(ManagedLedgerNotFoundError):
            await factory.open("public/default/persistent/nothing", create=False)
        with pytest.raises(ManagedLedgerError):
            managed_ledger_path("public//x")
        ml = await factory.open(TOPIC)
        with pytest.raises(ManagedLedgerError, match="exceeds"):
            await ml.add_entry(b"x" * (SMALL_LEDGERS.max_entry_bytes + 1))
        cursor = await ml.open_cursor("sub")
        [position] = await append(ml, 1)
        with pytest.raises(InvalidCursorPositionError):
            cursor.ack([Position(position.ledger_id, position.entry_id + 5)])
        with pytest.raises(InvalidCursorPositionError):
            cursor.reset(Position(position.ledger_id + 10, 0))
        with pytest.raises(CursorNotFoundError):
            await ml.delete_cursor("nobody")
        assert cursor.backlog == 1  # nothing of the refused calls applied


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_sigkill_while_acking_out_of_order_loses_no_unacked_entry(
    cluster: BookieCluster, metadata_url: str, seed: int
) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("cursor_crash_child.py")),
        metadata_url,
        TOPIC,
        "1500",
        str(seed),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert child.stdout is not None
    order: list[Position] = []
    acked = persisted = 0
    kill_after = random.Random(seed).randint(300, 1300)
    try:
        async with asyncio.timeout(120):
            while acked < kill_after:
                line = (await child.stdout.readline()).decode().strip()
                assert line, "the child died before the kill"
                kind, _, rest = line.partition(" ")
                if kind == "order":
                    order = [Position.parse(p) for p in json.loads(rest)]
                elif kind == "acked":
                    acked = int(rest)
                elif kind == "persisted":
                    persisted = int(rest)
    finally:
        child.kill()  # mid-stream: acks and snapshots still going
        await child.wait()

    async with Owner(metadata_url, KEEP_ALL) as factory:
        ml = await factory.open(TOPIC)
        cursor = ml.cursors["sub"]
        # A snapshot holds what was acknowledged when it was taken: a prefix of the order.
        recovered = sum(1 for p in order if cursor.is_acked(p))
        assert {p for p in order if cursor.is_acked(p)} == set(order[:recovered])
        # Never less than the last snapshot the child saw written; nothing it never acked.
        assert persisted <= recovered <= len(order)
        assert cursor.backlog == len(order) - recovered
        # Reading from the cursor delivers every entry not acknowledged.
        delivered = await ml.read_entries(cursor.read_position, len(order))
        assert {e.position for e in delivered if not cursor.is_acked(e.position)} == set(
            order[recovered:]
        )
        print(
            f"seed {seed}: killed after >= {acked} acks ({persisted} known persisted); "
            f"recovered {recovered}, so {max(0, acked - recovered)}+ acked entries come again"
        )


async def test_stats_and_delete(
    cluster: BookieCluster, metadata_url: str, store: MetadataStore
) -> None:
    async with Owner(metadata_url, KEEP_ALL) as factory:
        ml = await factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        positions = await append(ml, 250)
        cursor.ack([positions[3], positions[4], positions[10]])
        await cursor.flush()
        stats = ml.stats()
        assert stats.entries == 250 and len(stats.ledgers) == 3
        assert stats.last_confirmed_entry == str(positions[-1])
        sub = stats.cursors["sub"]
        assert sub.backlog == 247 and sub.individually_deleted_ranges == 2
        assert sub.mark_delete_position == f"{positions[0].ledger_id}:-1"
        assert sub.cursor_ledger >= 0 and sub.snapshots == 1

        ledger_ids = {info["ledger_id"] for info in stats.ledgers} | {sub.cursor_ledger}
        await factory.delete(TOPIC)
        assert not await factory.exists(TOPIC)
        existing = {i async for i in LedgerManager(store).ledger_ids()}
        assert not existing & ledger_ids  # topic ledgers and the cursor ledger are gone
        with pytest.raises(ManagedLedgerNotFoundError):
            await factory.open(TOPIC, create=False)
