"""The async ``MetadataStore`` interface every backend implements.

Semantics follow ZooKeeper, because that is the production backend and the others must be
indistinguishable from it in the contract tests: versioned nodes, compare-and-set,
ephemeral nodes bound to the store's session, sequential names, atomic multi-ops, watches
delivered on the event loop, and session events.
"""

from __future__ import annotations

import abc
import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from stripemq.errors import InvalidPathError

ANY_VERSION = -1


@dataclass(frozen=True)
class Stat:
    """What the store knows about a node besides its data."""

    version: int
    created_ms: int
    modified_ms: int
    ephemeral: bool
    num_children: int = 0


class EventType(enum.Enum):
    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"
    CHILDREN_CHANGED = "children_changed"


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    path: str


class SessionEvent(enum.Enum):
    """Session state changes, as ZooKeeper reports them."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost, session may still be alive
    RECONNECTED = "reconnected"  # connection back within the session timeout
    LOST = "lost"  # session expired: every ephemeral node of ours is gone


# ----------------------------------------------------------------------------- multi-ops


@dataclass(frozen=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True)
class SetOp:
    path: str
    data: bytes
    expected_version: int = ANY_VERSION


@dataclass(frozen=True)
class DeleteOp:
    path: str
    expected_version: int = ANY_VERSION


@dataclass(frozen=True)
class CheckOp:
    """Asserts a node's version inside a transaction without changing it."""

    path: str
    expected_version: int


Op = CreateOp | SetOp | DeleteOp | CheckOp


@dataclass
class WatchHandle:
    """Returned by ``watch``/``watch_children``; ``cancel()`` stops further callbacks."""

    _cancel: Callable[[], None] = field(repr=False)
    cancelled: bool = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self._cancel()


WatchCallback = Callable[[WatchEvent], None]
SessionListener = Callable[[SessionEvent], None]


def validate_path(path: str) -> str:
    """Raise ``InvalidPathError`` unless ``path`` is absolute and normalised."""
    if not path.startswith("/"):
        raise InvalidPathError(f"path must be absolute: {path!r}")
    if path != "/" and (path.endswith("/") or "//" in path):
        raise InvalidPathError(f"path is not normalised: {path!r}")
    if any(part in (".", "..") for part in path.split("/")) or "\x00" in path:
        raise InvalidPathError(f"invalid path component in {path!r}")
    return path


def parent_of(path: str) -> str:
    """The parent node's path ('/' for a top-level node)."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


class MetadataStore(abc.ABC):
    """Async, versioned, hierarchical key-value store with ZooKeeper's semantics.

    Every coroutine must be awaited on the loop that called ``start``. Callbacks (watches,
    session listeners) run on that loop too, never on a backend thread.
    """

    def __init__(self) -> None:
        self._session_listeners: list[SessionListener] = []

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect/open; a session begins and ``SessionEvent.CONNECTED`` fires."""

    @abc.abstractmethod
    async def close(self) -> None:
        """End the session: this store's ephemeral nodes are removed."""

    @abc.abstractmethod
    async def get(self, path: str) -> tuple[bytes, Stat] | None:
        """The node's data and stat, or ``None`` when it does not exist."""

    @abc.abstractmethod
    async def exists(self, path: str) -> Stat | None:
        """The node's stat, or ``None``."""

    @abc.abstractmethod
    async def put(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        """Set data with compare-and-set.

        ``expected_version == -1`` creates the node (and missing parents) or overwrites it.
        Otherwise the node must exist (``NotFoundError``) at exactly that version
        (``BadVersionError``).
        """

    @abc.abstractmethod
    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> str:
        """Create a node, with missing parents as persistent empty nodes.

        Returns the created path (with the 10-digit suffix when ``sequential``). Raises
        ``NodeExistsError`` if it exists.
        """

    @abc.abstractmethod
    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        """Delete one node. ``NotFoundError``, ``BadVersionError``, ``NotEmptyError``."""

    @abc.abstractmethod
    async def children(self, path: str) -> list[str]:
        """Sorted child names; an empty list when the node does not exist."""

    @abc.abstractmethod
    async def multi(self, ops: list[Op]) -> list[str | Stat | None]:
        """Apply all ops atomically or none; raise the first failing op's error.

        Results, one per op: created path for ``CreateOp``, new ``Stat`` for ``SetOp``,
        ``None`` for ``DeleteOp`` and ``CheckOp``.
        """

    def watch(self, path: str, callback: WatchCallback) -> WatchHandle:
        """Call ``callback`` on every create/change/delete of ``path`` until cancelled."""
        return self._add_watch(False, path, callback)

    def watch_children(self, path: str, callback: WatchCallback) -> WatchHandle:
        """Call ``callback`` whenever the set of ``path``'s children changes."""
        return self._add_watch(True, path, callback)

    @abc.abstractmethod
    def _add_watch(self, children: bool, path: str, callback: WatchCallback) -> WatchHandle:
        """The backend's watch on a node's data (``children=False``) or its children."""

    def add_session_listener(self, listener: SessionListener) -> None:
        """Receive ``SessionEvent``s for this store's session."""
        self._session_listeners.append(listener)

    def _emit_session_event(self, loop: asyncio.AbstractEventLoop, event: SessionEvent) -> None:
        """Deliver ``event`` to every listener on ``loop`` (an exception goes to its handler)."""
        for listener in list(self._session_listeners):
            loop.call_soon(listener, event)

    # ------------------------------------------------------------------ helpers

    async def delete_recursive(self, path: str) -> None:
        """Delete ``path`` and everything below it; missing nodes are ignored."""
        from stripemq.errors import NotFoundError

        for child in await self.children(path):
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        try:
            await self.delete(path)
        except NotFoundError:
            pass

    async def __aenter__(self) -> MetadataStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
