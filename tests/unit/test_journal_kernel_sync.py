"""The journal's kernel syncs: Linux AIO's asynchronous fdatasync, heard through an eventfd.

The first tests use the real kernel: a journal syncs in it by default, what it acknowledges
replays, and a descriptor the kernel cannot sync makes the journal fall back to its thread.
The rest hold a sync open with ``HeldKernelSync``, which stands in for the AIO context only
(the journal's own write, eventfd wake-up and ordering are real), to check that nothing is
acknowledged before its sync completes and that failures end up where the thread's do.
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
from collections.abc import Iterator
from pathlib import Path

import pytest

from stripemq.bookie.storage import journal as journal_module
from stripemq.bookie.storage.journal import (
    JournalWriter,
    LogMark,
    RecordType,
    encode_record,
    list_journals,
    replay_journals,
)
from stripemq.bookie.storage.kernel_aio import AsyncDataSync, SyncDone, open_async_datasync
from stripemq.errors import BookieError, DiskFullError
from stripemq.testing.journal_gate import SyncGate
from stripemq.testing.polling import until


def record(n: int) -> bytes:
    return encode_record(RecordType.ENTRY, 9, f"record {n:04d}".encode())


def journal(directory: Path, **options: object) -> JournalWriter:
    settings: dict[str, object] = {
        "max_group_wait_ms": 2.0,
        "buffered_writes_threshold": 1 << 20,
        "sync_data": True,
        "max_file_size": 1 << 30,
        **options,
    }
    return JournalWriter(directory, **settings)  # type: ignore[arg-type]


def replayed(directory: Path) -> list[bytes]:
    return [rec.body for rec, _ in replay_journals(directory, LogMark(0, 0))]


# ---------------------------------------------------------------- the real kernel


def test_the_kernel_syncs_a_file_and_signals_its_eventfd(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "data", os.O_WRONLY | os.O_CREAT, 0o644)
    datasync = AsyncDataSync()
    try:
        os.write(fd, b"durable")
        datasync.submit(fd, 41)
        assert datasync.in_flight == 1
        readable, _, _ = select.select([datasync.eventfd], [], [], 30.0)
        assert readable, "the kernel signalled the eventfd"
        assert datasync.reap() == [SyncDone(41, 0)]
        assert datasync.in_flight == 0
        assert datasync.reap() == []  # nothing twice
    finally:
        datasync.close()
        os.close(fd)


def test_a_descriptor_the_kernel_cannot_sync_leaves_the_thread_to_do_it() -> None:
    read_end, write_end = os.pipe()  # a pipe has no fsync: the kernel refuses with EINVAL
    try:
        assert open_async_datasync(write_end) is None
    finally:
        os.close(read_end)
        os.close(write_end)


async def test_a_journal_syncs_in_the_kernel_and_what_it_acknowledged_replays(
    tmp_path: Path,
) -> None:
    seen: list[tuple[float, bool]] = []
    writer = journal(tmp_path)
    writer.on_sync = lambda seconds, ok: seen.append((seconds, ok))
    await writer.open()
    try:
        assert writer.syncs_in_kernel
        marks = await asyncio.gather(*(writer.append(record(n)) for n in range(200)))
        assert marks == sorted(marks)
        assert 1 <= writer.fsync_count < 200  # records of one loop turn share a sync
        assert len(seen) == writer.fsync_count and all(ok for _, ok in seen)
        for n in range(200, 210):  # one at a time: a sync each
            await writer.append(record(n))
    finally:
        await writer.close()
    assert replayed(tmp_path) == [f"record {n:04d}".encode() for n in range(210)]


async def test_kernel_syncs_can_be_turned_off(tmp_path: Path) -> None:
    writer = journal(tmp_path, kernel_aio=False)
    await writer.open()
    try:
        assert not writer.syncs_in_kernel
        await writer.append(record(1))
        assert writer.fsync_count == 1
    finally:
        await writer.close()


async def test_a_sync_function_put_in_its_place_runs_on_the_thread(tmp_path: Path) -> None:
    """Tests (and embedders) that swap ``sync_file`` in get it called for every group."""
    writer = journal(tmp_path)
    await writer.open()
    gate = SyncGate(writer.sync_file)
    writer.sync_file = gate
    try:
        assert not writer.syncs_in_kernel
        await asyncio.gather(writer.append(record(1)), writer.append(record(2)))
        await writer.append(record(3))
        assert gate.syncs_returned == 2
    finally:
        await writer.close()


async def test_rolling_to_a_new_file_goes_through_the_thread_and_back(tmp_path: Path) -> None:
    writer = journal(tmp_path, max_file_size=1)  # every group opens a new file first
    await writer.open()
    try:
        for n in range(3):
            await writer.append(record(n))
        assert len(list_journals(tmp_path)) == 4
    finally:
        await writer.close()
    assert replayed(tmp_path) == [f"record {n:04d}".encode() for n in range(3)]


# ---------------------------------------------------------------- a sync held open


class HeldKernelSync:
    """Stands in for the AIO context: takes submits and completes each only when the test
    says, through a real eventfd the journal's loop listens on."""

    def __init__(self, refuse_submit: OSError | None = None) -> None:
        self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.submitted: list[tuple[int, int]] = []  # (fd, token)
        self.size_at_submit: list[int] = []
        self._done: list[SyncDone] = []
        self._reaped = 0
        self.refuse_submit = refuse_submit
        self.closed = False

    @property
    def in_flight(self) -> int:
        return len(self.submitted) - len(self._done)

    def submit(self, fd: int, token: int) -> None:
        if self.refuse_submit is not None:
            raise self.refuse_submit
        self.submitted.append((fd, token))
        self.size_at_submit.append(os.fstat(fd).st_size)

    def finish(self, error: int = 0) -> None:
        """Complete the oldest submitted sync (with ``error``, an errno, if not 0)."""
        fd, token = self.submitted[len(self._done)]
        if not error:
            os.fdatasync(fd)
        self._done.append(SyncDone(token, error))
        os.eventfd_write(self.eventfd, 1)

    def reap(self) -> list[SyncDone]:
        try:
            os.eventfd_read(self.eventfd)
        except BlockingIOError:
            pass
        fresh = self._done[self._reaped :]
        self._reaped = len(self._done)
        return fresh

    def close(self) -> None:
        self.closed = True
        os.close(self.eventfd)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldKernelSync]:
    stand_in = HeldKernelSync()
    monkeypatch.setattr(journal_module, "open_async_datasync", lambda fd: stand_in)
    yield stand_in


async def test_nothing_is_acknowledged_before_its_kernel_sync_completes(
    tmp_path: Path, held: HeldKernelSync
) -> None:
    writer = journal(tmp_path)
    await writer.open()
    try:
        first = writer.append(record(1))
        await until(lambda: len(held.submitted) == 1, "the first group's sync was submitted")
        # Written from the loop before the sync started, but not acknowledged.
        assert held.size_at_submit[0] == (tmp_path / "0000000000000001.txn").stat().st_size
        second = [writer.append(record(n)) for n in (2, 3)]
        await asyncio.sleep(0.05)
        assert not first.done() and not any(w.done() for w in second)
        assert len(held.submitted) == 1  # the next group waits for this sync
        held.finish()
        mark = await first
        await until(lambda: len(held.submitted) == 2, "the waiting group went next, together")
        assert not any(w.done() for w in second)
        held.finish()
        marks = await asyncio.gather(*second)
        assert mark < marks[0] == marks[1]
        assert writer.fsync_count == 2
    finally:
        await writer.close()
    assert held.closed


async def test_a_failed_kernel_sync_fails_its_group_and_the_next_goes_to_a_new_file(
    tmp_path: Path, held: HeldKernelSync
) -> None:
    seen: list[bool] = []
    writer = journal(tmp_path)
    writer.on_sync = lambda _seconds, ok: seen.append(ok)
    await writer.open()
    try:
        failing = writer.append(record(1))
        await until(lambda: len(held.submitted) == 1, "the sync was submitted")
        held.finish(errno.EIO)
        with pytest.raises(BookieError, match="journal write failed"):
            await failing
        assert seen == [False]
        await writer.append(record(2))  # rolled over on the thread, then synced there
        assert len(list_journals(tmp_path)) == 2
        nospace = writer.append(record(3))
        await until(lambda: len(held.submitted) == 2, "back in the kernel after the roll")
        held.finish(errno.ENOSPC)
        with pytest.raises(DiskFullError):
            await nospace
    finally:
        await writer.close()


async def test_a_refused_submit_leaves_the_thread_to_sync_from_then_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = HeldKernelSync(refuse_submit=OSError(errno.EAGAIN, "no room"))
    monkeypatch.setattr(journal_module, "open_async_datasync", lambda fd: stand_in)
    writer = journal(tmp_path)
    await writer.open()
    try:
        assert writer.syncs_in_kernel
        await writer.append(record(1))  # written on the loop, synced on the thread
        assert not writer.syncs_in_kernel
        await writer.append(record(2))
        assert writer.fsync_count == 2
    finally:
        await writer.close()
    await until(lambda: stand_in.closed, "the refused context was released")
    assert replayed(tmp_path) == [b"record 0001", b"record 0002"]


async def test_abort_fails_the_group_in_the_kernel_and_ignores_its_late_completion(
    tmp_path: Path, held: HeldKernelSync
) -> None:
    writer = journal(tmp_path)
    await writer.open()
    waiter = writer.append(record(1))
    await until(lambda: len(held.submitted) == 1, "the sync was submitted")
    await writer.abort()
    with pytest.raises(BookieError, match="aborted"):
        await waiter
    assert held.closed
