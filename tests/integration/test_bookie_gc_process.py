"""A real bookie process garbage-collects ledgers deleted from real ZooKeeper metadata."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import pytest

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.bookie.client.metadata import LedgerMetadata, master_key_for
from stripemq.errors import NoSuchEntryError, NoSuchLedgerError
from stripemq.metadata import MetadataStore
from stripemq.proto.entry import encode_entry
from stripemq.testing.bookie import BookieProcess

pytestmark = pytest.mark.integration

KEY = master_key_for(b"gc-test")
ENTRIES = 40
GC_SETTINGS = {
    "gc_wait_time_ms": 300,
    "flush_interval_ms": 100,
    "entry_log_size_limit": 32 * 1024,
    "major_compaction_threshold": 0.8,
    "major_compaction_interval_s": 0.5,
    "minor_compaction_threshold": 0.2,
    "minor_compaction_interval_s": 0.5,
}


def payload(ledger: int, entry_id: int) -> bytes:
    return f"ledger {ledger} entry {entry_id} ".encode() * 30


async def read_all(client: BookieClient, ledger: int) -> list[bytes]:
    return [(await client.read_entry(ledger, i)).entry for i in range(ENTRIES)]


async def is_gone(client: BookieClient, ledger: int) -> bool:
    try:
        await client.read_entry(ledger, 0)
    except (NoSuchLedgerError, NoSuchEntryError):
        return True
    return False


async def wait_until(predicate, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.1)


async def metric(bookie: BookieProcess, name: str) -> float:
    async with aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{bookie.metrics_port}/metrics"
        async with session.get(url) as response:
            text = await response.text()
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_bookie_drops_deleted_ledgers_and_keeps_the_rest(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    bookie = BookieProcess(metadata_url, tmp_path / "b0", settings=GC_SETTINGS)
    await bookie.start()
    client = BookieClient(bookie.address, timeout=10.0)
    await client.connect()
    try:
        manager = LedgerManager(store)
        metadata = LedgerMetadata(1, 1, 1, {0: (bookie.address,)}, KEY.hex())
        ledgers = [await manager.create(metadata) for _ in range(4)]  # metadata first
        expected: dict[int, list[bytes]] = {ledger: [] for ledger in ledgers}
        for i in range(ENTRIES):
            adds = []
            for ledger in ledgers:
                raw = encode_entry(ledger, i, i - 1, payload(ledger, i))
                expected[ledger].append(raw)
                adds.append(client.add_entry(KEY, raw))
            await asyncio.gather(*adds)
            if i % 10 == 9:
                await asyncio.sleep(0.15)  # let a flush land, so entry logs mix ledgers
        deleted, kept = ledgers[0::2], ledgers[1::2]
        for ledger in ledgers:
            assert await read_all(client, ledger) == expected[ledger]

        for ledger in deleted:
            await manager.delete(ledger)

        async def deleted_are_gone() -> bool:
            return all([await is_gone(client, ledger) for ledger in deleted])

        await wait_until(deleted_are_gone)
        for ledger in kept:
            assert await read_all(client, ledger) == expected[ledger]

        async def space_reclaimed() -> bool:
            return await metric(bookie, "bookie_gc_reclaimed_bytes_total") > 0

        await wait_until(space_reclaimed)
        assert await metric(bookie, "bookie_DELETED_LEDGER_TOTAL") == len(deleted)
        logs_removed = await metric(bookie, "bookie_gc_entry_logs_compacted_total")
        logs_removed += await metric(bookie, "bookie_gc_entry_logs_deleted_total")
        assert logs_removed >= 1
        for ledger in kept:
            assert await read_all(client, ledger) == expected[ledger]

        # After a SIGKILL the bookie still holds the kept ledgers intact, not the others.
        bookie.kill()
        await client.close()
        await bookie.start()
        client = BookieClient(bookie.address, timeout=10.0)
        await client.connect()
        for ledger in kept:
            assert await read_all(client, ledger) == expected[ledger]
        await wait_until(deleted_are_gone)
    finally:
        await client.close()
        bookie.kill()
