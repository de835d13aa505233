"""The writer's handle: pipelined, striped, quorum-acknowledged adds and ensemble changes.

Entry ``e`` goes to ensemble slots ``(e + i) % E`` for ``i < Qw`` and completes once ``Qa``
of them acknowledged it and every earlier entry completed, so completions (and the LAC) move
in entry order. A bookie that fails or times out is replaced in a new fragment starting at
the first unconfirmed entry; completions wait while that happens, then the unconfirmed
entries are resent to the replacement. A fenced bookie means another client recovered the
ledger: every pending add fails with ``LedgerFencedError`` and the handle is done.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stripemq.bookie.bookie_client import BookieCalls
from stripemq.bookie.client.metadata import LedgerMetadata, LedgerState
from stripemq.bookie.client.reader import ReadHandle
from stripemq.errors import (
    BookieError,
    ClientClosedError,
    EntryTooLargeError,
    IllegalOpError,
    InvalidEntryError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)
from stripemq.lifecycle import Transitions
from stripemq.proto.entry import encode_entry, verify_entry

if TYPE_CHECKING:
    from stripemq.bookie.client.bookkeeper import BookKeeper

log = logging.getLogger(__name__)


class HandleLifecycle(enum.Enum):
    """Where a writer's handle is in its life (not the ledger's ``LedgerState``, which the
    metadata holds for every client; a handle that failed keeps its error in ``_error``).

    ``CLOSING``: adds are refused; those pending complete, then the ledger is sealed (a
    failed seal is retried by the next ``close``). ``CLOSED``: sealed by this handle, or left
    to the client that fenced it.
    """

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_H = HandleLifecycle
HANDLE_TRANSITIONS = Transitions[HandleLifecycle](
    {
        _H.OPEN: {_H.CLOSING, _H.CLOSED},  # CLOSED at once: a recovering handle's seal
        _H.CLOSING: {_H.CLOSED},
        _H.CLOSED: set(),
    }
)


@dataclass(eq=False)
class PendingAdd:
    """One entry on its way to its write set."""

    entry_id: int
    payload: bytes  # the entry as framed for the bookies
    ledger_length: int
    future: asyncio.Future[int]
    required_acks: int  # Qa; Qw for a recovery re-add
    recovery: bool = False
    acked: set[int] = field(default_factory=set)  # ensemble slots that acknowledged


class LedgerHandle(ReadHandle):
    """Write (and read back) one ledger. Made by ``BookKeeper.create_ledger``."""

    def __init__(
        self,
        bk: BookKeeper,
        ledger_id: int,
        metadata: LedgerMetadata,
        version: int,
        master_key: bytes,
        *,
        last_add_confirmed: int = -1,
        length: int = 0,
        recovery: bool = False,
    ) -> None:
        super().__init__(bk, ledger_id, metadata, version)
        self.master_key = master_key
        self._lac = last_add_confirmed
        self._last_pushed = last_add_confirmed
        self._length_pushed = length
        self._length_confirmed = length
        self._recovery = recovery
        self._pending: deque[PendingAdd] = deque()
        self._ensemble: list[str] = list(metadata.current_ensemble)
        self._clients: list[BookieCalls] = []
        self._failed: dict[int, str] = {}  # slot -> bookie awaiting replacement
        self._change_task: asyncio.Task[None] | None = None
        self._ensemble_changes = 0
        self._error: BookieError | None = None
        self.lifecycle = HandleLifecycle.OPEN  # changed only by _move_to
        self._lac_sent = last_add_confirmed  # highest LAC the bookies have been told
        self._lac_task: asyncio.Task[None] | None = None
        self._close_task: asyncio.Future[None] | None = None
        # Fragments a recovering handle made, written to the metadata only when it seals.
        self._recovery_fragments: dict[int, tuple[str, ...]] = {}

    async def connect(self) -> None:
        """Connect to the ensemble's bookies; start the idle-LAC sender."""
        self._clients = [await self.bk.clients.get(b) for b in self._ensemble]
        interval = self.bk.config.explicit_lac_interval_ms
        if interval > 0 and not self._recovery:
            self._lac_task = asyncio.create_task(
                self._send_explicit_lac(interval / 1000), name=f"ledger-{self.ledger_id}-lac"
            )

    # ----------------------------------------------------------------- state

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def last_add_pushed(self) -> int:
        return self._last_pushed

    @property
    def length(self) -> int:
        """Bytes confirmed so far (the ledger's length once closed)."""
        return self._length_confirmed

    @property
    def ensemble(self) -> tuple[str, ...]:
        return tuple(self._ensemble)

    @property
    def pending_adds(self) -> int:
        return len(self._pending)

    # ----------------------------------------------------------------- adds

    def add_entry_async(self, data: bytes) -> asyncio.Future[int]:
        """Queue an add; the future gives the entry id once ``Qa`` bookies hold it."""
        self._check_writable()
        entry_id = self._last_pushed + 1
        length = self._length_pushed + len(data)
        payload = encode_entry(self.ledger_id, entry_id, self._lac, data, length)
        self._last_pushed, self._length_pushed = entry_id, length
        self._lac_sent = max(self._lac_sent, self._lac)
        future = asyncio.get_running_loop().create_future()
        op = PendingAdd(entry_id, payload, length, future, self.metadata.ack_quorum_size)
        self._pending.append(op)
        self._send_to_write_set(op)
        return future

    async def add_entry(self, data: bytes) -> int:
        return await self.add_entry_async(data)

    def recovery_add_async(self, raw_entry: bytes) -> asyncio.Future[int]:
        """Re-add an entry found by recovery, unchanged, to its full write quorum."""
        if not self._recovery:
            raise IllegalOpError("recovery adds are only for a recovering handle")
        if self._error is not None:
            raise self._error
        header = verify_entry(raw_entry)
        if header.entry_id != self._last_pushed + 1:
            raise InvalidEntryError(
                f"recovery add of entry {header.entry_id}, expected {self._last_pushed + 1}"
            )
        self._last_pushed, self._length_pushed = header.entry_id, header.length
        future = asyncio.get_running_loop().create_future()
        op = PendingAdd(
            header.entry_id,
            raw_entry,
            header.length,
            future,
            self.metadata.write_quorum_size,
            recovery=True,
        )
        self._pending.append(op)
        self._send_to_write_set(op)
        return future

    def _check_writable(self) -> None:
        if self._recovery:
            raise IllegalOpError("a recovering handle only re-adds what it recovered")
        if self._error is not None:
            raise type(self._error)(str(self._error))
        if self.lifecycle is not HandleLifecycle.OPEN or self.metadata.is_closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed")

    def _send_to_write_set(self, op: PendingAdd) -> None:
        for slot in self.metadata.write_set(op.entry_id):
            if slot not in self._failed:
                self._send(op, slot)

    def _send(self, op: PendingAdd, slot: int) -> None:
        bookie = self._ensemble[slot]
        try:
            sent = self._clients[slot].add_entry(
                self.master_key, op.payload, recovery_add=op.recovery
            )
        except BookieError as exc:
            self._on_bookie_failure(slot, bookie, exc)
            return
        sent.add_done_callback(functools.partial(self._on_add_result, op, slot, bookie))

    def _on_add_result(
        self, op: PendingAdd, slot: int, bookie: str, sent: asyncio.Future[tuple[int, int]]
    ) -> None:
        if sent.cancelled():
            return
        exc = sent.exception()  # retrieve it even when it no longer matters
        if self._error is not None or self._ensemble[slot] != bookie:
            return  # the handle is done, or a late answer from a replaced bookie
        if exc is None:
            # Counted even if the caller stopped waiting (its future cancelled): the entry
            # is written all the same, and later entries complete only after it.
            op.acked.add(slot)
            self._complete_in_order()
        elif isinstance(exc, LedgerFencedError):
            self._fail_handle(
                LedgerFencedError(f"ledger {self.ledger_id} was fenced by a recovering client")
            )
        elif isinstance(exc, (UnauthorizedAccessError, EntryTooLargeError, InvalidEntryError)):
            # Every bookie would say the same: no ensemble change can help.
            self._fail_handle(exc)
        else:
            # Even after the entry reached Qa: replace the bookie so later entries get Qw.
            self._on_bookie_failure(slot, bookie, exc)

    def _complete_in_order(self) -> None:
        if self._change_task is not None:
            return  # as in BookKeeper: nothing completes while the ensemble is changing
        while self._pending and len(self._pending[0].acked) >= self._pending[0].required_acks:
            op = self._pending.popleft()
            self._lac = op.entry_id
            self._length_confirmed = op.ledger_length
            if not op.future.done():
                op.future.set_result(op.entry_id)

    def _fail_handle(self, error: BookieError) -> None:
        """The handle cannot go on: fail every pending add with ``error``."""
        if self._error is None:
            log.warning("ledger %d: writer stops: %s", self.ledger_id, error)
            self._error = error
        pending, self._pending = self._pending, deque()
        for op in pending:
            if not op.future.done():
                op.future.set_exception(error)

    # ----------------------------------------------------------------- ensemble change

    def _on_bookie_failure(self, slot: int, bookie: str, error: BaseException) -> None:
        closing = self.lifecycle is not HandleLifecycle.OPEN
        if (closing and not self._pending) or self.metadata.is_closed:
            return  # nothing left to write: no new fragment needed
        if self.bk.closed:
            # The client's own connections were closed under the adds: not the bookie's fault.
            self._fail_handle(ClientClosedError(f"ledger {self.ledger_id}: client closed"))
            return
        self.bk.health.record_failure(bookie)
        if slot in self._failed:
            return
        log.warning(
            "ledger %d: bookie %s (slot %d) failed a write: %s", self.ledger_id, bookie, slot, error
        )
        self._failed[slot] = bookie
        if self._change_task is None:
            self._change_task = asyncio.create_task(
                self._change_ensemble(), name=f"ledger-{self.ledger_id}-ensemble-change"
            )

    async def _change_ensemble(self) -> None:
        try:
            while self._failed and self._error is None:
                if self._ensemble_changes >= self.bk.config.max_ensemble_changes:
                    raise NotEnoughBookiesError(
                        f"ledger {self.ledger_id}: gave up after "
                        f"{self._ensemble_changes} ensemble changes"
                    )
                self._ensemble_changes += 1
                failed = dict(self._failed)
                start = self._lac + 1
                ensemble = await self._replacements(failed)
                await self._write_fragment(start, ensemble)
                self._clients = [await self.bk.clients.get(b) for b in ensemble]
                self._ensemble = ensemble
                for slot, bookie in failed.items():
                    if self._failed.get(slot) == bookie:
                        del self._failed[slot]
                log.info(
                    "ledger %d: new fragment from entry %d on %s", self.ledger_id, start, ensemble
                )
                for op in list(self._pending):
                    for slot in self.metadata.write_set(op.entry_id):
                        if slot in failed and slot not in self._failed:
                            op.acked.discard(slot)
                            self._send(op, slot)
        except BookieError as exc:
            self._fail_handle(exc)
        except Exception as exc:  # a bug must not leave adds hanging forever
            log.exception("ledger %d: ensemble change failed", self.ledger_id)
            self._fail_handle(BookieError(f"ensemble change failed: {exc}"))
        finally:
            self._change_task = None
        self._complete_in_order()

    async def _replacements(self, failed: dict[int, str]) -> list[str]:
        writable = await self.bk.bookie_watcher.writable()
        # Bookies that failed lately (for any handle of this client) are not candidates.
        exclude = set(failed.values()) | {b for b in writable if self.bk.health.failed_recently(b)}
        ensemble = list(self._ensemble)
        for slot in sorted(failed):
            ensemble[slot] = self.bk.placement.replace_bookie(
                ensemble, slot, self.metadata.write_quorum_size, writable, exclude=exclude
            )
        return ensemble

    async def _write_fragment(self, start: int, ensemble: list[str]) -> None:
        """Record the new fragment by compare-and-set, merging changes made by others.

        A recovering handle keeps its fragments to itself until ``seal``: entries it is still
        re-adding must stay where the metadata says they are, so that another recovery
        reading meanwhile never takes a replacement bookie's "no such entry" for an answer.
        """
        if self._recovery:
            self.metadata = self.metadata.with_ensemble(start, ensemble)
            self._recovery_fragments = {
                k: v for k, v in self._recovery_fragments.items() if k < start
            }
            self._recovery_fragments[start] = tuple(ensemble)
            return
        while newer := await self._try_write(self.metadata.with_ensemble(start, ensemble)):
            current, version = newer
            self._check_still_ours(current)
            # Someone else (auto-recovery) changed an earlier fragment: keep that.
            self.metadata, self.version = current, version

    async def _try_write(self, updated: LedgerMetadata) -> tuple[LedgerMetadata, int] | None:
        """Compare-and-set ``updated`` over our version: ``None`` once written, else the
        metadata (and version) someone else wrote meanwhile, for the caller to reconcile."""
        try:
            self.version = await self.bk.ledger_manager.write(self.ledger_id, updated, self.version)
        except MetadataVersionError:
            return await self.bk.ledger_manager.read(self.ledger_id)
        self.metadata = updated
        return None

    def _check_still_ours(self, current: LedgerMetadata) -> None:
        if current.state is LedgerState.CLOSED:
            raise LedgerClosedError(f"ledger {self.ledger_id} was closed by another client")
        if current.state is LedgerState.IN_RECOVERY and not self._recovery:
            raise LedgerFencedError(f"ledger {self.ledger_id} is being recovered by another client")

    # ----------------------------------------------------------------- LAC and close

    async def _send_explicit_lac(self, interval: float) -> None:
        """When adds pause, tell the bookies the LAC the last entries could not carry."""
        while self.lifecycle is HandleLifecycle.OPEN and self._error is None and not self.bk.closed:
            await asyncio.sleep(interval)
            if self._pending or self._change_task is not None or self._lac <= self._lac_sent:
                continue
            lac = self._lac
            targets = list(zip(self._ensemble, self._clients, strict=True))
            results = await asyncio.gather(
                *(c.write_lac(self.ledger_id, self.master_key, lac) for _, c in targets),
                return_exceptions=True,
            )
            for (bookie, _), result in zip(targets, results, strict=True):
                if isinstance(result, BaseException):
                    log.debug("explicit LAC to %s failed: %s", bookie, result)
            if any(not isinstance(r, BaseException) for r in results):
                self._lac_sent = lac

    async def close(self) -> None:
        """Wait for pending adds, then seal the ledger at its last confirmed entry.

        Every caller waits for the same close; if it fails (metadata unreachable), the next
        call tries again. A handle fenced by a recovering client just stops: that client seals.
        """
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        task = self._close_task
        try:
            await asyncio.shield(task)
        except BaseException:
            if task.done() and self._close_task is task:
                if task.cancelled() or task.exception() is not None:
                    self._close_task = None  # let a later close() retry
            raise

    def _move_to(self, new: HandleLifecycle) -> None:
        """The one place the lifecycle changes; ``IllegalTransitionError`` if it may not."""
        owner = f"ledger {self.ledger_id} handle"
        self.lifecycle = HANDLE_TRANSITIONS.check(owner, self.lifecycle, new)

    async def _close(self) -> None:
        if self.lifecycle is HandleLifecycle.CLOSED:
            return  # sealed already (a recovering handle's ``seal``)
        self._move_to(HandleLifecycle.CLOSING)  # a retry after a failed seal: still CLOSING
        if self._pending:
            futures = [op.future for op in self._pending]
            await asyncio.gather(*futures, return_exceptions=True)
        if self._lac_task is not None:
            self._lac_task.cancel()
        if isinstance(self._error, (LedgerFencedError, LedgerClosedError)):
            self._move_to(HandleLifecycle.CLOSED)
            return  # the recovering client seals it
        await self.seal(self._lac, self._length_confirmed)

    async def seal(self, last_entry_id: int, length: int) -> None:
        """Mark the ledger CLOSED at ``last_entry_id``; adopt a close made by another client
        only if it agrees (a recovering handle adopts whatever the other recovery decided)."""
        while newer := await self._try_write(self.metadata.closed(last_entry_id, length)):
            current, version = newer
            if current.is_closed:
                if current.last_entry_id != last_entry_id and not self._recovery:
                    raise MetadataVersionError(
                        f"ledger {self.ledger_id} was closed by another client at entry "
                        f"{current.last_entry_id}, this writer confirmed {last_entry_id}"
                    )
                self.metadata, self.version = current, version
                self._lac = current.last_entry_id
                break
            self._check_still_ours(current)
            for start, ensemble in sorted(self._recovery_fragments.items()):
                current = current.with_ensemble(start, ensemble)
            self.metadata, self.version = current, version
        self._move_to(HandleLifecycle.CLOSED)
