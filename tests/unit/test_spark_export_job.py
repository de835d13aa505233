"""The export job's pure parts (export.py, submit.py, progress.py): its flags, request
checks, how a failed Spark job's error is reported, and the progress estimate. The job
itself runs in tests/integration/test_spark_export.py."""

from __future__ import annotations

import argparse
import io
import os
from pathlib import Path
from typing import Any

import pytest

from stripemq.errors import (
    ConfigError,
    CorruptEntryError,
    DataLossError,
    SparkSourceError,
    UnknownTopicError,
)
from stripemq.spark import export
from stripemq.spark import manifest as mf
from stripemq.spark.export import ExportRequest, ExportResult, run_export, spark_failure
from stripemq.spark.manifest import ExportRange, Manifest
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import ReadSplit, TopicPartitionRef
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


def test_a_date_alone_until_means_through_the_end_of_that_day() -> None:
    end_of_nov_30 = 1_796_083_200_000 - 1  # 2026-12-01T00:00Z, less 1 ms
    assert parse_time("--until", "2026-11-30", end_of_day=True) == end_of_nov_30
    assert parse_time("--until", "2026-11-30T00:00", end_of_day=True) == end_of_nov_30 - 86_399_999
    request = request_from_args(
        parse("--topic", "a", "--since", "2026-11-30", "--until", "2026-11-30")
    )
    assert request.since_ms == 1_796_083_200_000 - 86_400_000
    assert request.until_ms == end_of_nov_30
    request.check()  # the same day: not "--since is after --until"


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
        (
            {"source_options": {"maxEntriesPerPartiton": "10"}},
            'unknown option "maxEntriesPerPartiton" \\(did you mean "maxEntriesPerPartition"',
        ),
        ({"source_options": {"Metadata": "zk://h:1/y"}}, "--option Metadata: use --metadata"),
        ({"source_options": {"startingOffsets": "latest"}}, "a streaming option"),
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


CHAINED_TEXT = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/x/stripemq/bookie/client.py", line 88, in read_entries
    raise NoSuchLedgerError(ledger_id)
stripemq.errors.NoSuchLedgerError: ledger 12 does not exist

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/stripemq/spark/ledger_reader.py", line 214, in _open
    raise self._deleted() from exc
stripemq.errors.DataLossError: [persistent://public/default/t] ledger 12 was deleted

	at org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException
"""


def test_a_chained_task_error_reports_the_outer_error_naming_topic_and_ledger() -> None:
    error = spark_failure(RuntimeError(CHAINED_TEXT))
    assert isinstance(error, DataLossError)
    assert str(error) == "[persistent://public/default/t] ledger 12 was deleted"
    # the source's own error wins over a later bookie error (printed as its context)
    flipped = (
        CHAINED_TEXT.replace("NoSuchLedgerError", "X").replace(
            "stripemq.errors.X: ledger 12 does not exist", ""
        )
        + "stripemq.errors.NoSuchLedgerError: ledger 12 does not exist\n"
    )
    assert isinstance(spark_failure(RuntimeError(flipped)), DataLossError)
    # only stripemq errors outside the source's: the last one printed
    two = "stripemq.errors.ReadError: inner\n...\nstripemq.errors.NoSuchLedgerError: outer\n"
    assert str(spark_failure(RuntimeError(two))) == "outer"


# ---------------------------------------------------------------------- the output directory

REF = TopicPartitionRef("persistent://public/default/t", -1, "public/default/persistent/t")


def export_request(out: Path) -> ExportRequest:
    return ExportRequest(metadata=METADATA, out=out, topics=("t",))


def test_an_out_that_cannot_be_a_directory_is_one_config_error(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, message in [(afile, "is not a directory"), (afile / "sub", "cannot create it")]:
        with pytest.raises(ConfigError, match=message):
            run_export(export_request(out), lambda: None, progress=False)
    assert afile.read_text() == "x"


def test_a_failed_plan_leaves_no_new_out_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unknown(*_: Any) -> None:
        raise UnknownTopicError("topic persistent://public/default/t does not exist")

    monkeypatch.setattr(export, "_plan", unknown)
    out = tmp_path / "new" / "export"
    with pytest.raises(UnknownTopicError):
        run_export(export_request(out), lambda: None, progress=False)
    assert list(tmp_path.iterdir()) == []
    # An existing directory is left as it was found (with the lock file).
    (tmp_path / "old").mkdir()
    with pytest.raises(UnknownTopicError):
        run_export(export_request(tmp_path / "old"), lambda: None, progress=False)
    assert (tmp_path / "old").is_dir()


def test_a_first_run_writes_its_manifest_before_its_files_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So run files without a manifest are never a crashed first run's (``recover``
    refuses them); a first run that fails removes that manifest again."""
    out = tmp_path / "out"
    split = ReadSplit(REF, 5, 0, 9, 1000)

    async def plan(request: ExportRequest, options: SourceOptions, loaded: Any) -> Any:
        base = Manifest(partition_by=request.partition_by, since_ms=request.since_ms)
        return export._Plan(options, base, loaded is None, None, [split], [], [ExportRange(split)])

    def write(_session: Any, _request: Any, _plan: Any, staging: Path, *_: Any) -> Any:
        staging.mkdir(parents=True)
        (staging / "a.parquet").write_bytes(b"PAR1")
        return [("a.parquet", 3)]

    real_replace = os.replace
    at_move: list[Manifest | None] = []

    def replace(src: Any, dst: Any) -> None:
        if str(dst).endswith(".parquet"):
            at_move.append(mf.load(out))
            raise OSError("disk gone")
        real_replace(src, dst)

    monkeypatch.setattr(export, "_plan", plan)
    monkeypatch.setattr(export, "_write", write)
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="disk gone"):
        run_export(export_request(out), lambda: None, progress=False)
    monkeypatch.setattr(os, "replace", real_replace)
    assert len(at_move) == 1 and at_move[0] is not None and at_move[0].runs == ()
    assert mf.load(out) is None and list(mf.find_run_files(out)) == []


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
