"""One topic's compaction: its compacted ledger, the run in progress, what the last run did.

The compaction cursor (``__compaction``, Pulsar's) holds every entry after the horizon for
the next run, and its properties record the compacted ledger and its horizon
(``CompactedTopicLedger``, as Pulsar names it, and the horizon's ledger and entry). A run
writes a new ledger, then moves the cursor to the new horizon with the new properties in
one cursor write, then deletes the ledger it replaced; a broker that takes the topic over
reads the compacted ledger from the cursor. One run at a time per topic: a trigger while
one runs is refused (``CompactionInProgressError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from stripemq.bookie.client.bookkeeper import delete_ledger_quietly
from stripemq.broker.compaction.compacted_ledger import CompactedLedger
from stripemq.broker.compaction.compactor import TwoPhaseCompactor
from stripemq.broker.names import COMPACTION_CURSOR
from stripemq.clock import now_ms
from stripemq.errors import BookieError, StripeMQError
from stripemq.managed_ledger.cursor.managed_cursor import ManagedCursor
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.proto.initial_position import InitialPosition

log = logging.getLogger(__name__)

__all__ = [
    "COMPACTED_LEDGER_PROPERTY",
    "CompactionInProgressError",
    "CompactionStats",
    "CompactionStatus",
    "TopicCompaction",
]

COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"  # Pulsar's cursor property
HORIZON_LEDGER_PROPERTY = "CompactionHorizonLedger"
HORIZON_ENTRY_PROPERTY = "CompactionHorizonEntry"


class CompactionInProgressError(StripeMQError):
    """A compaction was triggered while one runs on the topic."""


class CompactionStatus(enum.Enum):
    """Pulsar's ``LongRunningProcessStatus.Status``."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


@dataclass
class CompactionStats:
    """What the last runs did, as Pulsar's topic stats show it (``compaction``)."""

    removed_event_count: int = 0
    succeed_timestamp: int = 0
    failed_timestamp: int = 0
    duration_ms: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "lastCompactionRemovedEventCount": self.removed_event_count,
            "lastCompactionSucceedTimestamp": self.succeed_timestamp,
            "lastCompactionFailedTimestamp": self.failed_timestamp,
            "lastCompactionDurationTimeInMills": self.duration_ms,
        }


class TopicCompaction:
    """The compaction of the topic on ``ml`` (one per served topic)."""

    def __init__(
        self,
        ml: ManagedLedger,
        *,
        retain_null_key: bool = False,
        open_cursor: Callable[[], Awaitable[ManagedCursor]] | None = None,
    ) -> None:
        self.ml = ml
        self.retain_null_key = retain_null_key
        # How the compaction cursor is opened: by the topic, which takes it up as a
        # subscription (Pulsar lists ``__compaction`` among them), else on the ledger.
        self._open_cursor = open_cursor or (
            lambda: ml.open_cursor(COMPACTION_CURSOR, InitialPosition.Earliest)
        )
        self.status = CompactionStatus.NOT_RUN
        self.last_error = ""
        self.stats = CompactionStats()
        self._compacted: CompactedLedger | None = None
        self._opening = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ reading

    def _recorded(self) -> tuple[int, Position] | None:
        """The compacted ledger and horizon the compaction cursor records, if any."""
        cursor = self.ml.cursors.get(COMPACTION_CURSOR)
        if cursor is None:
            return None
        props = cursor.state.properties
        ledger_id = props.get(COMPACTED_LEDGER_PROPERTY)
        if ledger_id is None:
            return None
        if HORIZON_LEDGER_PROPERTY in props and HORIZON_ENTRY_PROPERTY in props:
            horizon = Position(props[HORIZON_LEDGER_PROPERTY], props[HORIZON_ENTRY_PROPERTY])
        else:  # written by a compactor that records the horizon only as the mark-delete
            horizon = cursor.mark_delete_position
        return ledger_id, horizon

    @property
    def has_compacted(self) -> bool:
        """Whether the topic has a compacted ledger (readers that read compacted use it)."""
        return self._compacted is not None or self._recorded() is not None

    @property
    def opened(self) -> CompactedLedger | None:
        """The compacted ledger if ``compacted`` opened it already."""
        return self._compacted

    def horizon_after(self, start: Position) -> Position:
        """Where reading the topic goes on once the compacted ledger holds nothing more
        from ``start`` on: just after its horizon."""
        compacted = self._compacted
        return compacted.horizon.next() if compacted is not None else start

    async def compacted(self) -> CompactedLedger | None:
        """The compacted ledger, opened on first use; ``None`` if the topic has none."""
        if self._compacted is not None:
            return self._compacted
        async with self._opening:
            if self._compacted is None:
                recorded = self._recorded()
                if recorded is None:
                    return None
                ledger_id, horizon = recorded
                reader = await self.ml.bk.open_ledger(
                    ledger_id, password=self.ml.config.password, recovery=False
                )
                self._compacted = await CompactedLedger.open(reader, horizon)
        return self._compacted

    # ------------------------------------------------------------------ running

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def trigger(self) -> None:
        """Start a run in the background; ``CompactionInProgressError`` if one runs."""
        if self.running:
            raise CompactionInProgressError("Compaction already in progress")
        self.status = CompactionStatus.RUNNING
        self.last_error = ""
        self._task = asyncio.ensure_future(self._run())

    async def wait(self) -> None:
        """Until the run in progress (if any) ends."""
        if self._task is not None:
            await asyncio.wait({self._task})

    async def _run(self) -> None:
        started = time.monotonic()
        try:
            removed_events = await self._compact()
        except asyncio.CancelledError:
            self._failed("compaction was cancelled: the topic closed")
            raise
        except Exception as exc:
            if not isinstance(exc, StripeMQError):
                log.exception("[%s] compaction failed", self.ml.name)
            self._failed(str(exc) or type(exc).__name__)
            return
        self.status = CompactionStatus.SUCCESS
        self.stats.removed_event_count = removed_events
        self.stats.succeed_timestamp = now_ms()
        self.stats.duration_ms = int((time.monotonic() - started) * 1000)

    def _failed(self, error: str) -> None:
        log.warning("[%s] compaction failed: %s", self.ml.name, error)
        self.status = CompactionStatus.ERROR
        self.last_error = error
        self.stats.failed_timestamp = now_ms()

    async def _compact(self) -> int:
        """One run; returns its removed event count."""
        cursor = await self._open_cursor()
        previous = await self.compacted()
        end = self.ml.last_confirmed
        if end.entry_id < 0 or (previous is not None and end <= previous.horizon):
            log.info("[%s] compaction: nothing new to compact", self.ml.name)
            return 0
        compactor = TwoPhaseCompactor(self.ml, retain_null_key=self.retain_null_key)
        result = await compactor.compact(previous, end)
        compacted = result.compacted
        mark_delete, properties = cursor.mark_delete_position, dict(cursor.state.properties)
        self._move_cursor(cursor, compacted)
        try:
            await cursor.flush()
        except StripeMQError as exc:
            # Not recorded: the cursor goes back to what it was (written with its next
            # write) and the new ledger goes; the previous compaction stays in place.
            cursor.reset(mark_delete.next())
            cursor.set_properties(properties)
            await self._delete_ledger(compacted)
            raise StripeMQError(f"the compaction cursor could not be written: {exc}") from exc
        self._compacted = compacted
        if previous is not None:
            await self._delete_ledger(previous)
        log.info(
            "[%s] compacted up to %s into ledger %d: %d entries kept, %d messages removed",
            self.ml.name,
            end,
            compacted.ledger_id,
            compacted.entries,
            result.removed,
        )
        return result.removed_events

    def _move_cursor(self, cursor: ManagedCursor, compacted: CompactedLedger) -> None:
        """Move the compaction cursor to the new horizon, naming the new ledger (one
        cursor write, so a broker taking the topic over finds both or neither)."""
        horizon = compacted.horizon
        properties = {
            **cursor.state.properties,
            COMPACTED_LEDGER_PROPERTY: compacted.ledger_id,
            HORIZON_LEDGER_PROPERTY: horizon.ledger_id,
            HORIZON_ENTRY_PROPERTY: horizon.entry_id,
        }
        if horizon > cursor.mark_delete_position:
            cursor.ack_cumulative(horizon, properties=properties)
        else:  # moved on meanwhile (an admin skip): the position stays where it is
            cursor.set_properties(properties)

    async def _delete_ledger(self, compacted: CompactedLedger) -> None:
        await delete_ledger_quietly(
            self.ml.bk, compacted.ledger_id, f"compacted ledger of {self.ml.name}"
        )

    async def stop(self) -> None:
        """Cancel the run in progress (the topic closes or is deleted)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def delete(self) -> None:
        """Delete the compacted ledger (the topic, or its compaction cursor, is being
        deleted; stopped first)."""
        recorded = self._recorded()
        self._compacted = None
        if recorded is not None:
            with contextlib.suppress(BookieError):
                await delete_ledger_quietly(
                    self.ml.bk, recorded[0], f"compacted ledger of {self.ml.name}"
                )
