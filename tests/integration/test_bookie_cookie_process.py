"""Bookie cookies with real bookie processes and a real ZooKeeper: a bookie back under its id
with wiped directories refuses to start until ``stripemq shell cookie_delete``; a normal
restart is unaffected; a directory of another bookie or another cluster is refused."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.cookie import COOKIE_FILE, Cookie, read_registered_cookie
from stripemq.bookie.registration import registration_path
from stripemq.errors import NoSuchLedgerError
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.proto.entry import encode_entry
from stripemq.testing.bookie import BookieProcess
from stripemq.testing.process import run_stripemq
from stripemq.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

KEY = b"cookie-key"
BookieFactory = Callable[..., BookieProcess]


@pytest.fixture
def metadata_url(zookeeper_server: ZooKeeperServer) -> str:
    return zookeeper_server.url(f"/cookie-{uuid.uuid4().hex[:8]}")


@pytest.fixture
async def metadata(metadata_url: str) -> AsyncIterator[MetadataStore]:
    store = create_metadata_store(metadata_url)
    await store.start()
    yield store
    await store.close()


@pytest.fixture
def make_bookie(tmp_path: Path, metadata_url: str) -> Iterator[BookieFactory]:
    started: list[BookieProcess] = []

    def factory(
        name: str = "b0", *, url: str | None = None, port: int | None = None
    ) -> BookieProcess:
        proc = BookieProcess(url or metadata_url, tmp_path / name, port=port)
        started.append(proc)
        return proc

    yield factory
    for proc in started:
        proc.kill()


def entry(entry_id: int) -> bytes:
    return encode_entry(1, entry_id, entry_id - 1, f"entry {entry_id}".encode())


async def write_entries(bookie: BookieProcess, count: int) -> None:
    client = BookieClient(bookie.address, timeout=10.0)
    await client.connect()
    try:
        await asyncio.gather(*(client.add_entry(KEY, entry(i)) for i in range(count)))
    finally:
        await client.close()


async def read_entry(bookie: BookieProcess, entry_id: int) -> bytes:
    client = BookieClient(bookie.address, timeout=10.0)
    await client.connect()
    try:
        return (await client.read_entry(1, entry_id)).entry
    finally:
        await client.close()


async def refused_start(bookie: BookieProcess) -> list[str]:
    """Start ``bookie``, expecting it to exit with 2; returns the log lines it wrote."""
    before = bookie.log_path.stat().st_size if bookie.log_path.exists() else 0
    with pytest.raises(RuntimeError, match="bookie exited with 2"):
        await bookie.start()
    lines = bookie.log_path.read_bytes()[before:].decode().splitlines()
    assert not any("Traceback" in line for line in lines), lines
    return lines


def refusal(lines: list[str]) -> str:
    """The one ERROR line a refused start prints."""
    [line] = [line for line in lines if " ERROR " in line]
    return line


async def shell(url: str, *args: str) -> tuple[int, str, str]:
    return await run_stripemq("shell", "--metadata", url, *args)


def wipe(bookie: BookieProcess) -> None:
    shutil.rmtree(bookie.data_dir / "journal")
    shutil.rmtree(bookie.data_dir / "ledgers")


async def test_a_restart_on_its_own_directories_is_unaffected(
    make_bookie: BookieFactory, metadata: MetadataStore
) -> None:
    bookie = make_bookie()
    await bookie.start()
    await write_entries(bookie, 20)
    found = await read_registered_cookie(metadata, bookie.address)
    assert found is not None
    cookie, version = found
    journal_cookie = (bookie.data_dir / "journal" / COOKIE_FILE).read_bytes()
    assert Cookie.decode(journal_cookie, "journal") == cookie
    bookie.kill()

    await bookie.start()
    assert await read_entry(bookie, 19) == entry(19)
    assert await read_registered_cookie(metadata, bookie.address) == (cookie, version)


async def test_wiped_directories_refuse_until_the_cookie_is_deleted(
    make_bookie: BookieFactory, metadata: MetadataStore, metadata_url: str
) -> None:
    bookie, other = make_bookie("b0"), make_bookie("b1")
    await asyncio.gather(bookie.start(), other.start())
    await write_entries(bookie, 10)
    assert bookie.terminate() == 0  # as when its pod is deleted, its volumes with it
    wipe(bookie)

    line = refusal(await refused_start(bookie))
    assert f"bookie {bookie.address} refuses to start: its directories" in line
    assert "are empty but the cluster knows this bookie" in line
    assert f"`stripemq shell --metadata {metadata_url} cookie_delete {bookie.address}`" in line
    assert await metadata.exists(registration_path(bookie.address, False)) is None
    assert not (bookie.data_dir / "journal").exists()  # storage never started

    (code, out, _err), (refused, _out, err) = await asyncio.gather(
        shell(metadata_url, "cookie_list"), shell(metadata_url, "cookie_delete", other.address)
    )
    assert code == 0
    listed = {line.split("\t")[0]: line.split("\t")[1] for line in out.splitlines()}
    assert listed == {bookie.address: "not-registered", other.address: "registered"}
    assert refused == 1 and f"bookie {other.address} is registered" in err
    code, out, _err = await shell(metadata_url, "cookie_delete", bookie.address)
    assert code == 0 and f"deleted the cookie of bookie {bookie.address}" in out

    await bookie.start()  # a new bookie under the old id, with nothing in it
    with pytest.raises(NoSuchLedgerError):
        await read_entry(bookie, 0)
    assert await read_registered_cookie(metadata, bookie.address) is not None


async def test_two_bookies_cannot_share_a_directory(make_bookie: BookieFactory) -> None:
    first = make_bookie("shared")
    await first.start()
    second = make_bookie("shared")  # same directories, another port
    line = refusal(await refused_start(second))
    assert f"directory {first.data_dir / 'journal'} belongs to bookie {first.address}" in line
    assert "two bookies cannot share a directory" in line
    assert first.running


async def test_a_port_change_is_refused_naming_the_old_id(make_bookie: BookieFactory) -> None:
    bookie = make_bookie("b0")
    await bookie.start()
    bookie.kill()
    moved = make_bookie("b0")
    line = refusal(await refused_start(moved))
    assert f"belongs to bookie {bookie.address}" in line
    assert f"start it as {bookie.address} again" in line


async def test_directories_of_another_cluster_are_refused(
    make_bookie: BookieFactory, zookeeper_server: ZooKeeperServer
) -> None:
    bookie = make_bookie("b0")
    await bookie.start()
    bookie.kill()
    elsewhere = zookeeper_server.url(f"/cookie-other-{uuid.uuid4().hex[:8]}")
    stranger = make_bookie("b0", url=elsewhere, port=bookie.port)
    line = refusal(await refused_start(stranger))
    assert f"directory {bookie.data_dir / 'journal'} holds data of cluster instance" in line
    assert f"but the metadata store {elsewhere} is cluster instance" in line
