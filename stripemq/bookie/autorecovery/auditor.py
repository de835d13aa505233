"""The auditor: one elected process that notices lost bookies and queues their ledgers.

Election follows ZooKeeper's recipe: every candidate creates an ephemeral sequential node
``/ledgers/auditor/V_<seq>``; the lowest is the auditor, every other one watches only its
predecessor, so a death wakes one candidate, not all of them. A dead auditor's node goes
with its session and the next candidate takes over.

The elected auditor watches ``/ledgers/available`` (and ``readonly``: a read-only bookie still
serves its data and is not lost). A bookie gone for ``lost_bookie_recovery_delay_s`` is lost:
the auditor reads every ledger's metadata and marks each one with a fragment on a lost
bookie under-replicated. The same check runs on election (a bookie lost while there was no
auditor is caught) and every ``auditor_periodic_bookie_check_interval_s``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import time
import uuid

from stripemq.bookie.autorecovery.bookies import registered_bookies
from stripemq.bookie.autorecovery.config import AutoRecoveryConfig
from stripemq.bookie.autorecovery.metrics import AuditorStats
from stripemq.bookie.autorecovery.underreplication import DISABLE_PATH, UnderReplicationManager
from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.bookie.registration import AVAILABLE, READONLY
from stripemq.errors import InvalidEntryError, MetadataError, NoSuchLedgerError, SessionLostError
from stripemq.metadata import MetadataStore, WatchEvent, WatchHandle
from stripemq.retry import Backoff

log = logging.getLogger(__name__)

ELECTION_ROOT = "/ledgers/auditor"
_VOTE_PREFIX = "V_"
_SCAN_CONCURRENCY = 32


def _set_event(event: asyncio.Event, _watch_event: WatchEvent) -> None:
    event.set()


async def election_candidates(store: MetadataStore) -> list[tuple[str, str]]:
    """``(node name, participant id)`` of every candidate, the auditor first."""
    result = []
    names = sorted(c for c in await store.children(ELECTION_ROOT) if c.startswith(_VOTE_PREFIX))
    for name in names:
        found = await store.get(f"{ELECTION_ROOT}/{name}")
        if found is None:
            continue
        try:
            result.append((name, str(json.loads(found[0])["id"])))
        except (ValueError, KeyError, TypeError):
            result.append((name, ""))
    return result


async def current_auditor(store: MetadataStore) -> str | None:
    """The participant id of the elected auditor (BookKeeper's ``whoisauditor``)."""
    candidates = await election_candidates(store)
    return candidates[0][1] if candidates else None


class Auditor:
    """One election participant; while elected, it audits. ``start()``, later ``stop()``."""

    def __init__(
        self,
        store: MetadataStore,
        underreplication: UnderReplicationManager,
        config: AutoRecoveryConfig,
        *,
        participant_id: str | None = None,
        stats: AuditorStats | None = None,
    ) -> None:
        """``stats``: where to count (``AutoRecoveryMetrics.auditor``); default: its own."""
        self.store = store
        self.urm = underreplication
        self.config = config
        self.participant_id = participant_id or config.participant_id
        self.ledger_manager = LedgerManager(store)
        self.elected = asyncio.Event()
        self.audits = 0  # completed ledger checks while elected
        self.stats = stats or AuditorStats()
        self._token = uuid.uuid4().hex
        self._node: str | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def is_auditor(self) -> bool:
        return self.elected.is_set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"auditor-{self.participant_id}")

    async def stop(self) -> None:
        """Leave the election (the next candidate takes over at once)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._set_elected(False)
        if self._node is not None:
            try:
                await self.store.delete(self._node)
            except (MetadataError, SessionLostError):
                pass  # gone already, or gone with the session
            self._node = None

    # ----------------------------------------------------------------- election

    def _set_elected(self, elected: bool) -> None:
        if elected:
            self.elected.set()
        else:
            self.elected.clear()
        self.stats.elected = elected

    async def _run(self) -> None:
        backoff = Backoff(initial=0.5, maximum=10.0)
        while True:
            try:
                await self._wait_for_election()
                self._set_elected(True)
                log.info("%s is the auditor", self.participant_id)
                await self._audit_forever()
            except asyncio.CancelledError:
                raise
            except SessionLostError:
                self._set_elected(False)
                log.warning("auditor %s lost its metadata session", self.participant_id)
                return
            except Exception:
                self._set_elected(False)
                log.exception("auditor %s failed; retrying", self.participant_id)
                await backoff.sleep()

    async def _vote(self) -> str:
        """Our election node: found again (a create whose answer got lost) or created."""
        for name in await self.store.children(ELECTION_ROOT):
            found = await self.store.get(f"{ELECTION_ROOT}/{name}")
            try:
                if found is not None and json.loads(found[0]).get("token") == self._token:
                    return f"{ELECTION_ROOT}/{name}"
            except (ValueError, AttributeError):
                continue
        data = json.dumps({"id": self.participant_id, "token": self._token}).encode()
        return await self.store.create(
            f"{ELECTION_ROOT}/{_VOTE_PREFIX}", data, ephemeral=True, sequential=True
        )

    async def _wait_for_election(self) -> None:
        while True:
            self.stats.election_attempts += 1
            if self._node is None:
                self._node = await self._vote()
            mine = self._node.rsplit("/", 1)[1]
            votes = sorted(
                c for c in await self.store.children(ELECTION_ROOT) if c.startswith(_VOTE_PREFIX)
            )
            if mine not in votes:
                self._node = None  # deleted under us: vote again
                continue
            position = votes.index(mine)
            if position == 0:
                return
            predecessor = f"{ELECTION_ROOT}/{votes[position - 1]}"
            gone = asyncio.Event()
            handle = self.store.watch(predecessor, functools.partial(_set_event, gone))
            try:
                # The watch is armed before this read, so a deletion after it wakes us.
                if await self.store.exists(predecessor) is not None:
                    log.debug("%s waits for %s", self.participant_id, predecessor)
                    await gone.wait()
            finally:
                handle.cancel()

    # ----------------------------------------------------------------- auditing

    async def _audit_forever(self) -> None:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def on_change(_event: WatchEvent) -> None:
            wake.set()

        watches: list[WatchHandle] = [
            self.store.watch_children(AVAILABLE, on_change),
            self.store.watch_children(READONLY, on_change),
            self.store.watch(DISABLE_PATH, on_change),
        ]
        delay = self.config.lost_bookie_recovery_delay_s
        interval = self.config.auditor_periodic_bookie_check_interval_s or math.inf
        known: set[str] = set()
        missing_since: dict[str, float] = {}  # absent bookies and when first noticed
        audited: set[str] = set()  # lost bookies whose ledgers have been marked
        full_check = True  # on election
        next_full = math.inf
        try:
            while True:
                wake.clear()
                registered = await registered_bookies(self.store)
                now = loop.time()
                for bookie in known - registered:
                    log.warning("bookie %s is gone", bookie)
                    if bookie not in missing_since and delay > 0:
                        self.stats.bookie_audits_delayed += 1
                    missing_since.setdefault(bookie, now)
                for bookie in [b for b in missing_since if b in registered]:
                    log.info("bookie %s is back", bookie)
                    if bookie not in audited and delay > 0:
                        self.stats.delayed_bookie_audits_cancelled += 1
                    del missing_since[bookie]
                    audited.discard(bookie)
                known = registered
                if now >= next_full:
                    full_check = True
                enabled = await self.urm.is_enabled()
                due = {b for b, since in missing_since.items() if now - since >= delay}
                if enabled and (full_check or due - audited):
                    await self._check_ledgers(registered, missing_since, now, delay)
                    now = loop.time()
                    due = {b for b, since in missing_since.items() if now - since >= delay}
                    audited = (audited | due) & set(missing_since)
                    full_check = False
                    next_full = now + interval
                    self.audits += 1
                elif not enabled:
                    full_check = True  # catch up once enabled again
                pending = [s + delay for b, s in missing_since.items() if b not in audited]
                wake_at = min([next_full, *pending]) if enabled else math.inf
                timeout = None if wake_at == math.inf else max(0.0, wake_at - loop.time())
                try:
                    await asyncio.wait_for(wake.wait(), timeout)
                except TimeoutError:
                    pass
        finally:
            for handle in watches:
                handle.cancel()

    async def _check_ledgers(
        self,
        registered: set[str],
        missing_since: dict[str, float],
        now: float,
        delay: float,
    ) -> None:
        """Read every ledger; mark those with a fragment on a bookie lost for ``delay``.

        Bookies named by ledgers but not registered start their clock here (if not already
        known missing); bookies no ledger names any more are forgotten. The audit's time and
        findings go to ``stats``.
        """
        started = time.perf_counter()
        try:
            found, size = await self._check_each_ledger(registered, missing_since, now, delay)
        except Exception:
            self.stats.audit_failed(time.perf_counter() - started)
            raise
        self.stats.audited(time.perf_counter() - started, found, size)

    async def _check_each_ledger(
        self,
        registered: set[str],
        missing_since: dict[str, float],
        now: float,
        delay: float,
    ) -> tuple[int, int]:
        """``_check_ledgers``' work; returns how many ledgers have a fragment on a lost
        bookie, and their bytes."""
        named_absent: set[str] = set()
        marked = found = size = 0
        window = asyncio.Semaphore(_SCAN_CONCURRENCY)

        async def check(ledger_id: int) -> None:
            nonlocal marked, found, size
            async with window:
                try:
                    metadata, _ = await self.ledger_manager.read(ledger_id)
                except NoSuchLedgerError:
                    return  # deleted since the listing
                except InvalidEntryError as exc:
                    log.error("ledger %d has unreadable metadata: %s", ledger_id, exc)
                    return
                bookies = metadata.bookies()
                self.stats.ledger_checked(len(metadata.fragments()), len(bookies))
                absent = bookies - registered
                if not absent:
                    return
                named_absent.update(absent)
                for bookie in absent:
                    missing_since.setdefault(bookie, now)
                lost = {b for b in absent if now - missing_since[b] >= delay}
                if not lost:
                    return
                found += 1
                size += metadata.length
                if await self.urm.mark_under_replicated(ledger_id, lost):
                    marked += 1

        tasks: list[asyncio.Task[None]] = []
        try:
            async for ledger_id in self.ledger_manager.ledger_ids():
                tasks.append(asyncio.create_task(check(ledger_id)))
                if len(tasks) >= 4 * _SCAN_CONCURRENCY:
                    await asyncio.gather(*tasks)
                    tasks = []
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        for bookie in [b for b in missing_since if b not in named_absent]:
            if now - missing_since[bookie] >= delay:
                del missing_since[bookie]  # lost, but no ledger needs it any more
        log.info(
            "audit by %s: %d ledgers newly marked under-replicated; absent bookies %s",
            self.participant_id,
            marked,
            sorted(named_absent) or "none",
        )
        return found, size
