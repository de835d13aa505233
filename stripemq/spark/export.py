"""``stripemq spark export``: topics to Parquet, incrementally and idempotently.

A run, in order:

1. **Lock and recover** (``OUT/_stripemq_export.lock``, one run at a time per directory):
   delete ``OUT/_staging`` (what a crashed run staged) and every run file no committed run
   lists (what a run that died between moving its files and committing left). Run files
   without a manifest are refused, never deleted: the manifest was lost, since a first
   run writes one (empty) before it moves files in. ``OUT`` is created if missing, and
   removed again if planning fails.
2. **Plan** on the driver, without Spark: ``LedgerCatalog.plan`` with ``--since/--until``
   as publish-time pushdown (ledgers and entry ranges pruned), then subtract what the
   manifest holds (``Manifest.pending_work``). Ranges an earlier ``--until`` run examined
   are narrowed to the messages published after its bound. Ledgers the manifest recorded
   that retention has trimmed before they were wholly exported raise ``DataLossError``
   (``--fail-on-data-loss false``: a warning).
3. **Write** (only if there is something new): one Spark task per range. With the default
   writer (``arrow``, ``export_writer.py``) each task reads its range with the data
   source's reader (``ledger_reader.read_split``), keeps the rows within the publish-time
   bounds (pruning is by ranges, so rows outside them still come in) and writes Parquet
   with pyarrow into ``OUT/_staging/<run id>/``: rows never go through the JVM, which
   makes it about twice as fast as the alternative. With ``writer="spark"`` the
   ``stripemq`` data source reads exactly those ranges (the hidden
   ``stripemq.exportSplits`` option), Spark filters the rows and Spark's Parquet writer
   writes them (``date`` column: UTC). Either way, ``--partition-by date`` gives
   ``date=YYYY-MM-DD/`` directories, and a progress bar is fed by the status tracker.
4. **Commit**: the staged files are synced and renamed into ``OUT`` as
   ``[date=YYYY-MM-DD/]part-<n>-<run id>.parquet``, their directories synced, and the
   manifest written last (atomically). A run that fails before that point removes what it
   staged and moved; a run killed outright (or during the moves) leaves ``_``-prefixed
   paths or run files the next run deletes. Parquet readers (Spark, pyarrow) skip
   ``_``-prefixed paths.

What the manifest records when time bounds are used is described in ``manifest.py``:
``--since`` is the export's fixed floor, ``--until`` is exact per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from stripemq import errors
from stripemq.clock import now_ms
from stripemq.errors import ConfigError, DataLossError, SparkSourceError, StripeMQError
from stripemq.spark import manifest as mf
from stripemq.spark import schema
from stripemq.spark.export_writer import (
    DATE_COLUMN,
    ExportTask,
    TaskSettings,
    run_tasks,
    timestamp,
)
from stripemq.spark.manifest import ExportRange, Manifest, RunRecord
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import (
    Pushdown,
    ReadSplit,
    TimeBounds,
    TopicPartitionRef,
    TopicSnapshot,
    narrow_by_publish_time,
)
from stripemq.spark.progress import ExportProgress, PlannedWork, Summary, print_summary

log = logging.getLogger(__name__)

WRITERS = ("arrow", "spark")
_PARTITION_DIR = re.compile(r"^date=\d{4}-\d{2}-\d{2}$")
SYNC_THREADS = 8
SNAPSHOT_CONCURRENCY = 16  # topic partitions whose ledgers are listed at once
UNIQUE_COLUMNS = (schema.VALUE, schema.MESSAGE_ID)


@dataclass(frozen=True)
class ExportRequest:
    """What to export where (the command line's flags)."""

    metadata: str
    out: Path
    topics: tuple[str, ...] = ()
    topics_pattern: str | None = None
    since_ms: int | None = None  # publish time, inclusive
    until_ms: int | None = None  # publish time, inclusive
    partition_by: str = "none"  # "date" | "none"
    fail_on_data_loss: bool = True
    # More ``stripemq`` source options (maxEntriesPerPartition, publishTimeSkewMs, ...).
    source_options: Mapping[str, str] = field(default_factory=dict)
    # "arrow": tasks read their ranges and write Parquet with pyarrow (export_writer.py);
    # "spark": the stripemq data source and Spark's Parquet writer (a DataFrame).
    writer: str = "arrow"

    def raw_options(self) -> dict[str, str]:
        """The data source options this request reads with."""
        raw = dict(self.source_options)
        raw["metadata"] = self.metadata
        if self.topics_pattern is not None:
            raw["topicsPattern"] = self.topics_pattern
        else:
            raw["topics"] = ",".join(self.topics)
        raw["failOnDataLoss"] = "true" if self.fail_on_data_loss else "false"
        return raw

    def check(self) -> SourceOptions:
        """The parsed source options.

        Raises:
            ConfigError: a bad flag, named.
        """
        if self.partition_by not in mf.PARTITION_LAYOUTS:
            raise ConfigError(
                f"--partition-by is one of {', '.join(mf.PARTITION_LAYOUTS)}, "
                f"not {self.partition_by!r}"
            )
        if (
            self.since_ms is not None
            and self.until_ms is not None
            and self.since_ms > self.until_ms
        ):
            raise ConfigError("--since is after --until: nothing could be exported")
        if self.writer not in WRITERS:
            raise ConfigError(f"--writer is one of {', '.join(WRITERS)}, not {self.writer!r}")
        if bool(self.topics) == (self.topics_pattern is not None):
            raise ConfigError("give the topics to export: --topic, --topics or --topics-pattern")
        for key in self.source_options:
            flag = _FLAG_OPTIONS.get(key.strip().lower())
            if flag is not None:
                raise ConfigError(f"--option {key}: {flag}")
        return SourceOptions.parse(self.raw_options())


# Source options the export sets from its own flags, or has no use for.
_FLAG_OPTIONS = {
    "metadata": "use --metadata",
    "topic": "use --topic",
    "topics": "use --topics",
    "topicspattern": "use --topics-pattern",
    "failondataloss": "use --fail-on-data-loss",
    "startingoffsets": "a streaming option, not the export's",
    "maxentriespertrigger": "a streaming option, not the export's",
    "stripemq.exportsplits": "internal to the export",
}


@dataclass(frozen=True)
class ExportResult:
    """What a run did (``run_id`` is None when there was nothing new to write)."""

    out: Path
    run_id: str | None
    messages: int = 0
    entries: int = 0
    stored_bytes: int = 0
    parquet_bytes: int = 0
    files: tuple[str, ...] = ()
    splits: int = 0
    seconds: float = 0.0  # the whole run
    plan_seconds: float = 0.0
    session_seconds: float = 0.0  # starting Spark (when the run started it)
    write_seconds: float = 0.0  # the Spark job
    commit_seconds: float = 0.0  # syncing, moving, the manifest

    def summary(self) -> Summary:
        return Summary(
            messages=self.messages,
            entries=self.entries,
            stored_bytes=self.stored_bytes,
            parquet_bytes=self.parquet_bytes,
            files=len(self.files),
            seconds=self.seconds,
            write_seconds=self.write_seconds,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "run_id": self.run_id,
            "messages": self.messages,
            "entries": self.entries,
            "stored_bytes": self.stored_bytes,
            "parquet_bytes": self.parquet_bytes,
            "files": len(self.files),
            "splits": self.splits,
            "seconds": round(self.seconds, 3),
            "plan_seconds": round(self.plan_seconds, 3),
            "session_seconds": round(self.session_seconds, 3),
            "write_seconds": round(self.write_seconds, 3),
            "commit_seconds": round(self.commit_seconds, 3),
        }


@dataclass
class _Plan:
    options: SourceOptions
    base: Manifest  # the manifest before this run (an empty one on the first run)
    first_run: bool
    since_ms: int | None
    splits: list[ReadSplit]
    snapshots: list[TopicSnapshot]
    work: list[ExportRange]

    @property
    def planned(self) -> PlannedWork:
        return PlannedWork(
            splits=len(self.work),
            entries=sum(item.split.entries for item in self.work),
            bytes=sum(item.split.estimated_bytes for item in self.work),
        )


SparkOrFactory = Any  # a SparkSession, or a callable starting one when it is needed


def run_export(
    request: ExportRequest,
    spark: SparkOrFactory,
    *,
    progress: bool | None = None,
    stream: IO[str] | None = None,
) -> ExportResult:
    """Export what is new in ``request``'s topics to ``request.out``.

    ``spark`` is a ``SparkSession`` or a function that starts one: it is called only when
    there is something to write. ``progress``: draw the progress bar and the summary on
    ``stream`` (stderr); ``None`` draws them when ``stream`` is a terminal, plain lines
    otherwise; ``False`` draws nothing.

    Raises:
        ConfigError: bad request, or one that does not match the export's manifest.
        UnknownTopicError, DataLossError, CorruptEntryError, SparkSourceError: from
        planning or from the Spark job (the job's error is raised as the stripemq error
        its task raised, with the task's message).
    """
    started = time.monotonic()
    started_ms = now_ms()
    options = request.check()
    out = Path(request.out)
    created = _make_out(out)
    with _locked(out):
        with _removed_if_failing(out, created):
            loaded = mf.load(out)
            if loaded is not None:
                loaded.check_request(request.partition_by, request.since_ms)
            recover(out, loaded)
            plan = asyncio.run(_plan(request, options, loaded))
        plan_seconds = time.monotonic() - started
        run_id = mf.new_run_id(started_ms)
        if not plan.work:
            _commit_manifest(out, plan, request, run=None)
            log.info("[%s] nothing new to export", out)
            return ExportResult(
                out, None, seconds=time.monotonic() - started, plan_seconds=plan_seconds
            )
        session_started = time.monotonic()
        session = spark() if callable(spark) else spark
        session_seconds = time.monotonic() - session_started
        staging = out / mf.STAGING_DIR / run_id
        moved: list[Path] = []
        try:
            write_started = time.monotonic()
            written = _write(session, request, plan, staging, run_id, progress, stream)
            write_seconds = time.monotonic() - write_started
            commit_started = time.monotonic()
            if written is None:  # Spark's writer: what it committed into staging
                staged = _staged_files(staging)
            else:
                staged = sorted((staging / name, rows) for name, rows in written)
            names = _run_names(staged, staging, run_id)
            _sync_files(path for path, _ in staged)
            if plan.first_run and names:
                # A manifest before the first files land: run files without one are then
                # never a crashed first run's, and ``recover`` refuses to touch them.
                mf.write(out, plan.base)
            for (path, _), name in zip(staged, names, strict=True):
                target = out / name
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
                moved.append(target)
            for directory in sorted({target.parent for target in moved} | {out}):
                mf.fsync_dir(directory)
            messages = sum(rows for _, rows in staged)
            parquet_bytes = sum(target.stat().st_size for target in moved)
            run = RunRecord(
                run_id=run_id,
                started=mf.iso_now(started_ms),
                committed=mf.iso_now(now_ms()),
                since_ms=plan.since_ms,
                until_ms=request.until_ms,
                topics=tuple(sorted({item.split.ref.topic for item in plan.work})),
                files=tuple(names),
                messages=messages,
                entries=plan.planned.entries,
                stored_bytes=plan.planned.bytes,
                parquet_bytes=parquet_bytes,
                seconds=round(time.monotonic() - started, 3),
            )
            # No file (every message filtered out): what was read is settled all the same.
            _commit_manifest(out, plan, request, run=run if names else None)
        except BaseException:
            _undo(out, run_id, moved, first_run=plan.first_run)
            raise
        finally:
            shutil.rmtree(out / mf.STAGING_DIR, ignore_errors=True)
    result = ExportResult(
        out=out,
        run_id=run_id if names else None,
        messages=messages,
        entries=run.entries,
        stored_bytes=run.stored_bytes,
        parquet_bytes=parquet_bytes,
        files=tuple(names),
        splits=len(plan.work),
        seconds=time.monotonic() - started,
        plan_seconds=plan_seconds,
        session_seconds=session_seconds,
        write_seconds=write_seconds,
        commit_seconds=time.monotonic() - commit_started,
    )
    log.info(
        "[%s] run %s: %d messages of %d entries in %d files",
        out,
        run_id,
        messages,
        run.entries,
        len(names),
    )
    if progress is not False:
        print_summary(result.summary(), title=f"stripemq export {run_id}", stream=stream)
    return result


# ---------------------------------------------------------------------- recovery


def _undo(out: Path, run_id: str, moved: Sequence[Path], *, first_run: bool) -> None:
    """Delete the files a failed run moved into ``out`` (unless its manifest made it to
    disk after all: then they are committed and stay), and the empty manifest a failed
    first run wrote before moving them."""
    empty_manifest = False
    with contextlib.suppress(mf.ManifestError, OSError):
        current = mf.load(out)
        if current is not None and run_id in current.committed_run_ids:
            return
        empty_manifest = current is not None and not current.runs and not current.topics
    for target in moved:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
    _remove_empty_partition_dirs(out)
    if first_run and empty_manifest:  # last: run files never outlive it
        with contextlib.suppress(OSError):
            (out / mf.MANIFEST_NAME).unlink()


def _make_out(out: Path) -> list[Path]:
    """Create ``out`` and its missing parents; the directories created, deepest first.

    Raises:
        ConfigError: it cannot be (a file in the way, no permission), in one line.
    """
    try:
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out} is not a directory")
        created = []
        for path in (out, *out.parents):
            if path.exists():
                break
            created.append(path)
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create it: {exc.strerror or exc}") from None
    return created


@contextlib.contextmanager
def _removed_if_failing(out: Path, created: Sequence[Path]) -> Iterator[None]:
    """Remove the directories this run created (with its lock file) when what runs
    inside fails: a mistyped topic or an unreachable store leaves no empty export."""
    try:
        yield
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                (out / mf.LOCK_NAME).unlink()
                for directory in created:
                    directory.rmdir()  # only when empty
        raise


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """One run at a time per export directory (an advisory lock, released on exit or
    when the process dies).

    Raises:
        ConfigError: another run holds it, or ``out`` is not writable.
    """
    try:
        fd = os.open(out / mf.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write into it: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"another export is running into {out}") from None
        yield
    finally:
        os.close(fd)


def recover(out: Path, manifest: Manifest | None) -> list[str]:
    """Undo what runs that never committed left in ``out``: the staging directory and run
    files no committed run lists (deleted); returns the files deleted.

    Raises:
        ConfigError: ``out`` holds run files but no manifest (lost or deleted: a first run
        writes one before it moves files in), so nothing tells which are committed.
    """
    found = list(mf.find_run_files(out))
    if manifest is None and found:
        raise ConfigError(
            f"{out} holds {len(found)} export files ({found[0][0]}, ...) but no manifest "
            f"({mf.MANIFEST_NAME}): restore it, or export to another directory"
        )
    staging = out / mf.STAGING_DIR
    if staging.exists():
        log.warning("[%s] removing %s, left by a run that did not finish", out, staging)
        shutil.rmtree(staging)
    orphans = mf.orphan_files(manifest, found)
    for name in orphans:
        log.warning("[%s] removing %s, written by a run that never committed", out, name)
        (out / name).unlink()
    _remove_empty_partition_dirs(out)
    return orphans


def _remove_empty_partition_dirs(out: Path) -> None:
    for child in out.iterdir():
        if child.is_dir() and _PARTITION_DIR.match(child.name) and not any(child.iterdir()):
            child.rmdir()


# ---------------------------------------------------------------------- planning


async def _plan(request: ExportRequest, options: SourceOptions, loaded: Manifest | None) -> _Plan:
    """The plan and what of it is new; no Spark involved."""
    from stripemq.spark.catalog import LedgerCatalog, connect

    base = loaded or Manifest(partition_by=request.partition_by, since_ms=request.since_ms)
    since_ms = base.since_ms
    until_ms = request.until_ms
    skew = options.publish_time_skew_ms
    async with connect(options.metadata) as conn:
        catalog = LedgerCatalog(conn)
        splits = await catalog.plan(options, Pushdown(time=TimeBounds(since_ms, until_ms)))
        # Listed after planning: a ledger that closed meanwhile is recorded closed at its
        # final last entry, so it counts as complete only if the plan reached that entry.
        gate = asyncio.Semaphore(SNAPSHOT_CONCURRENCY)

        async def snapshot(ref: TopicPartitionRef) -> TopicSnapshot:
            async with gate:
                return await catalog.snapshot(ref, fail_on_data_loss=options.fail_on_data_loss)

        snapshots = list(
            await asyncio.gather(*(snapshot(ref) for ref in await catalog.resolve(options)))
        )
        _check_trimmed(base, snapshots, options.fail_on_data_loss)
        work: list[ExportRange] = []
        for item in base.pending_work(splits, until_ms):
            if item.after_ms is None:
                work.append(item)
                continue
            # Examined before up to an earlier --until: only what was published after it.
            split = item.split
            bounds = TimeBounds(item.after_ms + 1, until_ms).intersect(TimeBounds(since_ms))

            async def probe(entry_id: int, split: ReadSplit = split) -> int:
                return await catalog.publish_time(split.ref, split.ledger_id, entry_id)

            narrowed = await narrow_by_publish_time(
                probe, split.first_entry, split.last_entry, bounds, skew
            )
            if narrowed is not None:
                work.append(ExportRange(mf.trim_split(split, *narrowed), item.after_ms))
    log.info(
        "[%s] %d splits planned, %d ranges (%d entries) new",
        request.out,
        len(splits),
        len(work),
        sum(item.split.entries for item in work),
    )
    return _Plan(options, base, loaded is None, since_ms, splits, snapshots, work)


def _check_trimmed(
    manifest: Manifest, snapshots: Sequence[TopicSnapshot], fail_on_data_loss: bool
) -> None:
    """Refuse to go on (or warn) when retention trimmed ledgers before they were exported.

    Raises:
        DataLossError: a recorded ledger not wholly exported is gone.
    """
    for gone in manifest.trimmed_ledgers(snapshots):
        if not gone.lossy:
            log.warning(
                "%s: ledger %d, the newest this export had read, was deleted since; "
                "ledgers created and deleted between two runs cannot be seen",
                gone.topic,
                gone.ledger_id,
            )
            continue
        message = (
            f"{gone.topic}: ledger {gone.ledger_id} was deleted before it was wholly exported "
            f"(exported through entry {gone.through}); messages after it may be lost"
        )
        if fail_on_data_loss:
            raise DataLossError(message + " (--fail-on-data-loss false goes on)")
        log.warning("%s: going on (failOnDataLoss=false)", message)


# ---------------------------------------------------------------------- Spark


def export_frame(spark: Any, request: ExportRequest, work: Sequence[ExportRange]) -> Any:
    """The DataFrame of the rows to write: exactly ``work``'s entry ranges, rows filtered by
    the request's publish-time bounds and by what earlier ``--until`` runs wrote, plus the
    ``date`` column (UTC) when partitioning by date."""
    from pyspark.sql import functions as F

    from stripemq.spark import register

    register(spark)
    reader = spark.read.format("stripemq")
    for key, value in request.raw_options().items():
        reader = reader.option(key, value)
    reader = reader.option(mf.EXPORT_SPLITS_OPTION, mf.encode_splits(i.split for i in work))
    frame = reader.load()
    published = F.col(schema.PUBLISH_TIME)
    keep: Any = None

    def both(condition: Any) -> None:
        nonlocal keep
        keep = condition if keep is None else keep & condition

    if request.since_ms is not None:
        both(published >= F.lit(timestamp(request.since_ms)))
    if request.until_ms is not None:
        both(published <= F.lit(timestamp(request.until_ms)))
    for item in work:
        if item.after_ms is not None:
            written = (
                (F.col(schema.LEDGER_ID) == item.split.ledger_id)
                & F.col(schema.ENTRY_ID).between(item.split.first_entry, item.split.last_entry)
                & (published <= F.lit(timestamp(item.after_ms)))
            )
            both(~written)
    if keep is not None:
        frame = frame.where(keep)
    if request.partition_by == "date":
        frame = frame.withColumn(DATE_COLUMN, F.to_date(published))
    return frame


def _write(
    spark: Any,
    request: ExportRequest,
    plan: _Plan,
    staging: Path,
    run_id: str,
    progress: bool | None,
    stream: IO[str] | None,
) -> list[tuple[str, int]] | None:
    """Run the Spark job writing ``plan.work`` into ``staging``: the files written
    (relative paths and rows) by the arrow writer; ``None`` for Spark's writer (the caller
    lists what it committed).

    Raises:
        StripeMQError: what a task raised (see ``spark_failure``).
    """
    request = _with_since(request, plan.since_ms)
    context = spark.sparkContext
    # Dates of publish times in UTC; timestamps stored as Parquet's TIMESTAMP_MICROS
    # (UTC-adjusted), which pyarrow reads as timestamp[us, tz=UTC], not legacy INT96.
    confs = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }
    saved = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    context.setJobGroup(run_id, f"stripemq export {run_id}", interruptOnCancel=True)
    display: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if progress is not False:
        display = ExportProgress(
            context,
            run_id,
            plan.planned,
            stream=stream,
            live=None if progress is None else True,
            description="export",
        )
    try:
        if request.writer == "arrow":
            settings = TaskSettings(
                options=plan.options,
                staging=str(staging),
                partition_by=request.partition_by,
                since_ms=request.since_ms,
                until_ms=request.until_ms,
            )
            tasks = [
                ExportTask(index, item.split, item.after_ms) for index, item in enumerate(plan.work)
            ]
            job = context.parallelize(tasks, len(tasks)).mapPartitions(
                functools.partial(run_tasks, settings)
            )
            with display:
                return list(job.collect())
        frame = export_frame(spark, request, plan.work)
        writer = frame.write.mode("errorifexists").option("compression", "snappy")
        for column in UNIQUE_COLUMNS:  # a dictionary of unique values only costs time
            writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
        if request.partition_by == "date":
            writer = writer.partitionBy(DATE_COLUMN)
        with display:
            writer.parquet(str(staging))
        return None
    except StripeMQError:
        raise
    except KeyboardInterrupt:
        context.cancelJobGroup(run_id)
        raise
    except Exception as exc:
        raise spark_failure(exc) from exc
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
        context.setLocalProperty("spark.job.description", None)
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _with_since(request: ExportRequest, since_ms: int | None) -> ExportRequest:
    """``request`` with the export's floor (inherited from the manifest when not given)."""
    if request.since_ms == since_ms:
        return request
    return replace(request, since_ms=since_ms)


_TASK_ERROR = re.compile(r"stripemq\.errors\.(?P<name>[A-Za-z]+): (?P<message>[^\n]+)")


def spark_failure(exc: BaseException) -> StripeMQError:
    """The stripemq error a failed Spark job carries (a task's ``DataLossError``, ...) with
    its message, or a ``SparkSourceError`` with the first line of Spark's.

    A task's traceback prints a chain of causes innermost first (a ``BookieError``, then
    the ``DataLossError`` raised from it naming topic and ledger): the source's own
    errors (``SparkSourceError``) win, the last one printed (the outermost); failing
    that, the last stripemq error."""
    text = str(exc)
    found: list[StripeMQError] = []
    for match in _TASK_ERROR.finditer(text):
        kind = getattr(errors, match.group("name"), None)
        if isinstance(kind, type) and issubclass(kind, StripeMQError):
            try:
                found.append(kind(match.group("message").strip()))
            except TypeError:
                pass
    for error in reversed(found):
        if isinstance(error, SparkSourceError):
            return error
    if found:
        return found[-1]
    first = next((line.strip() for line in text.splitlines() if line.strip()), repr(exc))
    return SparkSourceError(f"the Spark job failed: {first[:500]}")


# ---------------------------------------------------------------------- commit


def _staged_files(staging: Path) -> list[tuple[Path, int]]:
    """The Parquet files Spark committed into ``staging`` with their row counts (files
    without rows are dropped), in path order."""
    import pyarrow.parquet as pq

    found: list[tuple[Path, int]] = []
    for path in sorted(staging.rglob("*.parquet")):
        relative = path.relative_to(staging)
        if any(part.startswith(("_", ".")) for part in relative.parts):
            continue
        rows = pq.read_metadata(path).num_rows
        if rows == 0:
            path.unlink()
            continue
        found.append((path, rows))
    return found


def _run_names(staged: Sequence[tuple[Path, int]], staging: Path, run_id: str) -> list[str]:
    """Where each staged file goes in ``OUT``: its partition directory, a run file name."""
    names = []
    for index, (path, _) in enumerate(staged):
        directory = path.parent.relative_to(staging).as_posix()
        name = mf.run_file_name(index, run_id)
        names.append(name if directory == "." else f"{directory}/{name}")
    return names


def _sync_files(paths: Iterable[Path]) -> None:
    """fsync every file (a few threads: the disk sees several at once)."""

    def sync(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    with ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="export-sync") as pool:
        list(pool.map(sync, list(paths)))


def _commit_manifest(out: Path, plan: _Plan, request: ExportRequest, run: RunRecord | None) -> None:
    """Write the manifest after the run (when it changed): the commit point."""
    updated = plan.base.after_run(
        plan.splits,
        request.until_ms,
        plan.snapshots,
        run,
        skew_ms=plan.options.publish_time_skew_ms,
    )
    if plan.first_run or updated.to_json() != plan.base.to_json():
        mf.write(out, updated)
