"""Seeded, randomized chaos against the ledger client: real ZooKeeper, five real bookies.

Several writers (each a ``BookKeeper`` on its own metadata session) write ledgers with random
E/Qw/Qa, pipelining adds of random sizes whose payloads name their writer, ledger and entry
and carry a checksum. Meanwhile a chaos task SIGKILLs bookies (restarting them on the same
port and data directory after a random delay), SIGSTOPs them briefly, and takes ledgers over
from their writers (``open_ledger(recovery=True)`` from another client, which fences the
writer). Writers roll to a new ledger when they are fenced or fail; failed adds are fine,
every acknowledged one is recorded.

At the end, with every bookie back, two fresh clients recover every ledger concurrently and
read it whole. Invariants:

1. every acknowledged entry is in the ledger, byte for byte;
2. the closed ledger's last entry is >= the highest acknowledged entry;
3. entries 0..last are exactly what the ledger's writer sent, in order (no gap, nothing
   foreign, no duplicate), each payload intact;
4. the two readers agree on the last entry, the length and every entry;
5. the length in the metadata is the sum of the entries' data lengths (and each entry's
   header records the running length).

Also checked: acknowledgements arrive in entry order and form a prefix; a ledger closed by
its writer or by a takeover keeps the last entry that close decided; no add is left hanging;
no bookie dies on its own or fails to restart.

The seed is printed; ``STRIPEMQ_CHAOS_SEED=<n>`` replays the same decisions (timing still
varies), ``STRIPEMQ_CHAOS_SECONDS`` changes the length of the chaos phase.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import logging
import os
import random
import signal
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.client import BookKeeper, ClientConfig, EnsemblePlacementPolicy
from stripemq.bookie.client.ledger_handle import LedgerHandle
from stripemq.bookie.client.reader import LedgerEntry, ReadOnlyLedgerHandle
from stripemq.errors import (
    ClientClosedError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    StripeMQError,
)
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.proto.entry import HEADER_SIZE
from stripemq.testing.cluster import BookieCluster

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

SEED_ENV = "STRIPEMQ_CHAOS_SEED"
SECONDS_ENV = "STRIPEMQ_CHAOS_SECONDS"

BOOKIES = 5
MAX_ENSEMBLE = 4  # E <= 4: with one bookie down there are still E_max writable
WRITERS = 3
TAKEOVER_CLIENTS = 2
MAX_DOWN = 2  # a kill plus a brief stop at most; kills one at a time
# A run in which nearly every add fails proves nothing. Healthy runs acknowledge some 280
# adds per second of chaos, and 85-98% of those sent.
MIN_ACKS_PER_SECOND = 50
MIN_ACKED_SHARE = 0.5

CLIENT_CONFIG = dict(
    add_entry_timeout_s=2.0,
    read_entry_timeout_s=2.0,
    speculative_read_timeout_ms=200,
    explicit_lac_interval_ms=100,
)
BOOKIE_SETTINGS = {"zk_timeout_ms": 3000}

# Failures an add may end with when bookies die or the ledger is taken over.
EXPECTED_ADD_FAILURES = (
    LedgerFencedError,
    LedgerClosedError,
    NotEnoughBookiesError,
    MetadataVersionError,
)

log = logging.getLogger(__name__)


@pytest.fixture
def metadata_url(zookeeper_server) -> str:  # type: ignore[no-untyped-def]
    """A ZooKeeper URL with a chroot of its own."""
    return zookeeper_server.url(f"/ledger-chaos-{uuid.uuid4().hex[:8]}")


# --------------------------------------------------------------------------- payloads

_MAGIC = b"CHAOS1"
_HEAD = struct.Struct(">6sHQQI")  # magic, writer, ledger id, entry id, body length
_DIGEST = 8


def encode_payload(writer: int, ledger_id: int, entry_id: int, body: bytes) -> bytes:
    head = _HEAD.pack(_MAGIC, writer, ledger_id, entry_id, len(body))
    return head + body + hashlib.blake2b(head + body, digest_size=_DIGEST).digest()


def decode_payload(data: bytes) -> tuple[int, int, int] | None:
    """``(writer, ledger, entry)`` of an intact payload, ``None`` if it is not one."""
    if len(data) < _HEAD.size + _DIGEST:
        return None
    magic, writer, ledger_id, entry_id, size = _HEAD.unpack_from(data)
    if magic != _MAGIC or len(data) != _HEAD.size + size + _DIGEST:
        return None
    if hashlib.blake2b(data[:-_DIGEST], digest_size=_DIGEST).digest() != data[-_DIGEST:]:
        return None
    return writer, ledger_id, entry_id


def payload_size(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.70:
        return rng.randint(0, 256)
    if roll < 0.95:
        return rng.randint(257, 4096)
    return rng.randint(4097, 64 * 1024)


# --------------------------------------------------------------------------- records


@dataclass
class LedgerRecord:
    """What the test knows about one ledger: everything sent, acknowledged, decided."""

    ledger_id: int
    writer: int
    quorums: tuple[int, int, int]  # E, Qw, Qa
    sent: dict[int, bytes] = field(default_factory=dict)
    acked: dict[int, bytes] = field(default_factory=dict)
    ack_order: list[int] = field(default_factory=list)
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    unexpected_failures: list[str] = field(default_factory=list)
    writer_closed: tuple[int, int] | None = None  # (last entry, length) of the writer's close
    close_error: str | None = None
    # (client, last entry it closed at or None, highest ack when it began, error)
    takeovers: list[tuple[str, int | None, int, str | None]] = field(default_factory=list)
    futures: list[asyncio.Future[int]] = field(default_factory=list, repr=False)
    abandoned: bool = False  # the writer walked away without closing (a crashed writer)
    done: bool = False

    def describe(self) -> str:
        e, qw, qa = self.quorums
        takeovers = "; ".join(
            f"{c}: {'closed at ' + str(last) if err is None else 'failed ' + err}"
            f" (acked {hi} when it began)"
            for c, last, hi, err in self.takeovers
        )
        return (
            f"ledger {self.ledger_id} writer {self.writer} E/Qw/Qa={e}/{qw}/{qa} "
            f"sent {len(self.sent)} acked {len(self.acked)} "
            f"(max {max(self.acked, default=-1)}) failures {dict(self.failures)} "
            f"writer_closed {self.writer_closed} close_error {self.close_error} "
            f"abandoned {self.abandoned} "
            f"takeovers [{takeovers}]"
        )


def on_add_done(rec: LedgerRecord, entry_id: int, data: bytes, fut: asyncio.Future[int]) -> None:
    if fut.cancelled():
        rec.failures["cancelled"] += 1
        return
    exc = fut.exception()
    if exc is None:
        got = fut.result()
        rec.ack_order.append(got)
        rec.acked[entry_id] = data
        if got != entry_id:
            rec.unexpected_failures.append(f"add of entry {entry_id} acknowledged as {got}")
        return
    rec.failures[type(exc).__name__] += 1
    if not isinstance(exc, EXPECTED_ADD_FAILURES):
        rec.unexpected_failures.append(f"entry {entry_id}: {type(exc).__name__}: {exc}")


class Timeline:
    """Timestamped chaos and writer events, printed with the result."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.lines: list[str] = []

    def note(self, what: str) -> None:
        line = f"{time.monotonic() - self.t0:7.2f}s {what}"
        self.lines.append(line)
        log.info("chaos: %s", what)


# --------------------------------------------------------------------------- writers


class Writer:
    def __init__(
        self,
        index: int,
        bk: BookKeeper,
        rng: random.Random,
        stop: asyncio.Event,
        ledgers: dict[int, LedgerRecord],
        current: dict[int, tuple[LedgerHandle, LedgerRecord]],
        timeline: Timeline,
    ) -> None:
        self.index = index
        self.bk = bk
        self.rng = rng
        self.stop = stop
        self.ledgers = ledgers
        self.current = current
        self.timeline = timeline
        self.create_failures: collections.Counter[str] = collections.Counter()
        self.abandoned: list[LedgerHandle] = []

    async def run(self) -> None:
        while not self.stop.is_set():
            rng = self.rng
            e = rng.choice([1, 2, 3, 3, 4, 4, 4])
            qw = rng.randint(min(2, e), e)
            qa = rng.randint(1, qw)
            try:
                handle = await asyncio.wait_for(
                    self.bk.create_ledger(e, qw, qa, custom_metadata={"writer": str(self.index)}),
                    15,
                )
            except (StripeMQError, TimeoutError) as exc:
                self.create_failures[type(exc).__name__] += 1
                await asyncio.sleep(0.2)
                continue
            rec = LedgerRecord(handle.ledger_id, self.index, (e, qw, qa))
            self.ledgers[rec.ledger_id] = rec
            self.current[self.index] = (handle, rec)
            self.timeline.note(
                f"writer {self.index} opens ledger {rec.ledger_id} E/Qw/Qa={e}/{qw}/{qa} "
                f"on {list(handle.ensemble)}"
            )
            try:
                await self.write(handle, rec)
                if rec.abandoned:
                    self.abandoned.append(handle)  # kept alive, never closed
                else:
                    await self.close(handle, rec)
            finally:
                rec.done = True
                self.current.pop(self.index, None)

    async def write(self, handle: LedgerHandle, rec: LedgerRecord) -> None:
        rng = self.rng
        target = rng.randint(10, 500)
        window = rng.choice([1, 4, 16, 64, 256])
        idle_chance = rng.choice([0.0, 0.01, 0.05])
        abandon_at = rng.randint(1, target) if rng.random() < 0.15 else None
        inflight: set[asyncio.Future[int]] = set()
        reason = "target reached"
        for n in range(target):
            if self.stop.is_set():
                reason = "stop"
                break
            if n == abandon_at:
                rec.abandoned = True
                reason = "abandoned with adds in flight, never closed"
                inflight = set()  # they complete (or not) behind the writer's back
                break
            entry_id = handle.last_add_pushed + 1
            data = encode_payload(
                self.index, rec.ledger_id, entry_id, rng.randbytes(payload_size(rng))
            )
            try:
                fut = handle.add_entry_async(data)
            except StripeMQError as exc:
                reason = f"add refused: {type(exc).__name__}"
                break
            rec.sent[entry_id] = data
            rec.futures.append(fut)
            fut.add_done_callback(functools.partial(on_add_done, rec, entry_id, data))
            inflight.add(fut)
            if len(inflight) >= window:
                done, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                failed = [f for f in done if f.cancelled() or f.exception() is not None]
                if failed:
                    exc = failed[0].exception() if not failed[0].cancelled() else None
                    reason = f"add failed: {type(exc).__name__}"
                    break
            if rng.random() < idle_chance:
                await asyncio.sleep(rng.uniform(0.05, 0.5))  # idle: explicit LAC goes out
        if inflight:
            await asyncio.wait(inflight, timeout=60)
        self.timeline.note(
            f"writer {self.index} leaves ledger {rec.ledger_id} ({reason}): sent {len(rec.sent)}"
            f" acked {len(rec.acked)} failures {dict(rec.failures)}"
        )

    async def close(self, handle: LedgerHandle, rec: LedgerRecord) -> None:
        try:
            await asyncio.wait_for(handle.close(), 20)
        except (StripeMQError, TimeoutError) as exc:
            rec.close_error = f"{type(exc).__name__}: {exc}"
            return
        if handle.metadata.is_closed:
            rec.writer_closed = (handle.metadata.last_entry_id, handle.metadata.length)


# --------------------------------------------------------------------------- chaos


class Chaos:
    def __init__(
        self,
        cluster: BookieCluster,
        rng: random.Random,
        takeover_clients: list[BookKeeper],
        current: dict[int, tuple[LedgerHandle, LedgerRecord]],
        timeline: Timeline,
    ) -> None:
        self.cluster = cluster
        self.rng = rng
        self.takeover_clients = takeover_clients
        self.current = current
        self.timeline = timeline
        self.dead: set[int] = set()
        self.stopped: set[int] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.restart_errors: list[str] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self.takeovers_running = 0

    def _spawn(self, coro, name: str) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _up(self) -> list[int]:
        return [
            i
            for i, b in enumerate(self.cluster.bookies)
            if i not in self.dead and i not in self.stopped and b.running
        ]

    async def run(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            await asyncio.sleep(self.rng.uniform(0.2, 1.2))
            action = self.rng.choices(["kill", "stop", "takeover"], weights=[3, 3, 3])[0]
            if action == "kill":
                self.maybe_kill()
            elif action == "stop":
                self.maybe_stop()
            else:
                self.maybe_takeover()

    def _victim(self, up: list[int]) -> int:
        """Mostly a bookie some writer is writing to right now, else any live one."""
        roll, pick = self.rng.random(), self.rng.random()
        busy = sorted(
            {
                i
                for handle, rec in self.current.values()
                if not rec.done
                for i, b in enumerate(self.cluster.bookies)
                if b.address in handle.ensemble and i in up
            }
        )
        pool = busy if busy and roll < 0.7 else up
        return pool[int(pick * len(pool))]

    def maybe_kill(self) -> None:
        # Usually one dead bookie at a time; now and then a second one, back quickly.
        delay = self.rng.uniform(0.3, 4.0)
        second = self.rng.random() < 0.25
        up = self._up()
        if self.dead and not second:
            return
        if second:
            delay = min(delay, 1.5)
        if len(self.dead | self.stopped) >= MAX_DOWN or not up:
            return
        index = self._victim(up)
        bookie = self.cluster.bookies[index]
        bookie.kill()
        self.dead.add(index)
        self.counts["kill"] += 1
        self.timeline.note(f"SIGKILL bookie {index} ({bookie.address}); restart in {delay:.2f}s")
        self._spawn(self._restart(index, delay), f"restart-{index}")

    async def _restart(self, index: int, delay: float) -> None:
        bookie = self.cluster.bookies[index]
        try:
            await asyncio.sleep(delay)
            await bookie.start()
            self.timeline.note(f"bookie {index} restarted")
        except Exception as exc:
            self.restart_errors.append(f"bookie {index} failed to restart: {exc}")
            self.timeline.note(f"bookie {index} failed to restart: {exc}")
        finally:
            self.dead.discard(index)

    def maybe_stop(self) -> None:
        # Mostly brief; sometimes past the bookie's 3 s ZooKeeper session, so it expires.
        long = self.rng.random() < 0.2
        duration = self.rng.uniform(3.2, 4.5) if long else self.rng.uniform(0.2, 2.5)
        up = self._up()
        if len(self.dead | self.stopped) >= MAX_DOWN or not up:
            return
        index = self._victim(up)
        bookie = self.cluster.bookies[index]
        assert bookie.proc is not None
        pid = bookie.proc.pid
        os.kill(pid, signal.SIGSTOP)
        self.stopped.add(index)
        self.counts["stop"] += 1
        self.timeline.note(f"SIGSTOP bookie {index} ({bookie.address}) for {duration:.2f}s")
        self._spawn(self._resume(index, pid, duration), f"resume-{index}")

    async def _resume(self, index: int, pid: int, duration: float) -> None:
        try:
            await asyncio.sleep(duration)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            self.stopped.discard(index)
            self.timeline.note(f"SIGCONT bookie {index}")

    def maybe_takeover(self) -> None:
        racing = self.rng.random() < 0.3
        pick = self.rng.random()
        client_index = self.rng.randrange(len(self.takeover_clients))
        candidates = sorted(
            (rec.ledger_id, rec) for _, rec in self.current.values() if not rec.done
        )
        if not candidates or self.takeovers_running >= 2:
            return
        _, rec = candidates[int(pick * len(candidates))]
        clients = list(range(len(self.takeover_clients))) if racing else [client_index]
        self.counts["takeover"] += 1
        self.timeline.note(
            f"takeover of ledger {rec.ledger_id} by client(s) {clients}"
            f" (writer acked up to {max(rec.acked, default=-1)})"
        )
        self._spawn(self._takeovers(rec, clients), f"takeover-{rec.ledger_id}")

    async def _takeovers(self, rec: LedgerRecord, clients: list[int]) -> None:
        self.takeovers_running += 1
        try:
            await asyncio.gather(*(self._takeover(rec, c) for c in clients))
        finally:
            self.takeovers_running -= 1

    async def _takeover(self, rec: LedgerRecord, client: int) -> None:
        acked_before = max(rec.acked, default=-1)
        name = f"takeover-{client}"
        try:
            handle = await asyncio.wait_for(
                self.takeover_clients[client].open_ledger(rec.ledger_id, recovery=True), 30
            )
        except (StripeMQError, TimeoutError) as exc:
            rec.takeovers.append((name, None, acked_before, f"{type(exc).__name__}: {exc}"))
            self.timeline.note(f"{name} of ledger {rec.ledger_id} failed: {type(exc).__name__}")
            return
        last = handle.metadata.last_entry_id
        rec.takeovers.append((name, last, acked_before, None))
        self.timeline.note(f"{name} closed ledger {rec.ledger_id} at {last}")

    async def heal(self) -> None:
        """Let pending restarts and resumes finish, then make sure every bookie serves."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
        for index, bookie in enumerate(self.cluster.bookies):
            if not bookie.running:
                self.restart_errors.append(
                    f"bookie {index} was not running at the end (exit {bookie.exited_with()})"
                )
                await bookie.start()
        await self.cluster.wait_registered([b.address for b in self.cluster.bookies])
        self.timeline.note("all bookies serving and registered")


# --------------------------------------------------------------------------- verification


async def open_recovered(
    bk: BookKeeper, ledger_id: int, notes: list[str], who: str
) -> ReadOnlyLedgerHandle:
    """Open with recovery; with every bookie up it must succeed (retries noted)."""
    for attempt in range(4):
        try:
            return await asyncio.wait_for(bk.open_ledger(ledger_id, recovery=True), 30)
        except (StripeMQError, TimeoutError) as exc:
            notes.append(
                f"{who}: recovery of ledger {ledger_id} attempt {attempt} failed "
                f"with all bookies up: {type(exc).__name__}: {exc}"
            )
            if attempt == 3:
                raise
            await asyncio.sleep(0.5)
    raise AssertionError("unreachable")


async def read_all(handle: ReadOnlyLedgerHandle) -> list[LedgerEntry]:
    last = handle.metadata.last_entry_id
    return await handle.read_entries(0, last) if last >= 0 else []


def replica_sample(metadata, last: int) -> list[int]:  # type: ignore[no-untyped-def]
    """Entries whose replicas are counted: the tail, and around every fragment boundary."""
    picked = set(range(max(0, last - 31), last + 1))
    for start in metadata.ensembles:
        picked |= set(range(max(0, start - 8), min(last, start + 8) + 1))
    return sorted(picked)


async def count_replicas(
    bookie_clients: dict[str, BookieClient],
    ledger_id: int,
    entry_id: int,
    data: bytes,
    bookies: list[str],
) -> tuple[int, list[str]]:
    """How many of ``bookies`` hold the entry with these bytes; and odd answers."""
    held, odd = 0, []
    for address in bookies:
        try:
            result = await bookie_clients[address].read_entry(ledger_id, entry_id)
        except (NoSuchEntryError, NoSuchLedgerError):
            continue
        except StripeMQError as exc:
            odd.append(f"{address}: {type(exc).__name__}: {exc}")
            continue
        if result.entry[HEADER_SIZE:] == data:
            held += 1
        else:
            odd.append(f"{address} holds other bytes")
    return held, odd


async def verify_ledger(
    ledger_id: int,
    rec: LedgerRecord | None,
    readers: list[BookKeeper],
    bookie_clients: dict[str, BookieClient],
    violations: list[str],
    notes: list[str],
) -> None:
    def bad(inv: str, what: str) -> None:
        desc = rec.describe() if rec is not None else f"ledger {ledger_id} (unknown to writers)"
        violations.append(f"[{inv}] ledger {ledger_id}: {what}\n      {desc}")

    # Two independent clients recover it at the same time (a takeover race, all bookies up).
    try:
        h1, h2 = await asyncio.gather(
            *(open_recovered(bk, ledger_id, notes, f"reader-{i}") for i, bk in enumerate(readers))
        )
    except (StripeMQError, TimeoutError) as exc:
        bad("recover", f"cannot be recovered with every bookie up: {type(exc).__name__}: {exc}")
        return
    m1, m2 = h1.metadata, h2.metadata
    if not (m1.is_closed and m2.is_closed):
        bad("recover", f"not closed after recovery: {m1.state} / {m2.state}")
        return
    if (m1.last_entry_id, m1.length) != (m2.last_entry_id, m2.length):
        bad(
            "4",
            f"readers disagree: last {m1.last_entry_id} length {m1.length} vs "
            f"last {m2.last_entry_id} length {m2.length}",
        )
    try:
        e1, e2 = await asyncio.gather(read_all(h1), read_all(h2))
    except StripeMQError as exc:
        bad("1", f"entries 0..{m1.last_entry_id} unreadable: {type(exc).__name__}: {exc}")
        return
    last = m1.last_entry_id
    if [(e.entry_id, e.data) for e in e1] != [(e.entry_id, e.data) for e in e2]:
        differ = [a.entry_id for a, b in zip(e1, e2, strict=False) if a.data != b.data]
        bad("4", f"readers read different entries (first differing: {differ[:5]})")

    # 5: length.
    running = 0
    for entry in e1:
        running += len(entry.data)
        if entry.ledger_length != running:
            bad("5", f"entry {entry.entry_id} records length {entry.ledger_length}, sum {running}")
            break
    if m1.length != running:
        bad("5", f"metadata length {m1.length} != sum of data lengths {running}")

    # Durability: an entry of the closed ledger sits on at least Qa bookies of its write set.
    qa = m1.ack_quorum_size
    for entry_id in replica_sample(m1, last):
        bookies = m1.write_set_bookies(entry_id)
        held, odd = await count_replicas(
            bookie_clients, ledger_id, entry_id, e1[entry_id].data, bookies
        )
        if odd:
            notes.append(f"ledger {ledger_id} entry {entry_id}: {odd}")
        if held < qa and not odd:
            bad(
                "durability",
                f"entry {entry_id} is on {held} of its write set {bookies}, Qa {qa}"
                f" (fragments {sorted(m1.ensembles)})",
            )
            break

    if rec is None:
        if last != -1:
            bad("3", f"a ledger no writer knows holds entries 0..{last}")
        return

    # Acks: in entry order, a prefix of the ledger.
    if rec.ack_order != sorted(rec.ack_order) or sorted(rec.acked) != list(range(len(rec.acked))):
        bad("acks", f"acknowledgements out of order or not a prefix: {rec.ack_order[:20]}...")
    if rec.unexpected_failures:
        notes.append(f"ledger {ledger_id}: unexpected add outcomes {rec.unexpected_failures[:3]}")
    hung = sum(1 for f in rec.futures if not f.done())
    if hung:
        bad("liveness", f"{hung} adds never resolved (pending when the test verified)")

    # 2: nothing acknowledged lies past the end.
    highest = max(rec.acked, default=-1)
    if last < highest:
        bad("2", f"closed at {last} but entry {highest} was acknowledged")
    # 1: every acknowledged entry, byte for byte.
    for entry_id, data in sorted(rec.acked.items()):
        if entry_id > last:
            bad("1", f"acknowledged entry {entry_id} is past the end {last}")
            break
        if e1[entry_id].data != data:
            bad("1", f"acknowledged entry {entry_id} reads back different bytes")
            break
    # 3: exactly the writer's entries, in order.
    for entry in e1:
        sent = rec.sent.get(entry.entry_id)
        if entry.data == sent:
            continue
        decoded = decode_payload(entry.data)
        if decoded is None:
            what = "a corrupt payload"
        elif decoded != (rec.writer, ledger_id, entry.entry_id):
            what = f"foreign data (writer, ledger, entry) = {decoded}"
        elif sent is None:
            what = "an entry the writer never sent"
        else:
            what = "different bytes than the writer sent"
        bad("3", f"entry {entry.entry_id} holds {what}")
        break

    # Closes are final.
    if rec.writer_closed is not None and rec.writer_closed != (last, m1.length):
        bad(
            "close",
            f"writer closed it at {rec.writer_closed}, now (last, length) = {(last, m1.length)}",
        )
    for client, t_last, acked_before, error in rec.takeovers:
        if error is None and t_last != last:
            bad("close", f"{client} closed it at {t_last}, now last is {last}")
        if error is None and t_last is not None and t_last < acked_before:
            bad("2", f"{client} closed it at {t_last} below the ack {acked_before} it saw")


async def verify_everything(
    url: str,
    addresses: list[str],
    ledgers: dict[int, LedgerRecord],
    violations: list[str],
    notes: list[str],
    config: ClientConfig,
) -> int:
    stores: list[MetadataStore] = []
    readers: list[BookKeeper] = []
    bookie_clients = {a: BookieClient(a, timeout=5.0) for a in addresses}
    try:
        for client in bookie_clients.values():
            await client.connect()
        for _ in range(2):
            store = create_metadata_store(url)
            await store.start()
            stores.append(store)
            bk = BookKeeper(store, config)
            await bk.start()
            readers.append(bk)
        listed = {lid async for lid in readers[0].ledger_manager.ledger_ids()}
        missing = set(ledgers) - listed
        for ledger_id in sorted(missing):
            violations.append(f"[meta] ledger {ledger_id} has no metadata any more")
        window = asyncio.Semaphore(4)

        async def one(ledger_id: int) -> None:
            async with window:
                await verify_ledger(
                    ledger_id, ledgers.get(ledger_id), readers, bookie_clients, violations, notes
                )

        await asyncio.gather(*(one(lid) for lid in sorted(listed)))
        return len(listed)
    finally:
        for bk in readers:
            await bk.close()
        for store in stores:
            await store.close()
        for client in bookie_clients.values():
            await client.close()


# --------------------------------------------------------------------------- the test


async def test_ledgers_survive_kills_stops_and_takeovers(
    metadata_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seed_text = os.environ.get(SEED_ENV)
    seed = int(seed_text) if seed_text else random.SystemRandom().randrange(2**32)
    seconds = float(os.environ.get(SECONDS_ENV, "30"))
    print(f"\nchaos seed: {SEED_ENV}={seed} ({SECONDS_ENV}={seconds})")
    caplog.set_level(logging.INFO, logger="stripemq")
    caplog.set_level(logging.INFO, logger=__name__)
    started = time.monotonic()

    config = ClientConfig(**CLIENT_CONFIG)  # type: ignore[arg-type]
    timeline = Timeline()
    ledgers: dict[int, LedgerRecord] = {}
    current: dict[int, tuple[LedgerHandle, LedgerRecord]] = {}
    stop = asyncio.Event()
    stores: list[MetadataStore] = []
    clients: list[BookKeeper] = []
    cluster = BookieCluster(metadata_url, tmp_path / "bookies", BOOKIES, settings=BOOKIE_SETTINGS)
    chaos: Chaos | None = None
    writer_tasks: list[asyncio.Task[None]] = []

    async def new_client(name: str) -> BookKeeper:
        store = create_metadata_store(metadata_url)
        await store.start()
        stores.append(store)
        placement = EnsemblePlacementPolicy(random.Random(f"{seed}:placement:{name}"))
        bk = BookKeeper(store, ClientConfig(**CLIENT_CONFIG), placement=placement)  # type: ignore[arg-type]
        await bk.start()
        clients.append(bk)
        return bk

    try:
        await cluster.__aenter__()
        timeline.note(f"{BOOKIES} bookies up: {[b.address for b in cluster.bookies]}")
        writers = [
            Writer(
                i,
                await new_client(f"writer-{i}"),
                random.Random(f"{seed}:writer:{i}"),
                stop,
                ledgers,
                current,
                timeline,
            )
            for i in range(WRITERS)
        ]
        takeover_clients = [await new_client(f"takeover-{i}") for i in range(TAKEOVER_CLIENTS)]
        chaos = Chaos(cluster, random.Random(f"{seed}:chaos"), takeover_clients, current, timeline)
        writer_tasks = [asyncio.create_task(w.run(), name=f"writer-{w.index}") for w in writers]

        await chaos.run(seconds)
        stop.set()
        timeline.note("chaos over: writers stop, bookies heal")
        await chaos.heal()
        _, still_running = await asyncio.wait(writer_tasks, timeout=90)
        violations: list[str] = []
        notes: list[str] = []
        if still_running:
            violations.append(f"[liveness] {len(still_running)} writers did not stop in 90 s")
        for task in writer_tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                violations.append(f"[writer] crashed: {task.exception()!r}")
        violations += [f"[bookie] {e}" for e in chaos.restart_errors]
        for index, bookie in enumerate(cluster.bookies):
            if not bookie.running:
                violations.append(f"[bookie] bookie {index} exited: {bookie.exited_with()}")
        chaos_done = time.monotonic()

        addresses = [b.address for b in cluster.bookies]
        checked = await verify_everything(
            metadata_url, addresses, ledgers, violations, notes, config
        )
        verified = time.monotonic()

        acked = sum(len(r.acked) for r in ledgers.values())
        sent = sum(len(r.sent) for r in ledgers.values())
        failures: collections.Counter[str] = collections.Counter()
        for rec in ledgers.values():
            failures.update(rec.failures)
        summary = (
            f"seed {seed}: {checked} ledgers checked, {sent} adds sent, {acked} acknowledged, "
            f"add failures {dict(failures)}, chaos {dict(chaos.counts)}, "
            f"takeovers ok {sum(1 for r in ledgers.values() for t in r.takeovers if t[3] is None)}"
            f" failed {sum(1 for r in ledgers.values() for t in r.takeovers if t[3] is not None)},"
            f" create failures "
            f"{dict(sum((w.create_failures for w in writers), collections.Counter()))}; "
            f"chaos+drain {chaos_done - started:.1f}s, verify {verified - chaos_done:.1f}s"
        )
        print(summary)
        for note in notes:
            print("note:", note)
        if violations:
            print("\n".join(timeline.lines))
        assert not violations, (
            f"{len(violations)} invariant violations with {SEED_ENV}={seed}:\n"
            + "\n".join(violations[:40])
            + f"\n{summary}\nbookie logs under {tmp_path / 'bookies'}"
        )
        assert acked >= MIN_ACKS_PER_SECOND * seconds and acked >= MIN_ACKED_SHARE * sent, (
            f"too few adds acknowledged to prove anything with {SEED_ENV}={seed}: {summary}"
        )
    finally:
        stop.set()
        for task in writer_tasks:
            task.cancel()
        if chaos is not None:
            for task in list(chaos.tasks):
                task.cancel()
            for index in list(chaos.stopped):
                bookie = cluster.bookies[index]
                if bookie.proc is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(bookie.proc.pid, signal.SIGCONT)
        await asyncio.gather(*writer_tasks, return_exceptions=True)
        for bk in clients:
            with contextlib.suppress(ClientClosedError):
                await bk.close()
        for store in stores:
            await store.close()
        cluster.kill_all()
