"""The auto-recovery queue (UnderReplicationManager) on memory:// and on a real ZooKeeper."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from stripemq.bookie.autorecovery.underreplication import (
    DISABLE_PATH,
    UR_LEDGERS,
    UR_LOCKS,
    UnderReplicationManager,
    lock_path,
    ur_ledger_path,
)
from stripemq.metadata import MetadataStore
from stripemq.testing.polling import until

pytestmark = pytest.mark.timeout(60)

StoreFactory = Callable[[], Awaitable[MetadataStore]]


class ReadSpy:
    """Counts the reads a store has answered, by method and path: a worker that has read
    what it decides by, and found nothing to take, is then waiting."""

    def __init__(self, store: MetadataStore) -> None:
        self.answered: Counter[tuple[str, str]] = Counter()
        for name in ("children", "exists"):
            setattr(store, name, self._counting(name, getattr(store, name)))

    def _counting(self, name: str, read: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def counted(path: str, *args: Any, **kwargs: Any) -> Any:
            result = await read(path, *args, **kwargs)
            self.answered[(name, path)] += 1
            return result

        return counted

    def has_read(self, name: str, path: str) -> bool:
        return self.answered[(name, path)] > 0


def test_paths_are_hierarchical() -> None:
    assert ur_ledger_path(123) == (
        "/ledgers/underreplication/ledgers/000/0000/0000/0000/urL0000000000000000123"
    )
    assert ur_ledger_path(12_3456_7890_1234_5678) == (
        "/ledgers/underreplication/ledgers/012/3456/7890/1234/urL0123456789012345678"
    )
    assert lock_path(7) == "/ledgers/underreplication/locks/urL0000000000000000007"
    with pytest.raises(ValueError):
        ur_ledger_path(-1)


async def test_mark_merges_and_lists(new_store: StoreFactory) -> None:
    urm = UnderReplicationManager(await new_store())
    assert await urm.mark_under_replicated(5, ["b1:1"])
    first = await urm.get(5)
    assert first is not None and first.lost_bookies == {"b1:1"}
    # Marking with what is already recorded writes nothing (the version stays).
    assert not await urm.mark_under_replicated(5, ["b1:1"])
    same = await urm.get(5)
    assert same is not None and same.version == first.version
    assert await urm.mark_under_replicated(5, ["b2:2"])
    merged = await urm.get(5)
    assert merged is not None
    assert merged.lost_bookies == {"b1:1", "b2:2"}
    assert merged.ctime_ms == first.ctime_ms and merged.version > first.version

    await urm.mark_under_replicated(10**12 + 3, ["b1:1"])
    await urm.mark_under_replicated(12345, ["b3:3"])
    assert await urm.ledger_ids() == [5, 12345, 10**12 + 3]
    assert [r.ledger_id for r in await urm.list()] == [5, 12345, 10**12 + 3]
    assert await urm.is_under_replicated(12345)
    assert not await urm.is_under_replicated(6)


async def test_lock_is_exclusive_and_ephemeral(new_store: StoreFactory) -> None:
    one_store = await new_store()
    one = UnderReplicationManager(one_store, owner="one")
    two_store = await new_store()
    two = UnderReplicationManager(two_store, owner="two")
    await one.mark_under_replicated(1, ["gone:1"])

    record = await one.try_acquire()
    assert record is not None and record.ledger_id == 1
    assert await one.lock_owner(1) == "one"
    assert await two.try_acquire() is None  # the only ledger is locked

    # Someone else's lock is not ours to release.
    await two.release(1)
    assert await two.locked() == {1}

    # The lock goes with its holder's session; the other worker then gets the ledger.
    reads = ReadSpy(two_store)
    waiting = asyncio.create_task(two.acquire(poll_interval=60))
    await until(lambda: reads.has_read("children", UR_LOCKS), "the worker sees the lock")
    assert not waiting.done()
    await one_store.close()
    taken = await asyncio.wait_for(waiting, 15)
    assert taken.ledger_id == 1
    assert await two.lock_owner(1) == "two"
    two.close()


async def test_mark_replicated_is_conditional_on_version(new_store: StoreFactory) -> None:
    store = await new_store()
    worker = UnderReplicationManager(store, owner="worker")
    auditor = UnderReplicationManager(await new_store(), owner="auditor")
    await auditor.mark_under_replicated(42, ["a:1"])

    record = await worker.try_acquire()
    assert record is not None
    await auditor.mark_under_replicated(42, ["b:2"])  # re-marked while being worked on
    assert not await worker.mark_replicated(record)
    assert await worker.is_under_replicated(42), "a re-mark must not be lost"
    assert await worker.locked() == set(), "the lock is released either way"

    again = await worker.try_acquire()
    assert again is not None and again.lost_bookies == {"a:1", "b:2"}
    assert await worker.mark_replicated(again)
    assert await worker.ledger_ids() == []
    assert await worker.locked() == set()
    # The emptied hierarchy levels are pruned.
    assert await store.children(UR_LEDGERS) == []


async def test_acquire_waits_for_work_on_watches(new_store: StoreFactory) -> None:
    worker_store = await new_store()
    worker = UnderReplicationManager(worker_store, owner="worker")
    auditor = UnderReplicationManager(await new_store(), owner="auditor")
    # A long poll interval: only a watch can wake the worker in time.
    reads = ReadSpy(worker_store)
    waiting = asyncio.create_task(worker.acquire(poll_interval=600))
    await until(lambda: reads.has_read("children", UR_LEDGERS), "the worker sees the queue")
    assert not waiting.done()
    await auditor.mark_under_replicated(77, ["x:1"])
    record = await asyncio.wait_for(waiting, 10)
    assert record.ledger_id == 77

    # Wakes too when a lock it was blocked on is released.
    other_store = await new_store()
    other = UnderReplicationManager(other_store, owner="other")
    reads = ReadSpy(other_store)
    waiting = asyncio.create_task(other.acquire(poll_interval=600))
    await until(lambda: reads.has_read("children", UR_LOCKS), "the worker sees the lock")
    assert not waiting.done()
    await worker.release(77)
    record = await asyncio.wait_for(waiting, 10)
    assert record.ledger_id == 77
    worker.close()
    other.close()


async def test_disable_stops_workers_until_enabled(new_store: StoreFactory) -> None:
    store = await new_store()
    admin = UnderReplicationManager(store)
    worker_store = await new_store()
    worker = UnderReplicationManager(worker_store, owner="worker")
    await admin.disable()
    await admin.disable()  # idempotent
    assert not await worker.is_enabled()
    assert await store.exists(DISABLE_PATH) is not None
    await admin.mark_under_replicated(9, ["x:1"])
    assert await worker.try_acquire() is None

    reads = ReadSpy(worker_store)
    waiting = asyncio.create_task(worker.acquire(poll_interval=600))
    await until(lambda: reads.has_read("exists", DISABLE_PATH), "the worker sees it disabled")
    assert not waiting.done()
    await admin.enable()
    record = await asyncio.wait_for(waiting, 10)
    assert record.ledger_id == 9
    await admin.enable()  # idempotent
    worker.close()


async def test_workers_share_the_queue(new_store: StoreFactory) -> None:
    """Concurrent acquirers never get the same ledger; each gets one."""
    marker = UnderReplicationManager(await new_store())
    for ledger_id in range(6):
        await marker.mark_under_replicated(ledger_id, ["gone:1"])
    workers = [UnderReplicationManager(await new_store(), owner=f"w{i}") for i in range(3)]
    records = await asyncio.gather(*(w.acquire(poll_interval=600) for w in workers))
    ids = [r.ledger_id for r in records]
    assert len(set(ids)) == 3
    for worker, record in zip(workers, records, strict=True):
        assert await worker.lock_owner(record.ledger_id) == worker.owner
        assert await worker.mark_replicated(record)
    assert sorted(await marker.ledger_ids()) == sorted(set(range(6)) - set(ids))
    await until(lambda: _no_locks(marker))
    for worker in workers:
        worker.close()


async def _no_locks(urm: UnderReplicationManager) -> bool:
    return await urm.locked() == set()
