"""The export's executor side: one task reads one range of entries and writes it to Parquet.

``stripemq spark export`` (``export.py``) runs one Spark task per range with
``SparkContext.parallelize(...).mapPartitions(...)``. Each task reads its entries with
``ledger_reader.read_split``, the same reader the ``stripemq`` data source uses, filters the
Arrow batches by publish time, and writes them with pyarrow straight into the run's staging
directory. Rows never pass through the JVM: there is no Arrow-to-row conversion and no row
by row Parquet encoding, which is where the DataFrame path spends most of its time.

Files and retries. A task writes ``[date=YYYY-MM-DD/]task-<index>-<attempt>.parquet``. It
writes under a hidden temp name, renames when the file is complete, and returns the paths
it wrote with their row counts. The driver moves only the files that the successful
attempts returned. Whatever a failed attempt left behind goes when the staging directory
is removed. A range whose rows are all filtered out writes no file.

The staging directory must be reachable at the same path by the driver and the executors:
a local directory with a local master, or a shared filesystem.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from stripemq.spark import schema
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import ReadSplit

DATE_COLUMN = "date"
ROW_GROUP_BYTES = 64 * 1024 * 1024  # Arrow bytes buffered per file before a row group
# Columns whose values repeat: dictionary-encoded. The others (values, ids, times) are
# mostly unique, and a dictionary would only cost time.
DICTIONARY_COLUMNS = [schema.KEY, schema.TOPIC, schema.PRODUCER_NAME]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ExportTask:
    """One Spark task: a range of entries. ``after_ms`` is set when an earlier run bounded
    by ``--until after_ms`` already wrote the messages published up to then."""

    index: int
    split: ReadSplit
    after_ms: int | None = None


@dataclass(frozen=True)
class TaskSettings:
    """What every task of a run shares."""

    options: SourceOptions
    staging: str  # the run's staging directory
    partition_by: str  # "date" | "none"
    since_ms: int | None = None  # publish-time bounds, inclusive
    until_ms: int | None = None


def timestamp(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC datetime (exact; no float rounding)."""
    return _EPOCH + timedelta(milliseconds=ms)


def run_tasks(settings: TaskSettings, tasks: Iterable[ExportTask]) -> Iterator[tuple[str, int]]:
    """``mapPartitions``'s function: write each task's rows; yield ``(path relative to the
    staging directory, rows)`` for each file written."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    for task in tasks:
        yield from write_task(settings, task, attempt)


def write_task(settings: TaskSettings, task: ExportTask, attempt: int) -> list[tuple[str, int]]:
    """Read ``task``'s entries and write the rows within the bounds. Returns the files as
    ``(relative path, rows)``.

    Raises:
        DataLossError, CorruptEntryError, SparkSourceError: from the reader.
    """
    from stripemq.spark.ledger_reader import read_split

    files = _Files(Path(settings.staging), f"task-{task.index:05d}-{attempt}")
    try:
        for batch in read_split(task.split, settings.options):
            kept = keep_rows(batch, settings, task.after_ms)
            if kept.num_rows == 0:
                continue
            if settings.partition_by == "date":
                for date, rows in split_by_date(kept):
                    files.add(f"{DATE_COLUMN}={date}", rows)
            else:
                files.add("", kept)
        return files.close()
    except BaseException:
        files.abort()
        raise


def keep_rows(batch: Any, settings: TaskSettings, after_ms: int | None) -> Any:
    """The rows of ``batch`` published within the run's bounds, and after ``after_ms``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    published = batch.column(schema.COLUMN_NAMES.index(schema.PUBLISH_TIME))
    kind = pa.timestamp("us", tz="UTC")
    mask = None
    tests = []
    if settings.since_ms is not None:
        tests.append(pc.greater_equal(published, pa.scalar(timestamp(settings.since_ms), kind)))
    if settings.until_ms is not None:
        tests.append(pc.less_equal(published, pa.scalar(timestamp(settings.until_ms), kind)))
    if after_ms is not None:
        tests.append(pc.greater(published, pa.scalar(timestamp(after_ms), kind)))
    for test in tests:
        mask = test if mask is None else pc.and_(mask, test)
    return batch if mask is None else batch.filter(mask)


def split_by_date(batch: Any) -> list[tuple[str, Any]]:
    """``batch``'s rows grouped by the UTC date of their publish time, as
    ``("YYYY-MM-DD", rows)``, in date order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    published = batch.column(schema.COLUMN_NAMES.index(schema.PUBLISH_TIME))
    dates = pc.cast(published, pa.date32())  # of the UTC instant
    distinct = pc.unique(dates)
    if len(distinct) == 1:
        return [(distinct[0].as_py().isoformat(), batch)]
    return [
        (day.as_py().isoformat(), batch.filter(pc.equal(dates, day)))
        for day in sorted(distinct, key=lambda d: d.as_py())
    ]


@dataclass
class _File:
    writer: Any
    temp: Path
    final: Path
    relative: str
    rows: int = 0
    buffered: list[Any] = field(default_factory=list)
    buffered_bytes: int = 0


class _Files:
    """One Parquet file per partition directory a task writes into."""

    def __init__(self, staging: Path, stem: str) -> None:
        self.staging = staging
        self.stem = stem
        self.files: dict[str, _File] = {}

    def add(self, directory: str, batch: Any) -> None:
        import pyarrow.parquet as pq

        file = self.files.get(directory)
        if file is None:
            parent = self.staging / directory if directory else self.staging
            parent.mkdir(parents=True, exist_ok=True)
            name = f"{self.stem}.parquet"
            temp = parent / f".{name}.tmp"
            writer = pq.ParquetWriter(
                temp,
                schema.arrow_schema(),
                compression="snappy",
                use_dictionary=DICTIONARY_COLUMNS,
            )
            relative = f"{directory}/{name}" if directory else name
            file = self.files[directory] = _File(writer, temp, parent / name, relative)
        file.buffered.append(batch)
        file.buffered_bytes += batch.nbytes
        file.rows += batch.num_rows
        if file.buffered_bytes >= ROW_GROUP_BYTES:
            self._flush(file)

    def _flush(self, file: _File) -> None:
        import pyarrow as pa

        if file.buffered:
            table = pa.Table.from_batches(file.buffered, schema=schema.arrow_schema())
            file.writer.write_table(table, row_group_size=table.num_rows)
            file.buffered.clear()
            file.buffered_bytes = 0

    def close(self) -> list[tuple[str, int]]:
        """Finish every file (then renamed into place); what was written."""
        written = []
        for file in self.files.values():
            self._flush(file)
            file.writer.close()
            os.replace(file.temp, file.final)
            written.append((file.relative, file.rows))
        return written

    def abort(self) -> None:
        for file in self.files.values():
            try:
                file.writer.close()
            except Exception:  # already failing: the task's own error is what matters
                pass
            file.temp.unlink(missing_ok=True)
