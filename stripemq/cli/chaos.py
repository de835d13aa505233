"""``stripemq chaos``: start a cluster, attack it on a seeded schedule, and judge what it kept.

Exit 0 when every check passed, 1 when one failed, 2 on bad arguments or when a part it
needs (Java and ZooKeeper, matplotlib) is missing. A progress line is drawn on stderr while
it runs; the verdict table goes to stdout at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stripemq.chaos.runner import ChaosOptions

__all__ = ["add_chaos_parser", "main", "run_chaos_command"]


def add_chaos_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "chaos",
        help="fault-injection verifier: run a cluster under faults, check nothing acknowledged "
        "was lost, duplicated or reordered",
        description="Start ZooKeeper, 4 bookies (E3/Qw2/Qa2), 2 brokers and auto-recovery on "
        "127.0.0.1 in a temporary directory; keep producers (deduplication on and off) and "
        "consumers in every subscription mode busy while a seeded schedule kills, pauses, "
        "partitions, fills and corrupts them; then check the history and write "
        "DIR/summary.json and DIR/report.html.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="replay a run's schedule (default: a new one)"
    )
    parser.add_argument(
        "--duration",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="how long faults are injected (default 60)",
    )
    parser.add_argument(
        "--faults", type=_count, default=20, metavar="N", help="how many faults (default 20)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("chaos-out"),
        metavar="DIR",
        help="where summary.json, report.html, history.jsonl and the logs go (default ./chaos-out)",
    )
    parser.add_argument(
        "--kinds",
        default=None,
        metavar="KIND[,KIND...]",
        help="only these fault kinds (default all): "
        "bookie_kill, bookie_pause, bookie_disk_full, bookie_lost, entry_log_bit_flip, "
        "entry_log_truncate, broker_kill, broker_pause, broker_session_expiry, partition",
    )
    parser.add_argument(
        "--rate",
        type=_positive_float,
        default=200.0,
        metavar="MSGS_PER_S",
        help="messages per second over all producers (default 200)",
    )
    parser.add_argument(
        "--recovery-bound",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="longest allowed time for traffic to resume after the last fault (default 60)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="run the cluster here and keep it (default: a temporary directory, removed)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument(
        "--log-level",
        default="warning",
        type=str.lower,
        choices=["debug", "info", "warning", "error"],
        help="log level on stderr (default warning)",
    )


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def main(argv: list[str]) -> int:
    """``stripemq chaos ...`` without building the other roles' parsers."""
    parser = argparse.ArgumentParser(prog="stripemq")
    add_chaos_parser(parser.add_subparsers(dest="command", required=True))
    return run_chaos_command(parser.parse_args(["chaos", *argv]))


def run_chaos_command(args: argparse.Namespace) -> int:
    from stripemq.chaos.runner import ChaosOptions
    from stripemq.chaos.schedule import parse_kinds

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        kinds = parse_kinds(args.kinds) if args.kinds else None
    except ValueError as exc:
        print(f"stripemq chaos: {exc}", file=sys.stderr)
        return 2
    missing = _missing_parts()
    if missing:
        print(f"stripemq chaos: {missing}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    options = ChaosOptions(
        seed=seed,
        duration_s=args.duration,
        faults=args.faults,
        out_dir=args.out,
        kinds=kinds,
        rate=args.rate,
        recovery_bound_s=args.recovery_bound,
        work_dir=args.work_dir,
    )
    print(
        f"stripemq chaos: seed {seed}, {args.faults} faults over {args.duration:g}s",
        file=sys.stderr,
    )
    progress = None if args.no_progress else _ProgressLine()
    try:
        summary = asyncio.run(_run_until_signalled(options, progress))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\nstripemq chaos: interrupted; the cluster was stopped", file=sys.stderr)
        return 130
    finally:
        if progress is not None:
            progress.end()
    print(render_verdict(summary, args.out))
    return 0 if summary["verdict"] == "pass" else 1


async def _run_until_signalled(options: ChaosOptions, progress: Any) -> dict[str, Any]:
    """The run, cancelled (its cluster stopped on the way out) by SIGTERM as by Ctrl-C."""
    from stripemq.chaos.runner import run_chaos

    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run_chaos(options, progress)


def _missing_parts() -> str | None:
    """What the run cannot do without, in words; ``None`` when all is there."""
    import importlib.util
    import os

    from stripemq.zookeeper.java import DEBIAN_JAR, INSTALL_HINT, find_java

    if importlib.util.find_spec("matplotlib") is None:
        return "the report needs matplotlib: pip install 'stripemq[chaos]'"
    if find_java() is None or not os.path.exists(DEBIAN_JAR):
        return f"the cluster runs ZooKeeper, which needs Java and its jar: {INSTALL_HINT}"
    return None


class _ProgressLine:
    """One line on stderr, redrawn in place when it is a terminal, else printed every 10 s."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.count = 0

    def __call__(self, line: str) -> None:
        self.count += 1
        if self.tty:
            sys.stderr.write("\r" + line[:160].ljust(160))
            sys.stderr.flush()
        elif self.count % 10 == 1:
            print(line, file=sys.stderr, flush=True)

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def render_verdict(summary: dict[str, Any], out: Path) -> str:
    """The verdict table and the figures, as the command prints them."""
    lines = [
        f"verdict: {summary['verdict'].upper()} (seed {summary['seed']})",
        f"acked {summary['acked']}, lost {summary['lost']}, duplicated {summary['duplicated']}, "
        f"reordered {summary['reordered']}, unknown {summary['unknown']}, failed "
        f"{summary['failed']}; recovery after the last fault: {summary['recovery_s']}s",
        "faults: " + ", ".join(f"{k} {n}" for k, n in summary["faults"].items()),
    ]
    for check in summary["checks"]:
        mark = "PASS" if check["passed"] else "FAIL"
        lines.append(f"  {mark}  {check['name']}: {check['detail']}")
    for note in summary.get("notes", []):
        lines.append(f"  note: {note}")
    lines.append(f"report: {out / 'report.html'}  summary: {out / 'summary.json'}")
    return "\n".join(lines)
