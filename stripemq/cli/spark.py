"""``stripemq spark export``: export topics to Parquet with a local Spark (``--master``).

The flags and the job are ``stripemq.spark.submit``'s (the same job runs under
``spark-submit``). Building this parser imports neither PySpark nor the ledger client;
bad input ends the command with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse

from stripemq.spark.submit import add_export_arguments


def add_spark_parser(sub: argparse._SubParsersAction) -> None:
    spark = sub.add_parser("spark", help="Spark jobs over the ledgers (export to Parquet)")
    commands = spark.add_subparsers(dest="spark_command", required=True)
    export = commands.add_parser(
        "export",
        help="export topics to Parquet, incrementally (a manifest in the output directory)",
        description="Export topics to Parquet, read straight from the bookies. Running it "
        "again exports only what is new. A run that fails removes what it wrote; one killed "
        "while moving its files into place can leave some, which the next run removes.",
    )
    add_export_arguments(export, master_default="local[*]")


def main(argv: list[str]) -> int:
    """``stripemq spark ...`` without building the other roles' parsers."""
    parser = argparse.ArgumentParser(prog="stripemq")
    add_spark_parser(parser.add_subparsers(dest="command", required=True))
    return run_spark(parser.parse_args(["spark", *argv]))


def run_spark(args: argparse.Namespace) -> int:
    """Run ``stripemq spark <command>``; the exit code."""
    from stripemq.spark.submit import run_export_command

    return run_export_command(args)  # export is the one command so far
