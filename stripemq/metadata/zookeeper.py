"""``MetadataStore`` on Apache ZooKeeper through kazoo, the production backend.

URL: ``zk://host:port[,host:port]/chroot`` (the chroot is optional and created when
missing). kazoo's asynchronous calls complete on its threads; their results are handed to
the event loop with ``loop.call_soon_threadsafe``, so nothing blocks the loop.

Session semantics: one store is one ZooKeeper session. ``SUSPENDED``/``RECONNECTED`` report
connection trouble within the session timeout. Once the session expires (``LOST``) its
ephemeral nodes are gone and the store refuses every further call with
``SessionLostError`` instead of quietly reconnecting with a new session: an owner of
ephemeral nodes (a broker's bundle ownership, a bookie's registration) must notice that it
lost them and build a new store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kazoo.exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

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
    validate_path,
)
from stripemq.retry import Backoff

logger = logging.getLogger(__name__)

_PUT_ATTEMPTS = 100
_RETRY_PAUSE = 0.05

_ERROR_TYPES: tuple[tuple[type[Exception], type[MetadataError]], ...] = (
    (kz.NoNodeError, NotFoundError),
    (kz.NodeExistsError, NodeExistsError),
    (kz.BadVersionError, BadVersionError),
    (kz.NotEmptyError, NotEmptyError),
    (kz.NoChildrenForEphemeralsError, NoChildrenForEphemeralsError),
    (kz.SessionExpiredError, SessionLostError),  # includes ConnectionClosedError
    (kz.ZookeeperStoppedError, SessionLostError),
    (kz.BadArgumentsError, InvalidPathError),
)


def _translate(exc: Exception, path: str) -> MetadataError:
    """Our typed error for a kazoo exception raised while working on ``path``."""
    for kazoo_type, ours in _ERROR_TYPES:
        if isinstance(exc, kazoo_type):
            return ours(path)
    return MetadataError(f"{path}: ZooKeeper error {type(exc).__name__} {exc}".rstrip())


def _stat(zstat: ZnodeStat) -> Stat:
    return Stat(
        version=zstat.version,
        created_ms=zstat.ctime,
        modified_ms=zstat.mtime,
        ephemeral=zstat.ephemeralOwner != 0,
        num_children=zstat.numChildren,
    )


def parse_zk_url(url: str) -> tuple[str, str]:
    """Split ``zk://hosts/chroot`` into kazoo's host list and the chroot ('' for none)."""
    if not url.startswith("zk://"):
        raise ConfigError(f"not a ZooKeeper metadata URL: {url!r}")
    hosts, slash, chroot = url[len("zk://") :].partition("/")
    if not hosts:
        raise ConfigError(f"ZooKeeper URL has no hosts: {url!r}")
    chroot = (slash + chroot).rstrip("/")
    if chroot:
        try:
            validate_path(chroot)
        except InvalidPathError as exc:
            raise ConfigError(f"bad chroot in {url!r}: {exc}") from None
    return hosts, chroot


def _settle(future: asyncio.Future[Any], result: IAsyncResult) -> None:
    """Copy a finished kazoo result into an asyncio future (runs on the loop)."""
    if future.done():
        return
    exc = result.exception
    if exc is None:
        future.set_result(result.value)
    else:
        future.set_exception(exc)


@dataclass(eq=False)
class _Subscriber:
    callback: WatchCallback
    active: bool = True


class _PathWatch:
    """A persistent watch on one path, rebuilt from ZooKeeper's one-shot watches.

    Each trigger (or connection drop) re-reads and re-arms; callbacks get the difference.
    """

    def __init__(self, store: ZooKeeperMetadataStore, path: str, children: bool) -> None:
        self.store = store
        self.path = path
        self.children = children
        self.active = True
        self.subscribers: list[_Subscriber] = []
        self._abs = store._abs(path)
        self._wake = asyncio.Event()
        # The first read goes out now, so it is ordered before any write the caller makes next.
        first = self._request_children() if children else self._request_exists()
        self._task = store._loop_or_fail().create_task(self._run(first))

    # ------------------------------------------------------------------ kazoo threads

    def _trigger(self, event: WatchedEvent) -> None:
        if self.active:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self.store._loop_or_fail().call_soon_threadsafe(self._wake.set)

    # ------------------------------------------------------------------ loop

    def _request_exists(self) -> IAsyncResult:
        return self.store._kazoo().exists_async(self._abs, watch=self._trigger)

    def _request_children(self) -> IAsyncResult:
        return self.store._kazoo().get_children_async(self._abs, watch=self._trigger)

    async def _observe(self, pending: IAsyncResult | None) -> object:
        if pending is None:
            pending = self._request_children() if self.children else self._request_exists()
        if not self.children:
            zstat = await self.store._bridge(pending)
            return None if zstat is None else (zstat.czxid, zstat.mzxid)
        try:
            return frozenset(await self.store._bridge(pending))
        except kz.NoNodeError:
            if await self.store._bridge(self._request_exists()) is not None:
                self._wake.set()  # created in between: list its children right away
            return frozenset()

    def _diff(self, old: object, new: object) -> list[EventType]:
        if self.children:
            return [EventType.CHILDREN_CHANGED] if old != new else []
        if old == new:
            return []
        if old is None:
            return [EventType.CREATED]
        if new is None:
            return [EventType.DELETED]
        assert isinstance(old, tuple) and isinstance(new, tuple)
        if old[0] != new[0]:  # czxid: deleted and created again
            return [EventType.DELETED, EventType.CREATED]
        return [EventType.CHANGED]

    async def _run(self, first: IAsyncResult) -> None:
        pending: IAsyncResult | None = first
        known: object = None
        initial = True
        while self.active:
            try:
                seen = await self._observe(pending)
            except kz.ConnectionLoss:
                pending = None
                await asyncio.sleep(_RETRY_PAUSE)
                continue
            except Exception as exc:
                if self.active and self.store._state == "open":
                    logger.warning("watch on %s stopped: %r", self.path, exc)
                return
            pending = None
            if not initial:
                for event_type in self._diff(known, seen):
                    self._deliver(WatchEvent(event_type, self.path))
            known, initial = seen, False
            await self._wake.wait()
            self._wake.clear()

    def _deliver(self, event: WatchEvent) -> None:
        for subscriber in list(self.subscribers):
            if not (self.active and subscriber.active):
                continue
            try:
                subscriber.callback(event)
            except Exception:
                logger.exception("metadata watch callback failed for %s", event)

    def stop(self) -> None:
        self.active = False
        self._task.cancel()


class ZooKeeperMetadataStore(MetadataStore):
    """``MetadataStore`` over one kazoo client and ZooKeeper session."""

    def __init__(
        self,
        url: str,
        *,
        session_timeout: float = 10.0,
        connect_timeout: float = 15.0,
    ) -> None:
        super().__init__()
        self.url = url
        self._hosts, self._chroot = parse_zk_url(url)
        self._session_timeout = session_timeout
        self._connect_timeout = connect_timeout
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = "new"  # new -> open -> (lost) -> closed
        self._expired = False  # set from kazoo's thread the moment the session is lost
        self._closing = False
        self._suspended = False
        self._watches: dict[tuple[bool, str], _PathWatch] = {}
        self._lost = asyncio.Event()
        self._stopper: asyncio.Task[None] | None = None

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """kazoo's (session id, password) while connected."""
        return self._client.client_id if self._client is not None else None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._state != "new":
            raise SessionLostError(f"metadata store {self.url} cannot be restarted")
        self._loop = asyncio.get_running_loop()
        client = KazooClient(
            hosts=self._hosts,
            timeout=self._session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
        )
        client.add_listener(self._on_kazoo_state)
        try:
            await asyncio.to_thread(client.start, self._connect_timeout)
        except KazooTimeoutError:
            raise MetadataError(
                f"cannot connect to ZooKeeper at {self._hosts} within {self._connect_timeout}s"
            ) from None
        self._client = client
        self._state = "open"
        if self._chroot:
            try:
                await self._run(self._chroot, lambda: client.ensure_path_async(self._chroot))
            except BaseException:
                await self.close()
                raise
        logger.debug("connected to ZooKeeper %s", self.url)
        self._emit(SessionEvent.CONNECTED)

    async def close(self) -> None:
        if self._state == "closed":
            return
        self._closing = True
        self._state = "closed"
        self._stop_watches()
        if self._stopper is not None:
            with contextlib.suppress(Exception):
                await self._stopper
        client, self._client = self._client, None
        if client is not None:
            await asyncio.to_thread(_shutdown, client)

    async def expire_session(self) -> None:
        """Test hook: expire the session the standard way (a second client joins and closes it).

        ZooKeeper deletes our ephemeral nodes; returns once this store has seen ``LOST``.
        """
        self._require_open()
        session = self.client_id
        if session is None:
            raise MetadataError("not connected: cannot expire the session")

        def expire() -> None:
            other = KazooClient(hosts=self._hosts, client_id=session, timeout=self._session_timeout)
            other.start(self._connect_timeout)
            _shutdown(other)

        await asyncio.to_thread(expire)
        await asyncio.wait_for(self._lost.wait(), self._session_timeout + self._connect_timeout)

    # ------------------------------------------------------------------ reads

    async def get(self, path: str) -> tuple[bytes, Stat] | None:
        target = self._abs(path)
        try:
            data, zstat = await self._run(path, lambda: self._kazoo().get_async(target))
        except NotFoundError:
            return None
        return (data or b"", _stat(zstat))

    async def exists(self, path: str) -> Stat | None:
        target = self._abs(path)
        zstat = await self._run(path, lambda: self._kazoo().exists_async(target))
        return _stat(zstat) if zstat is not None else None

    async def children(self, path: str) -> list[str]:
        target = self._abs(path)
        try:
            names = await self._run(path, lambda: self._kazoo().get_children_async(target))
        except NotFoundError:
            return []
        return sorted(names)

    # ------------------------------------------------------------------ writes

    async def put(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        target, value, client = self._abs(path), bytes(data), self._kazoo()
        if expected_version != ANY_VERSION:
            zstat = await self._run(
                path, lambda: client.set_async(target, value, expected_version), idempotent=False
            )
            return _stat(zstat)
        # Create-or-set, racing other writers: whichever of set/create fails, try the other.
        for _ in range(_PUT_ATTEMPTS):
            try:
                zstat = await self._run(
                    path, lambda: client.set_async(target, value), idempotent=False
                )
                return _stat(zstat)
            except NotFoundError:
                pass
            try:
                _, zstat = await self._run(
                    path,
                    lambda: client.create_async(target, value, makepath=True, include_data=True),
                    idempotent=False,
                )
                return _stat(zstat)
            except NodeExistsError:
                pass
        raise MetadataError(f"{path}: put kept racing with other writers")

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> str:
        target = self._abs_for_create(path, sequential)
        created = await self._run(
            path,
            lambda: self._kazoo().create_async(
                target, bytes(data), ephemeral=ephemeral, sequence=sequential, makepath=True
            ),
            idempotent=False,
        )
        return self._rel(created)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        target = self._abs_for_delete(path)
        await self._run(
            path, lambda: self._kazoo().delete_async(target, expected_version), idempotent=False
        )

    async def multi(self, ops: list[Op]) -> list[str | Stat | None]:
        ops = list(ops)
        if not ops:
            self._require_open()
            return []
        transaction = self._kazoo().transaction()
        for op in ops:
            match op:
                case CreateOp():
                    transaction.create(
                        self._abs_for_create(op.path, op.sequential),
                        bytes(op.data),
                        ephemeral=op.ephemeral,
                        sequence=op.sequential,
                    )
                case SetOp():
                    transaction.set_data(self._abs(op.path), bytes(op.data), op.expected_version)
                case DeleteOp():
                    transaction.delete(self._abs_for_delete(op.path), op.expected_version)
                case CheckOp():
                    transaction.check(self._abs(op.path), op.expected_version)
                case _:
                    raise TypeError(f"not a metadata op: {op!r}")
        results = await self._run("multi", lambda: transaction.commit_async(), idempotent=False)
        benign = (kz.RolledBackError, kz.RuntimeInconsistency)
        for op, result in zip(ops, results, strict=True):
            if isinstance(result, Exception) and not isinstance(result, benign):
                raise _translate(result, op.path) from result
        if any(isinstance(result, Exception) for result in results):
            raise MetadataError("multi rolled back without naming the failing op")
        out: list[str | Stat | None] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, CreateOp):
                out.append(self._rel(result))
            elif isinstance(op, SetOp):
                out.append(_stat(result))
            else:
                out.append(None)
        return out

    # ------------------------------------------------------------------ internals

    def _abs(self, path: str) -> str:
        validate_path(path)
        if not self._chroot:
            return path
        return self._chroot if path == "/" else self._chroot + path

    def _abs_for_create(self, path: str, sequential: bool) -> str:
        if path == "/" and sequential:
            raise InvalidPathError("a sequential node needs a name prefix, not '/'")
        return self._abs(path)

    def _abs_for_delete(self, path: str) -> str:
        if path == "/":
            raise InvalidPathError("the root node cannot be deleted")
        return self._abs(path)

    def _rel(self, path: str) -> str:
        if not self._chroot:
            return path
        return path[len(self._chroot) :] or "/"

    def _require_open(self) -> None:
        if self._state != "open" or self._expired:
            raise SessionLostError(f"metadata store {self.url} is {self._state}")

    def _kazoo(self) -> KazooClient:
        self._require_open()
        assert self._client is not None
        return self._client

    def _loop_or_fail(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("metadata store not started")
        return self._loop

    def _bridge(self, result: IAsyncResult) -> asyncio.Future[Any]:
        """An asyncio future completed (on the loop) when the kazoo result is."""
        loop = self._loop_or_fail()
        future: asyncio.Future[Any] = loop.create_future()

        def on_done(done: IAsyncResult) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(_settle, future, done)

        result.rawlink(on_done)
        return future

    async def _run(
        self, path: str, request: Callable[[], IAsyncResult], *, idempotent: bool = True
    ) -> Any:
        """Issue a kazoo call and await it; reads are retried over a connection drop."""
        self._loop_or_fail()
        backoff = Backoff(_RETRY_PAUSE, _RETRY_PAUSE, deadline=self._session_timeout)
        while True:
            self._require_open()
            try:
                return await self._bridge(request())
            except kz.ConnectionLoss as exc:
                if not idempotent:
                    raise MetadataError(
                        f"{path}: connection to ZooKeeper lost; the write may or may not "
                        "have been applied"
                    ) from exc
                if backoff.expired:
                    raise MetadataError(f"{path}: no connection to ZooKeeper") from exc
                await backoff.sleep()
            except kz.KazooException as exc:
                if self._expired:
                    raise SessionLostError(f"{path}: session lost") from exc
                raise _translate(exc, path) from exc

    def _add_watch(self, children: bool, path: str, callback: WatchCallback) -> WatchHandle:
        validate_path(path)
        self._require_open()
        key = (children, path)
        path_watch = self._watches.get(key)
        if path_watch is None:
            path_watch = self._watches[key] = _PathWatch(self, path, children)
        subscriber = _Subscriber(callback)
        path_watch.subscribers.append(subscriber)

        def cancel() -> None:
            subscriber.active = False
            with contextlib.suppress(ValueError):
                path_watch.subscribers.remove(subscriber)
            if not path_watch.subscribers:
                path_watch.stop()
                if self._watches.get(key) is path_watch:
                    del self._watches[key]

        return WatchHandle(cancel)

    def _stop_watches(self) -> None:
        watches, self._watches = self._watches, {}
        for path_watch in watches.values():
            path_watch.stop()

    def _on_kazoo_state(self, state: KazooState) -> None:
        """kazoo's connection thread reports a state change; handle it on the loop."""
        if state == KazooState.LOST and not self._closing:
            self._expired = True
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._on_state, state)

    def _on_state(self, state: KazooState) -> None:
        if self._state != "open":
            return
        if state == KazooState.CONNECTED:
            if not self._suspended:
                return  # start() reports the first connection itself
            self._suspended = False
            event = SessionEvent.RECONNECTED
        elif state == KazooState.SUSPENDED:
            self._suspended = True
            event = SessionEvent.SUSPENDED
        else:
            logger.warning("ZooKeeper session of %s lost; its ephemeral nodes are gone", self.url)
            self._state = "lost"
            self._stop_watches()
            if self._client is not None:
                # kazoo would open a new session by itself; we stop it so owners notice.
                self._stopper = asyncio.get_running_loop().create_task(
                    asyncio.to_thread(self._client.stop)
                )
            self._lost.set()
            event = SessionEvent.LOST
        self._emit(event)

    def _emit(self, event: SessionEvent) -> None:
        self._emit_session_event(self._loop_or_fail(), event)


def _shutdown(client: KazooClient) -> None:
    """Stop a kazoo client (ending its session) and free its resources; blocking."""
    try:
        client.stop()
    finally:
        client.close()
