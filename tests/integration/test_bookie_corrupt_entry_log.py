"""One replica's entry log is damaged on disk (a bit flip, or its tail cut): real ZooKeeper,
two real bookie processes, ledgers E2/Qw2/Qa2 through the ledger client.

Whatever the damage hits, the client reads every entry back byte for byte (the bad copy fails
on the damaged bookie and the read moves to the other replica), the damaged bookie answers an
error for the damaged entries only and keeps serving everything else, accepts new ledgers,
restarts after a SIGKILL, and garbage-collects and compacts the damaged log without a crash.
Also the helpers of ``stripemq.chaos.corruption`` on their own.
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.client import BookKeeper, ClientConfig
from stripemq.bookie.client.ledger_handle import LedgerHandle
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.storage.entry_log import FILE_MAGIC
from stripemq.chaos.corruption import (
    LOG_HEADER_SIZE,
    Corruption,
    corrupt_entry_log,
    entry_log_files,
    flip_bit,
    pick_entry_log,
    truncate_tail,
)
from stripemq.errors import (
    BookieError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from stripemq.metadata import MetadataStore
from stripemq.proto.entry import HEADER_SIZE, verify_entry
from stripemq.testing.bookie import BookieProcess
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.polling import until

pytestmark = pytest.mark.integration

SETTINGS: dict[str, object] = {
    "flush_interval_ms": 50,
    "gc_wait_time_ms": 200,
    "major_compaction_threshold": 0.95,
    "major_compaction_interval_s": 0.2,
    "minor_compaction_threshold": 0.2,
    "minor_compaction_interval_s": 0.2,
}
CFG = ClientConfig(
    add_entry_timeout_s=10.0,
    read_entry_timeout_s=5.0,
    explicit_lac_interval_ms=0,
    speculative_read_timeout_ms=0,
)
KEPT_ENTRIES = 40
DOOMED_ENTRIES = 10
SEEDS = {"bit_flip": 18, "truncate": 81}
SEED_ENV = "STRIPEMQ_CORRUPTION_SEED"  # replays (or varies) where the damage falls
_SIZE = struct.Struct(">I")
_IDS = struct.Struct(">QQ")


def payload(name: str, entry_id: int, size: int) -> bytes:
    return (f"{name}:{entry_id:04d}|".encode() * size)[:size]


@dataclass(frozen=True)
class Record:
    """One ``size | entry`` record of an entry log, where it lies in the file."""

    start: int
    end: int
    ledger_id: int
    entry_id: int


def log_records(path: Path) -> list[Record]:
    """The whole records of an entry log, in file order (stops at a torn tail)."""
    raw = path.read_bytes()
    out: list[Record] = []
    offset = LOG_HEADER_SIZE
    while offset + _SIZE.size <= len(raw):
        (size,) = _SIZE.unpack_from(raw, offset)
        end = offset + _SIZE.size + size
        if size < HEADER_SIZE or end > len(raw):
            break
        ledger_id, entry_id = _IDS.unpack_from(raw, offset + _SIZE.size)
        out.append(Record(offset, end, ledger_id, entry_id))
        offset = end
    return out


def ledger_dir(bookie: BookieProcess) -> Path:
    return Path(BookieConfig(data_dir=str(bookie.data_dir)).ledger_dir)


def stored(bookie: BookieProcess) -> set[tuple[int, int]]:
    return {
        (r.ledger_id, r.entry_id)
        for path in entry_log_files(ledger_dir(bookie))
        for r in log_records(path)
    }


def log_bytes(bookie: BookieProcess) -> int:
    return sum(path.stat().st_size for path in entry_log_files(ledger_dir(bookie)))


def damaged_entries(records: list[Record], corruption: Corruption) -> set[tuple[int, int]]:
    """The entries whose stored bytes the corruption changed or cut."""
    if corruption.kind == "bit_flip":
        hit = [r for r in records if r.start <= corruption.offset < r.end]
    else:
        hit = [r for r in records if r.end > corruption.offset]
    return {(r.ledger_id, r.entry_id) for r in hit}


async def write_ledger(
    bk: BookKeeper, name: str, entries: int, size: int
) -> tuple[int, list[bytes]]:
    handle: LedgerHandle = await bk.create_ledger(2, 2, 2)
    data = [payload(name, i, size) for i in range(entries)]
    await asyncio.gather(*(handle.add_entry_async(d) for d in data))
    await handle.close()
    return handle.ledger_id, data


async def read_back(
    store: MetadataStore,
    ledgers: dict[int, list[bytes]],
    damaged: set[tuple[int, int]],
    first: str,
    other: str,
) -> None:
    """Every entry through a fresh ledger client that asks ``first`` before ``other``; if
    ``first`` holds damaged entries of these ledgers, the client must have seen it fail."""
    async with BookKeeper(store, CFG) as bk:
        bk.health.record_failure(other)  # asked last: the damaged replica is read first
        for ledger_id, data in ledgers.items():
            handle = await bk.open_ledger(ledger_id, recovery=False)
            got = await handle.read_entries(0, len(data) - 1)
            assert [e.data for e in got] == data, f"ledger {ledger_id} read back wrong"
            for entry_id in range(len(data)):  # one by one too: the single-read path
                assert (await handle.read_entry(entry_id)).data == data[entry_id]
        if any(ledger_id in ledgers for ledger_id, _ in damaged):
            assert bk.health.failed_recently(first), "the damaged replica was never read"


@pytest.fixture
async def direct() -> AsyncIterator[dict[str, BookieClient]]:
    """Raw bookie clients by address (made on demand by ``client_for``)."""
    clients: dict[str, BookieClient] = {}
    yield clients
    for client in clients.values():
        await client.close()


async def client_for(clients: dict[str, BookieClient], bookie: BookieProcess) -> BookieClient:
    client = clients.get(bookie.address)
    if client is None:
        client = clients[bookie.address] = BookieClient(bookie.address, timeout=5.0)
        await client.connect()
    return client


async def check_direct_reads(
    client: BookieClient,
    ledgers: dict[int, list[bytes]],
    damaged: set[tuple[int, int]],
) -> None:
    """The damaged bookie answers an error for a damaged entry, the right bytes otherwise."""
    for ledger_id, data in ledgers.items():
        for entry_id, expected in enumerate(data):
            if (ledger_id, entry_id) in damaged:
                with pytest.raises((DigestMismatchError, NoSuchEntryError)):
                    result = await client.read_entry(ledger_id, entry_id)
                    pytest.fail(f"damaged {ledger_id}:{entry_id} was served: {result.entry!r}")
            else:
                result = await client.read_entry(ledger_id, entry_id)
                assert result.entry[HEADER_SIZE:] == expected
                assert verify_entry(result.entry).entry_id == entry_id
        # A batch read stops at (or fails on) the first damaged entry, never serves it.
        try:
            batch, _lac = await client.read_entries(ledger_id, list(range(len(data))))
        except BookieError:
            assert any(lid == ledger_id for lid, _ in damaged), f"ledger {ledger_id} intact"
            continue
        for entry_id, raw in enumerate(batch):
            assert (ledger_id, entry_id) not in damaged
            assert raw[HEADER_SIZE:] == data[entry_id]


def assert_no_traceback(bookie: BookieProcess) -> None:
    text = bookie.log_path.read_text(errors="replace")
    assert "Traceback" not in text, f"{bookie.address} logged a traceback:\n{bookie.tail_log(80)}"


@pytest.mark.parametrize("kind", ["bit_flip", "truncate"])
async def test_a_damaged_entry_log_costs_one_replica_of_the_damaged_entries_only(
    kind: str,
    metadata_url: str,
    store: MetadataStore,
    tmp_path: Path,
    direct: dict[str, BookieClient],
) -> None:
    cluster = BookieCluster(metadata_url, tmp_path / "bookies", 2, settings=SETTINGS)
    async with cluster, BookKeeper(store, CFG) as bk:
        victim, healthy = cluster.bookies
        # A small ledger to delete later, then a larger one that stays: after the delete the
        # damaged log is mostly live, below the compaction threshold.
        doomed_id, doomed = await write_ledger(bk, "doomed", DOOMED_ENTRIES, 400)
        kept_id, kept = await write_ledger(bk, "kept", KEPT_ENTRIES, 1000)
        ledgers = {doomed_id: doomed, kept_id: kept}
        every = {(lid, e) for lid, data in ledgers.items() for e in range(len(data))}
        await until(lambda: every <= stored(victim), "the entries are in the victim's entry log")

        logs = entry_log_files(ledger_dir(victim))
        assert len(logs) == 1, logs
        records = log_records(logs[0])
        seed = int(os.environ.get(SEED_ENV, SEEDS[kind]))
        rng = random.Random(seed)
        corruption = await asyncio.to_thread(corrupt_entry_log, ledger_dir(victim), kind, rng)
        assert corruption.path == logs[0] and corruption.kind == kind
        damaged = damaged_entries(records, corruption)
        assert damaged, corruption.detail
        logs_text = f"seed {seed}: {corruption.detail}; damaged entries {sorted(damaged)}"

        # 1. Through the client, asking the damaged replica first: every entry, intact.
        await read_back(store, ledgers, damaged, victim.address, healthy.address)
        # 2. Straight from the damaged bookie: an error for the damaged entries only.
        victim_client = await client_for(direct, victim)
        await check_direct_reads(victim_client, ledgers, damaged)
        assert victim.running, logs_text
        # 3. It still takes new ledgers and serves them whole.
        before_fresh = log_bytes(victim)
        fresh_id, fresh = await write_ledger(bk, "fresh", 20, 700)
        ledgers[fresh_id] = fresh
        # Parsing cannot find them after a cut tail (it stops at the torn record): wait for
        # the log to grow by their records instead.
        grown = before_fresh + sum(4 + HEADER_SIZE + len(d) for d in fresh)
        await until(lambda: log_bytes(victim) >= grown, "the fresh ledger is flushed")
        await check_direct_reads(victim_client, ledgers, damaged)

        # 4. SIGKILL and restart on the same port and directories.
        victim.kill()
        await victim.start()
        assert victim.running
        await read_back(store, ledgers, damaged, victim.address, healthy.address)
        await check_direct_reads(victim_client, ledgers, damaged)

        # 5. Garbage collection of the deleted ledger, then compaction of the damaged log.
        before_gc = len(victim.log_path.read_text(errors="replace"))
        await bk.delete_ledger(doomed_id)
        del ledgers[doomed_id]

        async def doomed_gone() -> bool:
            try:
                await victim_client.read_entry(doomed_id, 0)
            except (NoSuchLedgerError, NoSuchEntryError):
                return True
            return False

        await until(doomed_gone, "the victim garbage-collects the deleted ledger")
        log_name = corruption.path.stem

        def compaction_tried() -> bool:
            text = victim.log_path.read_text(errors="replace")[before_gc:]
            return (
                f"compacted entry log {log_name}" in text
                or f"entry log {log_name} has an unreadable record" in text
            )

        await until(compaction_tried, "compaction visits the damaged log", logs=logs_text)
        await read_back(store, ledgers, damaged, victim.address, healthy.address)
        await check_direct_reads(victim_client, ledgers, damaged)
        assert victim.running and healthy.running
        assert_no_traceback(victim)
        assert_no_traceback(healthy)


# ---------------------------------------------------------------------- the helpers alone


def make_log(directory: Path, log_id: int, data: bytes) -> Path:
    logs = directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"{log_id:08x}.log"
    path.write_bytes(FILE_MAGIC + data)
    return path


def test_entry_log_files_lists_only_logs_with_data(tmp_path: Path) -> None:
    empty = make_log(tmp_path, 1, b"")
    second = make_log(tmp_path, 2, b"x" * 10)
    tenth = make_log(tmp_path, 0x10, b"y")
    (tmp_path / "logs" / "00000003.meta").write_bytes(b"meta")
    assert entry_log_files(tmp_path) == [second, tenth]
    assert empty.exists()
    assert entry_log_files(tmp_path / "missing") == []


def test_flip_bit_changes_one_bit_after_the_header(tmp_path: Path) -> None:
    body = bytes(range(256)) * 4
    path = make_log(tmp_path, 1, body)
    for seed in range(50):
        before = path.read_bytes()
        corruption = flip_bit(path, random.Random(seed))
        after = path.read_bytes()
        assert len(after) == len(before)
        diff = [i for i in range(len(after)) if after[i] != before[i]]
        assert diff == [corruption.offset]
        assert corruption.offset >= LOG_HEADER_SIZE
        assert bin(after[corruption.offset] ^ before[corruption.offset]).count("1") == 1
        assert corruption.kind == "bit_flip" and path.name in corruption.detail


def test_truncate_tail_cuts_at_most_half_the_data_and_keeps_the_header(tmp_path: Path) -> None:
    for seed in range(50):
        path = make_log(tmp_path, seed + 1, b"z" * 101)
        corruption = truncate_tail(path, random.Random(seed))
        size = path.stat().st_size
        assert corruption.offset == size
        assert LOG_HEADER_SIZE + 51 <= size <= LOG_HEADER_SIZE + 100
        assert path.read_bytes()[:LOG_HEADER_SIZE] == FILE_MAGIC
    one = make_log(tmp_path, 0x100, b"q")
    assert truncate_tail(one, random.Random(1)).offset == LOG_HEADER_SIZE


def test_nothing_to_damage_is_a_lookup_error(tmp_path: Path) -> None:
    empty = make_log(tmp_path, 1, b"")
    with pytest.raises(LookupError):
        flip_bit(empty, random.Random(0))
    with pytest.raises(LookupError):
        truncate_tail(empty, random.Random(0))
    with pytest.raises(LookupError):
        flip_bit(tmp_path / "logs" / "00000009.log", random.Random(0))
    with pytest.raises(LookupError):
        pick_entry_log(tmp_path, random.Random(0))
    with pytest.raises(LookupError):
        corrupt_entry_log(tmp_path / "nowhere", "truncate", random.Random(0))


def test_corrupt_entry_log_picks_a_log_with_data(tmp_path: Path) -> None:
    make_log(tmp_path, 1, b"")
    full = make_log(tmp_path, 2, b"w" * 64)
    corruption = corrupt_entry_log(tmp_path, "truncate", random.Random(3))
    assert corruption.path == full and full.stat().st_size == corruption.offset
    assert corrupt_entry_log(tmp_path, "bit_flip", random.Random(3)).path == full
    with pytest.raises(ValueError):
        corrupt_entry_log(tmp_path, "shred", random.Random(3))
