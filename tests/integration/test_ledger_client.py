"""The ledger client against real ZooKeeper and real bookie processes.

Replication, striping, ensemble change, fencing and recovery are checked the hard way:
bookies are SIGKILLed or stopped mid-stream and every bookie's own store is read back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.client import BookKeeper, ClientConfig, LedgerHandle, LedgerState
from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.bookie.client.reader import ReplicaReader
from stripemq.errors import (
    ClientClosedError,
    DigestMismatchError,
    IllegalOpError,
    LedgerClosedError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadError,
    UnauthorizedAccessError,
)
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.proto.entry import HEADER_SIZE
from stripemq.testing.cluster import BookieCluster

pytestmark = pytest.mark.integration

FAST = ClientConfig(add_entry_timeout_s=5.0, read_entry_timeout_s=5.0, explicit_lac_interval_ms=100)


def payload(i: int) -> bytes:
    return f"entry-{i:06d}-".encode() * 3


@pytest.fixture
async def bk(store: MetadataStore) -> AsyncIterator[BookKeeper]:
    client = BookKeeper(store, FAST)
    await client.start()
    yield client
    await client.close()


async def cluster_of(url: str, tmp_path: Path, count: int, **kw: object) -> BookieCluster:
    cluster = BookieCluster(url, tmp_path / "bookies", count, **kw)  # type: ignore[arg-type]
    await cluster.__aenter__()
    return cluster


async def holdings(address: str, ledger_id: int, entry_ids: range) -> dict[int, bytes]:
    """What one bookie's own store holds of the ledger, entry by entry."""
    client = BookieClient(address, timeout=5.0)
    await client.connect()
    found: dict[int, bytes] = {}
    window = asyncio.Semaphore(64)

    async def probe(entry_id: int) -> None:
        async with window:
            try:
                found[entry_id] = (await client.read_entry(ledger_id, entry_id)).entry
            except (NoSuchEntryError, NoSuchLedgerError):
                pass

    try:
        await asyncio.gather(*(probe(e) for e in entry_ids))
    finally:
        await client.close()
    return found


async def test_each_entry_sits_on_exactly_its_write_set(
    metadata_url: str, bk: BookKeeper, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 4)
    try:
        handle = await bk.create_ledger(3, 2, 2, custom_metadata={"purpose": "striping"})
        ids = await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(300)))
        assert ids == list(range(300))
        await handle.close()

        metadata, _ = await bk.ledger_manager.read(handle.ledger_id)
        assert metadata.state is LedgerState.CLOSED and metadata.last_entry_id == 299
        assert metadata.length == sum(len(payload(i)) for i in range(300))
        assert metadata.custom_metadata == {"purpose": "striping"}
        ensemble = metadata.ensembles[0]
        for bookie in cluster.bookies:
            held = await holdings(bookie.address, handle.ledger_id, range(300))
            expected = {e for e in range(300) if bookie.address in metadata.write_set_bookies(e)}
            assert set(held) == expected, bookie.address
            for entry_id, raw in held.items():
                assert raw[HEADER_SIZE:] == payload(entry_id)
        assert sum(1 for b in cluster.bookies if b.address not in ensemble) == 1

        reader = await bk.open_ledger(handle.ledger_id)
        entries = await reader.read_entries(0, 299)
        assert [e.data for e in entries] == [payload(i) for i in range(300)]
    finally:
        cluster.kill_all()


async def test_range_reads_go_out_as_batches_and_survive_a_dead_bookie(
    metadata_url: str, bk: BookKeeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 3)
    try:
        handle = await bk.create_ledger(3, 2, 2)
        await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(600)))
        await handle.close()
        singles: list[int] = []
        real_read_raw = ReplicaReader.read_raw

        async def counted(self: ReplicaReader, metadata: object, entry_id: int) -> bytes:
            singles.append(entry_id)
            return await real_read_raw(self, metadata, entry_id)  # type: ignore[arg-type]

        monkeypatch.setattr(ReplicaReader, "read_raw", counted)
        reader = await bk.open_ledger(handle.ledger_id)
        entries = await reader.read_entries(0, 599)
        assert [e.data for e in entries] == [payload(i) for i in range(600)]
        assert singles == []  # every entry came in a batch, spread over the ensemble

        # With one bookie dead, its share is read one by one from the other replica.
        cluster.by_address(handle.metadata.ensembles[0][0]).kill()
        entries = await reader.read_entries(0, 599)
        assert [e.data for e in entries] == [payload(i) for i in range(600)]
        assert singles
    finally:
        cluster.kill_all()


async def test_a_hung_bookie_is_asked_last_after_one_failed_batch(
    metadata_url: str, bk: BookKeeper, store: MetadataStore, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 3)
    hung = None
    try:
        handle = await bk.create_ledger(3, 2, 2)
        await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(300)))
        await handle.close()
        hung = cluster.by_address(handle.metadata.ensembles[0][0])
        assert hung.proc is not None
        os.kill(hung.proc.pid, signal.SIGSTOP)
        reader_bk = BookKeeper(store, FAST)
        await reader_bk.start()
        try:
            reader = await reader_bk.open_ledger(handle.ledger_id)
            assert [e.data for e in await reader.read_entries(0, 299)] == [
                payload(i) for i in range(300)
            ]
            assert reader_bk.health.failed_recently(hung.address)
            asked: list[str] = []
            real = BookieClient.read_entries

            async def spy(self: BookieClient, *args: object, **kw: object) -> object:
                asked.append(self.address)
                return await real(self, *args, **kw)  # type: ignore[arg-type]

            BookieClient.read_entries = spy  # type: ignore[method-assign]
            try:
                assert len(await reader.read_entries(0, 299)) == 300
            finally:
                BookieClient.read_entries = real  # type: ignore[method-assign]
            assert asked and hung.address not in asked
        finally:
            await reader_bk.close()
    finally:
        if hung is not None and hung.proc is not None:
            os.kill(hung.proc.pid, signal.SIGCONT)
        cluster.kill_all()


# Enough adds that the kill lands with a full window of 500 in flight, well before the end.
MID_STREAM_ADDS = 4_000


@pytest.mark.parametrize("binary_adds", [True, False], ids=["binary-adds", "grpc-adds"])
async def test_sigkill_mid_stream_changes_ensemble_and_loses_nothing(
    metadata_url: str, store: MetadataStore, tmp_path: Path, binary_adds: bool
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 4)
    bk = BookKeeper(store, dataclasses.replace(FAST, use_v2_wire_protocol=binary_adds))
    await bk.start()
    try:
        handle = await bk.create_ledger(3, 2, 2)
        victim = cluster.by_address(handle.ensemble[1])
        acked: list[int] = []
        futures: list[asyncio.Future[int]] = []
        window: set[asyncio.Future[int]] = set()
        for i in range(MID_STREAM_ADDS):
            if i == MID_STREAM_ADDS // 3:
                victim.kill()
            future = handle.add_entry_async(payload(i))
            future.add_done_callback(lambda f: acked.append(f.result()))
            futures.append(future)
            window.add(future)
            if len(window) >= 500:
                _, window = await asyncio.wait(window, return_when=asyncio.FIRST_COMPLETED)
        # Over every future, not just the window: asyncio.wait may count a future done whose
        # callbacks are still queued, and gather's own callbacks run after those.
        assert await asyncio.gather(*futures) == list(range(MID_STREAM_ADDS))
        assert acked == list(range(MID_STREAM_ADDS))  # every add completed, in entry order
        assert victim.address not in handle.ensemble
        assert len(handle.metadata.ensembles) >= 2
        await handle.close()

        reader = await bk.open_ledger(handle.ledger_id)
        assert reader.last_add_confirmed == MID_STREAM_ADDS - 1
        entries = await reader.read_entries(0, MID_STREAM_ADDS - 1)
        assert [e.entry_id for e in entries] == list(range(MID_STREAM_ADDS))
        assert all(e.data == payload(e.entry_id) for e in entries)
        # Entries after the change are on the new ensemble only, on exactly their write sets.
        metadata = reader.metadata
        start = max(metadata.ensembles)
        for address in metadata.ensembles[start]:
            held = await holdings(address, handle.ledger_id, range(start, MID_STREAM_ADDS))
            on_it = {
                e for e in range(start, MID_STREAM_ADDS) if address in metadata.write_set_bookies(e)
            }
            assert on_it <= set(held)
    finally:
        await bk.close()
        cluster.kill_all()


async def test_recovery_fences_a_live_writer(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 3)
    writer_bk = BookKeeper(store, FAST)
    await writer_bk.start()
    other_store = create_metadata_store(metadata_url)
    await other_store.start()
    recovering_bk = BookKeeper(other_store, FAST)
    await recovering_bk.start()
    try:
        handle = await writer_bk.create_ledger(3, 2, 2)
        acked: list[int] = []
        failures: list[BaseException] = []
        stop = asyncio.Event()

        async def keep_adding() -> None:
            i = 0
            window: set[asyncio.Future[int]] = set()
            while not stop.is_set():
                try:
                    future = handle.add_entry_async(payload(i))
                except (LedgerFencedError, LedgerClosedError) as exc:
                    failures.append(exc)
                    break
                i += 1
                window.add(future)
                if len(window) >= 50:
                    done, window = await asyncio.wait(window, return_when=asyncio.FIRST_COMPLETED)
                    for f in done:
                        if f.exception() is None:
                            acked.append(f.result())
                        else:
                            failures.append(f.exception())  # type: ignore[arg-type]
            for f in asyncio.as_completed(window):
                try:
                    acked.append(await f)
                except LedgerFencedError as exc:
                    failures.append(exc)

        adder = asyncio.create_task(keep_adding())
        while len(acked) < 500:
            await asyncio.sleep(0.01)
        recovered = await recovering_bk.open_ledger(handle.ledger_id)
        seen_at_recovery = max(acked)
        await asyncio.wait_for(adder, 30)
        stop.set()

        assert failures and all(isinstance(f, LedgerFencedError) for f in failures)
        with pytest.raises((LedgerFencedError, LedgerClosedError)):
            await handle.add_entry(b"after the fence")
        assert recovered.metadata.state is LedgerState.CLOSED
        last = recovered.last_add_confirmed
        assert last >= max(acked) >= seen_at_recovery
        assert sorted(acked) == list(range(len(acked)))  # acked entries form a prefix

        third = BookKeeper(store, FAST)
        await third.start()
        reader = await third.open_ledger(handle.ledger_id, recovery=False)
        assert reader.last_add_confirmed == last
        entries = await reader.read_entries(0, last)
        assert all(e.data == payload(e.entry_id) for e in entries)
        assert reader.length == entries[-1].ledger_length == sum(len(e.data) for e in entries)
        await third.close()
        await handle.close()  # fenced: a no-op, the recovering client sealed it
    finally:
        await writer_bk.close()
        await recovering_bk.close()
        await other_store.close()
        cluster.kill_all()


async def test_concurrent_recoveries_agree(
    metadata_url: str, bk: BookKeeper, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 3)
    clients: list[tuple[MetadataStore, BookKeeper]] = []
    try:
        handle = await bk.create_ledger(3, 3, 2)
        # Leave entries in flight as a crashed writer would: the last adds have reached some
        # bookies but nobody knows whether they were confirmed.
        await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(200)))
        for i in range(200, 260):
            handle.add_entry_async(payload(i)).add_done_callback(lambda f: f.exception())
        for _ in range(4):
            s = create_metadata_store(metadata_url)
            await s.start()
            other = BookKeeper(s, FAST)
            await other.start()
            clients.append((s, other))
        results = await asyncio.gather(
            *(c.open_ledger(handle.ledger_id) for _, c in clients), return_exceptions=True
        )
        handles = [r for r in results if not isinstance(r, BaseException)]
        assert handles, results
        lasts = {h.last_add_confirmed for h in handles}
        metadata, _ = await bk.ledger_manager.read(handle.ledger_id)
        assert lasts == {metadata.last_entry_id}
        assert metadata.last_entry_id >= 199
        entries = await handles[0].read_entries(0, metadata.last_entry_id)
        assert [e.data for e in entries] == [payload(i) for i in range(len(entries))]
    finally:
        for s, other in clients:
            await other.close()
            await s.close()
        cluster.kill_all()


async def test_reader_skips_a_corrupted_replica(
    metadata_url: str, bk: BookKeeper, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 3)
    try:
        handle = await bk.create_ledger(3, 3, 3)
        marker = b"CORRUPT-ME-" * 20
        await handle.add_entry(payload(0))
        await handle.add_entry(marker)
        await handle.add_entry(payload(2))
        await handle.close()

        # Flip one byte of entry 1 inside the first bookie of its write set, on its disk.
        first = cluster.by_address(handle.metadata.write_set_bookies(1)[0])
        assert first.terminate() == 0  # a clean stop checkpoints the entry into an entry log
        corrupted = 0
        for path in first.data_dir.rglob("*.log"):
            data = bytearray(path.read_bytes())
            at = data.find(marker)
            if at >= 0:
                data[at + 5] ^= 0xFF
                path.write_bytes(bytes(data))
                corrupted += 1
        assert corrupted == 1
        await first.start()
        direct = BookieClient(first.address)
        await direct.connect()
        with pytest.raises(DigestMismatchError):
            await direct.read_entry(handle.ledger_id, 1)
        await direct.close()

        reader = await bk.open_ledger(handle.ledger_id)
        assert (await reader.read_entry(1)).data == marker
        assert [e.data for e in await reader.read_entries(0, 2)] == [payload(0), marker, payload(2)]
    finally:
        cluster.kill_all()


async def test_a_stopped_bookie_times_out_and_is_replaced(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 4)
    config = ClientConfig(
        add_entry_timeout_s=2.0, read_entry_timeout_s=2.0, speculative_read_timeout_ms=300
    )
    client = BookKeeper(store, config)
    await client.start()
    stopped = None
    try:
        handle = await client.create_ledger(3, 2, 2)
        await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(100)))
        stopped = cluster.by_address(handle.ensemble[2])
        assert stopped.proc is not None
        os.kill(stopped.proc.pid, signal.SIGSTOP)
        ids = await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(100, 300)))
        assert ids == list(range(100, 300))
        assert stopped.address not in handle.ensemble
        await handle.close()
        # The writer's client remembers the failure and reads from the others first.
        reader = await client.open_ledger(handle.ledger_id)
        assert [e.data for e in await reader.read_entries(0, 299)] == [
            payload(i) for i in range(300)
        ]
        # A fresh client does not know: its reads of entries whose first replica is the
        # stopped bookie are answered by a speculative read to the next replica, long before
        # the stopped bookie's read deadline.
        fresh = BookKeeper(
            store, ClientConfig(read_entry_timeout_s=120.0, speculative_read_timeout_ms=200)
        )
        await fresh.start()
        try:
            fresh_reader = await fresh.open_ledger(handle.ledger_id)
            first_on_stopped = [
                e
                for e in range(100)
                if fresh_reader.metadata.write_set_bookies(e)[0] == stopped.address
            ]
            assert first_on_stopped
            for entry_id in first_on_stopped[:5]:
                entry = await asyncio.wait_for(fresh_reader.read_entry(entry_id), 60)
                assert entry.data == payload(entry_id)
        finally:
            await fresh.close()
    finally:
        if stopped is not None and stopped.proc is not None:
            os.kill(stopped.proc.pid, signal.SIGCONT)
        await client.close()
        cluster.kill_all()


async def test_a_bookie_restarting_mid_write_loses_nothing(
    metadata_url: str, bk: BookKeeper, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 3)
    try:
        handle = await bk.create_ledger(3, 2, 2)
        await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(200)))
        bouncing = cluster.by_address(handle.ensemble[0])
        bouncing.kill()
        restart = asyncio.create_task(bouncing.start())
        # With only three bookies there is no replacement until it is back: the adds wait
        # in the ensemble change, or fail with NotEnoughBookies; never silently.
        outcome = await asyncio.gather(
            *(handle.add_entry_async(payload(i)) for i in range(200, 400)), return_exceptions=True
        )
        await restart
        confirmed = [r for r in outcome if isinstance(r, int)]
        errors = [r for r in outcome if isinstance(r, BaseException)]
        assert all(isinstance(e, NotEnoughBookiesError) for e in errors), errors
        assert confirmed == list(range(200, 200 + len(confirmed)))
        last = handle.last_add_confirmed
        await handle.close()
        reader = await bk.open_ledger(handle.ledger_id)
        assert reader.last_add_confirmed == last
        assert [e.data for e in await reader.read_entries(0, last)] == [
            payload(i) for i in range(last + 1)
        ]
    finally:
        cluster.kill_all()


async def test_tailing_reader_follows_the_writer(
    metadata_url: str, bk: BookKeeper, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 3)
    try:
        handle = await bk.create_ledger(3, 2, 2)
        for i in range(10):
            await handle.add_entry(payload(i))
        tail = await bk.open_ledger(handle.ledger_id, recovery=False)
        assert tail.metadata.state is LedgerState.OPEN
        # The last entry carried LAC 8; the idle writer then sends LAC 9 explicitly.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while await tail.read_last_add_confirmed() < 9:
            assert loop.time() < deadline, "explicit LAC never reached the bookies"
            await asyncio.sleep(0.05)
        with pytest.raises(ReadError):
            await tail.read_entries(0, 10)  # past the LAC
        with pytest.raises(IllegalOpError):
            handle.recovery_add_async(b"")

        waiter = asyncio.create_task(tail.wait_for_entries_after(9, timeout_s=10))
        # A shorter long poll sent with it: once the bookies have held that one to its
        # timeout, they have held the longer one as long.
        assert await tail.wait_for_entries_after(9, timeout_s=0.2) == 9
        assert not waiter.done()
        await handle.add_entry(payload(10))
        assert await asyncio.wait_for(waiter, 10) >= 10
        assert (await tail.read_entry(10)).data == payload(10)
        assert tail.length == sum(len(payload(i)) for i in range(11))  # through entry 10
        # Nothing new: the long poll ends at its timeout with the LAC unchanged.
        assert await tail.wait_for_entries_after(10, timeout_s=0.3) == 10

        await handle.close()
        assert await tail.wait_for_entries_after(10, timeout_s=1) == 10
        assert tail.is_closed
    finally:
        cluster.kill_all()


async def test_bad_requests_get_typed_errors(
    metadata_url: str, bk: BookKeeper, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 3)
    try:
        with pytest.raises(NotEnoughBookiesError):
            await bk.create_ledger(4, 2, 2)
        with pytest.raises(NoSuchLedgerError):
            await bk.open_ledger(987_654)
        with pytest.raises(ValueError):
            await bk.create_ledger(3, 2, 3)

        handle = await bk.create_ledger(3, 2, 2, password=b"secret")
        await handle.add_entry(b"one")
        with pytest.raises(UnauthorizedAccessError):
            await bk.open_ledger(handle.ledger_id, password=b"wrong")
        with pytest.raises(ReadError):
            await handle.read_entries(0, 1)
        assert (await handle.read_entry(0)).data == b"one"
        await handle.close()
        with pytest.raises(LedgerClosedError):
            await handle.add_entry(b"two")
        await handle.close()  # idempotent

        await bk.delete_ledger(handle.ledger_id)
        with pytest.raises(NoSuchLedgerError):
            await bk.open_ledger(handle.ledger_id, password=b"secret")
        with pytest.raises(NoSuchLedgerError):
            await bk.delete_ledger(handle.ledger_id)
    finally:
        cluster.kill_all()


async def test_ensemble_change_merges_a_concurrent_metadata_update(
    metadata_url: str, bk: BookKeeper, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 4)
    try:
        handle: LedgerHandle = await bk.create_ledger(3, 2, 2, custom_metadata={"k": "v"})
        await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(50)))
        # Someone else bumps the metadata version (as auto-recovery would).
        metadata, version = await bk.ledger_manager.read(handle.ledger_id)
        await bk.ledger_manager.write(handle.ledger_id, metadata, version)
        cluster.by_address(handle.ensemble[0]).kill()
        ids = await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(50, 100)))
        assert ids == list(range(50, 100))
        await handle.close()
        stored, _ = await bk.ledger_manager.read(handle.ledger_id)
        assert stored.state is LedgerState.CLOSED and stored.last_entry_id == 99
        assert len(stored.ensembles) == 2 and stored.custom_metadata == {"k": "v"}
    finally:
        cluster.kill_all()


async def test_rack_aware_ensembles_span_racks(
    metadata_url: str, bk: BookKeeper, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 4, racks=["/rack-a", "/rack-b"])
    try:
        rack_of = {b.address: b.settings["rack"] for b in cluster.bookies}
        for _ in range(5):
            handle = await bk.create_ledger(2, 2, 2)
            assert {rack_of[b] for b in handle.ensemble} == {"/rack-a", "/rack-b"}
            await handle.close()
    finally:
        cluster.kill_all()


async def test_closing_the_client_fails_pending_adds_as_client_closed(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 4)
    client = BookKeeper(store, FAST)
    await client.start()
    try:
        handle = await client.create_ledger(3, 2, 2)
        await handle.add_entry(b"first")
        pending = [handle.add_entry_async(payload(i)) for i in range(2000)]
        await client.close()
        outcomes = await asyncio.gather(*pending, return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        assert errors and all(isinstance(e, ClientClosedError) for e in errors), errors[:3]
        metadata, version = await LedgerManager(store).read(handle.ledger_id)
        assert version == 0 and len(metadata.ensembles) == 1  # no ensemble change was made
    finally:
        await client.close()
        cluster.kill_all()


async def test_recovery_with_a_dead_bookie_rewrites_the_tail_elsewhere(
    metadata_url: str, bk: BookKeeper, store: MetadataStore, tmp_path: Path
) -> None:
    cluster = await cluster_of(metadata_url, tmp_path, 4)
    other_store = create_metadata_store(metadata_url)
    await other_store.start()
    recovering = BookKeeper(other_store, FAST)
    await recovering.start()
    writer = BookKeeper(store, ClientConfig(explicit_lac_interval_ms=0))
    await writer.start()
    try:
        handle = await writer.create_ledger(3, 2, 2)
        await asyncio.gather(*(handle.add_entry_async(payload(i)) for i in range(100)))
        # The writer is abandoned: no close and no explicit LAC, so the bookies only know
        # the LAC the entries carried (-1: all were sent before the first completed). Recovery
        # must re-add every entry, and one bookie of the ensemble is dead.
        dead = handle.ensemble[1]
        cluster.by_address(dead).kill()
        recovered = await recovering.open_ledger(handle.ledger_id)
        assert recovered.last_add_confirmed == 99
        assert dead not in recovered.metadata.current_ensemble  # recovery replaced it
        assert [e.data for e in await recovered.read_entries(0, 99)] == [
            payload(i) for i in range(100)
        ]
        # The re-added tail went to a full write quorum of live bookies.
        metadata = recovered.metadata
        tail_start = max(metadata.ensembles)
        for entry_id in range(tail_start, 100):
            for address in metadata.write_set_bookies(entry_id):
                held = await holdings(address, handle.ledger_id, range(entry_id, entry_id + 1))
                assert entry_id in held, (entry_id, address)
    finally:
        await writer.close()
        await recovering.close()
        await other_store.close()
        cluster.kill_all()
