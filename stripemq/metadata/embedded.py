"""Embedded ``MetadataStore`` on SQLite, for ``stripemq standalone`` and unit tests.

``local:///path/to/dir`` keeps a durable database in that directory (WAL, synchronous=FULL);
``memory://`` is a private in-memory database and ``memory://<name>`` one shared by name
within the process. All stores opened on the same directory or name in one process share
one engine (connection, worker thread, watch registry) and see each other's writes and
watch events, while each store has its own session and ephemeral nodes. A ``local://``
directory is locked by one process at a time, so the ephemeral nodes found when the first
store of a process opens it belong to a dead process and are deleted.

``read_only=True`` opens a ``local://`` database without that lock, beside the process that
holds it (WAL lets readers and one writer share the file): Spark and other tools read a
running standalone's metadata this way. Such a store refuses every write, and sees only
the changes that committed (no watch fires across processes).

SQLite runs on the engine's single worker thread; watch callbacks are posted to each
watcher's event loop after the change commits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import logging
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

from stripemq.clock import now_ms
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
from stripemq.metadata.api import (
    ANY_VERSION,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
    Op,
    SessionEvent,
    SetOp,
    Stat,
    WatchCallback,
    WatchEvent,
    WatchHandle,
    parent_of,
    validate_path,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

DB_FILE = "metadata.sqlite3"
LOCK_FILE = "metadata.lock"
PERSISTENT = 0  # owner column value of persistent nodes; ephemeral nodes hold a session id

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path     TEXT PRIMARY KEY,
    parent   TEXT NOT NULL,
    data     BLOB NOT NULL,
    version  INTEGER NOT NULL,
    cversion INTEGER NOT NULL,
    ctime    INTEGER NOT NULL,
    mtime    INTEGER NOT NULL,
    owner    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes (parent, path);
CREATE INDEX IF NOT EXISTS nodes_by_owner ON nodes (owner) WHERE owner != 0;
"""


def _child_path(parent: str, name: str) -> str:
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


class _Row(NamedTuple):
    path: str
    parent: str
    data: bytes
    version: int
    cversion: int
    ctime: int
    mtime: int
    owner: int


class _Txn:
    """Node operations on the worker thread's connection; records the watch events they cause."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.events: list[WatchEvent] = []

    def row(self, path: str) -> _Row | None:
        found = self.conn.execute(
            "SELECT path, parent, data, version, cversion, ctime, mtime, owner "
            "FROM nodes WHERE path = ?",
            (path,),
        ).fetchone()
        return _Row(*found) if found is not None else None

    def stat(self, row: _Row) -> Stat:
        (count,) = self.conn.execute(
            "SELECT COUNT(*) FROM nodes WHERE parent = ? AND path != '/'", (row.path,)
        ).fetchone()
        return Stat(
            version=row.version,
            created_ms=row.ctime,
            modified_ms=row.mtime,
            ephemeral=row.owner != PERSISTENT,
            num_children=count,
        )

    def get(self, path: str) -> tuple[bytes, Stat] | None:
        row = self.row(path)
        return (bytes(row.data), self.stat(row)) if row is not None else None

    def children(self, path: str) -> list[str]:
        prefix = len(path) if path == "/" else len(path) + 1
        rows = self.conn.execute(
            "SELECT path FROM nodes WHERE parent = ? AND path != '/' ORDER BY path", (path,)
        ).fetchall()
        return [found[prefix:] for (found,) in rows]

    def _existing(self, path: str, expected_version: int) -> _Row:
        row = self.row(path)
        if row is None:
            raise NotFoundError(path)
        if expected_version != ANY_VERSION and row.version != expected_version:
            raise BadVersionError(f"{path}: expected version {expected_version}, is {row.version}")
        return row

    def _bump_cversion(self, parent: str) -> None:
        self.conn.execute("UPDATE nodes SET cversion = cversion + 1 WHERE path = ?", (parent,))

    def create(
        self, path: str, data: bytes, *, owner: int, sequential: bool, make_parents: bool
    ) -> str:
        """Insert a node the way ZooKeeper's create does (sequence from the parent's cversion)."""
        if path == "/":
            if sequential:
                raise InvalidPathError("a sequential node needs a name prefix, not '/'")
            raise NodeExistsError(path)
        parent_path = parent_of(path)
        parent = self.row(parent_path)
        if parent is None:
            if not make_parents:
                raise NotFoundError(f"parent of {path} does not exist")
            self.create(parent_path, b"", owner=PERSISTENT, sequential=False, make_parents=True)
            parent = self.row(parent_path)
            assert parent is not None
        if sequential:
            path = f"{path}{parent.cversion:010d}"
        if self.row(path) is not None:
            raise NodeExistsError(path)
        if parent.owner != PERSISTENT:
            raise NoChildrenForEphemeralsError(f"{parent_path} is ephemeral")
        now = now_ms()
        self.conn.execute(
            "INSERT INTO nodes (path, parent, data, version, cversion, ctime, mtime, owner) "
            "VALUES (?, ?, ?, 0, 0, ?, ?, ?)",
            (path, parent_path, bytes(data), now, now, owner),
        )
        self._bump_cversion(parent_path)
        self.events.append(WatchEvent(EventType.CREATED, path))
        self.events.append(WatchEvent(EventType.CHILDREN_CHANGED, parent_path))
        return path

    def set(self, path: str, data: bytes, expected_version: int) -> Stat:
        row = self._existing(path, expected_version)
        self.conn.execute(
            "UPDATE nodes SET data = ?, version = version + 1, mtime = ? WHERE path = ?",
            (bytes(data), now_ms(), path),
        )
        self.events.append(WatchEvent(EventType.CHANGED, path))
        updated = self.row(path)
        assert updated is not None and updated.version == row.version + 1
        return self.stat(updated)

    def put(self, path: str, data: bytes, expected_version: int) -> Stat:
        if expected_version == ANY_VERSION and self.row(path) is None:
            created = self.create(path, data, owner=PERSISTENT, sequential=False, make_parents=True)
            row = self.row(created)
            assert row is not None
            return self.stat(row)
        return self.set(path, data, expected_version)

    def delete(self, path: str, expected_version: int) -> None:
        if path == "/":
            raise InvalidPathError("the root node cannot be deleted")
        row = self._existing(path, expected_version)
        if self.conn.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone():
            raise NotEmptyError(path)
        self.conn.execute("DELETE FROM nodes WHERE path = ?", (path,))
        self._bump_cversion(row.parent)
        self.events.append(WatchEvent(EventType.DELETED, path))
        self.events.append(WatchEvent(EventType.CHILDREN_CHANGED, row.parent))

    def check(self, path: str, expected_version: int) -> None:
        self._existing(path, expected_version)

    def delete_ephemerals(self, owner: int | None) -> int:
        """Delete the ephemeral nodes of one session (or of every session when ``None``)."""
        if owner is None:
            rows = self.conn.execute("SELECT path FROM nodes WHERE owner != 0").fetchall()
        else:
            rows = self.conn.execute("SELECT path FROM nodes WHERE owner = ?", (owner,)).fetchall()
        for (path,) in rows:
            self.delete(path, ANY_VERSION)
        return len(rows)

    def apply(self, op: Op, owner: int) -> str | Stat | None:
        """One multi-op, with ZooKeeper's transaction semantics (no parent creation)."""
        validate_path(op.path)
        match op:
            case CreateOp():
                return self.create(
                    op.path,
                    op.data,
                    owner=owner if op.ephemeral else PERSISTENT,
                    sequential=op.sequential,
                    make_parents=False,
                )
            case SetOp():
                return self.set(op.path, op.data, op.expected_version)
            case DeleteOp():
                self.delete(op.path, op.expected_version)
                return None
            case CheckOp():
                self.check(op.path, op.expected_version)
                return None
        raise TypeError(f"not a metadata op: {op!r}")


@dataclass(eq=False)
class _Watcher:
    """A registered callback and the loop it must run on."""

    loop: asyncio.AbstractEventLoop
    callback: WatchCallback
    active: bool = True

    def fire(self, event: WatchEvent) -> None:
        if not self.active:
            return
        try:
            self.callback(event)
        except Exception:
            logger.exception("metadata watch callback failed for %s", event)


class _Engine:
    """One SQLite database with its worker thread and watch registry, shared by stores."""

    def __init__(
        self,
        key: str | None,
        directory: Path | None,
        predecessor: concurrent.futures.Future[None] | None,
        read_only: bool = False,
    ) -> None:
        self.key = key
        self.directory = directory
        self.read_only = read_only
        self.refs = 0
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="stripemq-metadata-sqlite"
        )
        self._conn: sqlite3.Connection | None = None  # used on the worker thread only
        self._lock_fd: int | None = None
        self._watch_lock = threading.Lock()
        self._watchers: dict[tuple[bool, str], list[_Watcher]] = {}
        self.opened = self._executor.submit(self._open, predecessor)

    # ------------------------------------------------------------------ worker thread

    def _open(self, predecessor: concurrent.futures.Future[None] | None) -> None:
        if predecessor is not None:
            with contextlib.suppress(Exception):
                predecessor.result()
        if self.read_only:
            self._conn = self._connect_read_only()
            return
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_directory(self.directory)
        try:
            self._conn = self._connect()
        except sqlite3.Error as exc:
            raise MetadataError(f"cannot open metadata database: {exc}") from exc
        # Nobody else can hold this database now, so every ephemeral node is a dead session's.
        removed = self._write(lambda txn: txn.delete_ephemerals(None))
        if removed:
            logger.info("removed %d ephemeral nodes left by a previous process", removed)

    def _connect(self) -> sqlite3.Connection:
        if self.directory is None:
            conn = sqlite3.connect(":memory:", isolation_level=None)
        else:
            conn = sqlite3.connect(self.directory / DB_FILE, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(_SCHEMA)
        now = now_ms()
        conn.execute(
            "INSERT OR IGNORE INTO nodes VALUES ('/', '/', x'', 0, 0, ?, ?, 0)", (now, now)
        )
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        assert self.directory is not None
        path = self.directory / DB_FILE
        if not path.is_file():
            raise MetadataError(f"no metadata database at {path}")
        try:
            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("PRAGMA query_only=ON")
            conn.execute("SELECT 1 FROM nodes LIMIT 1")
        except sqlite3.Error as exc:
            raise MetadataError(f"cannot open metadata database {path}: {exc}") from exc
        return conn

    def _lock_directory(self, directory: Path) -> None:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise MetadataError(
                f"metadata directory {directory} is in use by another process"
            ) from None
        self._lock_fd = fd

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _read(self, fn: Callable[[_Txn], T]) -> T:
        assert self._conn is not None
        try:
            return fn(_Txn(self._conn))
        except sqlite3.Error as exc:
            raise MetadataError(f"metadata database error: {exc}") from exc

    def _write(self, fn: Callable[[_Txn], T]) -> T:
        """Run ``fn`` in one transaction; publish its watch events only once it committed."""
        conn = self._conn
        assert conn is not None
        if self.read_only:
            raise MetadataError(f"metadata store {self.directory} is open read-only")
        txn = _Txn(conn)
        try:
            conn.execute("BEGIN IMMEDIATE")
            result = fn(txn)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise MetadataError(f"metadata database error: {exc}") from exc
            raise
        self._publish(txn.events)
        return result

    def _publish(self, events: list[WatchEvent]) -> None:
        for event in events:
            is_children = event.type is EventType.CHILDREN_CHANGED
            with self._watch_lock:
                watchers = list(self._watchers.get((is_children, event.path), ()))
            for watcher in watchers:
                try:
                    watcher.loop.call_soon_threadsafe(watcher.fire, event)
                except RuntimeError:  # that watcher's loop is closed
                    watcher.active = False

    # ------------------------------------------------------------------ any thread

    async def read(self, fn: Callable[[_Txn], T]) -> T:
        return await asyncio.wrap_future(self._executor.submit(self._read, fn))

    async def write(self, fn: Callable[[_Txn], T]) -> T:
        return await asyncio.wrap_future(self._executor.submit(self._write, fn))

    def add_watcher(self, children: bool, path: str, watcher: _Watcher) -> None:
        with self._watch_lock:
            self._watchers.setdefault((children, path), []).append(watcher)

    def remove_watcher(self, children: bool, path: str, watcher: _Watcher) -> None:
        watcher.active = False
        with self._watch_lock:
            watchers = self._watchers.get((children, path), [])
            if watcher in watchers:
                watchers.remove(watcher)
            if not watchers:
                self._watchers.pop((children, path), None)

    def shutdown(self) -> concurrent.futures.Future[None]:
        """Close the database on the worker thread, then let the thread exit."""
        closed = self._executor.submit(self._close)
        self._executor.shutdown(wait=False)
        return closed


_registry_lock = threading.Lock()
_engines: dict[str, _Engine] = {}
_closing: dict[str, concurrent.futures.Future[None]] = {}


def _acquire_engine(key: str | None, directory: Path | None, read_only: bool = False) -> _Engine:
    """The process's engine for ``key`` (a new private one when ``key`` is None)."""
    with _registry_lock:
        engine = _engines.get(key) if key is not None else None
        if engine is None:
            predecessor = _closing.pop(key, None) if key is not None else None
            engine = _Engine(key, directory, predecessor, read_only)
            if key is not None:
                _engines[key] = engine
        engine.refs += 1
        return engine


async def _release_engine(engine: _Engine) -> None:
    """Drop one reference; the last one closes the database (and unlocks the directory)."""
    with _registry_lock:
        engine.refs -= 1
        if engine.refs > 0:
            return
        if engine.key is not None and _engines.get(engine.key) is engine:
            del _engines[engine.key]
        closed = engine.shutdown()
        for stale in [name for name, done in _closing.items() if done.done()]:
            del _closing[stale]
        if engine.key is not None:
            _closing[engine.key] = closed
    await asyncio.wrap_future(closed)


def _parse_url(url: str) -> tuple[str | None, Path | None]:
    """Registry key and directory for a ``local://`` or ``memory://`` URL."""
    if url.startswith("local://"):
        location = url[len("local://") :]
        if not location:
            raise ConfigError(f"local:// URL needs a directory: {url!r}")
        directory = Path(location).expanduser().resolve()
        return f"local:{directory}", directory
    if url.startswith("memory://"):
        name = url[len("memory://") :].strip("/")
        return (f"memory:{name}" if name else None), None
    raise ConfigError(f"not an embedded metadata URL: {url!r}")


class EmbeddedMetadataStore(MetadataStore):
    """In-process ``MetadataStore`` with ZooKeeper's semantics, on SQLite.

    ``session_timeout`` is ignored: the session lasts until ``close()`` or the process ends.
    ``read_only`` (``local://`` only) reads a database another process may hold.
    """

    def __init__(
        self,
        url: str = "memory://",
        *,
        session_timeout: float | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__()
        self.url = url
        self._key, self._directory = _parse_url(url)
        if read_only and self._directory is None:
            raise ConfigError(f"only a local:// store can be opened read-only, not {url!r}")
        self.read_only = read_only
        if read_only:
            self._key = f"ro:{self._key}"
        self._session_id = secrets.randbits(62) + 1
        self._engine: _Engine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = "new"  # new -> open -> (lost) -> closed
        self._watchers: list[tuple[bool, str, _Watcher]] = []

    @property
    def session_id(self) -> int:
        """This store's session id (the owner of its ephemeral nodes)."""
        return self._session_id

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._state != "new":
            raise SessionLostError(f"metadata store {self.url} cannot be restarted")
        self._loop = asyncio.get_running_loop()
        engine = _acquire_engine(self._key, self._directory, self.read_only)
        try:
            await asyncio.wrap_future(engine.opened)
        except BaseException:
            await _release_engine(engine)
            raise
        self._engine = engine
        self._state = "open"
        logger.debug("embedded metadata store %s open, session %#x", self.url, self._session_id)
        self._emit(SessionEvent.CONNECTED)

    async def close(self) -> None:
        if self._state in ("new", "closed"):
            self._state = "closed"
            return
        was_open = self._state == "open"
        self._state = "closed"
        self._stop_watchers()
        engine, self._engine = self._engine, None
        assert engine is not None
        try:
            if was_open and not self.read_only:
                await engine.write(lambda txn: txn.delete_ephemerals(self._session_id))
        finally:
            await _release_engine(engine)

    async def expire_session(self) -> None:
        """Test hook: end the session as ZooKeeper's expiry would (ephemerals gone, ``LOST``).

        Afterwards every call raises ``SessionLostError``, as after a real expiry.
        """
        engine = self._require_open()
        self._state = "lost"
        self._stop_watchers()
        await engine.write(lambda txn: txn.delete_ephemerals(self._session_id))
        self._emit(SessionEvent.LOST)

    # ------------------------------------------------------------------ reads

    async def get(self, path: str) -> tuple[bytes, Stat] | None:
        validate_path(path)
        return await self._require_open().read(lambda txn: txn.get(path))

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)

        def stat(txn: _Txn) -> Stat | None:
            row = txn.row(path)
            return txn.stat(row) if row is not None else None

        return await self._require_open().read(stat)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        return await self._require_open().read(lambda txn: txn.children(path))

    # ------------------------------------------------------------------ writes

    async def put(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        validate_path(path)
        return await self._require_open().write(lambda txn: txn.put(path, data, expected_version))

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> str:
        validate_path(path)
        owner = self._session_id if ephemeral else PERSISTENT
        return await self._require_open().write(
            lambda txn: txn.create(
                path, data, owner=owner, sequential=sequential, make_parents=True
            )
        )

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        validate_path(path)
        await self._require_open().write(lambda txn: txn.delete(path, expected_version))

    async def multi(self, ops: list[Op]) -> list[str | Stat | None]:
        ops = list(ops)
        for op in ops:
            validate_path(op.path)
        return await self._require_open().write(
            lambda txn: [txn.apply(op, self._session_id) for op in ops]
        )

    # ------------------------------------------------------------------ internals

    def _require_open(self) -> _Engine:
        if self._state != "open" or self._engine is None:
            raise SessionLostError(f"metadata store {self.url} is {self._state}")
        return self._engine

    def _add_watch(self, children: bool, path: str, callback: WatchCallback) -> WatchHandle:
        validate_path(path)
        engine = self._require_open()
        assert self._loop is not None
        watcher = _Watcher(self._loop, callback)
        entry = (children, path, watcher)
        engine.add_watcher(children, path, watcher)
        self._watchers.append(entry)

        def cancel() -> None:
            engine.remove_watcher(children, path, watcher)
            with contextlib.suppress(ValueError):
                self._watchers.remove(entry)

        return WatchHandle(cancel)

    def _stop_watchers(self) -> None:
        watchers, self._watchers = self._watchers, []
        if self._engine is not None:
            for children, path, watcher in watchers:
                self._engine.remove_watcher(children, path, watcher)

    def _emit(self, event: SessionEvent) -> None:
        assert self._loop is not None
        self._emit_session_event(self._loop, event)
