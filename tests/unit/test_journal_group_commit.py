"""How the journal groups records into syncs: at once when idle, bigger groups under load.

With ``flush_when_queue_empty`` (BookKeeper's ``journalFlushWhenQueueEmpty``, our default) a
record is synced as soon as the journal has nothing else to do, however long the group wait;
records that arrive while a sync is on the disk share the next one. Without it, a group
waits for company until the wait ends or enough bytes are queued.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stripemq.bookie.storage.journal import JournalWriter, RecordType, encode_record
from stripemq.errors import BookieError
from stripemq.testing.journal_gate import SyncGate, blocked_holding
from stripemq.testing.polling import until

A_LONG_WAIT_MS = 600_000.0  # ten minutes: a test passing through it would time out


def record(n: int) -> bytes:
    return encode_record(RecordType.ENTRY, 7, f"record {n:04d}".encode())


async def opened(directory: Path, **options: object) -> JournalWriter:
    settings: dict[str, object] = {
        "max_group_wait_ms": A_LONG_WAIT_MS,
        "buffered_writes_threshold": 1 << 30,
        "sync_data": True,
        "max_file_size": 1 << 30,
        **options,
    }
    journal = JournalWriter(directory, **settings)  # type: ignore[arg-type]
    await journal.open()
    return journal


@contextlib.asynccontextmanager
async def gated(
    directory: Path, **options: object
) -> AsyncIterator[tuple[SyncGate, JournalWriter]]:
    """An open journal whose syncs pass a gate (open to start with); closed on the way out."""
    journal = await opened(directory, **options)
    gate = SyncGate(journal.sync_file)
    journal.sync_file = gate
    try:
        yield gate, journal
    finally:
        gate.open()
        await journal.close()


@pytest.fixture
async def gate_and_journal(tmp_path: Path) -> AsyncIterator[tuple[SyncGate, JournalWriter]]:
    async with gated(tmp_path / "journal") as opened_journal:
        yield opened_journal


async def test_an_idle_journal_syncs_a_record_without_waiting_for_company(
    gate_and_journal: tuple[SyncGate, JournalWriter],
) -> None:
    gate, journal = gate_and_journal
    mark = await asyncio.wait_for(journal.append(record(1)), 30)
    assert gate.syncs_returned == 1
    assert mark == journal.written_mark


async def test_records_queued_during_a_sync_share_the_next_one(
    gate_and_journal: tuple[SyncGate, JournalWriter],
) -> None:
    gate, journal = gate_and_journal
    gate.close()
    first = journal.append(record(0))
    await blocked_holding(gate, journal, record(0))
    later = [journal.append(record(n)) for n in range(1, 51)]
    for _ in range(20):  # the writer has every chance to start another sync: it must not
        await asyncio.sleep(0)
    assert not first.done() and not any(f.done() for f in later)
    gate.open()
    marks = await asyncio.wait_for(asyncio.gather(first, *later), 30)
    assert gate.syncs_returned == 2  # one for the first record, one for the fifty after it
    assert len(set(marks[1:])) == 1 and marks[0] < marks[1]


async def test_without_flush_when_queue_empty_a_group_waits_for_enough_bytes(
    tmp_path: Path,
) -> None:
    threshold = 3 * len(record(0))
    directory = tmp_path / "journal"
    options = {"flush_when_queue_empty": False, "buffered_writes_threshold": threshold}
    async with gated(directory, **options) as (gate, journal):
        waiting = [journal.append(record(0)), journal.append(record(1))]
        for _ in range(20):
            await asyncio.sleep(0)
        assert gate.syncs_returned == 0 and not any(f.done() for f in waiting)
        waiting.append(journal.append(record(2)))  # the group reaches the threshold
        marks = await asyncio.wait_for(asyncio.gather(*waiting), 30)
        assert gate.syncs_returned == 1 and len(set(marks)) == 1


async def test_closing_syncs_what_waits_for_company(tmp_path: Path) -> None:
    journal = await opened(tmp_path / "journal", flush_when_queue_empty=False)
    waiting = journal.append(record(0))
    await journal.close()
    assert waiting.done() and waiting.result().offset > 0
    await until(lambda: journal.fsync_count == 1, "the closing sync was counted")


async def test_abort_fails_the_group_whose_sync_is_on_the_disk(
    gate_and_journal: tuple[SyncGate, JournalWriter],
) -> None:
    gate, journal = gate_and_journal
    gate.close()
    syncing = journal.append(record(0))
    await blocked_holding(gate, journal, record(0))
    queued = journal.append(record(1))
    aborting = asyncio.ensure_future(journal.abort())
    await until(lambda: syncing.done() and queued.done(), "abort fails every waiter")
    gate.open()  # the sync thread may finish now; nobody is told the record is durable
    await aborting
    assert isinstance(syncing.exception(), BookieError)
    assert isinstance(queued.exception(), BookieError)
