"""A durable cursor: ``CursorState`` persisted to its own ledger and the metadata store.

Acknowledgements change the state at once; snapshots follow in the background, throttled
by time and by the number of acknowledgements not yet persisted (``CursorConfig``). The
metadata node holds only the cursor ledger's id and the mark-delete position (and, when
the ledger cannot be written, a bounded number of hole ranges). After a crash the cursor
comes back as of its last complete snapshot: every unacknowledged entry is delivered
again, and at most the acknowledgements made after that snapshot are delivered twice.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from stripemq.bookie.client import BookKeeper
from stripemq.bookie.client.bookkeeper import delete_ledger_quietly
from stripemq.bookie.client.ledger_handle import LedgerHandle
from stripemq.clock import now_ms
from stripemq.errors import (
    BadVersionError,
    BookieError,
    CursorNotFoundError,
    LedgerClosedError,
    LedgerFencedError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    MetadataError,
    NoSuchLedgerError,
)
from stripemq.lifecycle import Transitions
from stripemq.managed_ledger.cursor.config import CursorConfig
from stripemq.managed_ledger.cursor.range_set import RangeSet
from stripemq.managed_ledger.cursor.snapshot import (
    SnapshotFormatError,
    SnapshotPlan,
    chunk_entry_ids,
    decode_marker,
    is_marker,
    plan_snapshot,
    restore_state,
)
from stripemq.managed_ledger.cursor.state import BatchAck, CursorState
from stripemq.managed_ledger.cursor.view import CursorView
from stripemq.managed_ledger.ledger_chain import LedgerChain
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore

log = logging.getLogger(__name__)


class CursorLifecycle(enum.Enum):
    """Where a durable cursor is in its life (after Pulsar's ``ManagedCursorImpl.State``;
    whether it has a cursor ledger yet is ``_handle``, not a state here).

    ``CLOSING``: acknowledgements are refused while what is left is persisted. ``FENCED``:
    another owner has the cursor (or its managed ledger); nothing more is written, and
    closing it keeps it ``FENCED`` until ``CLOSED``.
    """

    OPEN = "open"
    FENCED = "fenced"
    CLOSING = "closing"
    CLOSED = "closed"


_C = CursorLifecycle
CURSOR_TRANSITIONS = Transitions[CursorLifecycle](
    {
        _C.OPEN: {_C.FENCED, _C.CLOSING, _C.CLOSED},  # CLOSED: abandoned
        _C.FENCED: {_C.CLOSED},
        _C.CLOSING: {_C.FENCED, _C.CLOSED},
        _C.CLOSED: set(),
    }
)


@dataclass
class CursorInfo:
    """The cursor's metadata node (JSON)."""

    mark_delete: Position
    cursor_ledger: int = -1
    properties: dict[str, int] = field(default_factory=dict)
    # Only when the cursor ledger could not be written: holes as integer key ranges.
    ranges: list[tuple[int, int]] = field(default_factory=list)
    last_active_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            {
                "mark_delete": str(self.mark_delete),
                "cursor_ledger": self.cursor_ledger,
                "properties": self.properties,
                "ranges": [list(r) for r in self.ranges],
                "last_active_ms": self.last_active_ms,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> CursorInfo:
        try:
            doc = json.loads(raw)
            return cls(
                mark_delete=Position.parse(doc["mark_delete"]),
                cursor_ledger=int(doc.get("cursor_ledger", -1)),
                properties={str(k): int(v) for k, v in doc.get("properties", {}).items()},
                ranges=[(int(s), int(e)) for s, e in doc.get("ranges", [])],
                last_active_ms=int(doc.get("last_active_ms", 0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManagedLedgerError(f"cursor metadata is not readable: {exc}") from None


@dataclass
class CursorStats:
    """What the admin API shows of a cursor."""

    name: str
    mark_delete_position: str
    read_position: str
    backlog: int
    individually_deleted_ranges: int
    individually_deleted_entries: int
    partially_acked_batches: int
    cursor_ledger: int
    last_active_ms: int
    properties: dict[str, int]
    snapshots: int
    last_snapshot_bytes: int
    persisted_in_metadata: bool


@dataclass
class CursorEnvironment:
    """What every cursor of one managed ledger shares."""

    store: MetadataStore
    bk: BookKeeper
    chain: LedgerChain  # the managed ledger's, kept current by it
    config: CursorConfig
    managed_ledger_name: str = ""
    password: bytes = b""
    # Called when a snapshot moved a cursor's persisted mark-delete position (trimming).
    on_persisted: Callable[[ManagedCursor], None] | None = None


class ManagedCursor(CursorView):
    """One subscription's acknowledgements on a managed ledger, kept durable.

    Made by ``create`` (a new cursor) or ``recover`` (an existing one, after any crash).
    """

    def __init__(
        self, name: str, path: str, env: CursorEnvironment, state: CursorState, info_version: int
    ) -> None:
        self.name = name
        self.path = path
        self.env = env
        self.store = env.store
        self.bk = env.bk
        self.state = state
        self.last_active_ms = now_ms()
        self.snapshots = 0
        self.last_snapshot_bytes = 0
        # The mark-delete position a crash would come back to: trimming goes by this one.
        self.persisted_mark_delete = state.mark_delete
        self._info_version = info_version
        self._handle: LedgerHandle | None = None
        self._cursor_ledger = -1  # the ledger the metadata node names
        self._old_ledger = -1  # a recovered ledger to delete once a new one is in place
        self._index: dict[int, tuple[int, ...]] | None = None
        self._ledger_entries = 0
        self._ledger_created = 0.0
        self._needs_full = True  # the next snapshot starts a new cursor ledger
        self._in_metadata = False
        self._last_snapshot = time.monotonic()
        self._flush_lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._flush_task: asyncio.Task[None] | None = None
        # Set by the first close(); a fenced cursor stays FENCED while it closes, so this
        # (not the lifecycle) is what makes close() run once and stops new flushes.
        self._close_task: asyncio.Future[None] | None = None
        # Not ``state``: that is the acknowledgements (``CursorState``). Changed by _move_to.
        self.lifecycle = CursorLifecycle.OPEN

    # ------------------------------------------------------------------ opening

    @classmethod
    async def create(
        cls, name: str, path: str, env: CursorEnvironment, mark_delete: Position
    ) -> ManagedCursor:
        """A new cursor whose first unacknowledged entry follows ``mark_delete``."""
        info = CursorInfo(mark_delete=mark_delete, last_active_ms=now_ms())
        stat = await env.store.put(path, info.encode(), expected_version=-1)
        return cls(name, path, env, CursorState(name, env.chain, mark_delete), stat.version)

    @classmethod
    async def recover(cls, name: str, path: str, env: CursorEnvironment) -> ManagedCursor:
        """Load a cursor as of its last complete snapshot (fencing any previous owner)."""
        store, chain = env.store, env.chain
        for _attempt in range(5):
            found = await store.get(path)
            if found is None:
                raise CursorNotFoundError(f"cursor {name} does not exist")
            raw, stat = found
            info = CursorInfo.decode(raw)
            state = CursorState(name, chain, info.mark_delete, properties=dict(info.properties))
            if info.cursor_ledger >= 0:
                await _restore_from_ledger(state, info, env.bk, env.password)
            else:
                state.holes = RangeSet.from_key_ranges(info.ranges)
                state.holes.remove_at_most(info.mark_delete)
            try:
                # Claim the node: a previous owner's next write to it now fails.
                stat = await store.put(path, raw, stat.version)
                break
            except BadVersionError:
                continue  # the previous owner moved it meanwhile: read it again
        else:
            raise ManagedLedgerFencedError(f"cursor {name} keeps changing under recovery")
        state.forget_missing_ledgers()
        state.rewind()
        cursor = cls(name, path, env, state, stat.version)
        cursor._cursor_ledger = info.cursor_ledger
        cursor._old_ledger = info.cursor_ledger
        cursor.last_active_ms = info.last_active_ms or now_ms()
        log.info(
            "recovered cursor %s at %s with %d holes (backlog %d)",
            name,
            state.mark_delete,
            state.holes.count,
            state.backlog,
        )
        return cursor

    # ------------------------------------------------------------------ reading state

    def stats(self) -> CursorStats:
        return CursorStats(
            name=self.name,
            mark_delete_position=str(self.state.mark_delete),
            read_position=str(self.state.read_position),
            backlog=self.state.backlog,
            individually_deleted_ranges=len(self.state.holes),
            individually_deleted_entries=self.state.holes.count,
            partially_acked_batches=len(self.state.batches),
            cursor_ledger=self._cursor_ledger,
            last_active_ms=self.last_active_ms,
            properties=dict(self.state.properties),
            snapshots=self.snapshots,
            last_snapshot_bytes=self.last_snapshot_bytes,
            persisted_in_metadata=self._in_metadata,
        )

    # ------------------------------------------------------------------ acknowledging

    def ack(self, positions: Iterable[Position]) -> int:
        """Acknowledge entries individually (persisted in the background)."""
        self._check_open()
        before = self.state.mark_delete
        done = self.state.ack(positions)
        self._changed(before)
        return done

    def ack_range(self, first: Position, last: Position) -> None:
        """Acknowledge every entry from ``first`` through ``last`` (see CursorState)."""
        self._check_open()
        before = self.state.mark_delete
        self.state.ack_range(first, last)
        self._changed(before)

    def ack_batch(self, position: Position, indexes: list[int], batch_size: int) -> bool:
        self._check_open()
        before = self.state.mark_delete
        done = self.state.ack_batch(position, BatchAck(indexes, batch_size))
        self._changed(before)
        return done

    def ack_cumulative(
        self,
        position: Position,
        batch: BatchAck | None = None,
        properties: dict[str, int] | None = None,
    ) -> None:
        self._check_open()
        before = self.state.mark_delete
        self.state.ack_cumulative(position, batch)
        if properties is not None:
            self.state.properties = dict(properties)
        self._changed(before)

    @property
    def config(self) -> CursorConfig:
        """The managed ledger's cursor settings as they are now (a namespace's persistence
        policies change how often snapshots are written)."""
        return self.env.config

    def reset(self, position: Position) -> None:
        self._check_open()
        before = self.state.mark_delete
        self.state.reset(position)
        self._changed(before)

    def skip(self, count: int) -> int:
        self._check_open()
        before = self.state.mark_delete
        skipped = self.state.skip(count)
        self._changed(before)
        return skipped

    def set_properties(self, properties: dict[str, int]) -> None:
        self._check_open()
        self.state.properties = dict(properties)
        self.state.acks_since_snapshot += 1
        self._changed(self.state.mark_delete)

    def _changed(self, mark_delete_before: Position) -> None:
        self.last_active_ms = now_ms()
        if self.state.acks_since_snapshot == 0:
            return
        if self.state.acks_since_snapshot >= self.config.snapshot_max_unpersisted_acks:
            self._start_flush()
        elif self._timer is None and self._flush_task is None:
            elapsed_ms = (time.monotonic() - self._last_snapshot) * 1000
            delay = max(0.0, (self.config.snapshot_interval_ms - elapsed_ms) / 1000)
            self._timer = asyncio.get_running_loop().call_later(delay, self._start_flush)

    def snapshot_interval_changed(self) -> None:
        """The managed ledger's snapshot interval changed: a snapshot waiting on the old one
        is timed by the new one."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._changed(self.state.mark_delete)

    def _start_flush(self) -> None:
        self._timer = None
        live = self.lifecycle in (_C.OPEN, _C.FENCED) and self._close_task is None
        if live and self._flush_task is None:
            self._flush_task = asyncio.ensure_future(self._background_flush())

    async def _background_flush(self) -> None:
        try:
            await self.flush()
        except ManagedLedgerFencedError:
            log.warning("cursor %s was taken over by another owner", self.name)
        except Exception:
            log.exception("cursor %s: snapshot failed", self.name)
        finally:
            self._flush_task = None
        if self.state.acks_since_snapshot and self.lifecycle is CursorLifecycle.OPEN:
            self._changed(self.state.mark_delete)  # acks arrived meanwhile

    # ------------------------------------------------------------------ persistence

    async def flush(self, *, full: bool = False) -> None:
        """Persist the current state now (if anything changed); ``full`` writes all of it
        to a new cursor ledger."""
        async with self._flush_lock:
            if self.lifecycle is CursorLifecycle.CLOSED:
                return
            if self.lifecycle is CursorLifecycle.FENCED:
                raise ManagedLedgerFencedError(f"cursor {self.name} belongs to another owner")
            self._needs_full = self._needs_full or full
            if self.state.acks_since_snapshot == 0 and not self._needs_full:
                return
            before = self.persisted_mark_delete
            try:
                if self._needs_full or self._handle is None or self._should_roll():
                    persisted = await self._switch_ledger()
                else:
                    assert self._index is not None
                    plan = plan_snapshot(
                        self.state, self._index, max_chunk_bytes=self.config.snapshot_chunk_bytes
                    )
                    await self._append(self._handle, plan)
                    persisted = plan.mark_delete
            except ManagedLedgerFencedError:
                self.fence()
                raise
            except (LedgerFencedError, LedgerClosedError) as exc:
                # Another owner recovered the cursor ledger: the cursor is no longer ours,
                # and writing the metadata node now could only undo that owner's work.
                self.fence()
                raise ManagedLedgerFencedError(
                    f"cursor {self.name}: its ledger was taken over by another owner"
                ) from exc
            except (BookieError, MetadataError) as exc:
                log.warning(
                    "cursor %s: cannot write its ledger (%s); mark-delete position "
                    "goes to the metadata store",
                    self.name,
                    exc,
                )
                self._needs_full = True
                persisted = await self._persist_in_metadata()
            self.persisted_mark_delete = persisted
            self._last_snapshot = time.monotonic()
        if persisted != before and self.env.on_persisted is not None:
            self.env.on_persisted(self)

    def _should_roll(self) -> bool:
        return (
            self._ledger_entries >= self.config.max_entries_per_ledger
            or time.monotonic() - self._ledger_created >= self.config.rollover_time_s
        )

    async def _append(self, handle: LedgerHandle, plan: SnapshotPlan) -> None:
        self._needs_full = True  # until the marker is in, the dirty set is lost
        futures = [handle.add_entry_async(chunk) for chunk in plan.chunks]
        ids = list(await asyncio.gather(*futures))
        marker, index = plan.marker_for(ids)
        await handle.add_entry(marker)
        self._index = index
        self._ledger_entries += len(ids) + 1
        self._needs_full = False
        self.snapshots += 1
        self.last_snapshot_bytes = plan.bytes_written + len(marker)

    async def _switch_ledger(self) -> Position:
        """Write a full snapshot to a new ledger, point the metadata at it, drop the old."""
        handle = await self.bk.create_ledger(
            self.config.ensemble_size,
            self.config.write_quorum_size,
            self.config.ack_quorum_size,
            password=self.env.password,
            custom_metadata={
                "component": "managed-cursor",
                "managed-ledger": self.env.managed_ledger_name,
                "cursor": self.name,
            },
        )
        try:
            self._ledger_entries = 0
            plan = plan_snapshot(self.state, None, max_chunk_bytes=self.config.snapshot_chunk_bytes)
            await self._append(handle, plan)
            info = CursorInfo(
                mark_delete=plan.mark_delete,
                cursor_ledger=handle.ledger_id,
                properties=plan.properties,
                last_active_ms=self.last_active_ms,
            )
            await self._write_info(info)
        except BaseException:
            self._needs_full = True
            await _discard_ledger(self.bk, handle)
            raise
        previous, self._handle = self._handle, handle
        self._cursor_ledger = handle.ledger_id
        self._ledger_created = time.monotonic()
        self._in_metadata = False
        if previous is not None:
            await _discard_ledger(self.bk, previous)
        if self._old_ledger >= 0 and self._old_ledger != handle.ledger_id:
            await _delete_quietly(self.bk, self._old_ledger)
            self._old_ledger = -1
        return plan.mark_delete

    async def _persist_in_metadata(self) -> Position:
        """Fallback when the ledger fails: mark-delete and the first holes in the node."""
        ranges = list(self._first_ranges(self.config.max_ranges_in_metadata))
        info = CursorInfo(
            mark_delete=self.state.mark_delete,
            cursor_ledger=-1,
            properties=dict(self.state.properties),
            ranges=ranges,
            last_active_ms=self.last_active_ms,
        )
        await self._write_info(info)
        self.state.acks_since_snapshot = 0
        self._in_metadata = True
        if self._handle is not None:
            await _discard_ledger(self.bk, self._handle)
            self._handle = None
        self._cursor_ledger = -1
        return info.mark_delete

    def _first_ranges(self, limit: int) -> Iterable[tuple[int, int]]:
        for i, key_range in enumerate(self.state.holes.key_ranges()):
            if i >= limit:
                return
            yield key_range

    async def _write_info(self, info: CursorInfo) -> None:
        try:
            stat = await self.store.put(self.path, info.encode(), self._info_version)
        except BadVersionError:
            self.fence()
            raise ManagedLedgerFencedError(
                f"cursor {self.name} was changed by another owner"
            ) from None
        self._info_version = stat.version

    # ------------------------------------------------------------------ lifecycle

    def _move_to(self, new: CursorLifecycle) -> None:
        """The one place the lifecycle changes; ``IllegalTransitionError`` if it may not."""
        self.lifecycle = CURSOR_TRANSITIONS.check(f"cursor {self.name}", self.lifecycle, new)

    def _check_open(self) -> None:
        if self.lifecycle in (CursorLifecycle.CLOSING, CursorLifecycle.CLOSED):
            raise ManagedLedgerClosedError(f"cursor {self.name} is closed")
        if self.lifecycle is CursorLifecycle.FENCED:
            raise ManagedLedgerFencedError(f"cursor {self.name} belongs to another owner")

    def fence(self) -> None:
        """Another owner has the managed ledger: refuse everything from now on."""
        if self.lifecycle is not CursorLifecycle.CLOSED:  # closed: nothing left to refuse
            self._move_to(CursorLifecycle.FENCED)

    def abandon(self) -> None:
        """Stop without persisting anything more (the owner lost its metadata session)."""
        self._move_to(CursorLifecycle.CLOSED)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flush_task is not None:
            self._flush_task.cancel()

    async def close(self) -> None:
        """Persist what is left and close the cursor ledger (acks are refused from now).
        Closing again waits for the first close."""
        if self._close_task is None:
            if self.lifecycle not in (CursorLifecycle.OPEN, CursorLifecycle.FENCED):
                return  # deleted, or being deleted
            if self.lifecycle is CursorLifecycle.OPEN:  # a fenced one stays so: writes nothing
                self._move_to(CursorLifecycle.CLOSING)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._close_task = asyncio.ensure_future(self._finish_close())
        await asyncio.shield(self._close_task)

    async def _finish_close(self) -> None:
        while self._flush_task is not None:
            await asyncio.gather(self._flush_task, return_exceptions=True)
        try:
            if self.lifecycle is CursorLifecycle.CLOSING:  # not fenced (or abandoned) meanwhile
                await self.flush()
        finally:
            self._move_to(CursorLifecycle.CLOSED)
            if self._handle is not None:
                try:
                    await self._handle.close()
                except (BookieError, MetadataError) as exc:
                    log.warning("cursor %s: closing its ledger failed: %s", self.name, exc)

    async def delete(self) -> None:
        """Remove the cursor: its node and its ledger."""
        if self.lifecycle is CursorLifecycle.OPEN:
            self._move_to(CursorLifecycle.CLOSING)
        if self._timer is not None:
            self._timer.cancel()
        if self._flush_task is not None:
            self._flush_task.cancel()
            await asyncio.gather(self._flush_task, return_exceptions=True)
        async with self._flush_lock:
            self._move_to(CursorLifecycle.CLOSED)
            await self.store.delete(self.path)
            if self._handle is not None:
                await _discard_ledger(self.bk, self._handle)
            for ledger_id in {self._cursor_ledger, self._old_ledger}:
                if ledger_id >= 0:
                    await _delete_quietly(self.bk, ledger_id)


async def _restore_from_ledger(
    state: CursorState, info: CursorInfo, bk: BookKeeper, password: bytes
) -> None:
    """State from the last complete marker of the cursor ledger, else from the node."""
    try:
        handle = await bk.open_ledger(info.cursor_ledger, password=password, recovery=True)
    except NoSuchLedgerError:
        log.error(
            "cursor %s: ledger %d is gone; restarting from mark-delete %s (acknowledged "
            "holes after it will be delivered again)",
            state.name,
            info.cursor_ledger,
            info.mark_delete,
        )
        return
    try:
        last = handle.last_add_confirmed
        for entry_id in range(last, -1, -1):
            raw = (await handle.read_entry(entry_id)).data
            if not is_marker(raw):
                continue
            try:
                marker = decode_marker(raw)
                chunks = {i: (await handle.read_entry(i)).data for i in chunk_entry_ids(marker)}
                restore_state(state, marker, chunks)
                return
            except SnapshotFormatError as exc:
                log.error(
                    "cursor %s: snapshot at entry %d unreadable (%s); trying an older one",
                    state.name,
                    entry_id,
                    exc,
                )
        log.info(
            "cursor %s: no complete snapshot in ledger %d; using the metadata's mark-delete %s",
            state.name,
            info.cursor_ledger,
            info.mark_delete,
        )
    finally:
        await handle.close()


async def _discard_ledger(bk: BookKeeper, handle: LedgerHandle) -> None:
    try:
        await handle.close()
    except (BookieError, MetadataError):
        pass
    await _delete_quietly(bk, handle.ledger_id)


async def _delete_quietly(bk: BookKeeper, ledger_id: int) -> None:
    await delete_ledger_quietly(bk, ledger_id, "cursor ledger")
