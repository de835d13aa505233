"""One contract for every MetadataStore backend: memory://, local:// and real ZooKeeper.

The backends must be indistinguishable, so every test here runs against all three (except
the few that check what only one backend has, such as local:// durability).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import stripemq
from stripemq.chaos.proxy import PartitionProxy
from stripemq.errors import (
    BadVersionError,
    ConfigError,
    InvalidPathError,
    MetadataError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NotEmptyError,
    NotFoundError,
    SessionLostError,
)
from stripemq.metadata import (
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
    SessionEvent,
    SetOp,
    Stat,
    WatchEvent,
    create_metadata_store,
)
from stripemq.metadata.embedded import DB_FILE, LOCK_FILE
from stripemq.metadata.zookeeper import ZooKeeperMetadataStore
from stripemq.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0  # seconds to wait for an asynchronous effect before failing


@dataclass
class Backend:
    """Where a test's stores live; ``new_store`` gives another session on the same data."""

    name: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)

    def new_store(self) -> MetadataStore:
        return create_metadata_store(self.url, **self.options)


@pytest.fixture(params=["memory", "local", pytest.param("zk", marks=pytest.mark.integration)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    unique = uuid.uuid4().hex[:12]
    if request.param == "memory":
        return Backend("memory", f"memory://contract-{unique}")
    if request.param == "local":
        return Backend("local", f"local://{tmp_path / 'metadata'}")
    server = request.getfixturevalue("zookeeper_server")
    return Backend("zk", server.url(f"/contract-{unique}"), {"session_timeout": 6.0})


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[MetadataStore]:
    opened = backend.new_store()
    await opened.start()
    yield opened
    await opened.close()


class Recorder:
    """Collects watch events or session events and waits for a condition on them."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._arrived = asyncio.Event()

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        self._arrived.set()

    async def wait_until(self, condition: Callable[[list[Any]], bool]) -> None:
        async with asyncio.timeout(WAIT):
            while not condition(self.events):
                self._arrived.clear()
                await self._arrived.wait()

    async def wait_for(self, expected: Any) -> None:
        await self.wait_until(lambda events: expected in events)


# ----------------------------------------------------------------------------- basics


async def test_missing_node(store: MetadataStore) -> None:
    assert await store.get("/nope") is None
    assert await store.exists("/nope") is None
    assert await store.children("/nope") == []
    assert await store.children("/nope/deeper") == []


async def test_put_creates_parents_and_counts_versions(store: MetadataStore) -> None:
    first = await store.put("/a/b/c", b"one")
    assert first.version == 0
    assert not first.ephemeral
    assert await store.get("/a/b/c") == (b"one", first)
    parent = await store.get("/a/b")
    assert parent is not None and parent[0] == b""
    assert parent[1].num_children == 1

    second = await store.put("/a/b/c", b"two")
    assert second.version == 1
    assert second.created_ms == first.created_ms
    assert second.modified_ms >= first.modified_ms
    got = await store.get("/a/b/c")
    assert got is not None and got[0] == b"two" and got[1].version == 1
    assert (await store.put("/a/b/c", b"three")).version == 2


async def test_put_compare_and_set(store: MetadataStore) -> None:
    await store.put("/cas", b"v0")
    assert (await store.put("/cas", b"v1", expected_version=0)).version == 1
    with pytest.raises(BadVersionError):
        await store.put("/cas", b"stale", expected_version=0)
    got = await store.get("/cas")
    assert got is not None and got[0] == b"v1" and got[1].version == 1


async def test_put_with_version_on_missing_node(store: MetadataStore) -> None:
    with pytest.raises(NotFoundError):
        await store.put("/absent", b"x", expected_version=0)
    assert await store.exists("/absent") is None


async def test_create_makes_parents(store: MetadataStore) -> None:
    assert await store.create("/x/y/z", b"data") == "/x/y/z"
    got = await store.get("/x/y/z")
    assert got is not None and got[0] == b"data" and got[1].version == 0
    for parent in ("/x", "/x/y"):
        found = await store.get(parent)
        assert found is not None and found[0] == b"" and not found[1].ephemeral
    assert await store.children("/x") == ["y"]


async def test_create_existing_node(store: MetadataStore) -> None:
    await store.create("/dup", b"first")
    with pytest.raises(NodeExistsError):
        await store.create("/dup", b"second")
    got = await store.get("/dup")
    assert got is not None and got[0] == b"first"
    with pytest.raises(NodeExistsError):
        await store.create("/")


async def test_sequential_names(store: MetadataStore) -> None:
    names = [await store.create("/queue/item-", sequential=True) for _ in range(3)]
    assert names == sorted(names)
    assert len(set(names)) == 3
    for name in names:
        prefix, suffix = name[:-10], name[-10:]
        assert prefix == "/queue/item-" and suffix.isdigit()
    await store.delete(names[-1])
    again = await store.create("/queue/item-", sequential=True)
    assert again > names[-1], "a sequence number is never reused"
    children = await store.children("/queue")
    assert children == sorted(name.rsplit("/", 1)[1] for name in [*names[:-1], again])


async def test_delete(store: MetadataStore) -> None:
    await store.create("/d/child", b"x")
    with pytest.raises(NotEmptyError):
        await store.delete("/d")
    with pytest.raises(BadVersionError):
        await store.delete("/d/child", expected_version=5)
    await store.put("/d/child", b"y")
    await store.delete("/d/child", expected_version=1)
    assert await store.exists("/d/child") is None
    with pytest.raises(NotFoundError):
        await store.delete("/d/child")
    await store.delete("/d")
    assert await store.get("/d") is None


async def test_children_sorted(store: MetadataStore) -> None:
    for name in ("b", "a-1", "c", "a", "B"):
        await store.create(f"/kids/{name}")
    assert await store.children("/kids") == ["B", "a", "a-1", "b", "c"]
    stat = await store.exists("/kids")
    assert stat is not None and stat.num_children == 5


async def test_delete_recursive(store: MetadataStore) -> None:
    await store.create("/tree/a/b", b"1")
    await store.create("/tree/c", b"2")
    await store.delete_recursive("/tree")
    assert await store.exists("/tree") is None
    await store.delete_recursive("/tree")  # missing is fine


async def test_invalid_paths(store: MetadataStore) -> None:
    for bad in ("relative", "/trailing/", "/double//slash", "/dot/../dot", ""):
        with pytest.raises(InvalidPathError):
            await store.get(bad)
    with pytest.raises(InvalidPathError):
        await store.put("no/slash", b"")
    with pytest.raises(InvalidPathError):
        await store.delete("/")


# ----------------------------------------------------------------------------- multi


async def test_multi_applies_all_and_returns_results(store: MetadataStore) -> None:
    await store.create("/m/set", b"old")
    await store.create("/m/gone", b"")
    await store.create("/m/checked", b"")
    results = await store.multi(
        [
            CreateOp("/m/new", b"n"),
            CreateOp("/m/seq-", b"s", sequential=True),
            SetOp("/m/set", b"new", expected_version=0),
            DeleteOp("/m/gone"),
            CheckOp("/m/checked", 0),
        ]
    )
    assert results[0] == "/m/new"
    assert isinstance(results[1], str) and results[1].startswith("/m/seq-")
    assert isinstance(results[2], Stat) and results[2].version == 1
    assert results[3:] == [None, None]
    assert await store.children("/m") == sorted(
        ["checked", "new", "set", results[1].rsplit("/", 1)[1]]
    )
    assert await store.multi([]) == []


async def test_multi_is_atomic(store: MetadataStore) -> None:
    await store.create("/t/x", b"x0")
    with pytest.raises(BadVersionError):
        await store.multi(
            [
                CreateOp("/t/new", b""),
                SetOp("/t/x", b"x1"),
                CheckOp("/t/x", 99),
            ]
        )
    assert await store.exists("/t/new") is None
    got = await store.get("/t/x")
    assert got is not None and got[0] == b"x0" and got[1].version == 0

    with pytest.raises(NotFoundError):
        await store.multi([CreateOp("/t/other", b""), DeleteOp("/t/missing")])
    assert await store.exists("/t/other") is None

    with pytest.raises(NodeExistsError):
        await store.multi([SetOp("/t/x", b"x1"), CreateOp("/t/x", b"")])
    assert (await store.get("/t/x")) == got

    with pytest.raises(NotFoundError):  # like ZooKeeper, multi does not create parents
        await store.multi([CreateOp("/t/no/parent", b"")])


# ----------------------------------------------------------------------------- watches


async def test_watch_sees_create_change_delete_until_cancelled(
    store: MetadataStore,
) -> None:
    seen = Recorder()
    handle = store.watch("/w", seen)
    await store.create("/w", b"1")
    await seen.wait_for(WatchEvent(EventType.CREATED, "/w"))
    await store.put("/w", b"2")
    await seen.wait_for(WatchEvent(EventType.CHANGED, "/w"))
    await store.delete("/w")
    await seen.wait_for(WatchEvent(EventType.DELETED, "/w"))
    assert [event.type for event in seen.events] == [
        EventType.CREATED,
        EventType.CHANGED,
        EventType.DELETED,
    ]

    handle.cancel()
    sentinel = Recorder()
    store.watch("/w-sentinel", sentinel)
    await store.create("/w", b"again")
    await store.create("/w-sentinel")
    await sentinel.wait_for(WatchEvent(EventType.CREATED, "/w-sentinel"))
    assert len(seen.events) == 3, "a cancelled watch must not fire"


async def test_two_watchers_on_one_path(store: MetadataStore) -> None:
    first, second = Recorder(), Recorder()
    first_handle = store.watch("/two", first)
    store.watch("/two", second)
    await store.create("/two")
    await first.wait_for(WatchEvent(EventType.CREATED, "/two"))
    await second.wait_for(WatchEvent(EventType.CREATED, "/two"))
    first_handle.cancel()
    await store.put("/two", b"changed")
    await second.wait_for(WatchEvent(EventType.CHANGED, "/two"))
    assert first.events == [WatchEvent(EventType.CREATED, "/two")]


async def test_watch_children(store: MetadataStore) -> None:
    seen = Recorder()
    changed = WatchEvent(EventType.CHILDREN_CHANGED, "/parent")
    handle = store.watch_children("/parent", seen)
    await store.create("/parent/one")
    await seen.wait_until(lambda events: events.count(changed) >= 1)
    await store.create("/parent/two")
    await seen.wait_until(lambda events: events.count(changed) >= 2)
    await store.delete("/parent/one")
    await seen.wait_until(lambda events: events.count(changed) >= 3)
    assert set(seen.events) == {changed}

    handle.cancel()
    count = len(seen.events)
    sentinel = Recorder()
    store.watch_children("/other", sentinel)
    await store.create("/parent/three")
    await store.create("/other/child")
    await sentinel.wait_for(WatchEvent(EventType.CHILDREN_CHANGED, "/other"))
    assert len(seen.events) == count, "a cancelled watch must not fire"


# ----------------------------------------------------------------------------- sessions


async def test_session_events_and_closed_store(backend: Backend) -> None:
    events = Recorder()
    store = backend.new_store()
    store.add_session_listener(events)
    await store.start()
    await events.wait_for(SessionEvent.CONNECTED)
    await store.put("/s", b"x")
    await store.close()
    with pytest.raises(SessionLostError):
        await store.get("/s")
    with pytest.raises(SessionLostError):
        store.watch("/s", Recorder())
    await store.close()  # idempotent


async def test_ephemeral_nodes_end_with_their_session(
    backend: Backend, store: MetadataStore
) -> None:
    await store.create("/eph/node", b"mine", ephemeral=True)
    other = backend.new_store()
    await other.start()
    try:
        seen = Recorder()
        other.watch("/eph/node", seen)
        # A read on the watching session returns after its watch is set up on the server.
        stat = await other.exists("/eph/node")
        assert stat is not None and stat.ephemeral
        parent = await other.exists("/eph")
        assert parent is not None and not parent.ephemeral
        await store.close()
        await seen.wait_for(WatchEvent(EventType.DELETED, "/eph/node"))
        assert await other.exists("/eph/node") is None
        assert await other.exists("/eph") is not None, "parents are persistent"
    finally:
        await other.close()


async def test_ephemeral_nodes_cannot_have_children(store: MetadataStore) -> None:
    await store.create("/lonely", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.create("/lonely/child")
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.put("/lonely/child", b"")
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.multi([CreateOp("/lonely/child")])
    assert await store.children("/lonely") == []


async def test_session_expiry(backend: Backend) -> None:
    events = Recorder()
    store = backend.new_store()
    store.add_session_listener(events)
    await store.start()
    observer = backend.new_store()
    await observer.start()
    try:
        await store.create("/owner/ephemeral", b"", ephemeral=True)
        await store.create("/owner/durable", b"")
        seen = Recorder()
        observer.watch("/owner/ephemeral", seen)
        assert await observer.exists("/owner/ephemeral") is not None  # the watch is set
        await store.expire_session()  # type: ignore[attr-defined]
        await events.wait_for(SessionEvent.LOST)
        await seen.wait_for(WatchEvent(EventType.DELETED, "/owner/ephemeral"))
        assert await observer.exists("/owner/ephemeral") is None
        assert await observer.exists("/owner/durable") is not None
        with pytest.raises(SessionLostError):
            await store.get("/owner/durable")
        with pytest.raises(SessionLostError):
            await store.create("/owner/again", ephemeral=True)
    finally:
        await store.close()
        await observer.close()
    assert nothing_after_lost(events)


def nothing_after_lost(events: Recorder) -> bool:
    """After LOST a session reports nothing else (no reconnect with a fresh session)."""
    return events.events[events.events.index(SessionEvent.LOST) + 1 :] == []


async def test_concurrent_writers(backend: Backend, store: MetadataStore) -> None:
    other = backend.new_store()
    await other.start()
    try:
        writers = [store, other] * 5
        stats = await asyncio.gather(
            *(w.put("/race/node", b"%d" % i) for i, w in enumerate(writers))
        )
        assert sorted(stat.version for stat in stats) == list(range(10))
        names = await asyncio.gather(*(w.create("/race/seq-", sequential=True) for w in writers))
        assert len(set(names)) == 10
        assert await store.children("/race") == sorted(
            ["node", *(n[len("/race/") :] for n in names)]
        )
    finally:
        await other.close()


# ----------------------------------------------------------------------------- ZooKeeper only


@pytest.mark.integration
async def test_zk_unreachable() -> None:
    store = ZooKeeperMetadataStore("zk://127.0.0.1:1/x", connect_timeout=0.5)
    with pytest.raises(MetadataError, match="cannot connect"):
        await store.start()
    await store.close()


async def forwarder(target_port: int, port: int = 0) -> PartitionProxy:
    """A TCP forwarder (nothing partitioned) to a ZooKeeper server; ``close()`` cuts it off.

    ZooKeeper listens on its port before it serves: a client whose reconnect lands in that
    window can have its handshake go unanswered and then waits a whole session timeout, by
    which time the session has expired. Letting clients through only once the restarted
    server serves keeps that race (ZooKeeper's, not the store's) out of the test below.
    """
    proxy = PartitionProxy(("127.0.0.1", target_port), dict, port=port)
    await proxy.start()
    return proxy


@pytest.mark.integration
async def test_zk_session_and_watches_survive_a_server_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "zk"
    server = await asyncio.to_thread(ZooKeeperServer(data_dir=data_dir).start)
    doorway = await forwarder(server.port)
    events = Recorder()
    store = ZooKeeperMetadataStore(f"zk://{doorway.address}/restart", session_timeout=10.0)
    store.add_session_listener(events)
    await store.start()
    other: ZooKeeperMetadataStore | None = None
    try:
        await store.create("/mine", ephemeral=True)
        seen = Recorder()
        store.watch("/watched", seen)
        await store.exists("/watched")

        await doorway.close()
        await asyncio.to_thread(server.stop)
        await events.wait_for(SessionEvent.SUSPENDED)
        server = ZooKeeperServer(port=server.port, data_dir=data_dir)
        await asyncio.to_thread(server.start)
        doorway = await forwarder(server.port, port=doorway.port)
        await events.wait_for(SessionEvent.RECONNECTED)

        assert await store.exists("/mine") is not None, "same session: ephemeral node kept"
        other = ZooKeeperMetadataStore(server.url("/restart"))
        await other.start()
        await other.create("/watched", b"")
        await seen.wait_for(WatchEvent(EventType.CREATED, "/watched"))
        assert SessionEvent.LOST not in events.events
    finally:
        if other is not None:
            await other.close()
        await store.close()
        await doorway.close()
        await asyncio.to_thread(server.stop)


# ----------------------------------------------------------------------------- local://

_CRASHING_WRITER = """
import asyncio, os, sys
from stripemq.metadata import create_metadata_store

async def main(url):
    store = create_metadata_store(url)
    await store.start()
    await store.create("/crash/ephemeral", b"e", ephemeral=True)
    await store.put("/crash/durable", b"d")
    os._exit(17)  # die without closing: the session ends with the process

asyncio.run(main(sys.argv[1]))
"""


async def test_local_data_survives_reopen(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'meta'}"
    first = create_metadata_store(url)
    await first.start()
    await first.put("/keep/me", b"v0")
    await first.put("/keep/me", b"v1")
    before = await first.create("/keep/seq-", sequential=True)
    await first.close()

    second = create_metadata_store(url)
    await second.start()
    try:
        got = await second.get("/keep/me")
        assert got is not None and got[0] == b"v1" and got[1].version == 1
        after = await second.create("/keep/seq-", sequential=True)
        assert after > before
    finally:
        await second.close()


async def test_local_ephemerals_of_a_crashed_process_are_removed(tmp_path: Path) -> None:
    directory = tmp_path / "meta"
    url = f"local://{directory}"
    env = {**os.environ, "PYTHONPATH": str(Path(stripemq.__file__).resolve().parents[1])}
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CRASHING_WRITER, url, env=env
    )
    assert await writer.wait() == 17

    def ephemeral_rows() -> int:
        with sqlite3.connect(directory / DB_FILE) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM nodes WHERE owner != 0").fetchone()[0])

    assert await asyncio.to_thread(ephemeral_rows) == 1, "the crashed writer's node committed"

    store = create_metadata_store(url)
    await store.start()
    try:
        assert await store.exists("/crash/ephemeral") is None
        got = await store.get("/crash/durable")
        assert got is not None and got[0] == b"d"
    finally:
        await store.close()


async def test_local_directory_is_locked_by_one_process(tmp_path: Path) -> None:
    directory = tmp_path / "meta"
    directory.mkdir()
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what another process's store would hold
        store = create_metadata_store(f"local://{directory}")
        with pytest.raises(MetadataError, match="in use"):
            await store.start()
        await store.close()
    finally:
        os.close(fd)


async def test_private_memory_stores_do_not_share() -> None:
    one, two = create_metadata_store("memory://"), create_metadata_store("memory://")
    await one.start()
    await two.start()
    try:
        await one.put("/only/here", b"")
        assert await two.exists("/only/here") is None
    finally:
        await one.close()
        await two.close()


def test_unknown_url_scheme() -> None:
    for url in ("etcd://host:2379", "/just/a/path", "zk://", "local://"):
        with pytest.raises(ConfigError):
            create_metadata_store(url)
