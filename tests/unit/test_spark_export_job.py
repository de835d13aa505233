"""The export job's pure parts (export.py, submit.py, progress.py): its flags, request
checks, how a failed Spark job's error is reported, and the progress estimate. The job
itself runs in tests/integration/test_spark_export.py."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from stripemq.errors import ConfigError, CorruptEntryError, DataLossError, SparkSourceError
from stripemq.spark.export import ExportRequest, ExportResult, spark_failure
from stripemq.spark.progress import (
    PlannedWork,
    Summary,
    TaskCounts,
    describe,
    estimate,
    format_seconds,
    print_summary,
    task_counts,
)
from stripemq.spark.submit import add_export_arguments, parse_time, request_from_args

METADATA = "zk://127.0.0.1:2181/stripemq"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_export_arguments(parser, master_default="local[*]")
    return parser.parse_args(["--metadata", METADATA, "--out", "/tmp/x", *argv])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-01", 1_793_491_200_000),
        ("2026-11-01T00:00", 1_793_491_200_000),
        ("2026-11-01T00:00:00.250Z", 1_793_491_200_250),
        ("2026-11-01T01:00:00+01:00", 1_793_491_200_000),
    ],
)
def test_times_are_iso_8601_and_utc_by_default(text: str, expected: int) -> None:
    assert parse_time("--since", text) == expected


def test_a_bad_time_names_its_flag() -> None:
    with pytest.raises(ConfigError, match="--until 'tomorrow' is not an ISO 8601"):
        parse_time("--until", "tomorrow")


def test_flags_become_a_request() -> None:
    args = parse(
        "--topics",
        "a, persistent://t/ns/b",
        "--since",
        "2026-11-01",
        "--partition-by",
        "date",
        "--fail-on-data-loss",
        "false",
        "--option",
        "maxEntriesPerPartition=5000",
    )
    request = request_from_args(args)
    assert request.topics == ("a", "persistent://t/ns/b")
    assert request.since_ms == 1_793_491_200_000 and request.until_ms is None
    assert request.partition_by == "date" and not request.fail_on_data_loss
    options = request.check()
    assert options.topics == ("persistent://public/default/a", "persistent://t/ns/b")
    assert options.max_entries_per_partition == 5000 and not options.fail_on_data_loss
    assert args.master == "local[*]"


def test_one_topic_flag_is_required() -> None:
    with pytest.raises(SystemExit):
        parse()
    with pytest.raises(SystemExit):
        parse("--topic", "a", "--topics", "b")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"partition_by": "hour"}, "--partition-by is one of date, none"),
        ({"since_ms": 2, "until_ms": 1}, "--since is after --until"),
        ({"topics": ()}, "give the topics"),
        ({"metadata": "http://x"}, "must be zk:// or local://"),
        ({"source_options": {"maxEntriesPerPartition": "0"}}, "must be positive"),
        ({"topics": ("non-persistent://public/default/x",)}, "only persistent topics"),
    ],
)
def test_bad_requests_are_refused_before_anything_runs(
    change: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {"metadata": METADATA, "out": Path("/tmp/x"), "topics": ("a",)}
    fields.update(change)
    with pytest.raises(ConfigError, match=message):
        ExportRequest(**fields).check()  # type: ignore[arg-type]


def test_option_flags_must_be_key_value() -> None:
    with pytest.raises(ConfigError, match="not KEY=VALUE"):
        request_from_args(parse("--topic", "a", "--option", "oops"))


SPARK_TEXT = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/x/stripemq/spark/ledger_reader.py", line 214, in _open
    raise self._deleted() from exc
stripemq.errors.DataLossError: [persistent://public/default/t] ledger 12 was deleted: \
entries 0..3 planned to be read are gone
"""


def test_a_failed_spark_job_raises_the_error_its_task_raised() -> None:
    error = spark_failure(RuntimeError(SPARK_TEXT))
    assert isinstance(error, DataLossError)
    assert str(error).startswith("[persistent://public/default/t] ledger 12 was deleted")
    corrupt = spark_failure(RuntimeError("...\nstripemq.errors.CorruptEntryError: bad crc\n"))
    assert isinstance(corrupt, CorruptEntryError) and str(corrupt) == "bad crc"
    other = spark_failure(RuntimeError("\n  Job aborted due to stage failure: OOM\n more"))
    assert type(other) is SparkSourceError
    assert str(other) == "the Spark job failed: Job aborted due to stage failure: OOM"
    # A name that is not one of ours is not trusted.
    assert type(spark_failure(RuntimeError("stripemq.errors.Nope: x"))) is SparkSourceError


# ---------------------------------------------------------------------- progress


def test_estimate_from_finished_tasks() -> None:
    planned = PlannedWork(splits=4, entries=400, bytes=400_000_000)
    start = estimate(planned, TaskCounts(), 1.0)
    assert (start.entries_done, start.bytes_done, start.eta_s) == (0, 0, None)
    half = estimate(planned, TaskCounts(total=4, completed=2, active=2), 10.0)
    assert (half.fraction, half.entries_done, half.bytes_done) == (0.5, 200, 200_000_000)
    assert half.mb_per_s == pytest.approx(20.0) and half.eta_s == pytest.approx(10.0)
    # Spark may retry tasks: never more than all of it.
    assert estimate(planned, TaskCounts(total=4, completed=6), 5.0).fraction == 1.0
    text = describe(planned, TaskCounts(total=4, completed=2), half)
    assert text["entries"] == "200/400 entries" and text["eta"] == "ETA 00:10"
    assert format_seconds(3725) == "1:02:05"


class FakeTracker:
    """The parts of pyspark's StatusTracker the display reads."""

    class Info:
        def __init__(self, **fields: object) -> None:
            self.__dict__.update(fields)

    def getJobIdsForGroup(self, group: str) -> list[int]:
        return [1, 2] if group == "run" else []

    def getJobInfo(self, job: int) -> object:
        return self.Info(stageIds=[job * 10]) if job == 1 else None

    def getStageInfo(self, stage: int) -> object:
        return self.Info(numTasks=8, numCompletedTasks=3, numActiveTasks=2, numFailedTasks=1)


def test_task_counts_sum_the_stages_of_the_run_group() -> None:
    assert task_counts(FakeTracker(), "run") == TaskCounts(8, 3, 2, 1)
    assert task_counts(FakeTracker(), "other") == TaskCounts()


def test_summary_table() -> None:
    out = io.StringIO()
    result = ExportResult(
        out=Path("/tmp/x"),
        run_id="r",
        messages=1234,
        entries=12,
        stored_bytes=50_000_000,
        parquet_bytes=40_000_000,
        files=("a", "b"),
        seconds=12.0,
        write_seconds=10.0,
    )
    assert result.summary() == Summary(1234, 12, 50_000_000, 40_000_000, 2, 12.0, 10.0)
    print_summary(result.summary(), title="stripemq export r", stream=out)
    table = out.getvalue()
    assert "1,234" in table and "50.0" in table and "5.0" in table  # 50 MB in 10 s
