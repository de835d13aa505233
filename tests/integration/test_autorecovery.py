"""Auto-recovery end to end: real ZooKeeper, real bookie and ``stripemq autorecovery`` processes.

Every test kills something with SIGKILL (a bookie, an auditor, a worker holding a lock) and
then checks the outcome on the bookies themselves: each entry is stored, byte-identical, on
the ``Qw`` live bookies its write set names in the updated metadata.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import re
from pathlib import Path

import pytest

from stripemq.bookie.autorecovery import UnderReplicationManager, current_auditor
from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.client import BookKeeper, ClientConfig, LedgerManager, LedgerState
from stripemq.metadata import MetadataStore
from stripemq.proto.entry import HEADER_SIZE, verify_entry
from stripemq.testing import polling
from stripemq.testing.autorecovery import AutoRecoveryProcess
from stripemq.testing.cluster import BookieCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ZK_TIMEOUT_MS = 3000  # bookies and auto-recovery: a SIGKILLed process is noticed this fast
WAIT = 45.0  # deadline for recovery to finish
PROBE_LEDGER = 10**12  # no such ledger: a worker that takes it just drops it from the queue


@pytest.fixture
def recovery_processes(tmp_path: Path, metadata_url: str):  # type: ignore[no-untyped-def]
    started: list[AutoRecoveryProcess] = []

    def factory(**settings: object) -> AutoRecoveryProcess:
        defaults: dict[str, object] = {
            "zk_timeout_ms": ZK_TIMEOUT_MS,
            "open_ledger_rereplication_grace_period_s": 3.0,
            "replication_retry_backoff_s": 0.2,
            "replication_retry_backoff_max_s": 2.0,
            "underreplication_poll_interval_s": 5.0,
            "add_entry_timeout_s": 5.0,
            "read_entry_timeout_s": 5.0,
        }
        proc = AutoRecoveryProcess(
            metadata_url, tmp_path / "autorecovery", settings={**defaults, **settings}
        )
        started.append(proc)
        return proc

    yield factory
    for proc in started:
        proc.kill()


def bookie_cluster(metadata_url: str, base: Path, count: int, **settings: object) -> BookieCluster:
    return BookieCluster(
        metadata_url, base, count, settings={"zk_timeout_ms": ZK_TIMEOUT_MS, **settings}
    )


# Recovery takes a while: every wait here gets the long deadline unless it says otherwise.
until = functools.partial(polling.until, timeout=WAIT)


def payload(rng: random.Random, ledger: int, entry: int) -> bytes:
    return f"{ledger}:{entry}:".encode() + rng.randbytes(rng.randrange(10, 3000))


async def write_ledger(
    bk: BookKeeper,
    rng: random.Random,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    entries: int,
    *,
    close: bool = True,
) -> tuple[int, list[bytes], tuple[str, ...]]:
    """A ledger with ``entries`` entries; its id, payloads and first ensemble."""
    handle = await bk.create_ledger(ensemble, write_quorum, ack_quorum, password=b"secret")
    data = [payload(rng, handle.ledger_id, e) for e in range(entries)]
    await asyncio.gather(*(handle.add_entry_async(d) for d in data))
    if close:
        await handle.close()
    return handle.ledger_id, data, handle.metadata.ensembles[0]


async def verify_replicas(
    store: MetadataStore, written: dict[int, list[bytes]], dead: set[str], live: set[str]
) -> None:
    """Every entry on exactly the Qw live bookies of its write set, byte-identical."""
    lm = LedgerManager(store)
    clients = {b: BookieClient(b, timeout=5.0) for b in live}
    for client in clients.values():
        await client.connect()
    try:
        for ledger_id, data in written.items():
            metadata, _ = await lm.read(ledger_id)
            assert metadata.state is LedgerState.CLOSED, f"ledger {ledger_id} not closed"
            assert metadata.last_entry_id == len(data) - 1, f"ledger {ledger_id} lost entries"
            assert not metadata.bookies() & dead, f"ledger {ledger_id} still names {dead}"
            for entry_id, expected in enumerate(data):
                write_set = metadata.write_set_bookies(entry_id)
                assert len(set(write_set)) == metadata.write_quorum_size
                assert set(write_set) <= live
                copies = [
                    (await clients[b].read_entry(ledger_id, entry_id)).entry for b in write_set
                ]
                for raw in copies:
                    header = verify_entry(raw)
                    assert (header.ledger_id, header.entry_id) == (ledger_id, entry_id)
                    assert raw[HEADER_SIZE:] == expected
                assert len(set(copies)) == 1, f"{ledger_id}:{entry_id} differs between replicas"
    finally:
        for client in clients.values():
            await client.close()


async def recovered(
    store: MetadataStore, ledger_ids: list[int], dead: str, queue: UnderReplicationManager
) -> bool:
    """No ledger names ``dead`` any more and the queue is empty and unlocked."""
    lm = LedgerManager(store)
    for ledger_id in ledger_ids:
        metadata, _ = await lm.read(ledger_id)
        if dead in metadata.bookies():
            return False
    return await queue.ledger_ids() == [] and await queue.locked() == set()


async def test_lost_bookie_is_re_replicated_to_write_quorum(
    tmp_path: Path, metadata_url: str, store: MetadataStore, recovery_processes
) -> None:  # type: ignore[no-untyped-def]
    """A bookie dies for good: auto-recovery restores Qw replicas of every entry (checked on
    the surviving bookies' stores), although one auto-recovery process dies on the way."""
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    async with bookie_cluster(metadata_url, tmp_path / "bookies", 5) as cluster:
        bk = BookKeeper(store)
        writer_bk = BookKeeper(store, ClientConfig(explicit_lac_interval_ms=0))
        await bk.start()
        await writer_bk.start()
        written: dict[int, list[bytes]] = {}
        try:
            # An open ledger whose writer goes away: recovery must close it first.
            open_id, open_data, open_ensemble = await write_ledger(
                writer_bk, rng, 3, 2, 2, 40, close=False
            )
            written[open_id] = open_data
            victim = open_ensemble[1]
            # Closed ledgers of several shapes, until a few of them use the victim.
            shapes = [(3, 2, 2, 60), (3, 3, 2, 30), (4, 3, 2, 45), (4, 2, 1, 50), (3, 2, 2, 0)]
            on_victim = 0
            for attempt in range(30):
                e, qw, qa, n = shapes[attempt % len(shapes)]
                ledger_id, data, ensemble = await write_ledger(bk, rng, e, qw, qa, n)
                written[ledger_id] = data
                on_victim += victim in ensemble
                if attempt >= len(shapes) - 1 and on_victim >= 3:
                    break
            # A ledger whose writer replaces the victim itself (two fragments).
            handle = await bk.create_ledger(3, 2, 2, password=b"secret")
            while victim not in handle.ensemble:
                await handle.close()
                written[handle.ledger_id] = []
                handle = await bk.create_ledger(3, 2, 2, password=b"secret")
            multi = [payload(rng, handle.ledger_id, e) for e in range(40)]
            written[handle.ledger_id] = multi
            for entry in multi[:20]:
                await handle.add_entry(entry)
            await writer_bk.close()  # the open ledger's writer is gone

            first = recovery_processes()
            second = recovery_processes()
            await first.start()
            await second.start()
            assert await current_auditor(store) == first.instance_id

            cluster.by_address(victim).kill()
            for entry in multi[20:]:
                await handle.add_entry(entry)  # ensemble change away from the victim
            await handle.close()
            assert len(handle.metadata.ensembles) == 2

            queue = UnderReplicationManager(store)
            await until(lambda: _queued(queue), "the auditor marks ledgers", logs=first.tail_log())
            first.kill()  # the auditor (and its worker, maybe holding a lock) dies too
            live = {b.address for b in cluster.bookies} - {victim}
            await until(
                lambda: recovered(store, list(written), victim, queue),
                "every ledger is re-replicated",
                logs=second.tail_log(),
            )
            await verify_replicas(store, written, {victim}, live)
            # The dead auditor's node goes when its session expires; the survivor takes over.
            await until(
                lambda: _auditor_is(store, second.instance_id),
                "the surviving process becomes the auditor",
                logs=second.tail_log(),
            )
            assert second.running
        finally:
            await bk.close()
            await writer_bk.close()


async def test_auditor_reelected_after_sigkill_catches_missed_loss(
    tmp_path: Path, metadata_url: str, store: MetadataStore, recovery_processes
) -> None:  # type: ignore[no-untyped-def]
    """The auditor dies together with a bookie: the next candidate is elected when the dead
    auditor's session expires, and its first check finds the bookie that was lost meanwhile."""
    rng = random.Random(7)
    async with bookie_cluster(metadata_url, tmp_path / "bookies", 3) as cluster:
        bk = BookKeeper(store)
        await bk.start()
        try:
            ledger_id, _, ensemble = await write_ledger(bk, rng, 2, 2, 2, 10)
            other_id, _, other_ensemble = await write_ledger(bk, rng, 2, 2, 2, 10)
        finally:
            await bk.close()
        # Workers off: the queue is what this test looks at.
        auditor = recovery_processes(replication_workers=0)
        candidate = recovery_processes(replication_workers=0)
        await auditor.start()
        await candidate.start()
        assert await current_auditor(store) == auditor.instance_id

        victim = ensemble[0]
        auditor.kill()
        cluster.by_address(victim).kill()
        await until(
            lambda: _auditor_is(store, candidate.instance_id),
            "the candidate is elected",
            logs=candidate.tail_log(),
        )
        queue = UnderReplicationManager(store)
        await until(
            lambda: queue.is_under_replicated(ledger_id),
            "the new auditor marks the ledger",
            logs=candidate.tail_log(),
        )
        record = await queue.get(ledger_id)
        assert record is not None and record.lost_bookies == {victim}
        expected = {ledger_id} | ({other_id} if victim in other_ensemble else set())
        # The audit that marked it checked every ledger: once it has finished, nothing more
        # is marked for this loss.
        await until(
            lambda: _audit_marked(candidate),
            "the marking audit finishes",
            logs=candidate.tail_log(),
        )
        assert set(await queue.ledger_ids()) == expected


async def test_worker_killed_holding_a_lock(
    tmp_path: Path, metadata_url: str, store: MetadataStore, recovery_processes
) -> None:  # type: ignore[no-untyped-def]
    """A worker dies while it holds a ledger's lock: the lock goes with its session and
    another worker re-replicates the ledger."""
    rng = random.Random(11)
    async with bookie_cluster(metadata_url, tmp_path / "bookies", 4) as cluster:
        writer = BookKeeper(store, ClientConfig(explicit_lac_interval_ms=0))
        await writer.start()
        try:
            ledger_id, data, ensemble = await write_ledger(writer, rng, 3, 2, 2, 30, close=False)
        finally:
            await writer.close()  # the writer is gone; the ledger stays open
        # The first worker waits long for the (gone) writer, holding the lock meanwhile.
        stuck = recovery_processes(
            open_ledger_rereplication_grace_period_s=600, replication_workers=1
        )
        await stuck.start()
        victim = ensemble[0]
        cluster.by_address(victim).kill()
        queue = UnderReplicationManager(store)
        await until(
            lambda: _locked_by(queue, ledger_id, stuck.instance_id),
            "the first worker locks the ledger",
            logs=stuck.tail_log(),
        )
        rescuer = recovery_processes(open_ledger_rereplication_grace_period_s=0.5)
        await rescuer.start()
        # A probe only the rescuer's worker is free to take (the stuck one's only worker is
        # busy): once it leaves the queue, the rescuer has been through the queue, the
        # locked ledger in it, and left that ledger alone.
        await queue.mark_under_replicated(PROBE_LEDGER, [victim])
        await until(
            lambda: _unqueued(queue, PROBE_LEDGER),
            "the rescuer takes the probe",
            logs=rescuer.tail_log(),
        )
        assert await queue.lock_owner(ledger_id) == stuck.instance_id
        stuck.kill()
        await until(
            lambda: recovered(store, [ledger_id], victim, queue),
            "the other worker re-replicates the ledger",
            logs=rescuer.tail_log(),
        )
        live = {b.address for b in cluster.bookies} - {victim}
        await verify_replicas(store, {ledger_id: data}, {victim}, live)


async def test_autorecovery_inside_bookies(
    tmp_path: Path, metadata_url: str, store: MetadataStore
) -> None:
    """``autorecovery_enabled`` bookies: killing the bookie that is also the auditor loses a
    bookie and the auditor at once; the other bookies re-elect and re-replicate."""
    rng = random.Random(13)
    settings = {"autorecovery_enabled": "true"}
    async with bookie_cluster(metadata_url, tmp_path / "bookies", 4, **settings) as cluster:
        await until(lambda: _auditor_known(store), "a bookie becomes the auditor", timeout=20)
        auditor = await current_auditor(store)
        assert auditor in {b.address for b in cluster.bookies}
        bk = BookKeeper(store)
        await bk.start()
        written: dict[int, list[bytes]] = {}
        try:
            for _ in range(10):
                ledger_id, data, ensemble = await write_ledger(bk, rng, 3, 2, 2, 25)
                written[ledger_id] = data
                if auditor in ensemble and len(written) >= 2:
                    break
        finally:
            await bk.close()
        cluster.by_address(auditor).kill()
        queue = UnderReplicationManager(store)
        await until(
            lambda: recovered(store, list(written), auditor, queue),
            "the surviving bookies re-replicate",
            logs="\n".join(b.tail_log() for b in cluster.bookies if b.address != auditor),
        )
        assert await current_auditor(store) not in (None, auditor)
        live = {b.address for b in cluster.bookies} - {auditor}
        await verify_replicas(store, written, {auditor}, live)


async def _queued(queue: UnderReplicationManager) -> bool:
    return bool(await queue.ledger_ids())


async def _unqueued(queue: UnderReplicationManager, ledger_id: int) -> bool:
    return not await queue.is_under_replicated(ledger_id)


def _audit_marked(proc: AutoRecoveryProcess) -> bool:
    """Whether an audit by ``proc`` has finished having marked a ledger (its log says so)."""
    pattern = rf"audit by {re.escape(proc.instance_id)}: [1-9]\d* ledgers newly marked"
    return re.search(pattern, proc.log_path.read_text(errors="replace")) is not None


async def _auditor_is(store: MetadataStore, instance_id: str) -> bool:
    return await current_auditor(store) == instance_id


async def _auditor_known(store: MetadataStore) -> bool:
    return await current_auditor(store) is not None


async def _locked_by(queue: UnderReplicationManager, ledger_id: int, owner: str) -> bool:
    return await queue.lock_owner(ledger_id) == owner
