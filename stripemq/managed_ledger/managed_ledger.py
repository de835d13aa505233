"""A topic's storage: a chain of ledgers in the metadata store, and its cursors.

Appends go to the current ledger, which rolls over by entries, size or age; reads span
ledgers and are served from a bounded cache when they tail; ledgers every cursor has passed
are deleted once outside retention. Opening a managed ledger recovers (and so fences) the
previous owner's last ledger, then starts a new one: from then on the previous owner's
appends fail with ``ManagedLedgerFencedError``.

A terminated managed ledger (``terminate``, Pulsar's topic termination) takes no more
appends, for ever, whoever opens it: its last entry is recorded in the ledger list. Its
cursors go on reading and acknowledging.

Metadata: ``/stripemq/managed-ledgers/<name>`` holds the ledger list (JSON); each cursor is
a child node of it (see ``ManagedCursor``).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stripemq.bookie.client import BookKeeper
from stripemq.bookie.client.bookkeeper import delete_ledger_quietly
from stripemq.bookie.client.ledger_handle import LedgerHandle
from stripemq.bookie.client.reader import ReadHandle
from stripemq.clock import now_ms
from stripemq.errors import (
    BadVersionError,
    BookieError,
    CursorNotFoundError,
    LedgerFencedError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerNotFoundError,
    ManagedLedgerTerminatedError,
    MetadataError,
    NodeExistsError,
    NoSuchLedgerError,
    StripeMQError,
)
from stripemq.lifecycle import Transitions
from stripemq.managed_ledger.config import LedgerPersistence, ManagedLedgerConfig
from stripemq.managed_ledger.cursor.managed_cursor import (
    CursorEnvironment,
    CursorStats,
    ManagedCursor,
)
from stripemq.managed_ledger.cursor.non_durable import NonDurableCursor
from stripemq.managed_ledger.entry_cache import EntryCacheManager
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.ledger_list import (
    LedgerList,
    child_name,
    cursor_path,
    managed_ledger_path,
)
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.proto.initial_position import InitialPosition
from stripemq.retry import Backoff

log = logging.getLogger(__name__)

HOUSEKEEPING_INTERVAL_S = 5.0
# How long sealing a ledger by recovery is retried before the rollover gives up.
RECOVERY_DEADLINE_S = 30.0


class ManagedLedgerLifecycle(enum.Enum):
    """Where a managed ledger is in its life (Pulsar's ``ManagedLedgerImpl.State``).

    ``FENCED``: another owner took it over; nothing of it is written any more, and closing
    it keeps it ``FENCED`` until ``CLOSED``. ``CLOSING``: no new appends, rollovers or trims;
    the cursors are persisted and the current ledger sealed.
    """

    OPENING = "opening"  # made, ``open`` not yet done
    OPEN = "open"
    FENCED = "fenced"
    CLOSING = "closing"
    CLOSED = "closed"


_ML = ManagedLedgerLifecycle
MANAGED_LEDGER_TRANSITIONS = Transitions[ManagedLedgerLifecycle](
    {
        _ML.OPENING: {_ML.OPEN, _ML.FENCED, _ML.CLOSING},
        _ML.OPEN: {_ML.FENCED, _ML.CLOSING},
        _ML.FENCED: {_ML.CLOSED},
        _ML.CLOSING: {_ML.FENCED, _ML.CLOSED},
        _ML.CLOSED: set(),
    }
)


@dataclass(frozen=True)
class Entry:
    position: Position
    data: bytes


@dataclass(eq=False)
class _QueuedAdd:
    """An append waiting for (or on its way to) a ledger."""

    data: bytes
    future: asyncio.Future[Position]

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


@dataclass
class ManagedLedgerStats:
    """What the admin API shows of a topic's storage."""

    name: str
    entries: int
    size: int
    ledgers: list[dict[str, int | bool]]
    current_ledger: int
    last_confirmed_entry: str
    entries_added: int
    cache_size: int
    cache_hits: int
    cache_misses: int
    cursors: dict[str, CursorStats] = field(default_factory=dict)


class ManagedLedgerFactory:
    """Opens managed ledgers on one metadata store and ledger client (neither owned)."""

    def __init__(
        self, store: MetadataStore, bk: BookKeeper, config: ManagedLedgerConfig | None = None
    ) -> None:
        self.store = store
        self.bk = bk
        self.config = config or ManagedLedgerConfig()
        self.config.validate()
        self.ledgers: dict[str, ManagedLedger] = {}
        self.cache = EntryCacheManager(self.config.cache_size_bytes)  # one for all topics

    async def open(
        self, name: str, *, create: bool = True, persistence: LedgerPersistence | None = None
    ) -> ManagedLedger:
        """Open (taking it over from any previous owner), creating it if asked; its
        ledgers are written with ``persistence`` (None: the configuration's)."""
        existing = self.ledgers.get(name)
        if existing is not None and not existing.closed:
            existing.set_persistence(persistence)
            return existing
        ml = ManagedLedger(name, self.store, self.bk, self.config, self.cache)
        if persistence is not None:
            ml.set_persistence(persistence)
        await ml.open(create=create)
        self.ledgers[name] = ml
        ml.on_close = lambda: self.ledgers.pop(name, None)
        return ml

    async def exists(self, name: str) -> bool:
        return await self.store.exists(managed_ledger_path(name)) is not None

    async def names_under(self, prefix: str) -> list[str]:
        """Names of the managed ledgers directly under ``prefix`` (``a/b`` -> ``a/b/x``...)."""
        children = await self.store.children(managed_ledger_path(prefix))
        return [f"{prefix}/{child_name(child)}" for child in children]

    async def delete(self, name: str) -> None:
        """Delete a managed ledger, its cursors and all their ledgers."""
        ml = await self.open(name, create=False)
        await ml.delete()

    async def close(self) -> None:
        for ml in list(self.ledgers.values()):
            await ml.close()

    def abandon(self) -> None:
        """Drop every managed ledger without writing anything (see ``ManagedLedger.abandon``)."""
        for ml in list(self.ledgers.values()):
            ml.abandon()


class ManagedLedger:
    """One topic's ledgers and cursors, owned by this process while open."""

    def __init__(
        self,
        name: str,
        store: MetadataStore,
        bk: BookKeeper,
        config: ManagedLedgerConfig,
        cache: EntryCacheManager | None = None,
    ) -> None:
        self.name = name
        self.path = managed_ledger_path(name)
        self.store = store
        self.bk = bk
        self.config = config
        self.chain = LedgerChain()
        self.properties: dict[str, str] = {}
        self.cursors: dict[str, ManagedCursor] = {}
        self.cursor_env = CursorEnvironment(
            store=store,
            bk=bk,
            chain=self.chain,
            config=config.cursor,
            managed_ledger_name=name,
            password=config.password,
            on_persisted=self._cursor_persisted,
        )
        if cache is None:  # on its own (tests): a budget of its own
            cache = EntryCacheManager(config.cache_size_bytes)
        self.cache = cache.cache_for(name)
        self.entries_added = 0
        self.lifecycle = ManagedLedgerLifecycle.OPENING  # changed only by _move_to
        self.on_close: Callable[[], object] | None = None
        # Set once terminated: the last entry there will ever be (persisted in the list).
        self.terminated_position: Position | None = None
        self._terminating = False  # appends are refused while termination completes
        self._version = -1
        self._handle: LedgerHandle | None = None
        self._handle_failed = False
        self._pushed_bytes = 0  # handed to the current ledger
        self._ledger_created = time.monotonic()
        self._rolling: asyncio.Future[None] | None = None
        self._queued: deque[_QueuedAdd] = deque()  # appends not yet handed to a ledger
        self._last_pushed: _QueuedAdd | None = None  # the latest handed to a ledger
        self._outstanding = 0  # appends accepted and not yet completed
        self._write_failed = False  # an append failed and others are still outstanding
        self._readers: dict[int, ReadHandle] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._wakers: set[Callable[[], None]] = set()  # one-shot, see wake_on_new_entry
        self._trim_lock = asyncio.Lock()
        self._info_lock = asyncio.Lock()
        self._trim_task: asyncio.Task[None] | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        # A retention of this ledger's own over the configured one (namespace policies).
        self._retention: tuple[float, int] | None = None
        self.persistence = LedgerPersistence.of(config)  # see set_persistence

    # ------------------------------------------------------------------ opening

    async def open(self, *, create: bool) -> None:
        found = await self.store.get(self.path)
        if found is None:
            if not create:
                raise ManagedLedgerNotFoundError(f"managed ledger {self.name} does not exist")
            try:
                await self.store.create(self.path, LedgerList().encode())
            except NodeExistsError:
                pass
            found = await self.store.get(self.path)
            assert found is not None
        raw, stat = found
        self._version = stat.version
        listed = LedgerList.decode(raw, self.name)
        self.chain, self.properties = listed.chain, listed.properties
        self.terminated_position = listed.terminated
        self.cursor_env.chain = self.chain
        empty = await self._recover_ledgers()
        # A terminated ledger takes no appends, ever: it gets no ledger to write to (as
        # Pulsar: "we don't need to create a new ledger for writing").
        handle = None if self.terminated else await self._new_ledger()
        if handle is not None:
            self.chain.add(LedgerInfo(handle.ledger_id, created_ms=now_ms()))
        try:
            await self._write_info()
        except BaseException:
            if handle is not None:
                await _discard(self.bk, handle)
            raise
        self._handle = handle
        self._ledger_created = time.monotonic()
        for ledger_id in empty:  # dropped from the list just now
            await self._delete_ledger_quietly(ledger_id)
        for child in await self.store.children(self.path):
            name = child_name(child)
            self.cursors[name] = await ManagedCursor.recover(
                name, f"{self.path}/{child}", self.cursor_env
            )
        self._move_to(ManagedLedgerLifecycle.OPEN)
        self._housekeeping = asyncio.ensure_future(self._housekeep())
        log.info(
            "opened managed ledger %s: %d ledgers, %d entries, %d cursors, writing ledger %d",
            self.name,
            len(self.chain),
            self.chain.entries,
            len(self.cursors),
            self.current_ledger_id,  # -1: terminated
        )

    async def _recover_ledgers(self) -> list[int]:
        """Close the ledgers a previous owner left open (fencing it); returns empty ones.

        A terminated managed ledger keeps its last ledger even when empty: it gets no
        ledger to write to, and its end (where readers stand) is a position in that one."""
        empty: list[int] = []
        keep = self.chain.last_ledger_id if self.terminated else None
        for info in list(self.chain):
            if not info.closed:
                try:
                    info.entries, info.size = await self._recover_ledger(info.ledger_id)
                except NoSuchLedgerError:
                    if info.entries:
                        raise ManagedLedgerError(
                            f"ledger {info.ledger_id} of {self.name} is missing"
                        ) from None
                    self.chain.remove(info.ledger_id)  # created, never written, then lost
                    continue
                info.closed = True
                info.closed_ms = now_ms()
            if info.entries == 0 and info.ledger_id != keep:
                self.chain.remove(info.ledger_id)
                empty.append(info.ledger_id)
        return empty

    async def _new_ledger(self) -> LedgerHandle:
        try:
            return await self.bk.create_ledger(
                self.persistence.ensemble_size,
                self.persistence.write_quorum_size,
                self.persistence.ack_quorum_size,
                password=self.config.password,
                custom_metadata={"component": "managed-ledger", "managed-ledger": self.name},
            )
        except BookieError as exc:
            raise ManagedLedgerError(f"cannot create a ledger for {self.name}: {exc}") from exc

    async def _write_info(self) -> None:
        """Write the ledger list as it is now. One write at a time: open, rollover and trim
        all change the list, and each must build on the version the last one left."""
        async with self._info_lock:
            try:
                stat = await self.store.put(
                    self.path,
                    LedgerList(self.chain, self.properties, self.terminated_position).encode(),
                    self._version,
                )
            except BadVersionError:
                self._mark_fenced()
                raise ManagedLedgerFencedError(
                    f"managed ledger {self.name} was taken over by another owner"
                ) from None
            self._version = stat.version

    # ------------------------------------------------------------------ appending

    @property
    def current_ledger_id(self) -> int:
        return self._handle.ledger_id if self._handle is not None else -1

    @property
    def last_confirmed(self) -> Position:
        return self.chain.last_confirmed()

    def add_entry_async(self, data: bytes) -> asyncio.Future[Position]:
        """Queue an append; its future gives the position once ``Qa`` bookies hold it.

        Appends are stored, and their futures completed, in the order of the calls, across
        rollovers too: while a new ledger is being made, appends wait in a queue and go to
        it in that order (Pulsar's pendingAddEntries). Raises at once if the managed ledger
        is closed, fenced or the entry too large.
        """
        self._check_writable()
        if self.terminated:
            raise ManagedLedgerTerminatedError(f"topic {self.name} is terminated")
        if len(data) > self.config.max_entry_bytes:
            raise ManagedLedgerError(
                f"entry of {len(data)} bytes exceeds {self.config.max_entry_bytes}"
            )
        if self._write_failed:
            raise ManagedLedgerError(
                f"a write to {self.name} failed: appends resume once those in flight are done"
            )
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self._outstanding += 1
        future.add_done_callback(self._append_done)
        self._queued.append(_QueuedAdd(data, future))
        self._push_queued()
        return future

    def _append_done(self, _: asyncio.Future[Position]) -> None:
        self._outstanding -= 1
        if self._outstanding == 0 and self._write_failed:
            self._write_failed = False
            log.info("[%s] every append after the failed write is done: appends resume", self.name)

    async def add_entry(self, data: bytes) -> Position:
        """Append an entry; its position once ``Qa`` bookies hold it. A cancelled caller
        does not take the entry back: it is on its way and later appends queue behind it."""
        return await asyncio.shield(self.add_entry_async(data))

    def _push_queued(self) -> None:
        """Hand queued appends to the current ledger, in order, until one needs a new ledger."""
        while self._queued and self._rolling is None and not self.fenced:
            if self._needs_new_ledger():
                # Closing: what is queued fails, no new ledger.
                if self.lifecycle not in (_ML.CLOSING, _ML.CLOSED):
                    self._start_rollover()
                return
            handle = self._handle
            assert handle is not None
            info = self.chain.get(handle.ledger_id)
            assert info is not None
            op = self._queued[0]
            try:
                added = handle.add_entry_async(op.data)
            except LedgerFencedError:
                self._mark_fenced()
                return
            except BookieError as exc:  # the handle is done: continue in a new ledger
                log.warning(
                    "ledger %d of %s takes no more adds: %s", handle.ledger_id, self.name, exc
                )
                self._handle_failed = True
                continue
            self._queued.popleft()
            self._last_pushed = op
            self._pushed_bytes += len(op.data)
            added.add_done_callback(functools.partial(self._on_added, handle, info, op))

    def _on_added(
        self, handle: LedgerHandle, info: LedgerInfo, op: _QueuedAdd, added: asyncio.Future[int]
    ) -> None:
        """An add completed (the ledger handle calls these in entry order)."""
        if added.cancelled():
            op.fail(ManagedLedgerError(f"append to {self.name} was cancelled"))
            return
        exc = added.exception()
        if isinstance(exc, LedgerFencedError):
            self._mark_fenced()
            op.fail(self._fenced_error())
            return
        if exc is not None:
            error = ManagedLedgerError(f"append to {self.name} failed: {exc}")
            if handle is self._handle:
                self._handle_failed = True  # the next append rolls over to a new ledger
            # Nothing after a failed append is stored (its own handle fails every later
            # add, the queue follows, and new appends are refused until all are done): a
            # later message stored before the failed one is sent again would make the
            # resend look like a duplicate to deduplication.
            self._write_failed = True
            self._fail_queued(error)
            op.fail(error)
            return
        entry_id = added.result()
        position = Position(handle.ledger_id, entry_id)
        info.entries = max(info.entries, entry_id + 1)
        info.size += len(op.data)
        self.entries_added += 1
        self.cache.put(position, op.data)
        self._wake_waiters()
        if not op.future.done():
            op.future.set_result(position)

    def _fail_queued(self, error: StripeMQError) -> None:
        """Fail the appends not handed to a ledger, once those that were have completed:
        every caller hears back in the order of its call."""
        queued, self._queued = self._queued, deque()
        if not queued:
            return

        def fail(_: object = None) -> None:
            for op in queued:
                op.fail(error)

        last = self._last_pushed
        if last is None or last.future.done():
            fail()
        else:
            last.future.add_done_callback(fail)

    def _fenced_error(self) -> ManagedLedgerFencedError:
        return ManagedLedgerFencedError(
            f"managed ledger {self.name} was taken over by another owner"
        )

    def _needs_new_ledger(self) -> bool:
        """No usable current ledger, or it is full: counted in entries handed to it, so a
        burst of pipelined appends rolls over on time too."""
        handle = self._handle
        if handle is None or self._handle_failed:
            return True
        pushed = handle.last_add_pushed + 1
        age = time.monotonic() - self._ledger_created
        full = (
            pushed >= self.config.max_entries_per_ledger
            or self._pushed_bytes >= self.config.max_size_per_ledger_bytes
            or (pushed > 0 and age >= self.config.max_rollover_time_s)
        )
        return full and age >= self.config.min_rollover_time_s

    def _start_rollover(self) -> asyncio.Future[None]:
        if self._rolling is None:
            self._rolling = asyncio.ensure_future(self._rollover())
            self._rolling.add_done_callback(self._rollover_done)
        return self._rolling

    def _rollover_done(self, task: asyncio.Future[None]) -> None:
        """Queued appends go to the new ledger, or fail with the rollover's error."""
        self._rolling = None
        error = None if task.cancelled() else task.exception()
        if task.cancelled() or error is not None:
            if isinstance(error, StripeMQError):
                self._fail_queued(error)
            else:
                self._fail_queued(ManagedLedgerError(f"rollover of {self.name} failed: {error}"))
            return
        self._push_queued()
        self._schedule_trim()

    async def _rollover(self) -> None:
        """Seal the current ledger and continue in a new one (appends queue meanwhile)."""
        try:
            old = self._handle
            if old is not None:
                info = self.chain.get(old.ledger_id)
                assert info is not None
                await self._seal(old, info)
            handle = await self._new_ledger()
            self.chain.add(LedgerInfo(handle.ledger_id, created_ms=now_ms()))
            try:
                await self._write_info()
            except BaseException:
                self.chain.remove(handle.ledger_id)
                await _discard(self.bk, handle)
                raise
            if old is not None:
                self._readers.pop(old.ledger_id, None)
            self._handle = handle
            self._handle_failed = False
            self._pushed_bytes = 0
            self._ledger_created = time.monotonic()
            log.info("managed ledger %s rolled over to ledger %d", self.name, handle.ledger_id)
        except MetadataError as exc:
            raise ManagedLedgerError(f"rollover of {self.name} failed: {exc}") from exc

    async def _seal(self, handle: LedgerHandle, info: LedgerInfo) -> None:
        """Close ``handle`` in BookKeeper, then mark it closed in the ledger list.

        If closing fails, the ledger is recovered (fenced and sealed, as a new owner would):
        a ledger the list calls closed must be closed in BookKeeper too, or readers wait on
        its LAC for ever.
        """
        try:
            await handle.close()
        except (LedgerFencedError, ManagedLedgerFencedError):
            self._mark_fenced()
            raise self._fenced_error() from None
        except (BookieError, MetadataError) as exc:
            log.warning(
                "closing ledger %d of %s failed (%s): recovering it",
                handle.ledger_id,
                self.name,
                exc,
            )
            entries, size = await self._recover_ledger(handle.ledger_id)
            info.entries, info.size = entries, size
        else:
            info.entries = max(info.entries, handle.last_add_confirmed + 1)
        info.closed = True
        info.closed_ms = now_ms()

    async def _recover_ledger(self, ledger_id: int) -> tuple[int, int]:
        """Open ``ledger_id`` with recovery (which fences and seals it); its entry count and
        length. Retried for a while; raises ``NoSuchLedgerError`` at once if it is gone."""
        backoff = Backoff(initial=0.05, maximum=1.0, deadline=RECOVERY_DEADLINE_S)
        while True:
            try:
                reader = await self.bk.open_ledger(
                    ledger_id, password=self.config.password, recovery=True
                )
                break
            except NoSuchLedgerError:
                raise
            except (BookieError, MetadataError) as exc:
                if backoff.expired:
                    raise ManagedLedgerError(
                        f"ledger {ledger_id} of {self.name} could not be sealed: {exc}"
                    ) from exc
                await backoff.sleep()
        entries, size = reader.last_add_confirmed + 1, reader.length
        await reader.close()
        return entries, size

    # ------------------------------------------------------------------ reading

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` confirmed entries from ``start`` on (across ledgers)."""
        self._check_open()
        out: list[Entry] = []
        position = start
        if not self.chain.exists(position):
            position = self.chain.next_valid(Position(start.ledger_id, start.entry_id - 1))
        while len(out) < max_entries and self.chain.exists(position):
            info = self.chain.get(position.ledger_id)
            assert info is not None
            last = min(info.entries - 1, position.entry_id + max_entries - len(out) - 1)
            out.extend(await self._read_in_ledger(position.ledger_id, position.entry_id, last))
            position = self.chain.next_valid(Position(position.ledger_id, last))
        return out

    async def _read_in_ledger(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        found: dict[int, bytes] = {}
        missing: list[int] = []
        for entry_id in range(first, last + 1):
            data = self.cache.get(Position(ledger_id, entry_id))
            if data is None:
                missing.append(entry_id)
            else:
                found[entry_id] = data
        if missing:
            handle = await self._reader(ledger_id)
            lo = missing[0]
            hi = missing[-1]
            try:
                for entry in await handle.read_entries(lo, hi):
                    found.setdefault(entry.entry_id, entry.data)
            except BookieError as exc:
                raise ManagedLedgerError(
                    f"reading {ledger_id}:{lo}..{hi} of {self.name} failed: {exc}"
                ) from exc
        return [Entry(Position(ledger_id, e), found[e]) for e in range(first, last + 1)]

    async def _reader(self, ledger_id: int) -> ReadHandle:
        if self._handle is not None and ledger_id == self._handle.ledger_id:
            return self._handle
        reader = self._readers.get(ledger_id)
        if reader is None:
            try:
                reader = await self.bk.open_ledger(
                    ledger_id, password=self.config.password, recovery=False
                )
            except BookieError as exc:
                raise ManagedLedgerError(f"cannot open ledger {ledger_id}: {exc}") from exc
            self._readers[ledger_id] = reader
        return reader

    def has_entries_after(self, after: Position) -> bool:
        """Whether an entry after ``after`` is confirmed."""
        return self.chain.exists(self.chain.next_valid(after))

    def wake_on_new_entry(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` once, from the next add's completion (or when the ledger closes or
        is fenced): how a dispatcher at the tail hears of a new entry without a task of its
        own per wait. Registering the same callable twice calls it once."""
        self._wakers.add(wake)

    async def wait_for_entries(self, after: Position, timeout_s: float | None = None) -> bool:
        """Wait until an entry after ``after`` is confirmed; ``False`` on timeout."""
        while not self.has_entries_after(after):
            self._check_open()
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, timeout_s)
            except TimeoutError:
                return False
        return True

    def _wake_waiters(self) -> None:
        wakers, self._wakers = self._wakers, set()
        for wake in wakers:
            try:
                wake()
            except Exception:  # one listener's failure must not hold back the appends
                log.exception("[%s] a new-entry listener failed", self.name)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------------ cursors

    async def open_cursor(
        self, name: str, initial_position: InitialPosition = InitialPosition.Latest
    ) -> ManagedCursor:
        """The cursor called ``name``, created at ``initial_position`` if new."""
        self._check_writable()
        cursor = self.cursors.get(name)
        if cursor is not None:
            return cursor
        if not name:
            raise ManagedLedgerError("a cursor needs a name")
        path = cursor_path(self.path, name)
        if initial_position is InitialPosition.Latest:
            mark_delete = self.chain.last_confirmed()
        else:
            first = self.chain.first_position()
            mark_delete = Position(first.ledger_id, first.entry_id - 1)
        cursor = await ManagedCursor.create(name, path, self.cursor_env, mark_delete)
        self.cursors[name] = cursor
        return cursor

    def open_non_durable_cursor(self, name: str, start: Position | None) -> NonDurableCursor:
        """An in-memory cursor whose first entry is ``start`` (``None``: after the last)."""
        self._check_open()
        if start is None:
            mark_delete = self.chain.last_confirmed()
        else:
            first = self.chain.first_position()
            if start < first:
                start = first
            mark_delete = Position(start.ledger_id, start.entry_id - 1)
        return NonDurableCursor(name, self.chain, mark_delete)

    async def delete_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        if cursor is None:
            raise CursorNotFoundError(f"cursor {name} does not exist on {self.name}")
        await cursor.delete()
        self._schedule_trim()

    def _cursor_persisted(self, cursor: ManagedCursor) -> None:
        self._schedule_trim()

    # ------------------------------------------------------------------ trimming

    def _schedule_trim(self) -> None:
        if self._trim_task is None and self.lifecycle not in (_ML.CLOSING, _ML.CLOSED):
            self._trim_task = asyncio.ensure_future(self._trim_in_background())

    async def _trim_in_background(self) -> None:
        try:
            await self.trim()
        except (ManagedLedgerError, MetadataError, BookieError) as exc:
            log.warning("trimming %s failed: %s", self.name, exc)
        finally:
            self._trim_task = None

    async def trim(self) -> list[int]:
        """Delete ledgers every cursor has passed that retention does not keep."""
        async with self._trim_lock:
            if self.lifecycle in (_ML.FENCED, _ML.CLOSED):
                return []
            doomed = self._ledgers_to_trim()
            if not doomed:
                return []
            for info in doomed:
                self.chain.remove(info.ledger_id)
            try:
                await self._write_info()
            except BaseException:
                self.chain.put_back(doomed)
                raise
            for info in doomed:
                self.cache.invalidate_ledger(info.ledger_id)
                self._readers.pop(info.ledger_id, None)
                await self._delete_ledger_quietly(info.ledger_id)
            ids = [info.ledger_id for info in doomed]
            log.info("trimmed ledgers %s of %s", ids, self.name)
            return ids

    def set_retention(self, time_s: float | None, size_bytes: int = -1) -> None:
        """Keep consumed ledgers ``time_s`` seconds or while under ``size_bytes`` (-1: no
        limit), over the configured retention; ``None`` goes back to the configured one.
        Applies from the next trim, which starts now."""
        self._retention = None if time_s is None else (time_s, size_bytes)
        self._schedule_trim()

    def set_persistence(self, persistence: LedgerPersistence | None) -> None:
        """Write with ``persistence`` from now on (None: the configuration's): the ledgers
        created from here on have its quorums (the current one keeps its own, as
        Pulsar's do until they roll over), and the cursors persist as often as it says."""
        persistence = persistence or LedgerPersistence.of(self.config)
        persistence.validate()
        if persistence != self.persistence and self.lifecycle is ManagedLedgerLifecycle.OPEN:
            log.info(
                "managed ledger %s: new ledgers E%d/Qw%d/Qa%d, cursor snapshots every %d ms",
                self.name,
                persistence.ensemble_size,
                persistence.write_quorum_size,
                persistence.ack_quorum_size,
                persistence.mark_delete_interval_ms,
            )
        interval_changed = (
            persistence.mark_delete_interval_ms != self.persistence.mark_delete_interval_ms
        )
        self.persistence = persistence
        self.cursor_env.config = persistence.cursor_config(self.config.cursor)
        if interval_changed:
            for cursor in self.cursors.values():
                cursor.snapshot_interval_changed()

    @property
    def retention(self) -> tuple[float, int]:
        """The retention trimming obeys: ``(seconds, bytes)``, -1 for no limit."""
        if self._retention is not None:
            return self._retention
        return self.config.retention_time_s, self.config.retention_size_bytes

    def _ledgers_to_trim(self) -> list[LedgerInfo]:
        retention_time_s, retention_size_bytes = self.retention
        if retention_time_s < 0 and retention_size_bytes < 0:
            return []
        if self.cursors:
            # By what the cursors have persisted: a crash brings them back there, and a
            # ledger they would need again must still exist.
            slowest = min(c.persisted_mark_delete for c in self.cursors.values())
        else:
            slowest = self.chain.last_confirmed()
        now = now_ms()
        remaining = self.chain.size
        doomed: list[LedgerInfo] = []
        # A terminated managed ledger has no current ledger; its last one stays instead.
        last = self.current_ledger_id if not self.terminated else self.chain.last_ledger_id
        for info in self.chain:
            if info.ledger_id == last or not info.closed:
                break
            consumed = info.ledger_id < slowest.ledger_id or (
                info.ledger_id == slowest.ledger_id and slowest.entry_id >= info.entries - 1
            )
            if not consumed:
                break
            expired = retention_time_s >= 0 and now - info.closed_ms >= retention_time_s * 1000
            over_quota = retention_size_bytes >= 0 and remaining > retention_size_bytes
            if not (expired or over_quota):
                break
            doomed.append(info)
            remaining -= info.size
        return doomed

    async def _delete_ledger_quietly(self, ledger_id: int) -> None:
        await delete_ledger_quietly(self.bk, ledger_id, f"ledger of {self.name}")

    async def _housekeep(self) -> None:
        """Roll over an idle ledger that got too old, and trim, every few seconds."""
        while self.lifecycle not in (_ML.FENCED, _ML.CLOSED):
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            try:
                idle = self._rolling is None and self._handle is not None and not self.terminated
                if idle and self._needs_new_ledger():
                    await asyncio.shield(self._start_rollover())
                await self.trim()
            except ManagedLedgerFencedError:
                return
            except ManagedLedgerError as exc:
                log.warning("housekeeping of %s: %s", self.name, exc)

    # ------------------------------------------------------------------ termination

    @property
    def terminated(self) -> bool:
        """Terminated, or being terminated: no append is taken any more."""
        return self._terminating or self.terminated_position is not None

    async def terminate(self) -> Position:
        """Take no more appends, for ever: the appends already taken are completed, then
        the last entry is recorded in the ledger list (a new owner keeps it terminated).
        Returns that last entry; terminating again returns it again.

        Raises ``ManagedLedgerClosedError``/``ManagedLedgerFencedError`` when closed or
        taken over, and the metadata store's errors (the managed ledger then takes appends
        again, as before).
        """
        self._check_writable()
        if self.terminated_position is not None:
            return self.terminated_position
        self._terminating = True
        try:
            # Every append taken completes first (stored, or failed): completions come in
            # order, so once the newest is done they all are.
            while self._rolling is not None or self._outstanding:
                pending: list[asyncio.Future[Any]] = [op.future for op in self._queued]
                if self._last_pushed is not None:
                    pending.append(self._last_pushed.future)
                if self._rolling is not None:
                    pending.append(self._rolling)
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
                # Let the done callbacks count them (and never spin on a stray count).
                await asyncio.sleep(0 if pending else 0.01)
            self._check_writable()
            self.terminated_position = self.chain.last_confirmed()
            try:
                await self._write_info()
            except BaseException:
                self.terminated_position = None
                raise
        finally:
            self._terminating = False
        log.info("[%s] terminated at %s", self.name, self.terminated_position)
        return self.terminated_position

    # ------------------------------------------------------------------ lifecycle

    def stats(self) -> ManagedLedgerStats:
        return ManagedLedgerStats(
            name=self.name,
            entries=self.chain.entries,
            size=self.chain.size,
            ledgers=[info.to_json() for info in self.chain],
            current_ledger=self.current_ledger_id,
            last_confirmed_entry=str(self.chain.last_confirmed()),
            entries_added=self.entries_added,
            cache_size=self.cache.size,
            cache_hits=self.cache.hits,
            cache_misses=self.cache.misses,
            cursors={name: c.stats() for name, c in self.cursors.items()},
        )

    @property
    def closed(self) -> bool:
        return self.lifecycle is ManagedLedgerLifecycle.CLOSED

    @property
    def fenced(self) -> bool:
        """Taken over by another owner (and not closed yet)."""
        return self.lifecycle is ManagedLedgerLifecycle.FENCED

    def _move_to(self, new: ManagedLedgerLifecycle) -> None:
        """The one place the lifecycle changes; ``IllegalTransitionError`` if it may not."""
        owner = f"managed ledger {self.name}"
        self.lifecycle = MANAGED_LEDGER_TRANSITIONS.check(owner, self.lifecycle, new)

    def _check_open(self) -> None:
        if self.closed:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.lifecycle is ManagedLedgerLifecycle.CLOSING:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closing")
        if self.fenced:
            raise ManagedLedgerFencedError(f"managed ledger {self.name} belongs to another owner")

    def _mark_fenced(self) -> None:
        if self.closed:
            return  # nothing of it is written any more, and its cursors are closed
        if not self.fenced:
            log.warning("managed ledger %s was fenced: another owner took it over", self.name)
            self._move_to(ManagedLedgerLifecycle.FENCED)
        for cursor in self.cursors.values():
            cursor.fence()
        self._fail_queued(self._fenced_error())
        self._wake_waiters()

    def abandon(self) -> None:
        """Stop at once and write nothing (the metadata session is gone: another broker may
        already own the topic). What was not persisted comes back as redeliveries."""
        if self.closed:
            return
        self._mark_fenced()  # every cursor refuses from now on, queued appends fail
        self._handle = None  # left for the next owner to recover: never sealed from here
        self._move_to(ManagedLedgerLifecycle.CLOSED)
        for task in (self._housekeeping, self._trim_task, self._rolling):
            if task is not None:
                task.cancel()
        for cursor in self.cursors.values():
            cursor.abandon()
        self._wake_waiters()
        self.cache.clear()
        if self.on_close is not None:
            self.on_close()

    async def close(self) -> None:
        """Persist the cursors and seal the current ledger (unless fenced: then it is the
        new owner's to seal, and nothing is written)."""
        if self.closed:
            return
        if not self.fenced:  # a fenced one takes no appends, rollovers or trims already
            self._move_to(ManagedLedgerLifecycle.CLOSING)  # and from here on, neither does this
        for task in (self._housekeeping, self._trim_task):
            if task is not None:
                task.cancel()
        while self._rolling is not None:
            await asyncio.gather(self._rolling, return_exceptions=True)
        self._fail_queued(ManagedLedgerClosedError(f"managed ledger {self.name} is closed"))
        for cursor in list(self.cursors.values()):
            try:
                await cursor.close()
            except ManagedLedgerError as exc:
                log.warning("closing cursor %s of %s: %s", cursor.name, self.name, exc)
        if self.fenced:
            self._handle = None  # the new owner's to seal: never closed from here
        self._move_to(ManagedLedgerLifecycle.CLOSED)  # (abandoned meanwhile: it is already)
        self._wake_waiters()
        if self._handle is not None:
            try:
                await self._handle.close()
            except (BookieError, MetadataError) as exc:
                log.warning(
                    "sealing ledger %d of %s failed: %s", self.current_ledger_id, self.name, exc
                )
        self._readers.clear()
        self.cache.clear()
        if self.on_close is not None:
            self.on_close()

    async def delete(self) -> None:
        """Delete the cursors, every ledger and the metadata."""
        for name in list(self.cursors):
            await self.delete_cursor(name)
        await self.close()
        for info in list(self.chain):
            await self._delete_ledger_quietly(info.ledger_id)
        await self.store.delete_recursive(self.path)


async def _discard(bk: BookKeeper, handle: LedgerHandle) -> None:
    try:
        await handle.close()
    except (BookieError, MetadataError):
        pass
    try:
        await bk.delete_ledger(handle.ledger_id)
    except (BookieError, MetadataError):
        pass
