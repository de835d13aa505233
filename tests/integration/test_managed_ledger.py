"""Managed ledgers and durable cursors on real ZooKeeper and three real bookie processes."""

from __future__ import annotations

import asyncio
import contextlib
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
from stripemq.errors import (
    CursorNotFoundError,
    InvalidCursorPositionError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerNotFoundError,
)
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.cursor.config import CursorConfig
from stripemq.managed_ledger.ledger_list import managed_ledger_path
from stripemq.managed_ledger.managed_ledger import ManagedLedgerFactory
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.proto.initial_position import InitialPosition
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
# Three entries per ledger and no snapshot unless asked for.
TINY = ManagedLedgerConfig(
    max_entries_per_ledger=3,
    min_rollover_time_s=0,
    cursor=CursorConfig(snapshot_interval_ms=60_000, snapshot_max_unpersisted_acks=1_000_000),
)


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


async def test_a_dispatcher_at_the_tail_is_woken_once_by_the_next_add_or_the_close(
    cluster: BookieCluster, metadata_url: str
) -> None:
    async with Owner(metadata_url, SMALL_LEDGERS) as factory:
        ml = await factory.open(TOPIC)
        end = ml.last_confirmed
        assert not ml.has_entries_after(end)
        woken: list[str] = []
        ml.wake_on_new_entry(lambda: woken.append("first"))
        wake_second = lambda: woken.append("second")  # noqa: E731
        ml.wake_on_new_entry(wake_second)
        ml.wake_on_new_entry(wake_second)  # the same callable twice: called once
        assert woken == []
        await ml.add_entry(b"one")
        assert sorted(woken) == ["first", "second"]
        assert ml.has_entries_after(end)
        await ml.add_entry(b"two")  # one-shot: not called again
        assert len(woken) == 2
        ml.wake_on_new_entry(lambda: woken.append("at close"))
        await ml.close()
        assert woken[-1] == "at close"


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
        slow = await ml.open_cursor("slow", InitialPosition.Earliest)
        fast = await ml.open_cursor("fast", InitialPosition.Earliest)
        positions = await append(ml, 550)
        first_ledgers = sorted({p.ledger_id for p in positions})
        fast.ack_cumulative(positions[-1])
        await fast.flush()
        assert await ml.trim() == []  # the slow cursor still needs everything
        slow.ack_cumulative(positions[349])
        assert await ml.trim() == []  # not persisted yet: a crash would need them again
        await slow.flush()
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
        await cursor.flush()
        assert await ml.trim() == []  # consumed, but within the retention time


async def test_cursor_acks_survive_close_and_reopen_by_another_owner(
    cluster: BookieCluster, metadata_url: str
) -> None:
    async with Owner(metadata_url, SMALL_LEDGERS) as factory:
        ml = await factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", InitialPosition.Earliest)
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
        cursor = await ml.open_cursor("sub", InitialPosition.Earliest)
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


async def test_appends_survive_a_dead_bookie_and_resume_after_losing_too_many(
    cluster: BookieCluster, metadata_url: str
) -> None:
    async with Owner(metadata_url, KEEP_ALL) as factory:
        ml = await factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", InitialPosition.Earliest)
        first = await append(ml, 50)
        ensemble = ml._handle.ensemble  # type: ignore[union-attr]
        cluster.by_address(ensemble[0]).kill()
        second = await append(ml, 50)  # the ledger client replaces the dead bookie
        assert second[0] == first[-1].next()
        survivors = [b for b in cluster.bookies if b.running]
        for bookie in survivors[1:]:
            bookie.kill()  # one writable bookie left: a 2-bookie ensemble is impossible
        with pytest.raises(ManagedLedgerError):
            await ml.add_entry(b"nowhere to go")
        for bookie in cluster.bookies:
            if not bookie.running:
                await bookie.start()
        third = [await ml.add_entry(payload(i)) for i in range(3)]  # a new ledger
        assert third[0].ledger_id > first[0].ledger_id
        read = await ml.read_entries(first[0], 200)
        data = [e.data for e in read]
        assert data[:100] == [payload(i) for i in range(50)] * 2
        assert data[-3:] == [payload(i) for i in range(3)]
        assert cursor.backlog == len(read)


async def test_trim_racing_rollover_does_not_fence_the_owner(
    cluster: BookieCluster, metadata_url: str
) -> None:
    """trim() and _rollover() both CAS the ML node with the same cached version."""
    async with Owner(metadata_url, replace(TINY, max_entries_per_ledger=10)) as factory:
        ml = await factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", InitialPosition.Earliest)
        positions = [await ml.add_entry(b"m%d" % i) for i in range(20)]  # L1 full, L2 full
        cursor.ack_cumulative(positions[9])  # L1 consumed: a trim is due
        real_put = ml.store.put

        async def slow_put(path, data, expected_version=-1, *a, **kw):  # type: ignore[no-untyped-def]
            if path == ml.path:
                await asyncio.sleep(0.3)  # a slow ZooKeeper round trip
            return await real_put(path, data, expected_version, *a, **kw)

        ml.store.put = slow_put  # type: ignore[method-assign]
        try:
            # The 21st add rolls over while the trim's metadata write is in flight.
            await asyncio.gather(ml.trim(), ml.add_entry(b"next"))
        finally:
            ml.store.put = real_put  # type: ignore[method-assign]
        assert not ml.fenced
        await ml.add_entry(b"still the owner")


async def test_old_owner_cursor_cannot_fence_the_new_owner(
    cluster: BookieCluster, metadata_url: str
) -> None:
    async with Owner(metadata_url, TINY) as first:
        ml_a = await first.open(TOPIC)
        cur_a = await ml_a.open_cursor("sub", InitialPosition.Earliest)
        positions = [await ml_a.add_entry(b"m%d" % i) for i in range(6)]
        cur_a.ack([positions[1]])
        await cur_a.flush()
        async with Owner(metadata_url, TINY) as second:
            ml_b = await second.open(TOPIC)  # takes over (fences A's cursor ledger too)
            cur_b = ml_b.cursors["sub"]
            # The old owner still gets an ack in before it notices anything.
            cur_a.ack([positions[3]])
            with contextlib.suppress(ManagedLedgerFencedError):
                await cur_a.flush()  # bug: falls back to the metadata node and succeeds
            cur_b.ack([positions[4]])
            await cur_b.flush()  # bug: the new owner is the one fenced
            assert cur_b.is_acked(positions[1])


async def test_trimming_goes_by_what_cursors_have_persisted(
    cluster: BookieCluster, metadata_url: str
) -> None:
    async with Owner(metadata_url, TINY) as first:
        ml = await first.open(TOPIC)
        cursor = await ml.open_cursor("sub", InitialPosition.Earliest)
        p = [await ml.add_entry(b"m%d" % i) for i in range(7)]  # L1: 0-2, L2: 3-5, L3: 6
        cursor.ack([p[1]])
        await cursor.flush()  # snapshot: mark-delete before L1, hole at p[1]
        cursor.ack([p[0], p[2]])  # L1 consumed, in memory only
        assert await ml.trim() == []  # a crash now would need L1 again
        # A crash: nothing more is persisted, and a new owner takes over.
        async with Owner(metadata_url, TINY) as second:
            ml_b = await second.open(TOPIC)
            cur = ml_b.cursors["sub"]
            assert cur.backlog == 6  # p[0] and p[2] come again, from L1
            delivered = await ml_b.read_entries(cur.read_position, 10)
            assert [e.data for e in delivered][:3] == [b"m0", b"m1", b"m2"]
            cur.ack([p[0], p[2], *p[3:7]])
            assert cur.mark_delete_position == p[6]
            await cur.flush()
            assert p[0].ledger_id in await ml_b.trim()
        for ml_a in list(first.ledgers.values()):
            ml_a.abandon()  # the first owner is gone: it writes nothing on the way out


async def test_acks_during_close_are_refused_and_the_snapshot_stays_whole(
    cluster: BookieCluster, metadata_url: str
) -> None:
    config = replace(
        TINY,
        max_entries_per_ledger=1000,
        cursor=CursorConfig(snapshot_interval_ms=0, max_ranges_in_metadata=2),
    )
    async with Owner(metadata_url, config) as factory:
        ml = await factory.open(TOPIC)
        cursor = await ml.open_cursor("sub", InitialPosition.Earliest)
        p = [await ml.add_entry(b"m%d" % i) for i in range(20)]
        cursor.ack(p[1:12:2])  # 6 holes
        await cursor.flush()
        cursor.ack([p[13]])
        closing = asyncio.ensure_future(cursor.close())
        await asyncio.sleep(0)  # close() is now writing its final snapshot
        with pytest.raises(ManagedLedgerClosedError):
            cursor.ack([p[15]])
        await closing
        # Every write of the node goes through the flush lock: this returns after any
        # snapshot still being written (a closed cursor writes nothing new).
        await cursor.flush()
        found = await ml.store.get(cursor.path)
        assert found is not None
        info = json.loads(found[0])
        assert info["cursor_ledger"] >= 0 and info["ranges"] == [], info  # not the fallback
    async with Owner(metadata_url, config) as factory:
        ml = await factory.open(TOPIC)
        again = ml.cursors["sub"]
        assert again.state.holes.count == 7 and not again.is_acked(p[15])


async def test_appends_are_stored_and_confirmed_in_call_order_across_rollovers(
    cluster: BookieCluster, metadata_url: str
) -> None:
    """Appends that arrive while a ledger rolls over (before, during and as it finishes)
    are stored, and their futures completed, in the order they were made."""
    rng = random.Random(13)
    async with Owner(
        metadata_url, replace(TINY, retention_time_s=-1, retention_size_bytes=-1)
    ) as factory:
        ml = await factory.open(TOPIC)
        appends: list[asyncio.Future[Position]] = []
        completed: list[int] = []

        def start(i: int) -> None:
            future = asyncio.ensure_future(ml.add_entry(payload(i)))
            future.add_done_callback(lambda _, i=i: completed.append(i))
            appends.append(future)

        count = 0
        for _ in range(120):  # bursts of pipelined appends, with new ones at every turn
            for _ in range(rng.randint(1, 8)):
                start(count)
                count += 1
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)
        positions = await asyncio.gather(*appends)
        assert len(set(positions)) == count
        assert positions == sorted(positions), "stored out of call order"
        assert completed == list(range(count)), "confirmed out of call order"
        assert len({p.ledger_id for p in positions}) >= count // 3
        read = await ml.read_entries(positions[0], count)
        assert [e.data for e in read] == [payload(i) for i in range(count)]


async def test_a_failed_seal_is_recovered_so_the_ledger_is_closed_in_bookkeeper(
    cluster: BookieCluster, metadata_url: str, store: MetadataStore
) -> None:
    """When closing the full ledger fails, the rollover seals it by recovery: the ledger
    list and BookKeeper agree it is closed, and a reader gets every entry without waiting."""
    async with Owner(
        metadata_url, replace(TINY, retention_time_s=-1, retention_size_bytes=-1)
    ) as factory:
        ml = await factory.open(TOPIC)
        first = await append(ml, 3)
        handle = ml._handle
        assert handle is not None

        async def failing_close() -> None:
            from stripemq.errors import BookieError

            raise BookieError("injected: the seal did not reach the metadata store")

        handle.close = failing_close  # type: ignore[method-assign]
        later = await append(ml, 3, start=3)  # rolls over past the unsealed ledger
        assert later[0].ledger_id != first[0].ledger_id
        info = ml.chain.get(first[0].ledger_id)
        assert info is not None and info.closed and info.entries == 3
        metadata = await LedgerManager(store).read(first[0].ledger_id)
        assert metadata[0].is_closed and metadata[0].last_entry_id == 2
        cursor = await ml.open_cursor("late", InitialPosition.Earliest)
        read = await asyncio.wait_for(ml.read_entries(cursor.read_position, 10), 10)
        assert [e.data for e in read] == [payload(i) for i in range(6)]


async def test_an_append_made_as_the_rollover_finishes_waits_behind_the_queued_ones(
    cluster: BookieCluster, metadata_url: str
) -> None:
    """The moment the new ledger is in place, appends queued during the rollover are not
    yet in it: one made just then must still go after them."""
    async with Owner(
        metadata_url, replace(TINY, retention_time_s=-1, retention_size_bytes=-1)
    ) as factory:
        ml = await factory.open(TOPIC)
        await append(ml, 3)  # the ledger is full: the next append rolls over
        full = ml.current_ledger_id
        queued = [asyncio.ensure_future(ml.add_entry(payload(i))) for i in range(3, 6)]
        while ml.current_ledger_id == full:
            await asyncio.sleep(0)
        late = asyncio.ensure_future(ml.add_entry(payload(6)))
        positions = await asyncio.gather(*queued, late)
        assert positions == sorted(positions)
