"""Bookie garbage collection: drop ledgers deleted from metadata, compact entry logs.

BookKeeper's ScanAndCompareGarbageCollector inside its GarbageCollectorThread. Each round:

1. snapshot the ledgers held locally, *then* list the ledgers in metadata. A ledger's metadata
   is created before any of its entries reach a bookie, so a ledger in the local snapshot but
   missing from the later listing was deleted; one created meanwhile is not in the snapshot.
   If the listing fails, nothing is deleted. Each candidate is checked once more by id.
2. drop those ledgers from storage (index, memtable, caches; their entry-log bytes go dead).
3. on their intervals, compact entry logs whose live fraction is below the major or minor
   threshold (a major round also counts as a minor one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from stripemq.bookie.config import BookieConfig
from stripemq.bookie.storage.engine import BookieStorage, CompactionResult, GcResult
from stripemq.errors import BookieShuttingDownError

log = logging.getLogger(__name__)


class LedgerSource(Protocol):
    """What GC needs from ledger metadata (``LedgerManager`` provides it)."""

    def ledger_ids(self) -> AsyncIterator[int]: ...

    async def exists(self, ledger_id: int) -> bool: ...

    async def is_initialized(self) -> bool: ...


@dataclass
class GcRound:
    """What one round did; ``ledgers`` is ``None`` when no ledger could be checked."""

    ledgers: GcResult | None = None
    compaction: CompactionResult | None = None
    major: bool = False


class GarbageCollector:
    """Runs GC rounds every ``gc_wait_time_ms`` against the ledgers in metadata.

    ``source`` is called at each round, because the metadata store behind it may be replaced
    (a bookie makes a new one after losing its session); ``None`` skips the ledger pass.
    """

    def __init__(
        self,
        storage: BookieStorage,
        config: BookieConfig,
        source: Callable[[], LedgerSource | None],
        *,
        verify_metadata: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.storage = storage
        self.config = config
        self._source = source
        self.verify_metadata = verify_metadata
        self._clock = clock
        # As in BookKeeper, the first compactions come one interval after start.
        self._last_minor = self._last_major = clock()
        self.rounds = 0
        self.listing_failures = 0
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ one round

    async def collect_ledgers(self) -> GcResult | None:
        """Drop every local ledger deleted from metadata; ``None`` if none could be checked."""
        source = self._source()
        if source is None:
            log.debug("no metadata store: ledger garbage collection skipped")
            return None
        local = await self.storage.local_ledger_ids()  # first, before the listing
        if not local:
            return await self.storage.drop_ledgers(())  # only sweeps entry logs left dead
        live: set[int] = set()
        try:
            if not await source.is_initialized():
                # No ledger id was ever allocated in this store: it is not the metadata
                # these ledgers were written under (a wrong chroot?). Deleting would be total.
                log.error(
                    "metadata store has no ledger id allocator but this bookie holds %d "
                    "ledgers: wrong metadata_service_uri? garbage collection refused",
                    len(local),
                )
                return None
            async for ledger_id in source.ledger_ids():
                live.add(ledger_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.listing_failures += 1
            log.warning("cannot list ledgers in metadata (%s): nothing deleted this round", exc)
            return None
        doomed = sorted(local - live)
        if doomed and self.verify_metadata:
            doomed = [
                ledger_id for ledger_id in doomed if await self._confirmed_gone(source, ledger_id)
            ]
        return await self.storage.drop_ledgers(doomed)

    async def _confirmed_gone(self, source: LedgerSource, ledger_id: int) -> bool:
        """A second look at one ledger: only an answer of "absent" lets it be deleted."""
        try:
            return not await source.exists(ledger_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("cannot check ledger %d in metadata (%s); kept", ledger_id, exc)
            return False

    async def run_once(self, *, force_major: bool = False, force_minor: bool = False) -> GcRound:
        """One round: the ledger pass, then whichever compaction is due (or forced)."""
        result = GcRound(ledgers=await self.collect_ledgers())
        config = self.config
        now = self._clock()
        if config.major_compaction_enabled and (
            force_major or now - self._last_major >= config.major_compaction_interval_s
        ):
            result.major = True
            result.compaction = await self.storage.compact(
                config.major_compaction_threshold, should_stop=self._stopping.is_set
            )
            self._last_major = self._last_minor = now
        elif config.minor_compaction_enabled and (
            force_minor or now - self._last_minor >= config.minor_compaction_interval_s
        ):
            result.compaction = await self.storage.compact(
                config.minor_compaction_threshold, should_stop=self._stopping.is_set
            )
            self._last_minor = now
        self.rounds += 1
        return result

    # ------------------------------------------------------------------ background loop

    def start(self) -> None:
        """Run rounds in the background until ``stop``."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="bookie-gc")

    async def stop(self, grace: float = 5.0) -> None:
        """Let a round in progress finish its current step (up to ``grace`` s), then stop."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), grace)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        interval = self.config.gc_wait_time_ms / 1000
        log.info(
            "garbage collection every %.1fs (minor compaction %s, major %s)",
            interval,
            self._level(
                self.config.minor_compaction_threshold, self.config.minor_compaction_interval_s
            ),
            self._level(
                self.config.major_compaction_threshold, self.config.major_compaction_interval_s
            ),
        )
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), interval)
                return
            except TimeoutError:
                pass
            try:
                await self.run_once()
            except BookieShuttingDownError:
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("garbage collection round failed; retried next round")

    @staticmethod
    def _level(threshold: float, interval_s: float) -> str:
        if threshold <= 0 or interval_s <= 0:
            return "off"
        return f"below {threshold:.0%} every {interval_s:g}s"
