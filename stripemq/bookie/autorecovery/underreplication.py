"""The auto-recovery queue in the metadata store: under-replicated ledgers and their locks.

Layout (BookKeeper's, with stripemq's 19-digit hierarchical ids)::

    /ledgers/underreplication/ledgers/000/0000/0000/0000/urL0000000000000000123
        JSON {"lost_bookies": [...], "ctime_ms": ...}: ledger 123 has lost replicas
    /ledgers/underreplication/locks/urL0000000000000000123
        EPHEMERAL: a replication worker is working on ledger 123
    /ledgers/underreplication/disable
        present: auto-recovery is switched off cluster-wide (maintenance)

A lock is ephemeral, so a worker that dies releases it with its session. Marking again merges
the lost bookies and bumps the node's version; a worker deletes the node only at the version
it acquired, so a ledger re-marked while it was being worked on stays queued.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from stripemq.bookie.client.ledger_manager import hierarchical_parts
from stripemq.clock import now_ms
from stripemq.errors import (
    BadVersionError,
    MetadataError,
    NodeExistsError,
    NotEmptyError,
    NotFoundError,
)
from stripemq.metadata import MetadataStore, WatchEvent, WatchHandle

log = logging.getLogger(__name__)

UNDERREPLICATION_ROOT = "/ledgers/underreplication"
UR_LEDGERS = f"{UNDERREPLICATION_ROOT}/ledgers"
UR_LOCKS = f"{UNDERREPLICATION_ROOT}/locks"
DISABLE_PATH = f"{UNDERREPLICATION_ROOT}/disable"

_ID_DIGITS = 19
_SPLITS = (3, 4, 4, 4)  # directory levels; the leaf carries the whole id
_LEAF_PREFIX = "urL"


def _leaf(ledger_id: int) -> str:
    if ledger_id < 0:
        raise ValueError(f"negative ledger id {ledger_id}")
    return f"{_LEAF_PREFIX}{ledger_id:0{_ID_DIGITS}d}"


def ur_ledger_path(ledger_id: int) -> str:
    """``/ledgers/underreplication/ledgers/000/0000/0000/0000/urL0000000000000000123``."""
    directories = hierarchical_parts(ledger_id)[: len(_SPLITS)]
    return f"{UR_LEDGERS}/{'/'.join(directories)}/{_leaf(ledger_id)}"


def lock_path(ledger_id: int) -> str:
    return f"{UR_LOCKS}/{_leaf(ledger_id)}"


def _ledger_id_of(leaf: str) -> int | None:
    digits = leaf[len(_LEAF_PREFIX) :]
    if leaf.startswith(_LEAF_PREFIX) and digits.isdigit() and len(digits) == _ID_DIGITS:
        return int(digits)
    return None


@dataclass(frozen=True)
class UnderReplicatedLedger:
    """One queue entry as read; ``version`` is what ``mark_replicated`` deletes at."""

    ledger_id: int
    lost_bookies: frozenset[str]
    version: int
    ctime_ms: int


def _encode(lost_bookies: Iterable[str], ctime_ms: int) -> bytes:
    doc = {"lost_bookies": sorted(set(lost_bookies)), "ctime_ms": ctime_ms}
    return json.dumps(doc, separators=(",", ":")).encode()


def _decode(ledger_id: int, raw: bytes, version: int) -> UnderReplicatedLedger:
    try:
        doc = json.loads(raw or b"{}")
        lost = frozenset(str(b) for b in doc.get("lost_bookies", []))
        ctime_ms = int(doc.get("ctime_ms", 0))
    except (ValueError, TypeError, AttributeError):
        log.warning("under-replication record of ledger %d is unreadable", ledger_id)
        lost, ctime_ms = frozenset(), 0
    return UnderReplicatedLedger(ledger_id, lost, version, ctime_ms)


class UnderReplicationManager:
    """Mark, list, lock and unmark under-replicated ledgers; the cluster-wide on/off flag.

    ``owner`` names this process in the lock nodes it creates (for operators and tests).
    """

    def __init__(self, store: MetadataStore, owner: str = "") -> None:
        self.store = store
        self.owner = owner
        self._token = uuid.uuid4().hex  # tells our locks from another session's
        self._held: set[int] = set()
        self._waiters: set[asyncio.Event] = set()
        self._watches: dict[tuple[bool, str], WatchHandle] = {}

    def close(self) -> None:
        """Stop watching; locks still held go with the session (or ``release`` them first)."""
        watches, self._watches = self._watches, {}
        for handle in watches.values():
            handle.cancel()
        for waiter in self._waiters:
            waiter.set()

    @property
    def held(self) -> frozenset[int]:
        """Ledgers this manager holds the lock of."""
        return frozenset(self._held)

    # ----------------------------------------------------------------- marking

    async def mark_under_replicated(self, ledger_id: int, lost_bookies: Iterable[str]) -> bool:
        """Queue ``ledger_id`` (or merge ``lost_bookies`` into its record).

        Returns whether the record was created or changed; marking with bookies already
        recorded writes nothing, so a worker's ``mark_replicated`` is not undone needlessly.
        """
        lost = frozenset(lost_bookies)
        path = ur_ledger_path(ledger_id)
        while True:
            found = await self.store.get(path)
            if found is None:
                try:
                    await self.store.create(path, _encode(lost, now_ms()))
                except (NodeExistsError, NotFoundError):
                    continue  # marked concurrently, or a parent pruned under us: look again
                log.info("ledger %d marked under-replicated (lost %s)", ledger_id, sorted(lost))
                return True
            record = _decode(ledger_id, found[0], found[1].version)
            if lost <= record.lost_bookies:
                return False
            try:
                await self.store.put(
                    path, _encode(record.lost_bookies | lost, record.ctime_ms), record.version
                )
            except (BadVersionError, NotFoundError):
                continue
            log.info("ledger %d marked under-replicated again (lost %s)", ledger_id, sorted(lost))
            return True

    async def get(self, ledger_id: int) -> UnderReplicatedLedger | None:
        found = await self.store.get(ur_ledger_path(ledger_id))
        if found is None:
            return None
        return _decode(ledger_id, found[0], found[1].version)

    async def is_under_replicated(self, ledger_id: int) -> bool:
        return await self.store.exists(ur_ledger_path(ledger_id)) is not None

    async def ledger_ids(self) -> list[int]:
        """Every queued ledger id, ascending."""
        return sorted(await self._scan(watch=False))

    async def list(self) -> list[UnderReplicatedLedger]:
        """Every queued ledger with its record (ones unmarked meanwhile are left out)."""
        records = []
        for ledger_id in await self.ledger_ids():
            record = await self.get(ledger_id)
            if record is not None:
                records.append(record)
        return records

    async def locked(self) -> set[int]:
        """Ledgers some worker holds the lock of."""
        ids = (_ledger_id_of(name) for name in await self.store.children(UR_LOCKS))
        return {i for i in ids if i is not None}

    async def lock_owner(self, ledger_id: int) -> str | None:
        """The ``owner`` named in the ledger's lock, None when unlocked."""
        found = await self.store.get(lock_path(ledger_id))
        if found is None:
            return None
        try:
            return str(json.loads(found[0])["owner"])
        except (ValueError, KeyError, TypeError):
            return ""

    # ----------------------------------------------------------------- workers

    async def acquire(self, poll_interval: float = 60.0) -> UnderReplicatedLedger:
        """Lock one queued ledger nobody else holds, waiting (on watches) until there is one.

        Returns the record as read under the lock. Blocks while auto-recovery is disabled.
        """
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        try:
            while True:
                waiter.clear()
                # Watches first, then reads: any change after the reads wakes us.
                self._ensure_watch(False, DISABLE_PATH)
                self._ensure_watch(True, UR_LOCKS)
                if await self.is_enabled():
                    found = await self._try_acquire(watch=True)
                    if found is not None:
                        return found
                try:
                    await asyncio.wait_for(waiter.wait(), poll_interval)
                except TimeoutError:
                    pass
        finally:
            self._waiters.discard(waiter)

    async def try_acquire(self) -> UnderReplicatedLedger | None:
        """One attempt of ``acquire``: a locked ledger, or None when none is free now."""
        if not await self.is_enabled():
            return None
        return await self._try_acquire(watch=False)

    async def _try_acquire(self, watch: bool) -> UnderReplicatedLedger | None:
        queued = await self._scan(watch)
        if not queued:
            return None
        locked = await self.locked()
        candidates = [i for i in queued if i not in locked and i not in self._held]
        random.shuffle(candidates)  # spread the workers over the queue
        data = json.dumps({"owner": self.owner, "token": self._token}).encode()
        for ledger_id in candidates:
            try:
                await self.store.create(lock_path(ledger_id), data, ephemeral=True)
            except NodeExistsError:
                continue
            self._held.add(ledger_id)
            record = await self.get(ledger_id)
            if record is None:  # replicated and unmarked since the scan
                await self.release(ledger_id)
                continue
            log.debug("%s locked under-replicated ledger %d", self.owner, ledger_id)
            return record
        return None

    async def mark_replicated(self, record: UnderReplicatedLedger) -> bool:
        """Unqueue the ledger unless it was marked again since ``record`` was read, and
        release its lock. Returns whether it left the queue."""
        path = ur_ledger_path(record.ledger_id)
        removed = True
        try:
            await self.store.delete(path, record.version)
        except BadVersionError:
            removed = False
            log.info("ledger %d was marked again while being replicated", record.ledger_id)
        except NotFoundError:
            pass
        else:
            await self._prune(path)
            log.info("ledger %d is fully replicated again", record.ledger_id)
        await self.release(record.ledger_id)
        return removed

    async def release(self, ledger_id: int) -> None:
        """Give up the ledger's lock if this manager holds it (idempotent)."""
        self._held.discard(ledger_id)
        path = lock_path(ledger_id)
        found = await self.store.get(path)
        if found is None:
            return
        try:
            if json.loads(found[0]).get("token") != self._token:
                return  # another session's lock (ours expired): not ours to delete
        except (ValueError, AttributeError):
            return
        try:
            await self.store.delete(path, found[1].version)
        except (NotFoundError, BadVersionError):
            pass

    # ----------------------------------------------------------------- on/off

    async def is_enabled(self) -> bool:
        return await self.store.exists(DISABLE_PATH) is None

    async def disable(self) -> None:
        """Stop every replication worker from taking ledgers (and the auditor from marking)."""
        try:
            await self.store.create(DISABLE_PATH, b"")
            log.warning("auto-recovery disabled cluster-wide")
        except NodeExistsError:
            pass

    async def enable(self) -> None:
        try:
            await self.store.delete(DISABLE_PATH)
            log.warning("auto-recovery enabled cluster-wide")
        except NotFoundError:
            pass

    async def wait_enabled(self) -> None:
        """Return once auto-recovery is (or becomes) enabled."""
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        try:
            while True:
                waiter.clear()
                self._ensure_watch(False, DISABLE_PATH)
                if await self.is_enabled():
                    return
                await waiter.wait()
        finally:
            self._waiters.discard(waiter)

    # ----------------------------------------------------------------- internals

    async def _scan(self, watch: bool) -> builtins.list[int]:  # list: a method here
        """Walk the hierarchy; with ``watch``, watch each directory before listing it."""
        found: builtins.list[int] = []

        async def walk(path: str, depth: int) -> None:
            if watch:
                self._ensure_watch(True, path)
            for child in await self.store.children(path):
                child_path = f"{path}/{child}"
                if depth == len(_SPLITS):
                    ledger_id = _ledger_id_of(child)
                    if ledger_id is not None:
                        found.append(ledger_id)
                elif child.isdigit() and len(child) == _SPLITS[depth]:
                    await walk(child_path, depth + 1)

        await walk(UR_LEDGERS, 0)
        return found

    def _ensure_watch(self, children: bool, path: str) -> None:
        key = (children, path)
        if key in self._watches:
            return
        if children:
            self._watches[key] = self.store.watch_children(path, self._wake)
        else:
            self._watches[key] = self.store.watch(path, self._wake)

    def _wake(self, _event: WatchEvent) -> None:
        for waiter in self._waiters:
            waiter.set()

    async def _prune(self, path: str) -> None:
        """Remove the now-empty directory levels above ``path``, best effort."""
        parent = path.rsplit("/", 1)[0]
        while parent != UR_LEDGERS:
            try:
                await self.store.delete(parent)
            except (NotEmptyError, NotFoundError):
                return
            except MetadataError as exc:
                log.debug("pruning %s failed: %s", parent, exc)
                return
            parent = parent.rsplit("/", 1)[0]
