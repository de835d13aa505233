"""When a bookie refuses writes: disk usage, a full disk, and a failed checkpoint, which keeps
the bookie read-only until a checkpoint succeeds whatever the disk monitor says meanwhile."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stripemq.bookie import server as server_module
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.disk import DiskUsage, DiskUsagePolicy, ReadOnlyReason, ReadOnlyState
from stripemq.bookie.registration import registration_path
from stripemq.bookie.server import BookieServer
from stripemq.bookie.storage import files as files_module
from stripemq.bookie.storage.engine import AddOp, BookieStorage
from stripemq.errors import BookieReadOnlyError
from stripemq.proto.entry import EntryHeader, encode_entry
from stripemq.testing.faults import FullDisk
from stripemq.testing.polling import until

KEY = b"master-key"


class CountedDiskChecks:
    """Stands in for ``fullest_disk``: an empty disk, and how many checks have run."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, paths: list[str]) -> DiskUsage:
        self.count += 1
        return DiskUsage(total_bytes=100, free_bytes=99)


def entry(ledger: int, entry_id: int) -> bytes:
    return encode_entry(ledger, entry_id, entry_id - 1, f"{ledger}:{entry_id}".encode())


@pytest.fixture
def disk_checks(monkeypatch: pytest.MonkeyPatch) -> CountedDiskChecks:
    checks = CountedDiskChecks()
    monkeypatch.setattr(server_module, "fullest_disk", checks)
    return checks


@pytest.fixture
async def bookie(tmp_path: Path, disk_checks: CountedDiskChecks) -> AsyncIterator[BookieServer]:
    config = BookieConfig(
        data_dir=str(tmp_path / "bookie"),
        bookie_port=0,
        enable_statistics=False,
        disk_check_interval_ms=10,
        flush_interval_ms=600_000,  # checkpoints run only when the test asks
    )
    server = BookieServer(config)
    await server.start()
    yield server
    await server.stop()


async def registered_read_only(server: BookieServer) -> bool:
    """Where the bookie's registration node is (and that there is exactly one)."""
    assert server.registration is not None and server.registration.store is not None
    store = server.registration.store
    writable = await store.exists(registration_path(server.bookie_id, False)) is not None
    read_only = await store.exists(registration_path(server.bookie_id, True)) is not None
    assert writable != read_only
    return read_only


async def test_failed_checkpoint_keeps_the_bookie_read_only_until_one_succeeds(
    bookie: BookieServer, disk_checks: CountedDiskChecks, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = bookie.storage
    [added] = await storage.add_entries([AddOp(entry(1, 0), KEY)])
    assert isinstance(added, EntryHeader)
    assert not storage.read_only

    monkeypatch.setattr(files_module, "os", FullDisk())
    with pytest.raises(OSError):
        await storage.checkpoint()
    monkeypatch.setattr(files_module, "os", os)  # the disk is fine again, as the monitor sees
    assert storage.read_only
    await until(lambda: registered_read_only(bookie), "the bookie is registered read-only")

    # The monitor finds the disk nearly empty, again and again: the bookie stays read-only.
    seen = disk_checks.count
    await until(lambda: disk_checks.count >= seen + 3, "three more disk checks ran")
    assert storage.read_only
    assert await registered_read_only(bookie)
    [refused] = await storage.add_entries([AddOp(entry(1, 1), KEY)])
    assert isinstance(refused, BookieReadOnlyError)

    await storage.checkpoint()  # the kept memtable flushes: writable again
    assert not storage.read_only
    seen = disk_checks.count
    await until(lambda: disk_checks.count >= seen + 2, "two more disk checks ran")
    assert not await registered_read_only(bookie)
    [added] = await storage.add_entries([AddOp(entry(1, 1), KEY)])
    assert isinstance(added, EntryHeader)


def test_only_a_successful_checkpoint_clears_a_failed_one() -> None:
    state = ReadOnlyState(DiskUsagePolicy(threshold=0.95, low_water_mark=0.90))
    state.checkpoint_failed()
    for usage in (0.10, 0.0, 0.50):  # the disk monitor finds plenty of room, again and again
        state.disk_checked(usage)
        assert state.read_only
    state.set_space_verdict(False)
    assert state.reasons == {ReadOnlyReason.CHECKPOINT_FAILED}
    state.checkpoint_succeeded()
    assert not state.read_only
    assert state.describe() == "writable"


def test_space_reasons_follow_the_disk_with_hysteresis() -> None:
    state = ReadOnlyState(DiskUsagePolicy(threshold=0.95, low_water_mark=0.90))
    state.disk_checked(0.94)
    assert not state.read_only
    state.disk_checked(0.95)
    assert state.reasons == {ReadOnlyReason.DISK_USAGE}
    state.disk_checked(0.92)  # between the marks: stays read-only
    assert state.read_only
    state.disk_checked(0.89)
    assert not state.read_only

    state.disk_full()  # a journal write hit ENOSPC: room is back only below the low mark
    state.disk_checked(0.92)
    assert state.read_only
    state.disk_checked(0.50)
    assert not state.read_only


def test_disk_reasons_and_a_failed_checkpoint_each_hold_the_bookie() -> None:
    state = ReadOnlyState(DiskUsagePolicy(threshold=0.95, low_water_mark=0.90))
    state.disk_checked(0.99)
    state.checkpoint_failed()
    state.checkpoint_succeeded()
    assert state.reasons == {ReadOnlyReason.DISK_USAGE}  # still over the threshold
    state.checkpoint_failed()
    state.disk_checked(0.10)
    assert state.reasons == {ReadOnlyReason.CHECKPOINT_FAILED}
    assert "checkpoint" in state.describe()


def storage_config(tmp_path: Path, **overrides: object) -> BookieConfig:
    settings: dict[str, object] = {"data_dir": str(tmp_path / "bookie")}
    settings.update(overrides)
    return BookieConfig(**settings)  # type: ignore[arg-type]


async def test_assigning_writable_does_not_end_a_failed_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = BookieStorage(storage_config(tmp_path, flush_interval_ms=600_000))
    await storage.start()
    try:
        monkeypatch.setattr(files_module, "os", FullDisk())
        with pytest.raises(OSError):
            await storage.checkpoint()
        monkeypatch.setattr(files_module, "os", os)
        storage.read_only = False  # the disks' verdict, as older callers assign it
        assert storage.read_only
        assert storage.disk_usage_checked(0.0)
        [refused] = await storage.add_entries([AddOp(entry(2, 0), KEY)])
        assert isinstance(refused, BookieReadOnlyError)
        assert "checkpoint" in str(refused)
        await storage.checkpoint()
        assert not storage.read_only
    finally:
        await storage.stop()


async def test_the_flush_timer_retries_a_failed_checkpoint_with_nothing_to_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = BookieStorage(storage_config(tmp_path, flush_interval_ms=20))
    await storage.start()  # checkpoints: nothing is left in the memtable or the headers
    try:
        monkeypatch.setattr(files_module, "os", FullDisk())
        with pytest.raises(OSError):  # the LastLogMark cannot be written
            await storage.checkpoint()
        assert storage.read_only
        before = storage.checkpoints
        monkeypatch.setattr(files_module, "os", os)
        await until(lambda: storage.checkpoints > before, "the timer checkpointed again")
        assert not storage.read_only
    finally:
        await storage.stop()
