"""Replication workers: take an under-replicated ledger, restore its lost replicas, unqueue it.

For every fragment that names a bookie no longer registered, a worker picks a replacement
(placement's ``replace_bookie``), copies to it every entry of the fragment that the lost
ensemble slot held (striping: slot ``i`` holds entry ``e`` when ``(i - e) mod E < Qw``),
byte for byte with header and digest as the surviving replicas store it, waits until the new
bookie has made them durable, and only then swaps the bookie in the metadata by
compare-and-set. A reader therefore never sees an ensemble naming a bookie that lacks data.

The current fragment of an open ledger has no known end. Its writer may still replace the
bookie itself, so the worker first waits ``open_ledger_rereplication_grace_period_s``; if the
fragment still names the lost bookie, it fences and closes the ledger by recovery (as
BookKeeper does) and then re-replicates the now sealed fragment.
"""

from __future__ import annotations

import asyncio
import logging
import time
from itertools import count

from stripemq.bookie.autorecovery.bookies import registered_bookies
from stripemq.bookie.autorecovery.config import AutoRecoveryConfig
from stripemq.bookie.autorecovery.metrics import ReplicationStats
from stripemq.bookie.autorecovery.underreplication import (
    UnderReplicatedLedger,
    UnderReplicationManager,
)
from stripemq.bookie.client.bookkeeper import BookKeeper
from stripemq.bookie.client.metadata import Fragment, LedgerMetadata, stored_on
from stripemq.bookie.client.reader import ReplicaReader
from stripemq.errors import (
    BookieError,
    MetadataVersionError,
    NoSuchLedgerError,
    ReplicationError,
    SessionLostError,
)
from stripemq.retry import Backoff

log = logging.getLogger(__name__)

_names = count()


class ReplicationWorker:
    """One worker loop over the under-replication queue. ``start()``, later ``stop()``."""

    def __init__(
        self,
        bk: BookKeeper,
        underreplication: UnderReplicationManager,
        config: AutoRecoveryConfig,
        *,
        name: str | None = None,
        stats: ReplicationStats | None = None,
    ) -> None:
        """``stats``: where to count (``AutoRecoveryMetrics.replication``, shared by the
        process's workers); default: its own."""
        self.bk = bk
        self.urm = underreplication
        self.config = config
        self.name = name or f"replication-worker-{next(_names)}"
        self.replicated = 0  # ledgers unqueued by this worker
        self.fragments_replicated = 0
        self.entries_copied = 0
        self.current: int | None = None  # the ledger being worked on
        self.stats = stats or ReplicationStats()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name=self.name)

    async def stop(self) -> None:
        """Stop at once; the ledger being worked on is released for another worker."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self._release_current()

    async def _release_current(self) -> None:
        """Best effort: the lock is ephemeral and goes with the session anyway."""
        ledger_id, self.current = self.current, None
        if ledger_id is None:
            return
        try:
            await self.urm.release(ledger_id)
        except Exception as exc:
            log.debug("%s: releasing ledger %d failed: %s", self.name, ledger_id, exc)

    async def run(self) -> None:
        """Take ledgers from the queue until cancelled (or the metadata session is lost)."""
        backoff = Backoff(
            self.config.replication_retry_backoff_s, self.config.replication_retry_backoff_max_s
        )
        while True:
            try:
                record = await self.urm.acquire(self.config.underreplication_poll_interval_s)
                self.current = record.ledger_id
                if await self._attempt(record, backoff):
                    backoff.reset()
                self.current = None
            except asyncio.CancelledError:
                raise
            except SessionLostError:
                log.warning("%s: metadata session lost; stopping", self.name)
                return
            except Exception:
                log.exception("%s: unexpected failure", self.name)
                await self._release_current()  # never keep a ledger locked while idle
                await backoff.sleep()

    async def _attempt(self, record: UnderReplicatedLedger, backoff: Backoff) -> bool:
        """Re-replicate one locked ledger; on failure hold it for a back-off delay first."""
        ledger_id = record.ledger_id
        fragments_before = self.fragments_replicated
        started = time.perf_counter()
        try:
            await self.replicate(ledger_id)
        except (asyncio.CancelledError, SessionLostError):
            raise
        except Exception as exc:
            self.stats.rereplicate.record(time.perf_counter() - started, success=False)
            if self.fragments_replicated > fragments_before:
                self.stats.ledgers_replicated += 1
            self.stats.deferred_lock_releases += 1
            delay = backoff.next_delay()
            log.warning(
                "%s: re-replicating ledger %d failed (%s: %s); retrying in %.1fs",
                self.name,
                ledger_id,
                type(exc).__name__,
                exc,
                delay,
            )
            # Keep the lock meanwhile, so no other worker retries the same failure at once.
            await asyncio.sleep(delay)
            await self.urm.release(ledger_id)
            return False
        self.stats.rereplicate.record(time.perf_counter() - started)
        if self.fragments_replicated > fragments_before:
            self.stats.ledgers_replicated += 1
        if await self.urm.mark_replicated(record):
            self.replicated += 1
        return True

    # ----------------------------------------------------------------- one ledger

    async def replicate(self, ledger_id: int) -> None:
        """Return once no fragment of the ledger names an unregistered bookie (or the ledger
        is gone). Raises on failure; the caller retries later."""
        lm = self.bk.ledger_manager
        waited_for_writer = False
        while True:
            try:
                metadata, version = await lm.read(ledger_id)
            except NoSuchLedgerError:
                log.info("ledger %d was deleted; nothing to re-replicate", ledger_id)
                return
            registered = await registered_bookies(self.bk.store)
            todo = [
                (fragment, slot)
                for fragment in metadata.fragments()
                for slot, bookie in enumerate(fragment.ensemble)
                if bookie not in registered
            ]
            if not todo:
                return
            sealed = [(f, slot) for f, slot in todo if f.last_entry_id is not None]
            if sealed:
                fragment, slot = sealed[0]
                try:
                    await self._replace(ledger_id, metadata, version, fragment, slot, registered)
                except NoSuchLedgerError:
                    pass  # deleted meanwhile: the next read says so
                continue
            # Only the open ledger's current fragment is left: its end is not known yet.
            grace = self.config.open_ledger_rereplication_grace_period_s
            if not waited_for_writer and grace > 0:
                log.info(
                    "ledger %d is open and its current fragment lost %s; giving its writer "
                    "%.1fs before recovering it",
                    ledger_id,
                    sorted({f.ensemble[s] for f, s in todo}),
                    grace,
                )
                waited_for_writer = True
                await asyncio.sleep(grace)
                continue
            log.info("ledger %d: fencing and closing it to re-replicate its end", ledger_id)
            try:
                await self.bk.open_ledger(ledger_id, password=None, recovery=True)
            except NoSuchLedgerError:
                continue  # deleted meanwhile: the next read says so

    async def _replace(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        version: int,
        fragment: Fragment,
        slot: int,
        registered: set[str],
    ) -> None:
        """Copy the slot's entries of ``fragment`` to a new bookie and swap it in."""
        old = fragment.ensemble[slot]
        candidates = await self.bk.bookie_watcher.writable()
        writable = {b: info for b, info in candidates.items() if b in registered}
        new = self.bk.placement.replace_bookie(
            fragment.ensemble, slot, metadata.write_quorum_size, writable
        )
        copied = 0
        if not fragment.is_empty():
            copied = await self._copy(ledger_id, metadata, fragment, slot, new)
        if await self._swap(ledger_id, metadata, version, fragment, old, new):
            self.fragments_replicated += 1
            self.entries_copied += copied
            log.info(
                "ledger %d: fragment %d..%s moved from lost bookie %s to %s (%d entries copied)",
                ledger_id,
                fragment.first_entry_id,
                fragment.last_entry_id,
                old,
                new,
                copied,
            )

    async def _copy(
        self, ledger_id: int, metadata: LedgerMetadata, fragment: Fragment, slot: int, new: str
    ) -> int:
        """Copy the entries slot ``slot`` held to ``new``; returns how many, once all durable."""
        assert fragment.last_entry_id is not None
        ensemble_size, write_quorum = metadata.ensemble_size, metadata.write_quorum_size
        entries = iter(
            [
                e
                for e in range(fragment.first_entry_id, fragment.last_entry_id + 1)
                if stored_on(e, slot, ensemble_size, write_quorum)
            ]
        )
        reader = ReplicaReader(self.bk, ledger_id)
        client = await self.bk.clients.get(new)
        master_key = metadata.master_key
        copied = 0

        stats = self.stats

        async def pump() -> None:
            nonlocal copied
            for entry_id in entries:  # shared by every pump: each entry is taken once
                started = time.perf_counter()
                try:
                    raw = await reader.read_raw(metadata, entry_id)
                except Exception:
                    stats.entry_read(time.perf_counter() - started, None)
                    raise
                stats.entry_read(time.perf_counter() - started, len(raw))
                started = time.perf_counter()
                try:
                    await client.add_entry(master_key, raw, recovery_add=True)
                except Exception:
                    stats.entry_written(time.perf_counter() - started, None)
                    raise
                stats.entry_written(time.perf_counter() - started, len(raw))
                copied += 1

        pumps = [
            asyncio.create_task(pump())
            for _ in range(self.config.replication_max_concurrent_entries)
        ]
        try:
            await asyncio.gather(*pumps)
        except BookieError as exc:
            raise ReplicationError(
                f"ledger {ledger_id}: copying fragment {fragment.first_entry_id}.."
                f"{fragment.last_entry_id} of {fragment.ensemble[slot]} to {new} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        finally:
            for task in pumps:
                task.cancel()
        return copied

    async def _swap(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        version: int,
        fragment: Fragment,
        old: str,
        new: str,
    ) -> bool:
        """Name ``new`` instead of ``old`` in the fragment, by compare-and-set.

        False (nothing written) if the fragment changed meanwhile: the caller starts over.
        """
        while True:
            current = next(
                (f for f in metadata.fragments() if f.first_entry_id == fragment.first_entry_id),
                None,
            )
            unchanged = (
                current is not None
                and current.ensemble == fragment.ensemble
                and current.last_entry_id is not None
                and fragment.last_entry_id is not None
                and current.last_entry_id <= fragment.last_entry_id
            )
            if not unchanged:
                log.info(
                    "ledger %d: fragment %d changed while it was copied; starting over",
                    ledger_id,
                    fragment.first_entry_id,
                )
                return False
            updated = metadata.with_replaced_bookie(fragment.first_entry_id, old, new)
            try:
                await self.bk.ledger_manager.write(ledger_id, updated, version)
                return True
            except MetadataVersionError:
                metadata, version = await self.bk.ledger_manager.read(ledger_id)
