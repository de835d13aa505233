"""The bookie storage engine driven directly: journal, memtable, entry logs, index, recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stripemq.bookie.config import BookieConfig
from stripemq.bookie.storage import files as files_module
from stripemq.bookie.storage.engine import AddOp, BookieStorage, decode_mark, encode_mark
from stripemq.bookie.storage.journal import (
    LogMark,
    RecordType,
    decode_records,
    encode_record,
    list_journals,
)
from stripemq.errors import (
    BookieReadOnlyError,
    DigestMismatchError,
    DiskFullError,
    EntryTooLargeError,
    InvalidEntryError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadTimeoutError,
    UnauthorizedAccessError,
)
from stripemq.proto.entry import HEADER_SIZE, EntryHeader, encode_entry, verify_entry
from stripemq.testing.faults import FullDisk

KEY = b"master-key"


def make_config(tmp_path: Path, **overrides: object) -> BookieConfig:
    settings: dict[str, object] = {
        "data_dir": str(tmp_path / "bookie"),
        "flush_interval_ms": 600_000,
    }
    settings.update(overrides)
    return BookieConfig(**settings)  # type: ignore[arg-type]


def entry(ledger: int, entry_id: int, payload: bytes | None = None) -> bytes:
    data = payload if payload is not None else f"ledger {ledger} entry {entry_id}".encode()
    return encode_entry(ledger, entry_id, entry_id - 1, data)


async def add(storage: BookieStorage, *entries: bytes, key: bytes = KEY, recovery: bool = False):
    results = await storage.add_entries([AddOp(e, key, recovery) for e in entries])
    return results


async def add_ok(storage: BookieStorage, *entries: bytes) -> None:
    for result in await add(storage, *entries):
        assert isinstance(result, EntryHeader), result


@pytest.fixture
async def storage(tmp_path: Path):
    store = BookieStorage(make_config(tmp_path))
    await store.start()
    yield store
    await store.stop()


# ------------------------------------------------------------------------- formats


def test_entry_roundtrip_and_digest() -> None:
    raw = encode_entry(7, 3, 2, b"hello")
    header = verify_entry(raw)
    assert (header.ledger_id, header.entry_id, header.lac, header.length) == (7, 3, 2, 5)
    assert header.data_length == 5
    assert raw[HEADER_SIZE:] == b"hello"
    # The length field is the ledger's length through this entry, as in BookKeeper.
    assert verify_entry(encode_entry(7, 4, 3, b"world", length=10)).length == 10
    with pytest.raises(InvalidEntryError):
        encode_entry(7, 4, 3, b"world", length=4)
    flipped = bytearray(raw)
    flipped[-1] ^= 0x01
    with pytest.raises(DigestMismatchError):
        verify_entry(bytes(flipped))
    header_flip = bytearray(raw)
    header_flip[20] ^= 0x01  # inside the lac field
    with pytest.raises(DigestMismatchError):
        verify_entry(bytes(header_flip))
    with pytest.raises(DigestMismatchError):  # truncated data no longer matches the CRC
        verify_entry(raw[:-1])
    with pytest.raises(InvalidEntryError):
        verify_entry(b"short")


def test_journal_records_stop_at_torn_tail() -> None:
    records = [encode_record(RecordType.ENTRY, 1, b"a" * 10), encode_record(RecordType.FENCE, 1)]
    buf = b"".join(records)
    assert [r.type for r, _ in decode_records(buf, 0)] == [RecordType.ENTRY, RecordType.FENCE]
    torn = buf[:-3]
    assert [r.type for r, _ in decode_records(torn, 0)] == [RecordType.ENTRY]
    corrupt = bytearray(buf)
    corrupt[len(records[0]) - 1] ^= 0xFF
    assert list(decode_records(bytes(corrupt), 0)) == []


def test_mark_roundtrip_and_corruption() -> None:
    raw = encode_mark(LogMark(5, 1234))
    assert decode_mark(raw) == LogMark(5, 1234)
    assert decode_mark(raw[:-1]) is None
    assert decode_mark(bytes([raw[0] ^ 1]) + raw[1:]) is None


# ------------------------------------------------------------------------- write and read


async def test_add_and_read_back(storage: BookieStorage) -> None:
    entries = [entry(1, i) for i in range(50)]
    await add_ok(storage, *entries)
    for i, raw in enumerate(entries):
        got, state = await storage.read_entry(1, i)
        assert got == raw
    assert state.lac == 48 and state.last_entry_id == 49
    last, _ = await storage.read_entry(1, -1)
    assert last == entries[-1]


async def test_reads_after_checkpoint_come_from_entry_log(storage: BookieStorage) -> None:
    entries = [entry(2, i, os.urandom(300)) for i in range(20)]
    await add_ok(storage, *entries)
    await storage.checkpoint()
    assert storage.memtable.size_bytes == 0
    for i, raw in enumerate(entries):
        assert (await storage.read_entry(2, i))[0] == raw


async def test_batch_reads_answer_a_prefix_in_order_from_memtable_and_disk(
    storage: BookieStorage,
) -> None:
    on_disk = [entry(4, i, os.urandom(1000)) for i in range(10)]
    await add_ok(storage, *on_disk)
    await storage.checkpoint()
    in_memtable = [entry(4, i, os.urandom(1000)) for i in range(10, 20)]
    await add_ok(storage, *in_memtable)
    wanted = [12, 3, 15, 0, 9]
    got, state = await storage.read_entries(4, wanted)
    everything = on_disk + in_memtable
    assert got == [everything[i] for i in wanted]
    assert state.lac == 18
    # A byte limit cuts the answer to a prefix, but never to nothing.
    got, _ = await storage.read_entries(4, list(range(20)), max_bytes=3 * len(on_disk[0]))
    assert got == everything[:3]
    got, _ = await storage.read_entries(4, [5, 6], max_bytes=1)
    assert got == [on_disk[5]]
    # An entry this bookie lacks ends the answer; lacking the first is an error.
    assert (await storage.read_entries(4, [1, 99, 2]))[0] == [on_disk[1]]
    assert (await storage.read_entries(4, [12, 99]))[0] == [in_memtable[2]]
    with pytest.raises(NoSuchEntryError):
        await storage.read_entries(4, [99, 1])
    with pytest.raises(NoSuchLedgerError):
        await storage.read_entries(404, [0])
    with pytest.raises(InvalidEntryError):
        await storage.read_entries(4, [-1])


async def test_missing_ledger_and_entry(storage: BookieStorage) -> None:
    with pytest.raises(NoSuchLedgerError):
        await storage.read_entry(404, 0)
    await add_ok(storage, entry(3, 0))
    with pytest.raises(NoSuchEntryError):
        await storage.read_entry(3, 5)
    await storage.checkpoint()
    with pytest.raises(NoSuchEntryError):
        await storage.read_entry(3, 5)


async def test_bad_adds_are_refused_and_the_rest_succeed(tmp_path: Path) -> None:
    storage = BookieStorage(make_config(tmp_path, max_entry_size=1024))
    await storage.start()
    try:
        good = entry(4, 0)
        too_big = encode_entry(4, 1, 0, b"x" * 2000)
        corrupt = bytearray(entry(4, 2))
        corrupt[-1] ^= 0xFF
        huge_id = encode_entry(4, 1 << 50, 0, b"x")
        results = await add(storage, good, too_big, bytes(corrupt), huge_id, b"garbage")
        assert isinstance(results[0], EntryHeader)
        assert isinstance(results[1], EntryTooLargeError)
        assert isinstance(results[2], DigestMismatchError)
        assert isinstance(results[3], InvalidEntryError)
        assert isinstance(results[4], InvalidEntryError)
        (wrong_key,) = await add(storage, entry(4, 3), key=b"other")
        assert isinstance(wrong_key, UnauthorizedAccessError)
        # An identical re-add is accepted (recovery re-replicates); other data is refused.
        assert isinstance((await add(storage, good))[0], EntryHeader)
        (dup,) = await add(storage, encode_entry(4, 0, -1, b"different"))
        assert isinstance(dup, InvalidEntryError)
        assert (await storage.read_entry(4, 0))[0] == good
    finally:
        await storage.stop()


async def test_fence_refuses_writer_but_allows_recovery_adds(storage: BookieStorage) -> None:
    await add_ok(storage, entry(5, 0), entry(5, 1))
    with pytest.raises(UnauthorizedAccessError):
        await storage.fence(5, b"wrong")
    state = await storage.fence(5, KEY)
    assert state.fenced and state.lac == 0
    (refused,) = await add(storage, entry(5, 2))
    assert isinstance(refused, LedgerFencedError)
    (recovered,) = await add(storage, entry(5, 2), recovery=True)
    assert isinstance(recovered, EntryHeader)


async def test_long_poll_waits_for_lac(storage: BookieStorage) -> None:
    import asyncio

    await add_ok(storage, entry(6, 0), entry(6, 1))  # LAC known to the bookie: 0
    with pytest.raises(ReadTimeoutError):
        await storage.read_entry(6, 1, long_poll_timeout_ms=50)
    waiter = asyncio.create_task(storage.read_entry(6, 1, long_poll_timeout_ms=5000))
    await asyncio.sleep(0)
    assert not waiter.done()
    await storage.write_lac(6, KEY, 1)
    got, state = await asyncio.wait_for(waiter, 5)
    assert got == entry(6, 1) and state.lac == 1


# ------------------------------------------------------------------------- restart and recovery


async def test_restart_after_clean_stop(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    await add_ok(storage, *[entry(7, i) for i in range(100)])
    await storage.fence(7, KEY)
    await storage.stop()

    reopened = BookieStorage(make_config(tmp_path))
    await reopened.start()
    try:
        for i in range(100):
            assert (await reopened.read_entry(7, i))[0] == entry(7, i)
        state = await reopened.ledger_state(7)
        assert state.fenced and state.last_entry_id == 99 and state.lac == 98
        (refused,) = await add(reopened, entry(7, 100))
        assert isinstance(refused, LedgerFencedError)
        # A clean stop checkpointed everything: only the fresh journal remains.
        assert len(list_journals(Path(config.journal_dir))) == 1
    finally:
        await reopened.stop()


async def test_crash_recovery_replays_journal_after_the_mark(tmp_path: Path) -> None:
    config = make_config(tmp_path, journal_max_size_mb=1)
    storage = BookieStorage(config)
    await storage.start()
    before = [entry(8, i, os.urandom(2000)) for i in range(600)]  # > 1 MiB: journal rotates
    await add_ok(storage, *before[:300])
    await add_ok(storage, *before[300:])
    mark = await storage.checkpoint()
    after = [entry(8, 600 + i) for i in range(50)]
    await add_ok(storage, *after)
    await storage.write_lac(8, KEY, 649)
    await storage.fence(8, KEY)
    journals = list_journals(Path(config.journal_dir))
    assert journals[0] >= mark.journal_id  # files before the mark were deleted
    await storage.abort()  # crash: nothing after the mark reaches the entry log

    recovered = BookieStorage(make_config(tmp_path, journal_max_size_mb=1))
    await recovered.start()
    try:
        for i, raw in enumerate(before + after):
            assert (await recovered.read_entry(8, i))[0] == raw
        state = await recovered.ledger_state(8)
        assert state.fenced and state.lac == 649 and state.last_entry_id == 649
    finally:
        await recovered.stop()


async def test_torn_journal_tail_is_ignored(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    await add_ok(storage, *[entry(9, i) for i in range(10)])
    await storage.abort()
    # Then tear the last record in half, as a power cut mid-write would.
    last = Path(config.journal_dir) / f"{list_journals(Path(config.journal_dir))[-1]:016x}.txn"
    size = last.stat().st_size
    with open(last, "r+b") as handle:
        handle.truncate(size - 10)

    recovered = BookieStorage(make_config(tmp_path))
    await recovered.start()
    try:
        for i in range(9):
            assert (await recovered.read_entry(9, i))[0] == entry(9, i)
        with pytest.raises(NoSuchEntryError):
            await recovered.read_entry(9, 9)
        # The bookie keeps working after the torn tail.
        await add_ok(recovered, entry(9, 9))
        assert (await recovered.read_entry(9, 9))[0] == entry(9, 9)
    finally:
        await recovered.stop()


async def test_entry_log_rotation_and_index_across_restarts(tmp_path: Path) -> None:
    config = make_config(tmp_path, entry_log_size_limit=64 * 1024)
    storage = BookieStorage(config)
    await storage.start()
    written = {}
    for ledger in (10, 11, 12):
        for i in range(40):
            written[(ledger, i)] = entry(ledger, i, os.urandom(1500))
    await add_ok(storage, *written.values())
    await storage.stop()
    logs = list((Path(config.ledger_dir) / "logs").glob("*.log"))
    assert len(logs) >= 3

    reopened = BookieStorage(make_config(tmp_path, entry_log_size_limit=64 * 1024))
    await reopened.start()
    try:
        for (ledger, i), raw in written.items():
            assert (await reopened.read_entry(ledger, i))[0] == raw
    finally:
        await reopened.stop()


async def test_corrupt_entry_log_record_is_never_served(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    entries = [entry(13, i, b"P" * 100) for i in range(3)]
    await add_ok(storage, *entries)
    await storage.stop()
    log_file = sorted((Path(config.ledger_dir) / "logs").glob("*.log"))[-1]
    data = bytearray(log_file.read_bytes())
    second = data.find(entries[1])
    data[second + HEADER_SIZE + 5] ^= 0xFF  # flip a payload byte of entry 1
    log_file.write_bytes(bytes(data))

    reopened = BookieStorage(make_config(tmp_path))
    await reopened.start()
    try:
        with pytest.raises(DigestMismatchError):
            await reopened.read_entry(13, 1)
        assert (await reopened.read_entry(13, 0))[0] == entries[0]
        assert (await reopened.read_entry(13, 2))[0] == entries[2]
    finally:
        await reopened.stop()


async def test_entry_log_cut_while_running_does_not_misplace_later_entries(
    tmp_path: Path,
) -> None:
    """Appends land at the file's end: once the current log is cut behind the bookie's back,
    later entries go to a new log, so the index never points them at the wrong bytes."""
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    try:
        before = [entry(16, i, b"B" * 200) for i in range(4)]
        await add_ok(storage, *before)
        await storage.checkpoint()
        log_file = sorted((Path(config.ledger_dir) / "logs").glob("*.log"))[-1]
        os.truncate(log_file, log_file.stat().st_size - 10)  # into entry 3's record

        after = [entry(17, i, b"A" * 300) for i in range(4)]
        await add_ok(storage, *after)
        await storage.checkpoint()
        logs = sorted((Path(config.ledger_dir) / "logs").glob("*.log"))
        assert logs[-1] != log_file
        for i, raw in enumerate(after):
            assert (await storage.read_entry(17, i))[0] == raw
        for i, raw in enumerate(before[:3]):
            assert (await storage.read_entry(16, i))[0] == raw
        with pytest.raises(DigestMismatchError):
            await storage.read_entry(16, 3)
    finally:
        await storage.stop()

    reopened = BookieStorage(make_config(tmp_path))
    await reopened.start()
    try:
        for i, raw in enumerate(after):
            assert (await reopened.read_entry(17, i))[0] == raw
        with pytest.raises(DigestMismatchError):
            await reopened.read_entry(16, 3)
    finally:
        await reopened.stop()


async def test_damaged_record_size_is_a_digest_error_and_a_recovery_add_repairs_it(
    tmp_path: Path,
) -> None:
    """A grown size prefix makes a ledger's first entry look malformed (longer than the
    ledger): that is corruption on disk, not a bad request, so a good copy may replace it."""
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    try:
        first = entry(18, 0, b"F" * 100)
        await add_ok(storage, first, entry(18, 1, b"S" * 100))
        await storage.checkpoint()
        log_file = sorted((Path(config.ledger_dir) / "logs").glob("*.log"))[-1]
        data = bytearray(log_file.read_bytes())
        record = data.find(first) - 4
        data[record + 3] ^= 0x10  # the size, 136 (0x88), becomes 152: 16 bytes too many
        log_file.write_bytes(bytes(data))
        with pytest.raises(DigestMismatchError):
            await storage.read_entry(18, 0)
        (result,) = await add(storage, first, recovery=True)
        assert isinstance(result, EntryHeader), result
        await storage.checkpoint()
        assert (await storage.read_entry(18, 0))[0] == first
    finally:
        await storage.stop()


async def test_full_journal_disk_fails_adds_and_turns_read_only(
    storage: BookieStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_ok(storage, entry(14, 0))
    monkeypatch.setattr(files_module, "os", FullDisk())
    (failed,) = await add(storage, entry(14, 1))
    assert isinstance(failed, DiskFullError)
    assert storage.read_only
    (refused,) = await add(storage, entry(14, 2))
    assert isinstance(refused, BookieReadOnlyError)
    # Reads keep working, and once space is back and the bookie writable, adds resume.
    assert (await storage.read_entry(14, 0))[0] == entry(14, 0)
    monkeypatch.setattr(files_module, "os", os)
    storage.read_only = False  # what the disk monitor does when usage falls
    await add_ok(storage, entry(14, 1), entry(14, 2))
    assert (await storage.read_entry(14, 2))[0] == entry(14, 2)


async def test_full_disk_while_the_journal_rotates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    await add_ok(storage, entry(15, 0))
    storage.journal.max_file_size = 0  # the next group must open a new journal file
    monkeypatch.setattr(files_module, "os", FullDisk())
    (failed,) = await add(storage, entry(15, 1))
    assert isinstance(failed, DiskFullError)
    monkeypatch.setattr(files_module, "os", os)
    storage.read_only = False
    await add_ok(storage, entry(15, 1))  # the half-made file did not wedge the journal
    await storage.abort()
    recovered = BookieStorage(make_config(tmp_path))
    await recovered.start()
    try:
        assert (await recovered.read_entry(15, 1))[0] == entry(15, 1)
    finally:
        await recovered.stop()


async def test_full_ledger_disk_during_checkpoint_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    entries = [entry(16, i, os.urandom(500)) for i in range(5)]
    await add_ok(storage, *entries)
    monkeypatch.setattr(files_module, "os", FullDisk())
    with pytest.raises(OSError):
        await storage.checkpoint()
    assert storage.read_only  # a bookie that cannot flush takes no more writes
    monkeypatch.setattr(files_module, "os", os)
    await storage.checkpoint()  # space is back: the kept memtable flushes
    await storage.abort()
    recovered = BookieStorage(make_config(tmp_path))
    await recovered.start()
    try:
        for i, raw in enumerate(entries):
            assert (await recovered.read_entry(16, i))[0] == raw
    finally:
        await recovered.stop()


async def test_no_add_is_acknowledged_after_a_fence(storage: BookieStorage) -> None:
    import asyncio

    await add_ok(storage, entry(17, 0), entry(17, 1))
    await storage.checkpoint()  # a re-add of entry 1 now reads the entry log in a thread
    events: list[str] = []

    async def late_add() -> None:
        (result,) = await add(storage, entry(17, 1))
        events.append("add ok" if isinstance(result, EntryHeader) else type(result).__name__)

    async def fence() -> None:
        await storage.fence(17, KEY)
        events.append("fenced")

    await asyncio.gather(late_add(), fence())  # the add starts first, then awaits a read
    assert sorted(events) == ["LedgerFencedError", "fenced"]


async def test_stop_during_a_timed_flush_is_clean(tmp_path: Path) -> None:
    import asyncio

    storage = BookieStorage(make_config(tmp_path, flush_interval_ms=1))
    await storage.start()
    for i in range(30):
        await add_ok(storage, entry(18, i, os.urandom(20_000)))
        await asyncio.sleep(0)
    await storage.stop()  # must not raise, wherever the timer's flush was
    reopened = BookieStorage(make_config(tmp_path))
    await reopened.start()
    try:
        assert (await reopened.read_entry(18, 29))[0][HEADER_SIZE:] != b""
        assert len(list_journals(Path(reopened.config.journal_dir))) == 1
    finally:
        await reopened.stop()


async def test_unreadable_index_header_leaves_the_rest_served(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    storage = BookieStorage(config)
    await storage.start()
    await add_ok(storage, entry(19, 0), entry(20, 0))
    await storage.stop()
    index_file = storage.index.path(19)
    raw = bytearray(index_file.read_bytes())
    raw[10] ^= 0xFF
    index_file.write_bytes(bytes(raw))

    reopened = BookieStorage(make_config(tmp_path))
    await reopened.start()
    try:
        assert (await reopened.read_entry(20, 0))[0] == entry(20, 0)
        assert (await reopened.read_entry(19, 0))[0] == entry(19, 0)
        (refused,) = await add(reopened, entry(19, 1))
        assert isinstance(refused, LedgerFencedError)  # fence state unknown: assume fenced
        await add_ok(reopened, entry(20, 1))
    finally:
        await reopened.stop()


# ------------------------------------------------------------------------- group commit


async def test_group_commit_covers_many_adds_with_one_fsync(tmp_path: Path) -> None:
    """Concurrent adds share fsyncs. The group waits for company (BookKeeper's default) so
    the count does not depend on how fast this machine's disk is; the flush-when-empty
    grouping is driven step by step in test_journal_group_commit.py."""
    import asyncio

    config = make_config(
        tmp_path, journal_flush_when_queue_empty=False, journal_max_group_wait_ms=500.0
    )
    storage = BookieStorage(config)
    await storage.start()
    try:
        before = storage.journal.fsync_count
        batches = [[entry(21, b * 10 + i) for i in range(10)] for b in range(50)]
        await asyncio.gather(*(add_ok(storage, *batch) for batch in batches))
        fsyncs = storage.journal.fsync_count - before
        assert 1 <= fsyncs < len(batches) // 5, f"500 concurrent adds took {fsyncs} fsyncs"
    finally:
        await storage.stop()


async def test_journal_sync_data_false_skips_fsync(tmp_path: Path) -> None:
    storage = BookieStorage(make_config(tmp_path, journal_sync_data=False))
    await storage.start()
    try:
        await add_ok(storage, *[entry(22, i) for i in range(20)])
        assert storage.journal.fsync_count == 0
        assert (await storage.read_entry(22, 19))[0] == entry(22, 19)
    finally:
        await storage.stop()


# ------------------------------------------------------------------------- journal properties

_record_types = st.sampled_from([RecordType.ENTRY, RecordType.FENCE, RecordType.MASTER_KEY])
_records = st.lists(
    st.tuples(_record_types, st.integers(0, 2**63), st.binary(max_size=64)), max_size=12
)


@given(records=_records, cut=st.integers(min_value=0))
def test_any_torn_journal_replays_a_prefix_of_what_was_written(
    records: list[tuple[RecordType, int, bytes]], cut: int
) -> None:
    encoded = [encode_record(kind, ledger, body) for kind, ledger, body in records]
    buf = b"".join(encoded)
    torn = buf[: cut % (len(buf) + 1)]
    replayed = [(r.type, r.ledger_id, r.body) for r, _ in decode_records(torn, 0)]
    assert replayed == records[: len(replayed)]
    assert sum(map(len, encoded[: len(replayed)])) <= len(torn)


@given(records=_records.filter(bool), position=st.integers(min_value=0), flip=st.integers(1, 255))
def test_a_corrupted_byte_never_replays_as_a_different_record(
    records: list[tuple[RecordType, int, bytes]], position: int, flip: int
) -> None:
    buf = bytearray(b"".join(encode_record(kind, ledger, body) for kind, ledger, body in records))
    buf[position % len(buf)] ^= flip
    replayed = [(r.type, r.ledger_id, r.body) for r, _ in decode_records(bytes(buf), 0)]
    assert replayed == records[: len(replayed)]
    assert len(replayed) < len(records)
