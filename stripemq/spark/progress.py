"""The export's progress display: a rich progress bar fed by Spark's status tracker, then a
summary table.

Spark says how many tasks of a job group have finished, not how many bytes: each task of
the export's write job reads one planned split, so the entries and bytes done are the
planned totals times the fraction of tasks finished (``estimate``, pure). A thread polls
``SparkContext.statusTracker()`` for the run's job group while the write runs. Rendering
goes to stderr: a live bar on a terminal, a plain line per change otherwise (logs, CI).
Spark's own console progress bar is off (``spark_session``).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

log = logging.getLogger(__name__)

MB = 1_000_000
PLAIN_EVERY_S = 10.0  # a plain progress line at least this often while nothing changes


@dataclass(frozen=True)
class PlannedWork:
    """What the write job reads: one task per split."""

    splits: int
    entries: int
    bytes: int


@dataclass(frozen=True)
class TaskCounts:
    """Tasks of a job group's stages, summed over the stages Spark still tracks."""

    total: int = 0
    completed: int = 0
    active: int = 0
    failed: int = 0


@dataclass(frozen=True)
class Estimate:
    fraction: float  # of the planned work done, 0..1
    entries_done: int
    bytes_done: int
    mb_per_s: float
    eta_s: float | None  # None until a rate is known


def estimate(planned: PlannedWork, counts: TaskCounts, elapsed_s: float) -> Estimate:
    """Entries and bytes done, rate and time left, from finished tasks (each one split of
    average size). Before the job has stages, the planned split count is the total."""
    total = max(counts.total, planned.splits, 1)
    fraction = min(1.0, counts.completed / total)
    bytes_done = round(planned.bytes * fraction)
    rate = bytes_done / elapsed_s if elapsed_s > 0 else 0.0
    eta = (planned.bytes - bytes_done) / rate if rate > 0 else None
    return Estimate(
        fraction=fraction,
        entries_done=round(planned.entries * fraction),
        bytes_done=bytes_done,
        mb_per_s=rate / MB,
        eta_s=eta,
    )


def task_counts(tracker: Any, job_group: str) -> TaskCounts:
    """Sum the task counts of every stage of ``job_group``'s jobs (``tracker``:
    ``SparkContext.statusTracker()``)."""
    total = completed = active = failed = 0
    for job_id in tracker.getJobIdsForGroup(job_group):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            total += stage.numTasks
            completed += stage.numCompletedTasks
            active += stage.numActiveTasks
            failed += stage.numFailedTasks
    return TaskCounts(total, completed, active, failed)


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def describe(planned: PlannedWork, counts: TaskCounts, now: Estimate) -> dict[str, Any]:
    """The progress figures as text (the bar's fields and the plain line's parts)."""
    return {
        "splits": f"{counts.completed}/{max(counts.total, planned.splits)} splits",
        "entries": f"{now.entries_done:,}/{planned.entries:,} entries",
        "mb": f"{now.bytes_done / MB:,.1f}/{planned.bytes / MB:,.1f} MB",
        "rate": f"{now.mb_per_s:,.1f} MB/s",
        "eta": f"ETA {format_seconds(now.eta_s)}",
    }


class ExportProgress:
    """Polls the status tracker for ``job_group`` from a thread while the write runs (use
    as a context manager around it) and draws the bar on ``stream`` (stderr)."""

    def __init__(
        self,
        spark_context: Any,
        job_group: str,
        planned: PlannedWork,
        *,
        stream: IO[str] | None = None,
        interval_s: float = 0.25,
        live: bool | None = None,
        description: str = "export",
    ) -> None:
        from rich.console import Console

        self.tracker = spark_context.statusTracker()
        self.job_group = job_group
        self.planned = planned
        self.interval_s = interval_s
        self.description = description
        self.console = Console(file=stream or sys.stderr, stderr=stream is None)
        self.live = self.console.is_terminal if live is None else live
        self.counts = TaskCounts()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def __enter__(self) -> ExportProgress:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="export-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def _poll(self) -> Estimate:
        try:
            self.counts = task_counts(self.tracker, self.job_group)
        except Exception:  # the display must never fail the export
            log.debug("status tracker poll failed", exc_info=True)
        return estimate(self.planned, self.counts, self.elapsed_s)

    def _run(self) -> None:
        try:
            if self.live:
                self._run_live()
            else:
                self._run_plain()
        except Exception:  # the display must never fail the export
            log.warning("the progress display failed", exc_info=True)

    def _run_live(self) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[entries]}"),
            TextColumn("{task.fields[mb]}"),
            TextColumn("[cyan]{task.fields[rate]}"),
            TextColumn("{task.fields[eta]}"),
        )
        with Progress(*columns, console=self.console, refresh_per_second=4) as bar:
            fields = describe(self.planned, self.counts, self._poll())
            task = bar.add_task(self.description, total=max(self.planned.bytes, 1), **fields)
            while True:
                stopping = self._stop.wait(self.interval_s)
                now = self._poll()
                fields = describe(self.planned, self.counts, now)
                bar.update(task, completed=now.bytes_done, **fields)
                if stopping:
                    break

    def _run_plain(self) -> None:
        last: tuple[int, int] | None = None
        last_at = 0.0
        while True:
            stopping = self._stop.wait(self.interval_s)
            now = self._poll()
            key = (self.counts.completed, self.counts.total)
            if stopping or key != last or time.monotonic() - last_at >= PLAIN_EVERY_S:
                fields = describe(self.planned, self.counts, now)
                self.console.print(
                    f"{self.description}: {fields['splits']}, {fields['entries']}, "
                    f"{fields['mb']}, {fields['rate']}, {fields['eta']}",
                    highlight=False,
                    soft_wrap=True,
                )
                last, last_at = key, time.monotonic()
            if stopping:
                break


@dataclass(frozen=True)
class Summary:
    """The figures of a finished run (what the table shows)."""

    messages: int
    entries: int
    stored_bytes: int  # entry bytes read from the bookies
    parquet_bytes: int
    files: int
    seconds: float  # the whole run, planning to commit (and starting Spark, if it did)
    write_seconds: float  # the Spark job alone

    @property
    def mb_per_s(self) -> float:
        """Stored bytes read per second of the Spark job."""
        return self.stored_bytes / MB / self.write_seconds if self.write_seconds > 0 else 0.0


def print_summary(summary: Summary, *, title: str, stream: IO[str] | None = None) -> None:
    """The summary table on ``stream`` (stderr)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    columns = ("messages", "entries", "stored MB", "Parquet MB", "files", "seconds", "write s")
    for name in (*columns, "MB/s"):
        table.add_column(name, justify="right")
    table.add_row(
        f"{summary.messages:,}",
        f"{summary.entries:,}",
        f"{summary.stored_bytes / MB:,.1f}",
        f"{summary.parquet_bytes / MB:,.1f}",
        f"{summary.files:,}",
        f"{summary.seconds:,.1f}",
        f"{summary.write_seconds:,.1f}",
        f"{summary.mb_per_s:,.1f}",
    )
    Console(file=stream or sys.stderr, stderr=stream is None).print(table)
