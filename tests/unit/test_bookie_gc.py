"""Bookie garbage collection and entry-log compaction, driven on ``BookieStorage`` directly."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import crc32c
import pytest

from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.bookie.client.metadata import LedgerMetadata, master_key_for
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.metrics import BookieMetrics
from stripemq.bookie.storage import engine as engine_module
from stripemq.bookie.storage.deleted import DeletedLedgers
from stripemq.bookie.storage.engine import AddOp, BookieStorage
from stripemq.bookie.storage.entry_log import (
    EntryLogger,
    EntryLogMeta,
    MissingEntryLogError,
    make_location,
    split_location,
)
from stripemq.bookie.storage.gc import GarbageCollector
from stripemq.bookie.storage.index import LedgerIndex
from stripemq.config import load_config
from stripemq.errors import (
    BookieError,
    BookieReadOnlyError,
    ConfigError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from stripemq.metadata import create_metadata_store
from stripemq.proto.entry import EntryHeader, encode_entry

KEY = b"master-key"
LOG_LIMIT = 64 * 1024


def make_config(tmp_path: Path, **overrides: object) -> BookieConfig:
    settings: dict[str, object] = {
        "data_dir": str(tmp_path / "bookie"),
        "flush_interval_ms": 600_000,
        "entry_log_size_limit": LOG_LIMIT,
        "max_entry_size": 16 * 1024,
        "read_cache_max_size_mb": 0,  # every read of a flushed entry goes to the entry log
    }
    settings.update(overrides)
    return BookieConfig(**settings)  # type: ignore[arg-type]


def entry(ledger: int, entry_id: int, size: int = 500) -> bytes:
    seed = f"{ledger}:{entry_id}:".encode()
    data = (seed * (size // len(seed) + 1))[:size]
    return encode_entry(ledger, entry_id, entry_id - 1, data)


async def add_ok(storage: BookieStorage, *entries: bytes) -> None:
    for result in await storage.add_entries([AddOp(e, KEY) for e in entries]):
        assert isinstance(result, EntryHeader), result


async def write_interleaved(
    storage: BookieStorage, sizes: dict[int, int], count: int
) -> dict[int, list[bytes]]:
    """``count`` entries per ledger, flushed round by round so every log holds every ledger."""
    written: dict[int, list[bytes]] = {ledger: [] for ledger in sizes}
    for i in range(count):
        batch = [entry(ledger, i, size) for ledger, size in sizes.items()]
        await add_ok(storage, *batch)
        await storage.checkpoint()  # a flush writes in (ledger, entry) order
        for raw in batch:
            written[int.from_bytes(raw[:8], "big")].append(raw)
    return written


async def assert_readable(storage: BookieStorage, written: dict[int, list[bytes]]) -> None:
    for ledger, entries in written.items():
        for i, raw in enumerate(entries):
            got, _ = await storage.read_entry(ledger, i)
            assert got == raw, f"{ledger}:{i} differs"


async def assert_gone(storage: BookieStorage, ledger: int) -> None:
    with pytest.raises((NoSuchLedgerError, NoSuchEntryError)):
        await storage.read_entry(ledger, 0)
    assert not storage.index.exists(ledger)


def logs_bytes(storage: BookieStorage) -> int:
    return sum(p.stat().st_size for p in storage.entry_log.directory.glob("*.log"))


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[BookieStorage]:
    store = BookieStorage(make_config(tmp_path))
    await store.start()
    yield store
    await store.stop()


async def restarted(storage: BookieStorage, crash: bool = False) -> BookieStorage:
    await (storage.abort() if crash else storage.stop())
    fresh = BookieStorage(storage.config)
    await fresh.start()
    return fresh


# ------------------------------------------------------------------------- ledger GC


async def test_deleted_ledgers_are_dropped_and_live_ones_untouched(
    storage: BookieStorage,
) -> None:
    written = await write_interleaved(storage, {1: 400, 2: 400, 3: 400, 4: 400}, 40)
    await add_ok(storage, entry(5, 0))  # only in the memtable and journal so far
    assert await storage.local_ledger_ids() == {1, 2, 3, 4, 5}

    result = await storage.run_gc({2, 4})

    assert result.ledgers_deleted == [1, 3, 5]
    assert result.dead_bytes > 0
    for ledger in (1, 3, 5):
        await assert_gone(storage, ledger)
    assert storage.memtable.size_bytes == 0
    assert await storage.local_ledger_ids() == {2, 4}
    await assert_readable(storage, {2: written[2], 4: written[4]})
    assert storage.gc_stats.ledgers_deleted == 3

    # Nothing comes back after a crash: the index files were removed durably and the
    # LastLogMark moved past the journal records of ledger 5.
    storage = await restarted(storage, crash=True)
    try:
        for ledger in (1, 3, 5):
            await assert_gone(storage, ledger)
        assert await storage.local_ledger_ids() == {2, 4}
        await assert_readable(storage, {2: written[2], 4: written[4]})
    finally:
        await storage.stop()


async def test_a_fenced_out_writer_cannot_revive_a_dropped_ledger(
    storage: BookieStorage,
) -> None:
    await write_interleaved(storage, {1: 300, 2: 300}, 3)
    state = await storage.fence(1, KEY)  # a recovery fenced it; then it was deleted
    [refused] = await storage.add_entries([AddOp(entry(1, 3), KEY)])
    assert isinstance(refused, LedgerFencedError)
    await storage.run_gc({2})
    storage._dirty_headers.add(state.ledger_id)  # a request that loaded the state earlier

    # Without a record of the drop, the writer would find a fresh, unfenced ledger here and
    # have its add acknowledged, only for the next GC round to throw the entry away.
    [refused] = await storage.add_entries([AddOp(entry(1, 3), KEY)])
    assert isinstance(refused, LedgerFencedError)
    with pytest.raises(LedgerFencedError):
        await storage.fence(1, KEY)
    with pytest.raises(LedgerFencedError):
        await storage.write_lac(1, KEY, 2)
    await storage.checkpoint()  # must not fail (a failed checkpoint turns the bookie read-only)
    assert not storage.read_only
    await assert_gone(storage, 1)

    # The record of the drop is durable: neither a crash nor a clean restart forgets it.
    for crash in (True, False):
        storage = await restarted(storage, crash=crash)
        [refused] = await storage.add_entries([AddOp(entry(1, 3), KEY)])
        assert isinstance(refused, LedgerFencedError)
        await assert_gone(storage, 1)
    await storage.stop()


async def test_journal_records_of_a_dropped_ledger_are_not_replayed(tmp_path: Path) -> None:
    storage = BookieStorage(make_config(tmp_path))
    await storage.start()
    await add_ok(storage, entry(1, 0), entry(2, 0))
    real_checkpoint = storage._checkpoint_locked

    async def failing_checkpoint() -> None:
        raise OSError("disk trouble")  # GC's checkpoint fails: the LastLogMark stays put

    storage._checkpoint_locked = failing_checkpoint  # type: ignore[method-assign]
    await storage.run_gc({2})
    storage._checkpoint_locked = real_checkpoint  # type: ignore[method-assign]
    await storage.abort()  # the journal still holds ledger 1's entry

    storage = BookieStorage(storage.config)
    await storage.start()
    try:
        await assert_gone(storage, 1)
        assert (await storage.read_entry(2, 0))[0] == entry(2, 0)
    finally:
        await storage.stop()


async def test_logs_with_nothing_live_are_removed_without_copying(storage: BookieStorage) -> None:
    dead = await write_interleaved(storage, {1: 2000}, 100)  # several logs of ledger 1 only
    live = await write_interleaved(storage, {2: 2000}, 40)
    finished = [m.log_id for m in storage.entry_log.finished_metas()]
    assert len(finished) >= 3
    before = logs_bytes(storage)

    result = await storage.run_gc({2})

    assert result.logs_deleted >= 2
    assert result.bytes_reclaimed >= 2 * LOG_LIMIT * 0.9
    assert logs_bytes(storage) < before
    await assert_gone(storage, 1)
    await assert_readable(storage, live)
    assert len(dead[1]) == 100


# ------------------------------------------------------------------------- compaction


async def test_compaction_moves_live_entries_and_reclaims_space(storage: BookieStorage) -> None:
    # Every log is ~90% ledger 1, ~10% ledger 2.
    written = await write_interleaved(storage, {1: 3600, 2: 400}, 120)
    first_logs = {m.log_id for m in storage.entry_log.finished_metas()}
    assert len(first_logs) >= 5
    await storage.run_gc({2})
    before = logs_bytes(storage)

    assert (await storage.compact(0.05)).logs_compacted == 0  # all logs are ~10% live
    result = await storage.compact(0.2)

    assert result.logs_compacted >= len(first_logs) - 1
    assert result.entries_moved >= 100
    assert result.bytes_reclaimed > 0
    assert logs_bytes(storage) < before / 3
    remaining = {m.log_id for m in storage.entry_log.finished_metas()}
    assert not remaining & first_logs - {max(first_logs)}
    await assert_readable(storage, {2: written[2]})
    assert storage.gc_stats.entry_logs_compacted == result.logs_compacted

    # A clean restart (sidecars written) and a crash restart (no sidecar for the current log,
    # which holds the moved entries) both read everything.
    storage = await restarted(storage)
    await assert_readable(storage, {2: written[2]})
    orphan = storage.entry_log.meta_path(first_logs.pop())  # as if a crash cut remove_log short
    orphan.write_bytes(b"left behind")
    storage = await restarted(storage, crash=True)
    try:
        assert not orphan.exists()
        await assert_readable(storage, {2: written[2]})
        assert (await storage.compact(0.2)).entries_moved == 0  # nothing left to compact
    finally:
        await storage.stop()


async def test_compaction_skips_entries_superseded_in_a_newer_log(
    storage: BookieStorage,
) -> None:
    written = await write_interleaved(storage, {1: 3000, 2: 300}, 60)
    await storage.run_gc({2})
    old_log = min(m.log_id for m in storage.entry_log.finished_metas())
    # Re-adding the same entries (recovery does that) points the index at newer copies.
    await storage.add_entries([AddOp(raw, KEY, recovery_add=True) for raw in written[2]])
    await storage.checkpoint()
    result = await storage.compact(0.5)
    assert result.logs_compacted >= 1
    assert not storage.entry_log.path(old_log).exists()
    await assert_readable(storage, {2: written[2]})


async def test_metadata_is_rebuilt_by_scanning_when_sidecars_are_lost(tmp_path: Path) -> None:
    storage = BookieStorage(make_config(tmp_path))
    await storage.start()
    written = await write_interleaved(storage, {1: 3000, 2: 300}, 60)
    expected = {m.log_id: m for m in storage.entry_log.finished_metas()}
    await storage.stop()
    for sidecar in storage.entry_log.directory.glob("*.meta"):
        sidecar.write_bytes(b"garbage")  # corrupt ones are rebuilt the same way
    storage = BookieStorage(make_config(tmp_path))
    await storage.start()
    try:
        rebuilt = {m.log_id: m for m in storage.entry_log.finished_metas()}
        for log_id, meta in expected.items():
            assert rebuilt[log_id].ledger_bytes == meta.ledger_bytes
            assert rebuilt[log_id].total_bytes == meta.total_bytes
        await storage.run_gc({2})
        assert (await storage.compact(0.5)).logs_compacted >= len(expected) - 1
        await assert_readable(storage, {2: written[2]})
    finally:
        await storage.stop()


async def crash_without_sidecar(storage: BookieStorage) -> None:
    """What SIGKILL leaves: files intact but no sidecar for the current entry log
    (``abort()`` closes the entry logger, which writes one)."""
    storage._closed = True
    storage._stopping.set()
    for task in (storage._timer_task, storage._flush_task):
        if task is not None:
            task.cancel()
    await storage.journal.abort()
    storage._read_io.shutdown(wait=True)

    def close_raw() -> None:
        logger = storage.entry_log
        for fd in logger._read_fds.values():
            os.close(fd)
        logger._read_fds.clear()
        if logger._fd >= 0:
            os.close(logger._fd)
            logger._fd = -1
        for fd in storage.index._fds.values():
            os.close(fd)
        storage.index._fds.clear()

    await asyncio.get_running_loop().run_in_executor(storage._flush_io, close_raw)
    storage._flush_io.shutdown(wait=True)


def corrupt_record_size(config: BookieConfig, ledger: int, entry_id: int) -> int:
    """Flip the size prefix of one stored record (a bad sector) while the bookie is down,
    touching nothing else; returns the record's log id."""
    index = LedgerIndex(Path(config.ledger_dir) / "index")
    location = index.get_location(ledger, entry_id)
    index.close()
    assert location is not None
    log_id, offset = split_location(location)
    path = Path(config.ledger_dir) / "logs" / f"{log_id:08x}.log"
    assert not path.with_suffix(".meta").exists()  # the log that was current at the crash
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\xff\xff\xff\xff", offset)
    finally:
        os.close(fd)
    return log_id


async def test_a_log_scanned_past_a_bad_record_is_kept_while_the_index_uses_it(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    live = [entry(2, i) for i in range(5)]
    await add_ok(storage, entry(1, 0), *live)
    await storage.checkpoint()  # in the current log; the LastLogMark moves past them
    await crash_without_sidecar(storage)  # the current log is left without a sidecar

    # A bad sector over the log's first record: the scan that rebuilds its metadata stops
    # there and never sees ledger 2, whose entries come after it.
    log_id = corrupt_record_size(config, 1, 0)

    storage = BookieStorage(config)
    await storage.start()
    try:
        for i, raw in enumerate(live):  # ledger 2 is intact and readable
            assert (await storage.read_entry(2, i))[0] == raw
        # Both ledgers are still in metadata: GC must delete nothing.
        result = await storage.run_gc({1, 2})
        assert result.ledgers_deleted == []
        assert storage.entry_log.path(log_id).exists(), "ledger 2 still points into the log"
        for i, raw in enumerate(live):
            assert (await storage.read_entry(2, i))[0] == raw
    finally:
        await storage.stop()


async def test_compaction_keeps_a_log_with_a_bad_record_the_index_still_uses(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    dead = [entry(1, i, 4000) for i in range(8)]  # mostly garbage once ledger 1 goes
    kept = [entry(2, i) for i in range(3)]
    tail = [entry(3, i) for i in range(5)]
    await add_ok(storage, *dead, *kept, *tail)
    await storage.checkpoint()
    await crash_without_sidecar(storage)

    log_id = corrupt_record_size(config, 3, 0)  # ledger 3's records come after this one

    storage = BookieStorage(config)
    await storage.start()
    try:
        for i in range(1, 5):  # entries 3:1..3:4 are intact
            assert (await storage.read_entry(3, i))[0] == tail[i]
        await storage.run_gc({2, 3})  # ledger 1 deleted from metadata
        await storage.compact(0.5)
        # The scan stopped at the bad record, so its metadata never saw ledger 3.
        assert storage.entry_log.path(log_id).exists(), "ledger 3 still points into the log"
        for i in range(1, 5):
            assert (await storage.read_entry(3, i))[0] == tail[i]
    finally:
        await storage.stop()


async def test_a_version_1_sidecar_is_rebuilt_rather_than_trusted(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    live = [entry(2, i) for i in range(5)]
    await add_ok(storage, entry(1, 0), *live)
    await storage.checkpoint()
    await crash_without_sidecar(storage)
    log_id = corrupt_record_size(config, 1, 0)
    # What the previous release wrote after its scan stopped at the bad record: no flags.
    body = struct.pack(">4sHHQQI", b"SMQL", 1, 0, log_id, 0, 0)
    meta_path = Path(config.ledger_dir) / "logs" / f"{log_id:08x}.meta"
    meta_path.write_bytes(body + struct.pack(">I", crc32c.crc32c(body)))

    storage = BookieStorage(config)
    await storage.start()
    try:
        await storage.run_gc({1, 2})  # nothing was deleted from metadata
        assert storage.entry_log.path(log_id).exists(), "ledger 2 still points into the log"
        for i, raw in enumerate(live):
            assert (await storage.read_entry(2, i))[0] == raw
    finally:
        await storage.stop()


async def test_gc_frees_space_even_when_the_dropped_set_cannot_be_saved(
    storage: BookieStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await write_interleaved(storage, {1: 2000}, 100)  # several logs of ledger 1 only
    before = logs_bytes(storage)
    real_save = DeletedLedgers.save

    def disk_full(self: DeletedLedgers, directory: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DeletedLedgers, "save", disk_full)
    storage.read_only = True  # the disk is full: that is why the bookie went read-only
    await storage.run_gc(set())
    assert logs_bytes(storage) < before / 2, "GC freed nothing on a full disk"
    [refused] = await storage.add_entries([AddOp(entry(1, 500), KEY)])
    assert isinstance(refused, (LedgerFencedError, BookieReadOnlyError))
    assert 1 in storage.deleted

    monkeypatch.setattr(DeletedLedgers, "save", real_save)
    storage.read_only = False
    await storage.run_gc(set())  # space again: the set is saved on the next round
    assert 1 in DeletedLedgers.load(Path(storage.config.ledger_dir))


def test_entry_log_meta_roundtrip() -> None:
    meta = EntryLogMeta(7, 1000, {1: 600, 9: 400})
    assert EntryLogMeta.decode(meta.encode(), 7) == meta
    assert EntryLogMeta.decode(meta.encode(), 8) is None  # another log's sidecar
    assert EntryLogMeta.decode(meta.encode()[:-1], 7) is None
    assert meta.live_fraction == 1.0
    assert EntryLogMeta(3).live_fraction == 0.0
    partial = EntryLogMeta(7, 1000, {1: 600}, partial=True)
    assert EntryLogMeta.decode(partial.encode(), 7) == partial


def test_deleted_ledgers_merge_runs_and_survive_encoding(tmp_path: Path) -> None:
    empty = DeletedLedgers()
    deleted = empty.union([5, 3, 4, 10]).union([6, 12, 11, 1 << 62])
    assert empty.ranges() == []
    assert deleted.ranges() == [(3, 6), (10, 12), (1 << 62, 1 << 62)]
    assert [i for i in (2, 3, 6, 7, 9, 11, 13, 1 << 62) if i in deleted] == [3, 6, 11, 1 << 62]
    assert len(deleted) == 8
    deleted.save(tmp_path)
    assert DeletedLedgers.load(tmp_path).ranges() == deleted.ranges()
    assert DeletedLedgers.load(tmp_path / "elsewhere").ranges() == []  # never collected
    raw = (tmp_path / "deleted-ledgers").read_bytes()
    for damaged in (raw[:-1], raw[:5], raw[:-1] + bytes([raw[-1] ^ 1]), b"XXXX" + raw[4:]):
        with pytest.raises(BookieError):  # guessing could bring a deleted ledger back
            DeletedLedgers.decode(damaged)


# ------------------------------------------------------------------------- crash safety


class Crash(Exception):
    """Stands for the process dying at an instrumented point."""


def crash_after(calls: int, real: Callable[..., object], fired: list[str]) -> Callable[..., object]:
    """``real``, except that its ``calls``-th call runs and then "crashes"."""
    count = 0

    def wrapped(*args: object, **kwargs: object) -> object:
        nonlocal count
        count += 1
        outcome = real(*args, **kwargs)
        if count == calls:
            fired.append(real.__name__)
            raise Crash(f"crash after {real.__name__} #{calls}")
        return outcome

    return wrapped


@pytest.mark.parametrize(
    ("target", "attribute", "calls"),
    [
        ("entry_log", "append_many", 1),  # copies written, not synced, index untouched
        ("entry_log", "sync", 1),  # copies durable, index untouched
        ("index", "set_locations", 5),  # index half moved
        ("index", "sync", 1),  # index moved and durable, old log still there
        ("entry_log", "remove_log", 1),  # log gone, the pass cut short
    ],
)
async def test_crash_during_compaction_loses_nothing(
    tmp_path: Path, target: str, attribute: str, calls: int
) -> None:
    storage = BookieStorage(make_config(tmp_path))
    await storage.start()
    written = await write_interleaved(storage, {1: 3000, 2: 300, 3: 300}, 60)
    await storage.run_gc({2, 3})
    owner = getattr(storage, target)
    fired: list[str] = []
    setattr(owner, attribute, crash_after(calls, getattr(owner, attribute), fired))

    await storage.compact(0.5)  # the "crash" is logged and stops the pass
    assert fired == [attribute]

    storage = await restarted(storage, crash=True)
    try:
        live = {2: written[2], 3: written[3]}
        await assert_readable(storage, live)
        await storage.run_gc({2, 3})
        await storage.compact(0.5)
        assert not list(storage.entry_log.directory.glob("*.meta.tmp"))
        await assert_readable(storage, live)
        storage = await restarted(storage)
        await assert_readable(storage, live)
        await assert_gone(storage, 1)
    finally:
        await storage.stop()


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from stripemq.bookie.config import BookieConfig
    from stripemq.bookie.storage import engine
    from stripemq.bookie.storage.engine import BookieStorage

    engine.COMPACTION_BATCH_BYTES = 4096  # many small steps for the kill to land between

    async def main():
        storage = BookieStorage(BookieConfig(**eval(sys.argv[1])))
        await storage.start()
        real = storage._compact_batch_sync
        def step(*args):
            out = real(*args)
            print("step", flush=True)
            return out
        storage._compact_batch_sync = step
        await storage.run_gc({2, 3})
        await storage.compact(0.5)
        print("done", flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


async def test_sigkill_during_compaction_loses_nothing(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    written = await write_interleaved(storage, {1: 3000, 2: 300, 3: 300}, 60)
    await storage.stop()
    live = {2: written[2], 3: written[3]}
    settings = {
        "data_dir": config.data_dir,
        "flush_interval_ms": 600_000,
        "entry_log_size_limit": LOG_LIMIT,
        "max_entry_size": 16 * 1024,
    }
    killed_mid_way = 0
    for kill_after in (1, 3, 6):
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, repr(settings)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert child.stdout is not None
        seen = 0
        while seen < kill_after:
            line = await asyncio.to_thread(child.stdout.readline)
            if not line or line.startswith(b"done"):
                break
            seen += 1
        killed_mid_way += seen == kill_after
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        storage = BookieStorage(config)
        await storage.start()
        try:
            await assert_readable(storage, live)
        finally:
            await storage.stop()
    assert killed_mid_way >= 2
    storage = BookieStorage(config)
    await storage.start()
    try:
        await storage.run_gc({2, 3})
        await storage.compact(0.5)
        await assert_readable(storage, live)
        await assert_gone(storage, 1)
    finally:
        await storage.stop()


# ------------------------------------------------------------------------- reads vs. compaction


async def test_read_of_a_moved_entry_follows_the_index(storage: BookieStorage) -> None:
    written = await write_interleaved(storage, {1: 3000, 2: 300}, 60)
    await storage.run_gc({2})
    old = {i: storage.index.get_location(2, i) for i in range(len(written[2]))}
    assert (await storage.compact(0.5)).logs_compacted >= 1
    moved = [i for i, location in old.items() if storage.index.get_location(2, i) != location]
    assert moved
    # A reader that looked the location up just before the old log was removed:
    real = storage.index.get_location
    stale = {"armed": True}

    def first_stale(ledger_id: int, entry_id: int) -> int | None:
        if stale["armed"]:
            stale["armed"] = False
            return old[entry_id]
        return real(ledger_id, entry_id)

    storage.index.get_location = first_stale  # type: ignore[method-assign]
    assert storage._read_located(2, moved[0]) == written[2][moved[0]]
    assert not stale["armed"]


async def test_concurrent_reads_during_compaction_get_the_right_bytes(
    storage: BookieStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "COMPACTION_BATCH_BYTES", 2048)
    written = await write_interleaved(storage, {1: 3000, 2: 300, 3: 300}, 80)
    await storage.run_gc({2, 3})
    live = {2: written[2], 3: written[3]}
    stop = asyncio.Event()

    async def reader() -> int:
        reads = 0
        while not stop.is_set():
            await assert_readable(storage, live)
            reads += 1
        return reads

    readers = [asyncio.create_task(reader()) for _ in range(3)]
    result = await storage.compact(0.5)
    stop.set()
    assert all(n >= 1 for n in await asyncio.gather(*readers))
    assert result.logs_compacted >= 1
    await assert_readable(storage, live)


def test_log_removal_waits_for_reads_in_progress(tmp_path: Path) -> None:
    logger = EntryLogger(tmp_path / "logs", 1024, 4096)
    logger.open()
    [location] = logger.append_many([entry(1, 0, 100)])
    logger.sync()
    first = logger.current_log_id
    logger._rotate()
    fd = logger._acquire(first)  # a read in progress on the old log
    done = threading.Event()
    worker = threading.Thread(target=lambda: (logger.remove_log(first), done.set()))
    worker.start()
    assert not done.wait(0.2), "removal must wait for the read"
    assert os.pread(fd, 4, 0) == b"SMQE"
    logger._release(first)
    worker.join(5)
    assert done.is_set()
    with pytest.raises(MissingEntryLogError):
        logger.read(location)
    assert location == make_location(first, 8)
    logger.close()


# ------------------------------------------------------------------------- the collector


class FakeSource:
    """Ledger metadata as GC sees it, with a hook that runs while the listing is under way."""

    def __init__(self, ledgers: set[int], during_listing: Callable[[], object] | None = None):
        self.ledgers = ledgers
        self.during_listing = during_listing
        self.fail_listing = False

    async def ledger_ids(self) -> AsyncIterator[int]:
        for i, ledger_id in enumerate(sorted(self.ledgers)):
            if i == 0 and self.during_listing is not None:
                await self.during_listing()  # type: ignore[misc]
            if self.fail_listing and i == 1:
                raise ConnectionError("metadata service went away")
            yield ledger_id

    async def exists(self, ledger_id: int) -> bool:
        return ledger_id in self.ledgers

    async def is_initialized(self) -> bool:
        return True


async def test_ledger_created_after_the_local_snapshot_is_never_deleted(
    storage: BookieStorage,
) -> None:
    await write_interleaved(storage, {1: 300, 2: 300}, 5)

    async def new_ledger_arrives() -> None:
        # Its metadata was created after the listing passed its place; its entries land now.
        await add_ok(storage, entry(7, 0), entry(7, 1))
        await storage.checkpoint()

    source = FakeSource({1, 5, 6}, during_listing=new_ledger_arrives)
    gc = GarbageCollector(storage, storage.config, lambda: source, verify_metadata=False)
    result = await gc.collect_ledgers()

    assert result is not None and result.ledgers_deleted == [2]
    assert (await storage.read_entry(7, 1))[0] == entry(7, 1)
    assert await storage.local_ledger_ids() == {1, 7}


async def test_failed_listing_deletes_nothing(storage: BookieStorage) -> None:
    written = await write_interleaved(storage, {1: 300, 2: 300, 3: 300}, 5)
    source = FakeSource({1, 4})
    source.fail_listing = True
    gc = GarbageCollector(storage, storage.config, lambda: source)
    assert await gc.collect_ledgers() is None
    assert gc.listing_failures == 1
    await assert_readable(storage, written)
    # No store at all: nothing to compare with, nothing deleted.
    assert await GarbageCollector(storage, storage.config, lambda: None).collect_ledgers() is None
    await assert_readable(storage, written)


async def test_second_look_keeps_a_ledger_the_listing_missed(storage: BookieStorage) -> None:
    written = await write_interleaved(storage, {1: 300, 2: 300}, 5)
    source = FakeSource({1, 2})

    async def listing_missing_2() -> AsyncIterator[int]:
        yield 1

    source.ledger_ids = listing_missing_2  # type: ignore[method-assign]
    gc = GarbageCollector(storage, storage.config, lambda: source)
    result = await gc.collect_ledgers()
    assert result is not None and result.ledgers_deleted == []
    await assert_readable(storage, written)


async def test_collector_with_ledger_manager_on_a_metadata_store(storage: BookieStorage) -> None:
    store = create_metadata_store("memory://")
    await store.start()
    try:
        manager = LedgerManager(store)
        metadata = LedgerMetadata(1, 1, 1, {0: ("127.0.0.1:3181",)}, master_key_for(b"p").hex())
        ids = [await manager.create(metadata) for _ in range(4)]
        sizes = dict.fromkeys(ids, 300)
        written = await write_interleaved(storage, sizes, 10)
        await manager.delete(ids[0])
        await manager.delete(ids[2])
        gc = GarbageCollector(storage, storage.config, lambda: manager)
        round_ = await gc.run_once()
        assert round_.ledgers is not None
        assert round_.ledgers.ledgers_deleted == [ids[0], ids[2]]
        await assert_gone(storage, ids[0])
        await assert_readable(storage, {ids[1]: written[ids[1]], ids[3]: written[ids[3]]})
        text = BookieMetrics(storage).render().decode()
        assert "bookie_DELETED_LEDGER_TOTAL 2.0" in text
        assert "bookie_entry_log_live_bytes" in text
    finally:
        await store.close()


async def test_gc_refuses_a_metadata_store_that_never_allocated_a_ledger(
    storage: BookieStorage,
) -> None:
    written = await write_interleaved(storage, {1: 100, 2: 100}, 10)
    store = create_metadata_store("memory://")
    await store.start()
    try:
        gc = GarbageCollector(storage, storage.config, lambda: LedgerManager(store))
        assert await gc.collect_ledgers() is None  # an empty, foreign store deletes nothing
        await assert_readable(storage, written)
    finally:
        await store.close()


async def test_compaction_schedule_follows_thresholds_and_intervals(tmp_path: Path) -> None:
    now = [0.0]
    config = make_config(
        tmp_path,
        minor_compaction_interval_s=10,
        major_compaction_interval_s=100,
        minor_compaction_threshold=0.2,
        major_compaction_threshold=0.8,
    )
    storage = BookieStorage(config)
    await storage.start()
    try:
        written = await write_interleaved(storage, {1: 3000, 2: 1000}, 60)  # ~25% live
        source = FakeSource({2})
        gc = GarbageCollector(storage, config, lambda: source, clock=lambda: now[0])
        assert (await gc.run_once()).compaction is None  # nothing due yet
        now[0] = 10
        minor = await gc.run_once()
        assert minor.compaction is not None and not minor.major
        assert minor.compaction.logs_compacted == 0  # 25% live is above the minor threshold
        now[0] = 100
        major = await gc.run_once()
        assert major.major and major.compaction is not None
        assert major.compaction.logs_compacted >= 1
        await assert_readable(storage, {2: written[2]})
        now[0] = 105
        assert (await gc.run_once()).compaction is None  # a major round resets the minor clock
    finally:
        await storage.stop()
    disabled = make_config(tmp_path, major_compaction_threshold=0, minor_compaction_interval_s=0)
    assert not disabled.major_compaction_enabled and not disabled.minor_compaction_enabled


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"minor_compaction_threshold": "1.5"}, "minor_compaction_threshold"),
        ({"major_compaction_threshold": "-0.1"}, "major_compaction_threshold"),
        ({"minor_compaction_interval_s": "-1"}, "minor_compaction_interval_s"),
        (
            {"minor_compaction_threshold": "0.9", "major_compaction_threshold": "0.5"},
            "must not exceed",
        ),
    ],
)
def test_bad_gc_settings_are_refused(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(BookieConfig, None, overrides)


def test_gc_settings_defaults_and_switches() -> None:
    config = load_config(BookieConfig, None, {"gc_wait_time_ms": "0"})
    assert not config.gc_enabled
    defaults = BookieConfig()
    assert defaults.gc_wait_time_ms == 900_000
    assert (defaults.minor_compaction_threshold, defaults.major_compaction_threshold) == (0.2, 0.8)
    assert (defaults.minor_compaction_interval_s, defaults.major_compaction_interval_s) == (
        3600,
        86400,
    )
    # Minor above major is fine when major compaction is off.
    load_config(
        BookieConfig, None, {"minor_compaction_threshold": "0.9", "major_compaction_threshold": "0"}
    )
