"""Carry out a fault schedule on a running ``ChaosCluster``, recording each fault as it lands.

Faults start at their planned times. Those that take a bookie (or a broker) out of service
wait for the previous one of their kind to be over, the process back and registered, so a
slow restart never stacks two outages the schedule kept apart. A supervisor restarts any
process that dies without a fault and records it: that is a finding.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import resource
from collections.abc import Sequence
from dataclasses import dataclass, field

from stripemq.chaos.cluster import BookieNode, ChaosCluster
from stripemq.chaos.corruption import corrupt_entry_log
from stripemq.chaos.history import FaultEvent, History
from stripemq.chaos.schedule import FaultKind, PlannedFault
from stripemq.clock import now_ms

log = logging.getLogger(__name__)

# How long a fault waits for its target to exist (a replacement bookie still starting).
TARGET_WAIT_S = 60.0


@dataclass
class FaultInjector:
    """Runs ``schedule`` against ``cluster``; ``held`` names processes a fault is handling."""

    cluster: ChaosCluster
    history: History
    rng: random.Random
    held: set[str] = field(default_factory=set)
    unexpected_exits: list[str] = field(default_factory=list)
    done: int = 0
    active: dict[int, str] = field(default_factory=dict)
    _bookie_slot: asyncio.Lock = field(default_factory=asyncio.Lock)
    _broker_slot: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run(self, schedule: Sequence[PlannedFault]) -> None:
        """Inject every fault at its time (seconds from now) and return when all are over."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        for index, planned in enumerate(schedule):
            await asyncio.sleep(max(0.0, start + planned.at_s - loop.time()))
            tasks.append(asyncio.ensure_future(self._inject(index, planned)))
        await asyncio.gather(*tasks)

    def describe_active(self) -> str:
        return ", ".join(self.active.values()) or "none"

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
            finally:
                if event.end_ms is None:
                    event.end_ms = now_ms()
                del self.active[index]
                self.done += 1
        log.info("fault %s on %s over: %s", event.kind, event.target, event.detail)

    async def _carry_out(self, planned: PlannedFault, event: FaultEvent) -> None:
        kind, cluster = planned.kind, self.cluster
        if kind is FaultKind.PARTITION:
            broker, bookie = planned.target.split("/")
            proxy = (await self._bookie(bookie)).proxy
            proxy.partition(broker)
            event.detail = f"{broker} cannot reach {bookie} for {planned.duration_s}s"
            await asyncio.sleep(planned.duration_s)
            proxy.heal(broker)
            event.end_ms = now_ms()
            return
        if kind in (FaultKind.ENTRY_LOG_BIT_FLIP, FaultKind.ENTRY_LOG_TRUNCATE):
            event.detail = await self._corrupt(planned)
            return
        if kind is FaultKind.BOOKIE_LOST:
            await self._bookie(planned.target)
            self.held.add(planned.target)
            try:
                await cluster.lose_bookie(planned.target)
                assert planned.replacement is not None
                event.end_ms = now_ms()
                node = await cluster.add_bookie(planned.replacement)
                event.detail = f"wiped; {planned.replacement} ({node.bookie_id}) joined"
            finally:
                self.held.discard(planned.target)
            return
        name = planned.target
        process = (await self._bookie(name)).process if kind.on_bookie else cluster.brokers[name]
        self.held.add(name)
        try:
            if kind in (FaultKind.BOOKIE_KILL, FaultKind.BROKER_KILL):
                process.kill()
                event.detail = f"SIGKILL, restarted after {planned.duration_s}s"
                await asyncio.sleep(planned.duration_s)
                event.end_ms = now_ms()
                await cluster.restart(process)
            elif kind in (
                FaultKind.BOOKIE_PAUSE,
                FaultKind.BROKER_PAUSE,
                FaultKind.BROKER_SESSION_EXPIRY,
            ):
                cluster.pause(process)
                event.detail = f"SIGSTOP for {planned.duration_s}s"
                if kind is FaultKind.BROKER_SESSION_EXPIRY:
                    event.detail += f" (session timeout {cluster.shape.session_timeout_ms}ms)"
                await asyncio.sleep(planned.duration_s)
                cluster.resume(process)
                event.end_ms = now_ms()
            elif kind is FaultKind.BOOKIE_DISK_FULL:
                assert process.proc is not None
                pid = process.proc.pid
                before = resource.prlimit(pid, resource.RLIMIT_FSIZE)
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, before[1]))
                event.detail = f"writes fail (EFBIG, file size limit 0) for {planned.duration_s}s"
                try:
                    await asyncio.sleep(planned.duration_s)
                finally:
                    with contextlib.suppress(ProcessLookupError):
                        resource.prlimit(pid, resource.RLIMIT_FSIZE, before)
                event.end_ms = now_ms()
            else:
                raise ValueError(f"no way to inject {kind}")
            if kind.on_bookie:
                await cluster.wait_writable(await self._bookie(name))
        finally:
            self.held.discard(name)

    async def _bookie(self, name: str) -> BookieNode:
        """The bookie called ``name``, waiting a while if it is a replacement still joining."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TARGET_WAIT_S
        while name not in self.cluster.bookies:
            if loop.time() > deadline:
                raise LookupError(f"no bookie {name}")
            await asyncio.sleep(0.2)
        return self.cluster.bookies[name]

    async def _corrupt(self, planned: PlannedFault) -> str:
        node = await self._bookie(planned.target)
        kind = "bit_flip" if planned.kind is FaultKind.ENTRY_LOG_BIT_FLIP else "truncate"
        ledger_dir = node.process.data_dir / "ledgers"  # the bookie's default ledger_dir
        done = await asyncio.to_thread(corrupt_entry_log, ledger_dir, kind, self.rng)
        return done.detail

    async def supervise(self) -> None:
        """Until cancelled: restart any process that died while no fault held it."""
        while True:
            await asyncio.sleep(1.0)
            for name, process in list(self.cluster.processes().items()):
                code = process.exited_with()
                if name in self.held or code is None:
                    continue
                tail = process.tail_log(5).replace("\n", " | ")
                self.unexpected_exits.append(f"{name} exited with {code} ({tail[-300:]})")
                log.error("%s exited with %s without a fault; restarting it", name, code)
                self.held.add(name)
                try:
                    await self.cluster.restart(process)
                except Exception:
                    log.exception("could not restart %s", name)
                finally:
                    self.held.discard(name)
