"""Ledger metadata in a metadata store: ids, compare-and-set, listing, deletion."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stripemq.bookie.client.ledger_manager import LedgerManager, ledger_path
from stripemq.bookie.client.metadata import LedgerMetadata, master_key_for
from stripemq.errors import MetadataVersionError, NoSuchLedgerError
from stripemq.metadata import create_metadata_store


def metadata() -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, {0: ("a:1", "b:1", "c:1")}, master_key_for(b"").hex())


async def test_ids_are_unique_across_concurrent_clients(new_store) -> None:  # type: ignore[no-untyped-def]
    managers = [LedgerManager(await new_store()) for _ in range(3)]
    ids = await asyncio.gather(*(m.create(metadata()) for m in managers for _ in range(20)))
    assert len(set(ids)) == 60
    listed = [i async for i in managers[0].ledger_ids()]
    assert listed == sorted(ids)


async def test_compare_and_set_refuses_a_stale_version(new_store) -> None:  # type: ignore[no-untyped-def]
    manager = LedgerManager(await new_store())
    ledger_id = await manager.create(metadata())
    md, version = await manager.read(ledger_id)
    newer = await manager.write(ledger_id, md.in_recovery(), version)
    with pytest.raises(MetadataVersionError):
        await manager.write(ledger_id, md.closed(5, 10), version)
    assert (await manager.read(ledger_id)) == (md.in_recovery(), newer)
    await manager.delete(ledger_id)
    with pytest.raises(NoSuchLedgerError):
        await manager.read(ledger_id)
    with pytest.raises(NoSuchLedgerError):
        await manager.write(ledger_id, md, newer)
    assert [i async for i in manager.ledger_ids()] == []
    # Deleting the last ledger under a level prunes the empty levels too.
    assert await manager.store.children(ledger_path(ledger_id).rsplit("/", 2)[0]) == []


async def test_ids_keep_growing_across_restarts(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'metadata'}"
    store = create_metadata_store(url)
    await store.start()
    first = [await LedgerManager(store).create(metadata()) for _ in range(3)]
    await store.close()
    store = create_metadata_store(url)
    await store.start()
    try:
        manager = LedgerManager(store)
        again = await manager.create(metadata())
        assert again > max(first)
        assert [i async for i in manager.ledger_ids()] == [*first, again]
        assert await manager.is_initialized()
    finally:
        await store.close()
