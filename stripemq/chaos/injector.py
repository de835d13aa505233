"""Carry out a fault schedule on a running ``ChaosCluster``, recording each fault as it lands.

Faults start at their planned times. Those that take a bookie (or a broker) out of service
wait for the previous one of their kind to be over, the process back and registered, so a
slow restart never stacks two outages the schedule kept apart. A supervisor restarts any
process that dies without a fault and records it: that is a finding.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import resource
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from stripemq.chaos.cluster import BookieNode, ChaosCluster
from stripemq.chaos.corruption import Corruption, corrupt_entry_log
from stripemq.chaos.history import FaultEvent, History
from stripemq.chaos.schedule import FaultKind, PlannedFault
from stripemq.clock import now_ms
from stripemq.retry import poll
from stripemq.testing.process import ChildProcess

log = logging.getLogger(__name__)

# How long a fault waits for its target to exist (a replacement bookie still starting), or
# for a bookie's entry logs to hold something to damage.
TARGET_WAIT_S = 60.0


@dataclass
class FaultInjector:
    """Runs ``schedule`` against ``cluster``. ``held`` counts, per process, the faults (and
    supervisor restarts) handling it, which the supervisor leaves alone."""

    cluster: ChaosCluster
    history: History
    rng: random.Random
    held: collections.Counter[str] = field(default_factory=collections.Counter)
    unexpected_exits: list[str] = field(default_factory=list)
    done: int = 0
    active: dict[int, str] = field(default_factory=dict)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _bookie_slot: asyncio.Lock = field(default_factory=asyncio.Lock)
    _broker_slot: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run(self, schedule: Sequence[PlannedFault]) -> None:
        """Inject every fault at its time (seconds from now) and return when all are over."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        for index, planned in enumerate(schedule):
            await asyncio.sleep(max(0.0, start + planned.at_s - loop.time()))
            self._tasks.append(asyncio.ensure_future(self._inject(index, planned)))
        await asyncio.gather(*self._tasks)

    async def close(self) -> None:
        """Cancel the faults still under way; each heals what it did on the way out."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def describe_active(self) -> str:
        return ", ".join(self.active.values()) or "none"

    @contextlib.contextmanager
    def _holding(self, name: str) -> Iterator[None]:
        self.held[name] += 1
        try:
            yield
        finally:
            self.held[name] -= 1

    async def _inject(self, index: int, planned: PlannedFault) -> None:
        async with contextlib.AsyncExitStack() as slots:
            if planned.kind.on_bookie:
                await slots.enter_async_context(self._bookie_slot)
            if planned.kind.on_broker or planned.kind is FaultKind.PARTITION:
                await slots.enter_async_context(self._broker_slot)
            self.active[index] = f"{planned.kind.value} {planned.target}"
            event = FaultEvent(planned.kind.value, planned.target, start_ms=now_ms())
            self.history.faults.append(event)
            try:
                await self._carry_out(planned, event)
            except Exception as exc:  # a fault that could not be carried out is reported
                log.exception("fault %s on %s failed", planned.kind.value, planned.target)
                event.detail = f"could not inject: {type(exc).__name__}: {exc}"
                event.took_effect = False
            finally:
                if event.end_ms is None:
                    event.end_ms = now_ms()
                del self.active[index]
                self.done += 1
        log.info("fault %s on %s over: %s", event.kind, event.target, event.detail)

    async def _carry_out(self, planned: PlannedFault, event: FaultEvent) -> None:
        kind = planned.kind
        if kind is FaultKind.PARTITION:
            await self._partition(planned, event)
        elif kind in (FaultKind.ENTRY_LOG_BIT_FLIP, FaultKind.ENTRY_LOG_TRUNCATE):
            event.detail = await self._corrupt(planned)
        elif kind is FaultKind.BOOKIE_LOST:
            await self._lose_bookie(planned, event)
        elif kind in (FaultKind.BOOKIE_KILL, FaultKind.BROKER_KILL):
            await self._kill(planned, event)
        elif kind in (FaultKind.BOOKIE_PAUSE, FaultKind.BROKER_PAUSE):
            await self._pause(planned, event)
        elif kind is FaultKind.BROKER_SESSION_EXPIRY:
            await self._expire_session(planned, event)
        elif kind is FaultKind.BOOKIE_DISK_FULL:
            await self._fill_disk(planned, event)
        else:
            raise ValueError(f"no way to inject {kind}")

    async def _process(self, planned: PlannedFault) -> ChildProcess:
        if planned.kind.on_bookie:
            return (await self._bookie(planned.target)).process
        return self.cluster.brokers[planned.target]

    async def _back_in_service(self, planned: PlannedFault) -> None:
        if planned.kind.on_bookie:
            await self.cluster.wait_writable(await self._bookie(planned.target))

    async def _partition(self, planned: PlannedFault, event: FaultEvent) -> None:
        broker, bookie = planned.target.split("/")
        proxy = (await self._bookie(bookie)).proxy
        proxy.partition(broker)
        held = 0
        try:
            await asyncio.sleep(planned.duration_s)
            held = proxy.stats()["held"]
        finally:
            proxy.heal(broker)
            event.end_ms = now_ms()
        event.detail = f"{broker} cut off from {bookie} for {planned.duration_s}s"
        # 0: the broker had no business with that bookie meanwhile (no ledger of its there).
        event.detail += f" ({held} connection(s) held)"

    async def _lose_bookie(self, planned: PlannedFault, event: FaultEvent) -> None:
        assert planned.replacement is not None
        await self._bookie(planned.target)
        with self._holding(planned.target):
            await self.cluster.lose_bookie(planned.target)
            event.end_ms = now_ms()
        node = await self.cluster.add_bookie(planned.replacement)
        event.detail = f"wiped; {planned.replacement} ({node.bookie_id}) joined"

    async def _kill(self, planned: PlannedFault, event: FaultEvent) -> None:
        process = await self._process(planned)
        with self._holding(planned.target):
            process.kill()
            event.detail = f"SIGKILL, restarted after {planned.duration_s}s"
            await asyncio.sleep(planned.duration_s)  # cancelled: it stays down, the end kills all
            event.end_ms = now_ms()
            await self.cluster.restart(process)
            await self._back_in_service(planned)

    async def _pause(self, planned: PlannedFault, event: FaultEvent) -> None:
        process = await self._process(planned)
        with self._holding(planned.target):
            self.cluster.pause(process)
            event.detail = f"SIGSTOP for {planned.duration_s}s"
            try:
                await asyncio.sleep(planned.duration_s)
            finally:
                self.cluster.resume(process)
                event.end_ms = now_ms()
            await self._back_in_service(planned)

    async def _expire_session(self, planned: PlannedFault, event: FaultEvent) -> None:
        """A pause past the session timeout; it took effect when the broker registered
        again on a new session (a new instance id in its registration)."""
        broker = self.cluster.brokers[planned.target]
        before = await self.cluster.broker_instance(broker)
        await self._pause(planned, event)
        timeout_ms = self.cluster.shape.session_timeout_ms
        event.detail += f", past the {timeout_ms}ms session timeout"

        async def registered_again() -> bool:
            now = await self.cluster.broker_instance(broker)
            return now is not None and now != before

        if await poll(registered_again, within_s=30.0, interval=0.2):
            event.detail += "; it registered again on a new session"
        else:
            event.detail += "; its session did not expire"
            event.took_effect = False

    async def _fill_disk(self, planned: PlannedFault, event: FaultEvent) -> None:
        process = await self._process(planned)
        assert process.proc is not None
        pid = process.proc.pid
        with self._holding(planned.target):
            before = resource.prlimit(pid, resource.RLIMIT_FSIZE)
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, before[1]))
            event.detail = f"writes fail (EFBIG, file size limit 0) for {planned.duration_s}s"
            try:
                await asyncio.sleep(planned.duration_s)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    resource.prlimit(pid, resource.RLIMIT_FSIZE, before)
                event.end_ms = now_ms()
            await self._back_in_service(planned)

    async def _bookie(self, name: str) -> BookieNode:
        """The bookie called ``name``, waiting a while if it is a replacement still joining."""
        joined = await poll(
            lambda: name in self.cluster.bookies, within_s=TARGET_WAIT_S, interval=0.2
        )
        if not joined:
            raise LookupError(f"no bookie {name}")
        return self.cluster.bookies[name]

    async def _corrupt(self, planned: PlannedFault) -> str:
        node = await self._bookie(planned.target)
        kind = "bit_flip" if planned.kind is FaultKind.ENTRY_LOG_BIT_FLIP else "truncate"
        ledger_dir = node.process.data_dir / "ledgers"  # the bookie's default ledger_dir
        done: Corruption | None = None

        async def damaged() -> bool:
            nonlocal done
            try:
                done = await asyncio.to_thread(corrupt_entry_log, ledger_dir, kind, self.rng)
            except LookupError:  # a replacement holds nothing until ledgers are written to it
                return False
            return True

        if not await poll(damaged, within_s=TARGET_WAIT_S, interval=1.0) or done is None:
            raise LookupError(f"{planned.target} has no entry log with data to damage")
        return done.detail

    async def supervise(self) -> None:
        """Until cancelled: restart any process that died while no fault held it."""
        while True:
            await asyncio.sleep(1.0)
            for name, process in list(self.cluster.processes().items()):
                code = process.exited_with()
                if self.held[name] or code is None or name not in self.cluster.processes():
                    continue
                tail = process.tail_log(5).replace("\n", " | ")
                self.unexpected_exits.append(f"{name} exited with {code} ({tail[-300:]})")
                log.error("%s exited with %s without a fault; restarting it", name, code)
                with self._holding(name):
                    try:
                        await self.cluster.restart(process)
                    except Exception:
                        log.exception("could not restart %s", name)
