"""The embedded store opened read-only (``EmbeddedMetadataStore(url, read_only=True)``):
what Spark uses to read a running standalone's ``local://`` metadata beside it.

It reads a database another process holds (and locks), sees what that process commits
later, refuses every write, leaves the owner's ephemeral nodes alone, and says clearly
when there is no database to read."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stripemq.errors import ConfigError, MetadataError
from stripemq.metadata import CreateOp, EmbeddedMetadataStore, MetadataStore
from stripemq.metadata.embedded import DB_FILE

pytestmark = pytest.mark.timeout(60)

# The writer: holds the directory (and its lock) in its own process, creates a few nodes,
# then applies "put <path> <value>" / "delete <path>" lines from stdin, answering "ok".
WRITER = r"""
import asyncio, sys
from stripemq.metadata import EmbeddedMetadataStore

async def main() -> None:
    store = EmbeddedMetadataStore(sys.argv[1])
    await store.start()
    await store.create("/stripemq/topics/orders", b"v0")
    await store.create("/stripemq/topics/payments", b"p0")
    await store.create("/stripemq/brokers/b1", b"alive", ephemeral=True)
    print("ready", flush=True)
    while line := await asyncio.to_thread(sys.stdin.readline):
        verb, path, *value = line.split()
        if verb == "put":
            await store.put(path, value[0].encode())
        elif verb == "delete":
            await store.delete(path)
        print("ok", flush=True)
    await store.close()

asyncio.run(main())
"""


class Writer:
    """The writing process and its command pipe."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def line(self) -> str:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), 20)
        return raw.decode().strip()

    async def do(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{command}\n".encode())
        await self.process.stdin.drain()
        assert await self.line() == "ok"


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[Writer]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER,
        f"local://{tmp_path / 'metadata'}",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    writer = Writer(process)
    try:
        assert await writer.line() == "ready"
        yield writer
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def value(store: MetadataStore, path: str) -> bytes | None:
    found = await store.get(path)
    return None if found is None else found[0]


async def test_reads_a_directory_another_process_holds(writer: Writer, tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'metadata'}"
    # The directory is locked by the writer: an ordinary store cannot open it ...
    locked = EmbeddedMetadataStore(url)
    with pytest.raises(MetadataError, match="in use"):
        await locked.start()
    # ... a read-only one can, beside it.
    reader = EmbeddedMetadataStore(url, read_only=True)
    await reader.start()
    try:
        assert await value(reader, "/stripemq/topics/orders") == b"v0"
        assert await reader.children("/stripemq/topics") == ["orders", "payments"]
        ephemeral = await reader.exists("/stripemq/brokers/b1")
        assert ephemeral is not None and ephemeral.ephemeral  # the owner's, left alone

        # Later commits of the writer are seen by the next read.
        await writer.do("put /stripemq/topics/orders v1")
        await writer.do("put /stripemq/topics/refunds r0")
        await writer.do("delete /stripemq/topics/payments")
        found = await reader.get("/stripemq/topics/orders")
        assert found is not None and found[0] == b"v1" and found[1].version == 1
        assert await reader.children("/stripemq/topics") == ["orders", "refunds"]
    finally:
        await reader.close()
    # Closing the reader took nothing of the writer's: it keeps writing, its nodes intact.
    await writer.do("put /stripemq/topics/orders v2")
    again = EmbeddedMetadataStore(url, read_only=True)
    await again.start()
    try:
        assert await value(again, "/stripemq/topics/orders") == b"v2"
        assert await again.exists("/stripemq/brokers/b1") is not None
    finally:
        await again.close()


async def test_in_one_process_beside_a_writer_and_every_write_refused(tmp_path: Path) -> None:
    """Stores of one process share an engine per directory; the read-only store has its own
    (key ``ro:...``), a separate read-only connection on the same file."""
    url = f"local://{tmp_path}"
    owner = EmbeddedMetadataStore(url)
    await owner.start()
    reader = EmbeddedMetadataStore(url, read_only=True)
    try:
        await owner.create("/a/b", b"1")
        await reader.start()
        assert reader.read_only
        assert await value(reader, "/a/b") == b"1"
        await owner.put("/a/b", b"2")
        assert await value(reader, "/a/b") == b"2"  # committed: seen by the next read

        writes = [
            reader.put("/a/b", b"3"),
            reader.put("/a/new", b"x"),
            reader.create("/a/c", b""),
            reader.create("/a/e", b"", ephemeral=True),
            reader.delete("/a/b"),
            reader.multi([CreateOp("/a/d", b"")]),
        ]
        for write in writes:
            with pytest.raises(MetadataError, match="read-only"):
                await write
        assert await value(owner, "/a/b") == b"2"
        assert await owner.children("/a") == ["b"]
        # The owner still writes, and the reader still reads, after the refusals.
        await owner.create("/a/after", b"y")
        assert await value(reader, "/a/after") == b"y"
    finally:
        await reader.close()
        await owner.close()


async def test_missing_database_is_a_metadata_error(tmp_path: Path) -> None:
    for directory in (tmp_path / "absent", tmp_path):
        store = EmbeddedMetadataStore(f"local://{directory}", read_only=True)
        with pytest.raises(MetadataError, match=f"no metadata database at .*{DB_FILE}"):
            await store.start()
        await store.close()
    # Nothing was created looking for it.
    assert not (tmp_path / "absent").exists()
    assert list(tmp_path.iterdir()) == []


async def test_not_a_database_is_a_metadata_error(tmp_path: Path) -> None:
    (tmp_path / DB_FILE).write_bytes(b"this is not sqlite" * 100)
    store = EmbeddedMetadataStore(f"local://{tmp_path}", read_only=True)
    with pytest.raises(MetadataError, match="cannot open metadata database"):
        await store.start()
    await store.close()


def test_only_a_local_store_opens_read_only() -> None:
    with pytest.raises(ConfigError, match="read-only"):
        EmbeddedMetadataStore("memory://shared", read_only=True)
    with pytest.raises(ConfigError, match="read-only"):
        EmbeddedMetadataStore("memory://", read_only=True)
