"""Real bookie processes against a real ZooKeeper: crashes, restarts, fencing, bad input."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest

from stripemq.bookie.bookie_client import BookieClient
from stripemq.errors import (
    BookieReadOnlyError,
    BookieTimeoutError,
    BookieUnavailableError,
    DigestMismatchError,
    DiskFullError,
    InvalidEntryError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)
from stripemq.metadata import create_metadata_store
from stripemq.proto import bookie_pb2 as pb
from stripemq.proto import bookie_pb2_grpc as pb_grpc
from stripemq.proto.entry import encode_entry
from stripemq.testing.fixtures import BookieFactory
from stripemq.testing.ports import free_port

pytestmark = pytest.mark.integration

KEY = b"writer-key"


@pytest.fixture
async def metadata(metadata_url: str) -> AsyncIterator:
    store = create_metadata_store(metadata_url)
    await store.start()
    yield store
    await store.close()


async def connected(address: str) -> BookieClient:
    client = BookieClient(address, timeout=10.0)
    await client.connect()
    return client


def payload(ledger: int, entry_id: int) -> bytes:
    return f"ledger {ledger} entry {entry_id} ".encode() * 8


def make_entry(ledger: int, entry_id: int) -> bytes:
    return encode_entry(ledger, entry_id, entry_id - 1, payload(ledger, entry_id))


async def wait_until(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def test_sigkill_while_streaming_loses_no_acknowledged_entry(
    make_bookie: BookieFactory,
) -> None:
    # Small memtable and journal files: checkpoints, journal rotation and journal deletion
    # all happen while the stream runs, so the kill can land in any of them.
    bookie = make_bookie(write_cache_max_size_mb=1, journal_max_size_mb=1)
    await bookie.start()
    client = await connected(bookie.address)
    acknowledged: set[int] = set()
    failures: list[BaseException] = []
    inflight: set[asyncio.Future] = set()

    def settle(entry_id: int, future: asyncio.Future) -> None:
        inflight.discard(future)
        if future.exception() is None:
            acknowledged.add(entry_id)
        else:
            failures.append(future.exception())

    # Kill once a checkpoint has deleted the first journal file, and keep streaming: the
    # signal is sent without waiting (as bookie.kill() would), so adds go on being sent and
    # answered while the process dies.
    first_journal = bookie.data_dir / "journal" / f"{1:016x}.txn"
    next_id, killed_at = 0, None
    while killed_at is None or next_id < killed_at + 500 or inflight:
        if killed_at is None and len(acknowledged) >= 5_000 and not first_journal.exists():
            assert bookie.proc is not None
            os.kill(bookie.proc.pid, signal.SIGKILL)
            killed_at = next_id
        assert next_id < 500_000, "no checkpoint deleted the first journal file"
        if (killed_at is None or next_id < killed_at + 500) and len(inflight) < 2_000:
            future = client.add_entry(KEY, make_entry(1, next_id))
            future.add_done_callback(lambda f, e=next_id: settle(e, f))
            inflight.add(future)
            next_id += 1
            if next_id % 200 == 0:
                await asyncio.sleep(0)
        else:
            await asyncio.wait(set(inflight), return_when=asyncio.FIRST_COMPLETED)
    bookie.kill()  # reaps it
    assert failures, "the kill must land in the middle of the stream"
    assert all(isinstance(f, BookieUnavailableError) for f in failures)
    await client.close()

    await bookie.start()
    reader = await connected(bookie.address)
    try:
        for entry_id in sorted(acknowledged):
            result = await reader.read_entry(1, entry_id)
            assert result.entry == make_entry(1, entry_id)
    finally:
        await reader.close()


async def test_clean_stop_unregisters_and_restart_keeps_data(
    make_bookie: BookieFactory, metadata
) -> None:  # type: ignore[no-untyped-def]
    bookie = make_bookie()
    await bookie.start()
    path = f"/ledgers/available/{bookie.address}"
    found = await metadata.get(path)
    assert found is not None and json.loads(found[0])["read_only"] is False
    client = await connected(bookie.address)
    await asyncio.gather(*(client.add_entry(KEY, make_entry(2, i)) for i in range(500)))
    with pytest.raises(NoSuchLedgerError):
        await client.read_entry(77, 0)
    await client.close()
    metrics = await scrape(bookie.metrics_port)
    assert metrics['bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"}'] == 500
    assert metrics["bookie_WRITE_BYTES"] == sum(len(make_entry(2, i)) for i in range(500))
    assert metrics['bookie_journal_JOURNAL_SYNC_count{success="true"}'] >= 1
    assert metrics['bookkeeper_server_READ_ENTRY_REQUEST_count{success="false"}'] == 1
    assert metrics['bookie_request_errors_total{code="-7",operation="read"}'] == 1
    assert metrics["bookie_SERVER_STATUS"] == 1

    assert bookie.terminate() == 0
    assert await metadata.exists(path) is None
    journals = list((bookie.data_dir / "journal").glob("*.txn"))
    assert len(journals) == 1  # the clean stop checkpointed and trimmed the journal

    await bookie.start()
    client = await connected(bookie.address)
    try:
        lac = await client.read_lac(2)
        assert (lac.lac, lac.last_entry_id) == (498, 499)
        for i in range(500):
            assert (await client.read_entry(2, i)).entry == make_entry(2, i)
        assert await metadata.exists(path) is not None
    finally:
        await client.close()


async def test_a_port_in_use_stops_the_start_cleanly_and_loses_nothing(
    make_bookie: BookieFactory,
) -> None:
    bookie = make_bookie()
    await bookie.start()
    client = await connected(bookie.address)
    await asyncio.gather(*(client.add_entry(KEY, make_entry(3, i)) for i in range(50)))
    await client.close()
    bookie.kill()

    expected = {
        bookie.metrics_port: "address already in use",
        bookie.port: f"cannot listen on 127.0.0.1:{bookie.port}",
    }
    for port, message in expected.items():
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            with pytest.raises(RuntimeError, match="exited with 1"):
                await bookie.start()
            log = bookie.tail_log()
            assert message in log, log
            assert "Traceback" not in log and "never awaited" not in log, log

    await bookie.start()
    client = await connected(bookie.address)
    try:
        for i in range(50):
            assert (await client.read_entry(3, i)).entry == make_entry(3, i)
    finally:
        await client.close()


async def scrape(port: int) -> dict[str, float]:
    """The bookie's /metrics as ``{series: value}``."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            assert response.status == 200
            text = await response.text()
    series = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            series[name] = float(value)
    return series


async def test_fencing_survives_a_crash(make_bookie: BookieFactory) -> None:
    bookie = make_bookie()
    await bookie.start()
    client = await connected(bookie.address)
    await asyncio.gather(*(client.add_entry(KEY, make_entry(3, i)) for i in range(10)))
    with pytest.raises(UnauthorizedAccessError):
        await client.read_entry(3, -1, fence=True, master_key=b"not-the-key")
    fenced = await client.read_entry(3, -1, fence=True, master_key=KEY)
    assert fenced.fenced and fenced.entry == make_entry(3, 9)
    await client.close()
    bookie.kill()

    await bookie.start()
    client = await connected(bookie.address)
    try:
        assert (await client.read_lac(3)).fenced
        with pytest.raises(LedgerFencedError):
            await client.add_entry(KEY, make_entry(3, 10))
        # Recovery adds (re-replication by the new owner) still go through.
        await client.add_entry(KEY, make_entry(3, 10), recovery_add=True)
    finally:
        await client.close()


async def test_bad_requests_get_typed_errors_and_the_bookie_keeps_serving(
    make_bookie: BookieFactory,
) -> None:
    bookie = make_bookie(max_entry_size=4096)
    await bookie.start()
    client = await connected(bookie.address)
    try:
        with pytest.raises(NoSuchLedgerError):
            await client.read_entry(999, 0)
        await client.add_entry(KEY, make_entry(4, 0))
        with pytest.raises(NoSuchEntryError):
            await client.read_entry(4, 7)
        with pytest.raises(InvalidEntryError):
            await client.add_entry(KEY, b"\x00" * 10)
        corrupt = bytearray(make_entry(4, 1))
        corrupt[-2] ^= 0x55
        with pytest.raises(DigestMismatchError):
            await client.add_entry(KEY, bytes(corrupt))
        from stripemq.errors import EntryTooLargeError

        with pytest.raises(EntryTooLargeError):
            await client.add_entry(KEY, encode_entry(4, 1, 0, b"z" * 10_000))
        with pytest.raises(UnauthorizedAccessError):
            await client.add_entry(b"thief", make_entry(4, 1))
        # A raw request that is not even a protobuf message: the call fails, the bookie lives.
        channel = grpc.aio.insecure_channel(bookie.address)
        raw = channel.unary_unary("/stripemq.bookie.Bookie/ReadEntry")
        with pytest.raises(grpc.aio.AioRpcError):
            await raw(b"\xff\xff\xff\xff\x0f garbage", timeout=5)
        stub = pb_grpc.BookieStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.ReadEntry(pb.ReadRequest(ledger_id=4, entry_id=-5), timeout=5)
        assert missing.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        await channel.close()
        await client.add_entry(KEY, make_entry(4, 1))
        assert (await client.read_entry(4, 1)).entry == make_entry(4, 1)
        assert bookie.proc is not None and bookie.proc.poll() is None
    finally:
        await client.close()


async def test_read_only_when_disk_usage_passes_threshold(
    make_bookie: BookieFactory, metadata
) -> None:  # type: ignore[no-untyped-def]
    bookie = make_bookie(disk_usage_threshold=0.0001, disk_usage_lwm_threshold=0.0001)
    await bookie.start()
    assert await metadata.exists(f"/ledgers/available/readonly/{bookie.address}") is not None
    assert await metadata.exists(f"/ledgers/available/{bookie.address}") is None
    client = await connected(bookie.address)
    try:
        assert (await client.get_info()).read_only
        with pytest.raises(BookieReadOnlyError):
            await client.add_entry(KEY, make_entry(5, 0))
    finally:
        await client.close()


async def test_full_disk_fails_adds_turns_read_only_and_keeps_acknowledged_entries(
    make_bookie: BookieFactory, tmp_path: Path, metadata
) -> None:  # type: ignore[no-untyped-def]
    small = tmp_path / "small-disk"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)], check=True)
    try:
        bookie = make_bookie(
            journal_directory=str(small),
            disk_check_interval_ms=100,
            # A truncated failed write leaves a little room; the low-water mark is far below
            # it, so the bookie stays read-only once the disk filled.
            disk_usage_threshold=0.95,
            disk_usage_lwm_threshold=0.5,
        )
        await bookie.start()
        client = await connected(bookie.address)
        acknowledged = []
        full_error = None
        for i in range(200):
            big = encode_entry(6, i, i - 1, os.urandom(64 * 1024))
            try:
                await client.add_entry(KEY, big)
                acknowledged.append(big)
            except (DiskFullError, BookieReadOnlyError) as exc:
                full_error = exc
                break
        assert full_error is not None and len(acknowledged) > 5
        with pytest.raises((DiskFullError, BookieReadOnlyError)):
            await client.add_entry(KEY, encode_entry(6, 500, 0, b"x"))
        readonly = f"/ledgers/available/readonly/{bookie.address}"
        await wait_until(lambda: _exists(metadata, readonly))
        for i, raw in enumerate(acknowledged):
            assert (await client.read_entry(6, i)).entry == raw
        await client.close()
        bookie.kill()
        # Room again (the checkpoint on restart moves the journal into the entry log).
        await bookie.start()
        client = await connected(bookie.address)
        for i, raw in enumerate(acknowledged):
            assert (await client.read_entry(6, i)).entry == raw
        await client.close()
        bookie.kill()
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


async def test_a_file_size_limit_fails_writes_like_a_full_disk_until_it_is_lifted(
    make_bookie: BookieFactory, metadata
) -> None:  # type: ignore[no-untyped-def]
    """How ``stripemq chaos`` fills a bookie's disk: RLIMIT_FSIZE on the running process.
    Writes fail with EFBIG (the bookie ignores SIGXFSZ), it turns read-only and stays up;
    lifted, it takes writes again and kept every acknowledged entry."""
    bookie = make_bookie(disk_check_interval_ms=100)
    await bookie.start()
    assert bookie.proc is not None
    pid = bookie.proc.pid
    client = await connected(bookie.address)
    try:
        for i in range(3):
            await client.add_entry(KEY, make_entry(8, i))
        before = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, before[1]))
        with pytest.raises((DiskFullError, BookieReadOnlyError)):
            await client.add_entry(KEY, make_entry(8, 3))
        assert bookie.running  # not killed by SIGXFSZ
        for i in range(3):
            assert (await client.read_entry(8, i)).entry == make_entry(8, i)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, before)

        async def writable_again() -> bool:
            try:
                await client.add_entry(KEY, make_entry(8, 3))
                return True
            except (DiskFullError, BookieReadOnlyError):
                return False

        await wait_until(writable_again)
        assert await metadata.exists(f"/ledgers/available/{bookie.address}") is not None
        for i in range(4):
            assert (await client.read_entry(8, i)).entry == make_entry(8, i)
    finally:
        await client.close()
    bookie.kill()
    await bookie.start()  # and the journal written around the failure replays
    client = await connected(bookie.address)
    try:
        for i in range(4):
            assert (await client.read_entry(8, i)).entry == make_entry(8, i)
    finally:
        await client.close()


async def _exists(store, path: str) -> bool:  # type: ignore[no-untyped-def]
    return await store.exists(path) is not None


async def test_standalone_runs_a_bookie_with_embedded_metadata(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "standalone.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stripemq",
                "standalone",
                "--data-dir",
                str(tmp_path / "data"),
                "--bookie-port",
                str(port),
                "--broker-port",
                str(free_port()),
                "-c",
                f"stats_http_port={free_port()}",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        client = BookieClient(f"127.0.0.1:{port}", timeout=2.0)
        await client.connect()

        async def serving() -> bool:
            try:
                await client.get_info()
                return True
            except BookieUnavailableError:
                assert proc.poll() is None, log_path.read_text()
                return False

        await wait_until(serving)
        await client.add_entry(KEY, make_entry(7, 0))
        assert (await client.read_entry(7, 0)).entry == make_entry(7, 0)
        await client.close()
        proc.terminate()
        assert proc.wait(30) == 0, log_path.read_text()
        store = create_metadata_store(f"local://{tmp_path / 'data' / 'metadata'}")
        await store.start()
        try:
            assert await store.children("/ledgers/available") == ["readonly"]  # unregistered
        finally:
            await store.close()
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_adds_to_a_frozen_bookie_time_out_and_resume_after(
    make_bookie: BookieFactory,
) -> None:
    bookie = make_bookie()
    await bookie.start()
    client = BookieClient(bookie.address, add_timeout=1.5)
    await client.connect()
    try:
        await client.add_entry(KEY, make_entry(8, 0))
        assert bookie.proc is not None
        os.kill(bookie.proc.pid, signal.SIGSTOP)  # alive but silent, like a hung host
        try:
            with pytest.raises(BookieTimeoutError):
                await client.add_entry(KEY, make_entry(8, 1))
        finally:
            os.kill(bookie.proc.pid, signal.SIGCONT)
        await client.add_entry(KEY, make_entry(8, 1))  # the late first copy is identical
        await client.add_entry(KEY, make_entry(8, 2))
        assert (await client.read_entry(8, 2)).entry == make_entry(8, 2)
    finally:
        await client.close()
