"""One chaos run from start to verdict: cluster up, traffic, faults, settle, check, report.

The phases, each bounded:

1. start the cluster in a temporary directory and the workload; wait until every producer
   and subscription is moving (the baseline);
2. inject the schedule while the traffic goes on;
3. keep the traffic going until every producer and subscription has moved again after the
   last fault (or the recovery bound passes), then stop sending and collect every outcome;
4. let the subscriptions catch up, read every topic back from the start, and wait until no
   ledger is short of copies;
5. judge the history, write ``summary.json``, ``history.jsonl``, ``report.html`` and the
   processes' logs to the output directory, and remove the temporary one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import random
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stripemq.chaos.checker import Verdict, check_history, fault_end_ms
from stripemq.chaos.cluster import ChaosCluster, ClusterShape, describe
from stripemq.chaos.history import SUBSCRIPTION_MODES, History, Outcome
from stripemq.chaos.injector import FaultInjector
from stripemq.chaos.report import write_report
from stripemq.chaos.schedule import FaultKind, PlannedFault, ScheduleShape, make_schedule
from stripemq.chaos.workload import (
    DEDUP_NAMESPACE,
    PLAIN_NAMESPACE,
    TENANT,
    Workload,
    WorkloadShape,
    topics,
)
from stripemq.clock import now_ms
from stripemq.errors import StripeMQError
from stripemq.retry import poll

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass
class ChaosOptions:
    """What ``stripemq chaos`` was asked for."""

    seed: int
    duration_s: float = 60.0
    faults: int = 20
    out_dir: Path = Path("chaos-out")
    kinds: Sequence[FaultKind] | None = None
    rate: float = 200.0
    recovery_bound_s: float = 60.0
    settle_timeout_s: float = 120.0
    work_dir: Path | None = None  # where the cluster lives; a fresh temp dir by default
    cluster: ClusterShape = field(default_factory=ClusterShape)


class ChaosRun:
    """The state of one run, so the phases can share it and the progress line can read it."""

    def __init__(self, options: ChaosOptions, progress: Progress | None = None) -> None:
        self.options = options
        self.progress = progress
        self.history = History()
        self.schedule: list[PlannedFault] = make_schedule(
            options.seed,
            options.duration_s,
            options.faults,
            shape=ScheduleShape(
                bookies=options.cluster.bookies,
                brokers=options.cluster.brokers,
                session_timeout_s=options.cluster.session_timeout_ms / 1000,
            ),
            kinds=options.kinds,
        )
        self.phase = "starting"
        self.started_ms = now_ms()
        self.notes: list[str] = []
        self.under_replicated: int | None = None
        self.injector: FaultInjector | None = None
        self.corrupt_messages = 0
        self.crashed: list[str] = []

    async def run(self) -> dict[str, Any]:
        """Everything; returns the summary (also written to ``out_dir/summary.json``)."""
        options = self.options
        options.out_dir.mkdir(parents=True, exist_ok=True)
        work = options.work_dir or Path(tempfile.mkdtemp(prefix="stripemq-chaos-"))
        cluster = ChaosCluster(work / "cluster", options.cluster)
        workload: Workload | None = None
        ticker = asyncio.ensure_future(self._tick())
        supervisor: asyncio.Future[None] | None = None
        try:
            await cluster.start()
            log.info("cluster: %s", describe(cluster))
            await self._prepare_namespaces(cluster)
            workload = Workload(cluster.service_url, self.history, WorkloadShape(rate=options.rate))
            self.injector = FaultInjector(cluster, self.history, random.Random(options.seed))
            supervisor = asyncio.ensure_future(self.injector.supervise())
            self.phase = "warming up"
            self.started_ms = now_ms()
            await workload.start()
            await self._wait_moving(since_ms=self.started_ms, bound_s=60.0, what="baseline")
            self.phase = "faults"
            await self.injector.run(self.schedule)
            self.phase = "recovering"
            last = max((fault_end_ms(f) for f in self.history.faults), default=now_ms())
            await asyncio.sleep(2.0)
            await self._wait_moving(last, options.recovery_bound_s, "recovery")
            self.phase = "draining"
            await workload.stop_sending()
            await self._wait_delivered(options.settle_timeout_s)
            self.phase = "re-replicating"
            await self._wait_replicated(cluster, options.settle_timeout_s)
            self.phase = "reading back"
            await self._read_back(workload)
        except Exception as exc:
            log.exception("chaos run stopped early")
            self.notes.append(f"the run stopped early in phase {self.phase!r}: {exc!r}")
        finally:
            self.phase = "closing"
            await self._close(cluster, workload, work, supervisor)
            ticker.cancel()
        return await self._judge()

    async def _read_back(self, workload: Workload) -> None:
        """Each topic whole from the start; one that cannot be read is left out (the
        checker then fails the run for it, without calling its messages lost)."""
        for topic in topics():
            try:
                self.history.read_back[topic] = await workload.read_back(topic)
            except (StripeMQError, TimeoutError, OSError) as exc:
                log.error("reading %s back failed: %r", topic, exc)
                self.notes.append(f"reading {topic} back failed: {exc!r}")

    async def _close(
        self,
        cluster: ChaosCluster,
        workload: Workload | None,
        work: Path,
        supervisor: asyncio.Future[None] | None,
    ) -> None:
        """Stop everything, each step on its own so one failing leaves none undone."""
        steps: list[tuple[str, Callable[[], Awaitable[object]]]] = []
        if supervisor is not None:
            supervisor.cancel()
            steps.append(("supervisor", lambda: asyncio.gather(supervisor, return_exceptions=True)))
        if self.injector is not None:
            steps.append(("faults", self.injector.close))
        if workload is not None:
            steps.append(("workload", workload.close))
        steps.append(("cluster", cluster.close))
        steps.append(
            ("logs", lambda: asyncio.to_thread(_copy_logs, cluster, self.options.out_dir / "logs"))
        )
        if self.options.work_dir is None:
            steps.append(("work dir", lambda: asyncio.to_thread(shutil.rmtree, work, True)))
        for what, step in steps:
            try:
                await step()
            except Exception as exc:
                log.exception("closing the %s failed", what)
                self.notes.append(f"closing the {what} failed: {exc!r}")
        if workload is not None:
            self.notes += [f"{n} x {what}" for what, n in sorted(workload.errors.items())]
            self.corrupt_messages = workload.corrupt
            self.crashed = workload.crashed

    async def _prepare_namespaces(self, cluster: ChaosCluster) -> None:
        """One namespace that deduplicates and one that does not, both keeping every
        message (infinite retention), so the topics can be read back whole at the end."""
        keep_all = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
        for namespace, dedup in ((DEDUP_NAMESPACE, True), (PLAIN_NAMESPACE, False)):
            path = f"/admin/v2/namespaces/{TENANT}/{namespace}"
            await cluster.admin("PUT", path, {})
            await cluster.admin("POST", f"{path}/deduplication", dedup)
            await cluster.admin("POST", f"{path}/retention", keep_all)

    async def _wait_moving(self, since_ms: int, bound_s: float, what: str) -> None:
        """Until every producer had a send acknowledged and every subscription a delivery
        after ``since_ms``, or ``bound_s`` passed (the checker then names who stalled)."""
        if not await poll(lambda: not self._stalled(since_ms), within_s=bound_s, interval=0.2):
            stalled = self._stalled(since_ms)
            self.notes.append(f"{what}: still stalled after {bound_s:.0f}s: {stalled}")

    def _stalled(self, since_ms: int) -> list[str]:
        producers = {s.producer for s in self.history.sends}
        moved = {
            s.producer
            for s in self.history.sends[-5000:]
            if s.outcome is Outcome.ACKED and (s.done_ms or 0) >= since_ms
        }
        subscriptions = {(t, s) for t in topics() for s in SUBSCRIPTION_MODES}
        delivered = {
            (d.topic, d.subscription)
            for d in self.history.deliveries[-20000:]
            if d.received_ms >= since_ms
        }
        return sorted(producers - moved) + sorted(f"{t}[{s}]" for t, s in subscriptions - delivered)

    async def _wait_delivered(self, bound_s: float) -> None:
        """Until every subscription has received every acknowledged message."""
        if not await poll(lambda: not self._undelivered(), within_s=bound_s, interval=0.5):
            self.notes.append(f"after {bound_s:.0f}s still undelivered: {self._undelivered()}")

    def _undelivered(self) -> dict[str, int]:
        acked = collections.defaultdict(set)
        for send in self.history.sends:
            if send.outcome is Outcome.ACKED:
                acked[send.topic].add(send.message)
        received = collections.defaultdict(set)
        for d in self.history.deliveries:
            received[(d.topic, d.subscription)].add(d.message)
        missing = {}
        for topic in topics():
            for subscription in SUBSCRIPTION_MODES:
                n = len(acked[topic] - received[(topic, subscription)])
                if n:
                    missing[f"{topic}[{subscription}]"] = n
        return missing

    async def _wait_replicated(self, cluster: ChaosCluster, bound_s: float) -> None:
        short: list[int] | None = None

        async def replicated() -> bool:
            nonlocal short
            try:
                short = await cluster.under_replicated_ledgers()
            except StripeMQError as exc:  # a metadata hiccup: look again
                log.warning("under-replication scan failed: %r", exc)
                return False
            self.under_replicated = len(short)
            return not short

        if not await poll(replicated, within_s=bound_s, interval=1.0) and short:
            self.notes.append(f"ledgers still under-replicated: {short[:20]}")

    async def _tick(self) -> None:
        """The progress line, once a second."""
        if self.progress is None:
            return
        loop = asyncio.get_running_loop()
        began = loop.time()
        while True:
            self.progress(self.progress_line(loop.time() - began))
            await asyncio.sleep(1.0)

    def progress_line(self, elapsed_s: float) -> str:
        counts = collections.Counter(
            s.outcome if s.done_ms is not None else "pending" for s in self.history.sends
        )
        injector = self.injector
        done = injector.done if injector else 0
        active = injector.describe_active() if injector else "none"
        return (
            f"{elapsed_s:5.0f}s {self.phase:<14} faults {done}/{len(self.schedule)} "
            f"(now: {active}) | acked {counts[Outcome.ACKED]} pending {counts['pending']} "
            f"unknown {counts[Outcome.UNKNOWN]} failed {counts[Outcome.FAILED]} | delivered "
            f"{len(self.history.deliveries)}"
        )

    async def _judge(self) -> dict[str, Any]:
        options = self.options
        injector = self.injector
        verdict = check_history(
            self.history,
            recovery_bound_s=options.recovery_bound_s,
            under_replicated=self.under_replicated,
            unexpected_exits=[*(injector.unexpected_exits if injector else ()), *self.crashed],
            corrupt_messages=self.corrupt_messages,
        )
        if not self.history.read_back:
            verdict.add("the run reached its verdict phase", False, "; ".join(self.notes))
        summary = self.summary(verdict)
        out = options.out_dir
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        await asyncio.to_thread(self.history.write_jsonl, out / "history.jsonl")
        await asyncio.to_thread(write_report, out, summary, self.history)
        return summary

    def summary(self, verdict: Verdict) -> dict[str, Any]:
        faults = collections.Counter(f.kind for f in self.history.faults if f.took_effect)
        not_injected = [
            f"{f.kind} {f.target}: {f.detail}" for f in self.history.faults if not f.took_effect
        ]
        return {
            "verdict": "pass" if verdict.passed else "fail",
            "seed": self.options.seed,
            "duration_s": self.options.duration_s,
            "started_ms": self.started_ms,
            "acked": verdict.acked,
            "failed": verdict.failed,
            "unknown": verdict.unknown,
            "lost": verdict.lost,
            "undelivered": verdict.undelivered,
            "duplicated": verdict.duplicated,
            "duplicated_without_dedup": verdict.duplicated_without_dedup,
            "reordered": verdict.reordered,
            "delivered": len(self.history.deliveries),
            "corrupt_messages": self.corrupt_messages,
            "stored": sum(len(v) for v in self.history.read_back.values()),
            "faults": dict(sorted(faults.items())),
            "faults_total": sum(faults.values()),
            "faults_not_injected": not_injected,
            "recovery_s": verdict.recovery_s,
            "time_to_recover_by_kind": verdict.time_to_recover_by_kind,
            "under_replicated": self.under_replicated,
            "checks": [c.as_dict() for c in verdict.checks],
            "notes": self.notes,
            "schedule": [
                {"at_s": p.at_s, "kind": p.kind.value, "target": p.target, "for_s": p.duration_s}
                for p in self.schedule
            ],
        }


def _copy_logs(cluster: ChaosCluster, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for path in cluster.logs():
        name = path.name if path.parent == cluster.base_dir else f"{path.parent.name}-{path.name}"
        with contextlib.suppress(OSError):
            shutil.copyfile(path, target / name)


async def run_chaos(options: ChaosOptions, progress: Progress | None = None) -> dict[str, Any]:
    """Run ``stripemq chaos`` with ``options``; the summary (``verdict`` is "pass" or "fail")."""
    return await ChaosRun(options, progress).run()
