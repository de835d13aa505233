"""The export job's command line, for ``spark-submit`` and for ``stripemq spark export``.

Run it with ``spark-submit`` (which provides the SparkSession: master, memory, cluster)::

    spark-submit $(python3 -c 'import stripemq.spark.submit as m; print(m.__file__)') \\
        --metadata zk://zk:2181/stripemq --topic persistent://public/default/orders \\
        --out /data/export/orders --partition-by date

or as ``python3 -m stripemq.spark.submit`` with the same flags. The package must be
importable by the driver and by the executors' Python (installed, or on ``PYTHONPATH``).
Nothing here imports PySpark or the ledger client until the job runs, so the CLI can
build its parser from ``add_export_arguments`` cheaply.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stripemq.spark.export import ExportRequest, ExportResult

log = logging.getLogger(__name__)


def add_export_arguments(parser: argparse.ArgumentParser, *, master_default: str | None) -> None:
    """The export's flags (``master_default``: the CLI's ``local[*]``; ``None`` under
    spark-submit, whose own ``--master`` then applies)."""
    parser.add_argument(
        "--metadata",
        required=True,
        help="metadata store: zk://host:port/chroot, or local://<standalone data>/metadata",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="a topic (a partitioned topic means all its partitions)")
    which.add_argument("--topics", help="comma-separated topics")
    which.add_argument(
        "--topics-pattern",
        help="a regex over full topic names, starting with persistent://<tenant>/<namespace>/",
    )
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument(
        "--since",
        help="only messages published at or after this ISO 8601 time (UTC unless it has an "
        "offset; a date alone is its start, 00:00); the export keeps it for later runs",
    )
    parser.add_argument(
        "--until",
        help="only messages published at or before this ISO 8601 time, for this run (a date "
        "alone means through its end: --until 2026-11-30 includes all of November 30)",
    )
    parser.add_argument(
        "--partition-by",
        choices=["date", "none"],
        default="none",
        help="date: date=YYYY-MM-DD/ directories by publish time (UTC); none: one directory",
    )
    parser.add_argument(
        "--master",
        default=master_default,
        help="Spark master"
        + (f" (default {master_default})" if master_default else " (default: spark-submit's)"),
    )
    parser.add_argument(
        "--fail-on-data-loss",
        choices=["true", "false"],
        default="true",
        help="false: skip ledgers deleted before they were exported, with a warning",
    )
    parser.add_argument(
        "--writer",
        choices=["arrow", "spark"],
        default="arrow",
        help="arrow: each task reads its entries and writes Parquet with pyarrow (fastest); "
        "spark: the stripemq data source and Spark's Parquet writer",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another stripemq source option, e.g. maxEntriesPerPartition=5000 (repeatable)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the run's figures as one JSON line on stdout"
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar and no summary table"
    )
    parser.add_argument("--log-level", default="WARNING")


_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_time(flag: str, text: str, *, end_of_day: bool = False) -> int:
    """An ISO 8601 date or date-time (UTC when it names no offset) in epoch milliseconds.
    A date alone is its first millisecond, or with ``end_of_day`` its last (an inclusive
    upper bound: ``--until 2026-11-30`` includes that whole day).

    Raises:
        ConfigError: ``text`` is not one (the message names ``flag``).
    """
    from stripemq.errors import ConfigError

    value = text.strip()
    try:
        if _DATE_ONLY.match(value):
            moment = datetime.fromisoformat(value + "T00:00:00")
            if end_of_day:
                moment += timedelta(days=1, milliseconds=-1)
        else:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r} is not an ISO 8601 date or time (e.g. 2026-11-01T00:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def request_from_args(args: argparse.Namespace) -> ExportRequest:
    """The ``ExportRequest`` the flags describe.

    Raises:
        ConfigError: a bad date or option.
    """
    from stripemq.errors import ConfigError
    from stripemq.spark.export import ExportRequest

    topics: tuple[str, ...] = ()
    if args.topic:
        topics = (args.topic,)
    elif args.topics:
        topics = tuple(t.strip() for t in args.topics.split(",") if t.strip())
        if not topics:
            raise ConfigError("--topics names no topic")
    extra: dict[str, str] = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option {item!r} is not KEY=VALUE")
        extra[key.strip()] = value.strip()
    return ExportRequest(
        metadata=args.metadata,
        out=Path(args.out),
        topics=topics,
        topics_pattern=args.topics_pattern,
        since_ms=parse_time("--since", args.since) if args.since else None,
        until_ms=parse_time("--until", args.until, end_of_day=True) if args.until else None,
        partition_by=args.partition_by,
        fail_on_data_loss=args.fail_on_data_loss == "true",
        source_options=extra,
        writer=args.writer,
    )


def workers_can_import_stripemq() -> None:
    """Let Spark's Python workers import this package when it runs from a source tree
    (not installed): its directory goes on ``PYTHONPATH``, which the JVM, started after
    this, hands to the workers it forks. An installed package needs nothing."""
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def export_session(master: str | None, app_name: str = "stripemq-export") -> Any:
    """A SparkSession for the job: ``spark_session``'s settings; ``master`` only when given
    (under spark-submit, its own)."""
    if master is not None:
        from stripemq.spark import spark_session

        spark = spark_session(app_name, master=master)
    else:
        from pyspark.sql import SparkSession

        from stripemq.spark import FILTER_PUSHDOWN_CONF, register

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = (
            SparkSession.builder.appName(app_name)
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config(FILTER_PUSHDOWN_CONF, "true")
            .getOrCreate()
        )
        register(spark)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(args: argparse.Namespace, spark: Any = None) -> ExportResult:
    """The job for parsed flags: ``spark`` if given, else a session started only when
    there is something to write.

    Raises:
        StripeMQError: bad input or a failed job (see ``run_export``).
    """
    from stripemq.spark.export import run_export

    request = request_from_args(args)
    request.check()  # bad flags fail before Spark or the metadata store is touched
    workers_can_import_stripemq()

    def start() -> Any:
        return export_session(args.master)

    result = run_export(
        request, spark if spark is not None else start, progress=False if args.no_progress else None
    )
    if result.run_id is None and not args.no_progress:
        sys.stderr.write(f"stripemq spark export: nothing new in {request.out}\n")
    if args.json:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
        sys.stdout.flush()
    return result


def configure_logging(level: str) -> None:
    """Log lines on stderr at ``level``; the ZooKeeper client's reconnection warnings only
    when debugging (an unreachable store is reported once, as the command's error)."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("kazoo").setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    """spark-submit's (and ``python3 -m``'s) entry: 0 on success, 2 with a one-line
    error on stderr for bad input or a failed job."""
    parser = argparse.ArgumentParser(
        prog="stripemq.spark.submit", description="Export topics to Parquet (spark-submit job)."
    )
    add_export_arguments(parser, master_default=None)
    return run_export_command(parser.parse_args(argv))


def run_export_command(args: argparse.Namespace) -> int:
    """Run the export for parsed flags (this module's and ``stripemq spark export``'s): 0 on
    success, 2 with a one-line error on stderr for bad input or a failed job."""
    from stripemq.errors import StripeMQError

    configure_logging(args.log_level)
    try:
        run(args)
    except StripeMQError as exc:
        sys.stderr.write(f"stripemq spark export: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("stripemq spark export: interrupted\n")
        return 130
    return 0


if __name__ == "__main__":
    if not __package__:
        # Run as a file (spark-submit): its own directory, first on the path, would shadow
        # modules by their bare names; the source tree's root lets ``stripemq`` import.
        here = Path(__file__).resolve().parent
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
        sys.path.insert(0, str(here.parents[1]))
    sys.exit(main())
