"""The auditor (election, lost-bookie detection) and the worker's metadata-only paths, on
memory:// and real ZooKeeper metadata with fake bookie registrations (no bookie processes)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import pytest

from stripemq.bookie.autorecovery import (
    Auditor,
    AutoRecoveryConfig,
    AutoRecoveryService,
    UnderReplicationManager,
    current_auditor,
)
from stripemq.bookie.autorecovery.auditor import election_candidates
from stripemq.bookie.client import LedgerManager, LedgerMetadata, LedgerState
from stripemq.bookie.client.metadata import master_key_for
from stripemq.bookie.registration import AVAILABLE, READONLY
from stripemq.metadata import MetadataStore
from stripemq.testing.polling import until

pytestmark = pytest.mark.timeout(60)

StoreFactory = Callable[[], Awaitable[MetadataStore]]


async def register(new_store: StoreFactory, bookie: str, read_only: bool = False) -> MetadataStore:
    """A fake bookie: its registration lives as long as the returned store's session."""
    store = await new_store()
    parent = READONLY if read_only else AVAILABLE
    await store.create(f"{parent}/{bookie}", json.dumps({"rack": None}).encode(), ephemeral=True)
    return store


def ledger(*ensembles: tuple[str, ...], closed_at: int | None = None) -> LedgerMetadata:
    starts = [0, *range(10, 10 * len(ensembles), 10)]
    metadata = LedgerMetadata(
        ensemble_size=len(ensembles[0]),
        write_quorum_size=2,
        ack_quorum_size=2,
        ensembles=dict(zip(starts, ensembles, strict=True)),
        password_hash=master_key_for(b"").hex(),
    )
    return metadata if closed_at is None else metadata.closed(closed_at, 0)


def config(**settings: object) -> AutoRecoveryConfig:
    return AutoRecoveryConfig(**settings)  # type: ignore[arg-type]


async def test_election_and_reelection(new_store: StoreFactory) -> None:
    stores = [await new_store() for _ in range(3)]
    observer = await new_store()
    auditors = []
    for i, store in enumerate(stores):
        auditor = Auditor(store, UnderReplicationManager(store), config(instance_id=f"p{i}"))
        auditor.start()
        auditors.append(auditor)
        await until(lambda n=i + 1: _candidates(observer, n))
    assert await current_auditor(observer) == "p0"
    await asyncio.wait_for(auditors[0].elected.wait(), 10)
    assert [a.is_auditor for a in auditors] == [True, False, False]

    # The middle candidate leaving changes nothing; then the auditor's session ends.
    await auditors[1].stop()
    await stores[0].close()  # as if p0 died: its election node goes with its session
    await asyncio.wait_for(auditors[2].elected.wait(), 10)
    assert await current_auditor(observer) == "p2"
    assert not auditors[1].is_auditor
    await auditors[2].stop()
    await auditors[0].stop()
    assert await current_auditor(observer) is None


async def _candidates(store: MetadataStore, n: int) -> bool:
    return len(await election_candidates(store)) == n


async def test_lost_bookie_marks_exactly_its_ledgers(new_store: StoreFactory) -> None:
    store = await new_store()
    # "w" holds no ledger: its loss makes the auditor audit, a witness that marks nothing.
    names = ("a:1", "b:1", "c:1", "d:1", "w:1")
    bookies = {b: await register(new_store, b) for b in names}
    lm = LedgerManager(store)
    on_a_closed = await lm.create(ledger(("a:1", "b:1", "c:1"), closed_at=5))
    on_a_later = await lm.create(ledger(("b:1", "c:1", "d:1"), ("a:1", "c:1", "d:1")))
    not_on_a = await lm.create(ledger(("b:1", "c:1", "d:1"), closed_at=3))
    urm = UnderReplicationManager(store)
    auditor = Auditor(store, urm, config(instance_id="auditor"))
    auditor.start()
    try:
        await asyncio.wait_for(auditor.elected.wait(), 10)
        await until(lambda: _audits(auditor, 1))
        assert await urm.ledger_ids() == []  # everyone registered: nothing to do

        # A bookie turning read-only still has its data: not lost.
        # (Like BookieRegistration: the new node first, then the old one goes.)
        await bookies["b:1"].create(f"{READONLY}/b:1", b"{}", ephemeral=True)
        await bookies["b:1"].delete(f"{AVAILABLE}/b:1")
        audits = auditor.audits
        await bookies["w:1"].close()  # audited with "b" read-only: "b"'s ledgers would be marked
        await until(lambda: _audits(auditor, audits + 1), "the witness is audited")
        assert await urm.ledger_ids() == []

        audits = auditor.audits
        await bookies["a:1"].close()  # "a" dies: its registration goes with its session
        await until(lambda: _queued(urm, {on_a_closed, on_a_later}))
        record = await urm.get(on_a_later)
        assert record is not None and record.lost_bookies == {"a:1"}
        await until(lambda: _audits(auditor, audits + 1), "the marking audit finishes")
        assert set(await urm.ledger_ids()) == {on_a_closed, on_a_later}
        assert not await urm.is_under_replicated(not_on_a)
    finally:
        await auditor.stop()


async def test_election_catches_bookies_lost_without_an_auditor(new_store: StoreFactory) -> None:
    store = await new_store()
    for bookie in ("b:1", "c:1"):
        await register(new_store, bookie)
    lm = LedgerManager(store)
    orphan = await lm.create(ledger(("gone:1", "b:1", "c:1"), closed_at=0))
    healthy = await lm.create(ledger(("b:1", "c:1"), closed_at=0))
    urm = UnderReplicationManager(store)
    auditor = Auditor(store, urm, config(instance_id="auditor"))
    auditor.start()
    try:
        await until(lambda: _queued(urm, {orphan}))
        assert not await urm.is_under_replicated(healthy)
    finally:
        await auditor.stop()


async def test_recovery_delay_spares_a_bookie_that_comes_back(new_store: StoreFactory) -> None:
    store = await new_store()
    bookies = {b: await register(new_store, b) for b in ("a:1", "b:1", "c:1", "d:1", "e:1")}
    lm = LedgerManager(store)
    ledger_id = await lm.create(ledger(("a:1", "b:1", "c:1"), closed_at=9))
    # "d" goes with "a" and stays away: once its ledger is marked, the delay has run out for
    # "a" too, and the auditor has looked.
    witness = await lm.create(ledger(("d:1", "e:1"), closed_at=9))
    urm = UnderReplicationManager(store)
    auditor = Auditor(store, urm, config(instance_id="auditor", lost_bookie_recovery_delay_s=1.5))
    auditor.start()
    loop = asyncio.get_running_loop()
    try:
        await until(lambda: _audits(auditor, 1))
        await bookies["a:1"].close()
        await bookies["d:1"].close()
        await asyncio.sleep(0.5)
        bookies["a:1"] = await register(new_store, "a:1")  # a quick restart
        await until(lambda: urm.is_under_replicated(witness), "the witness is marked")
        assert not await urm.is_under_replicated(ledger_id)

        gone_at = loop.time()
        await bookies["a:1"].close()  # now for good: marked once the delay has passed
        await until(lambda: urm.is_under_replicated(ledger_id), timeout=10)
        assert loop.time() - gone_at >= 1.5, "marked before the delay ran out"
    finally:
        await auditor.stop()


async def test_disabled_auditor_marks_nothing_until_enabled(
    new_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stripemq.bookie.autorecovery")
    store = await new_store()
    bookies = {b: await register(new_store, b) for b in ("a:1", "b:1", "w:1")}
    lm = LedgerManager(store)
    ledger_id = await lm.create(ledger(("a:1", "b:1"), closed_at=1))
    urm = UnderReplicationManager(store)
    auditor = Auditor(store, urm, config(instance_id="auditor"))
    auditor.start()
    try:
        await until(lambda: _audits(auditor, 1))  # it knows the bookies: a loss is logged
        await urm.disable()
        await bookies["a:1"].close()
        await until(lambda: _logged(caplog, "bookie a:1 is gone"), "the auditor sees it")
        # The auditor handles one change at a time: once it sees the next one, it is done
        # with "a"'s.
        await bookies["w:1"].close()
        await until(lambda: _logged(caplog, "bookie w:1 is gone"), "the auditor sees the next")
        assert not await urm.is_under_replicated(ledger_id)
        await urm.enable()
        await until(lambda: urm.is_under_replicated(ledger_id))
    finally:
        await auditor.stop()


async def test_worker_swaps_empty_fragments_and_drops_deleted_ledgers(
    new_store: StoreFactory,
) -> None:
    """No entries to copy: the worker only rewrites metadata (no bookie process needed)."""
    store = await new_store()
    for bookie in ("b:1", "c:1", "d:1"):
        await register(new_store, bookie)
    lm = LedgerManager(store)
    empty = await lm.create(ledger(("gone:1", "b:1", "c:1"), closed_at=-1))
    deleted = await lm.create(ledger(("gone:1", "b:1", "c:1"), closed_at=-1))
    urm = UnderReplicationManager(store)
    await urm.mark_under_replicated(deleted, ["gone:1"])
    await lm.delete(deleted)
    service = AutoRecoveryService(
        store, config(instance_id="svc", replication_workers=2, replication_retry_backoff_s=0.1)
    )
    await service.start()
    try:
        await until(lambda: _names(lm, empty, "d:1"), timeout=15)
        await until(lambda: _queue_empty(urm), timeout=15)
        metadata, _ = await lm.read(empty)
        assert metadata.state is LedgerState.CLOSED
        assert metadata.ensembles == {0: ("d:1", "b:1", "c:1")}
    finally:
        await service.stop()


async def _names(lm: LedgerManager, ledger_id: int, bookie: str) -> bool:
    metadata, _ = await lm.read(ledger_id)
    return bookie in metadata.bookies()


async def _audits(auditor: Auditor, n: int) -> bool:
    return auditor.audits >= n


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


async def _queued(urm: UnderReplicationManager, expected: set[int]) -> bool:
    return expected <= set(await urm.ledger_ids())


async def _queue_empty(urm: UnderReplicationManager) -> bool:
    return await urm.ledger_ids() == [] and await urm.locked() == set()
