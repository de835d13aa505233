"""Replicated ledger write throughput and latency: one writer, three bookie processes.

Starts a real ZooKeeper and three ``stripemq bookie`` processes (fsync on) on free 127.0.0.1
ports in a temp dir; the writer is a ``BookKeeper`` client in this process. For each
configuration (E/Qw/Qa 3/3/2 and 3/2/2 by default) and entry size (1 KiB, 64 KiB) it runs
two phases, each on a fresh ledger:

* throughput: a pipelined writer keeps ``--inflight`` adds outstanding for ``--seconds``
  (or ``--count`` adds) and reports ``adds_per_s`` / ``mb_per_s`` (payload bytes, 1 MB = 1e6,
  not counting replication) plus the latencies under that load (``sat_p50_ms``...);
* latency: an open-loop writer adds at a fixed moderate rate (``--latency-rate``, capped at
  ``--latency-load`` of the throughput just measured) for ``--latency-seconds`` and reports
  ``p50_ms`` / ``p99_ms`` from ``add_entry_async`` to its completion (Qa acks, in order).

Prints progress to stderr and one JSON object on the last line of stdout:
``{"bench": "ledger_write", "fsync_per_s": ..., "results": [...], ...}``. ``fsync_per_s`` is
this disk's own rate of 4 KiB write + fdatasync in the bookies' data directory (all three
bookies share that disk). Everything shares this machine's CPUs, so each throughput row
also gives the cores used (1.0 = one core busy all the time) by this process, the client
(``client_cpu``), by its event loop thread alone (``client_loop_cpu``; the rest is gRPC's
threads), by each bookie (``bookie_cpu``) and by the whole machine (``machine_cpu``, out
of ``cpu_count``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import psutil

from stripemq.bookie.client import BookKeeper, LedgerHandle
from stripemq.testing.bench import bench_cluster, measure_fsync_rate, percentile, progress

BOOKIES = 3
LATENCY_MODE = "open-loop fixed rate (latency_rate_per_s), one add at a time on a schedule"


def parse_quorums(text: str) -> list[tuple[int, int, int]]:
    """``"3/3/2,3/2/2"`` -> ``[(3, 3, 2), (3, 2, 2)]`` (ensemble/write quorum/ack quorum)."""
    configs = []
    for item in text.split(","):
        e, qw, qa = (int(x) for x in item.split("/"))
        if not 1 <= qa <= qw <= e <= BOOKIES:
            raise argparse.ArgumentTypeError(f"bad E/Qw/Qa {item!r} for {BOOKIES} bookies")
        configs.append((e, qw, qa))
    return configs


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


class CpuMeter:
    """CPU seconds used by some processes between ``start()`` and ``utilisation()``."""

    def __init__(self, procs: dict[str, psutil.Process]) -> None:
        self.procs = procs
        self._start: dict[str, float] = {}

    def _cpu(self, proc: psutil.Process) -> float:
        times = proc.cpu_times()
        return times.user + times.system

    @staticmethod
    def _machine() -> float:
        """Seconds all CPUs of this machine spent busy (neither idle nor waiting for I/O)."""
        times = psutil.cpu_times()
        return sum(times) - times.idle - getattr(times, "iowait", 0.0)

    def start(self) -> None:
        self._start = {name: self._cpu(p) for name, p in self.procs.items()}
        self._start["machine"] = self._machine()

    def utilisation(self, elapsed: float) -> dict[str, float]:
        """Cores used by each process, and by the whole machine (key ``machine``), on
        average (1.0 = one core busy all the time)."""
        used = {name: self._cpu(p) - self._start[name] for name, p in self.procs.items()}
        used["machine"] = self._machine() - self._start["machine"]
        return {name: round(seconds / elapsed, 2) for name, seconds in used.items()}


def latency_stats(latencies: list[float], prefix: str = "") -> dict[str, float]:
    return {
        f"{prefix}p50_ms": round(statistics.median(latencies), 3),
        f"{prefix}p99_ms": round(percentile(latencies, 0.99), 3),
        f"{prefix}max_ms": round(max(latencies), 3),
    }


async def run_pipelined(
    handle: LedgerHandle, payload: bytes, window: int, seconds: float, count: int | None
) -> tuple[float, list[float]]:
    """Keep ``window`` adds in flight for ``seconds`` (or until ``count`` were sent); return
    the elapsed time (until the last add completed) and every add's latency in ms."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []

    def completed(sent_at: float, future: asyncio.Future[int]) -> None:
        if not future.cancelled() and future.exception() is None:
            latencies.append((loop.time() - sent_at) * 1000)

    inflight: deque[asyncio.Future[int]] = deque()
    sent = 0
    start = loop.time()
    deadline = start + seconds

    def more() -> bool:
        return sent < count if count is not None else loop.time() < deadline

    while more():
        while len(inflight) < window and more():
            future = handle.add_entry_async(payload)
            future.add_done_callback(functools.partial(completed, loop.time()))
            inflight.append(future)
            sent += 1
        await inflight[0]  # adds complete in entry order: the oldest is first to finish
        while inflight and inflight[0].done():
            inflight.popleft().result()  # raises if the add failed
    await asyncio.gather(*inflight)
    return loop.time() - start, latencies


async def run_fixed_rate(
    handle: LedgerHandle, payload: bytes, rate: float, seconds: float
) -> list[float]:
    """Add at ``rate`` per second on a fixed schedule, not waiting for completions; return
    every add's latency in ms (from the add call to its completion)."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []

    def completed(sent_at: float, future: asyncio.Future[int]) -> None:
        if not future.cancelled() and future.exception() is None:
            latencies.append((loop.time() - sent_at) * 1000)

    futures = []
    start = loop.time()
    for i in range(max(1, int(rate * seconds))):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        future = handle.add_entry_async(payload)
        future.add_done_callback(functools.partial(completed, loop.time()))
        futures.append(future)
    await asyncio.gather(*futures)
    return latencies


async def journal_fsyncs(bk: BookKeeper, addresses: list[str]) -> list[int]:
    infos = [await (await bk.clients.get(a)).get_info() for a in addresses]
    return [info.journal_fsyncs for info in infos]


async def run_config(
    bk: BookKeeper,
    cpu: CpuMeter,
    addresses: list[str],
    quorums: tuple[int, int, int],
    entry_bytes: int,
    window: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    e, qw, qa = quorums
    payload = os.urandom(entry_bytes)
    row: dict[str, Any] = {
        "ensemble": e,
        "write_quorum": qw,
        "ack_quorum": qa,
        "entry_bytes": entry_bytes,
        "inflight": window,
    }

    # Throughput: a pipelined writer with a bounded window.
    handle = await bk.create_ledger(e, qw, qa)
    for _ in range(args.warmup):  # connect the channels and warm the bookies up
        await handle.add_entry(payload)
    fsyncs_before = await journal_fsyncs(bk, addresses)
    cpu.start()
    loop_cpu = time.thread_time()
    elapsed, latencies = await run_pipelined(handle, payload, window, args.seconds, args.count)
    loop_cpu = time.thread_time() - loop_cpu
    usage = cpu.utilisation(elapsed)
    fsyncs = [
        b - a for a, b in zip(fsyncs_before, await journal_fsyncs(bk, addresses), strict=True)
    ]
    changes = len(handle.metadata.ensembles) - 1
    await handle.close()
    adds = len(latencies)
    row.update(
        adds=adds,
        seconds=round(elapsed, 2),
        adds_per_s=round(adds / elapsed, 1),
        mb_per_s=round(adds * entry_bytes / elapsed / 1e6, 2),
    )
    row.update(latency_stats(latencies, "sat_"))
    row["journal_fsyncs_per_s"] = round(statistics.mean(fsyncs) / elapsed, 1)
    row["client_cpu"] = usage["client"]
    row["client_loop_cpu"] = round(loop_cpu / elapsed, 2)  # the event loop's thread alone
    row["bookie_cpu"] = [usage[a] for a in addresses]
    row["machine_cpu"] = usage["machine"]

    # Latency: a fixed, moderate rate far below saturation.
    rate = max(1.0, min(args.latency_rate, args.latency_load * adds / elapsed))
    handle = await bk.create_ledger(e, qw, qa)
    for _ in range(args.warmup):
        await handle.add_entry(payload)
    latencies = await run_fixed_rate(handle, payload, rate, args.latency_seconds)
    changes += len(handle.metadata.ensembles) - 1
    await handle.close()
    row.update(latency_stats(latencies))
    row["latency_rate_per_s"] = round(rate, 1)
    row["latency_adds"] = len(latencies)
    row["ensemble_changes"] = changes
    return row


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quorums", type=parse_quorums, default="3/3/2,3/2/2", help="E/Qw/Qa,...")
    parser.add_argument("--sizes", type=ints, default="1024,65536", help="entry bytes,...")
    parser.add_argument(
        "--inflight",
        type=ints,
        default="1000,100",
        help="adds in flight in the throughput phase, one per size",
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="throughput phase, per row")
    parser.add_argument("--count", type=int, help="adds per throughput phase instead of --seconds")
    parser.add_argument("--latency-rate", type=float, default=200.0, help="adds/s at most")
    parser.add_argument(
        "--latency-load",
        type=float,
        default=0.25,
        help="latency-phase rate at most this fraction of the measured throughput",
    )
    parser.add_argument("--latency-seconds", type=float, default=5.0, help="per row")
    parser.add_argument("--warmup", type=int, default=20, help="adds before each phase")
    parser.add_argument("--data-dir", help="where ZooKeeper and the bookies keep their data")
    parser.add_argument("--keep", action="store_true", help="keep the data dir afterwards")
    args = parser.parse_args()
    if len(args.inflight) != len(args.sizes):
        parser.error("--inflight needs one value per --sizes value")
    return args


async def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # SIGTERM cancels like Ctrl-C does, so the cleanup below runs either way.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    base = Path(args.data_dir or tempfile.mkdtemp(prefix="stripemq-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    remove_base = args.data_dir is None and not args.keep
    rows: list[dict[str, Any]] = []
    me = psutil.Process()
    cpu_before = me.cpu_times()
    try:
        progress(f"measuring fsync rate in {base} ...")
        fsync_rate = measure_fsync_rate(base)
        progress(f"fsync_per_s = {fsync_rate:.0f}")
        async with bench_cluster(base, BOOKIES) as running:
            bk, cluster = running.bk, running.bookies
            addresses = [b.address for b in cluster.bookies]
            procs = {"client": me}
            for bookie in cluster.bookies:
                assert bookie.proc is not None
                procs[bookie.address] = psutil.Process(bookie.proc.pid)
            cpu = CpuMeter(procs)

            for quorums in args.quorums:
                for size, window in zip(args.sizes, args.inflight, strict=True):
                    progress(
                        f"E/Qw/Qa {'/'.join(map(str, quorums))}, {size} B entries, "
                        f"{window} in flight ..."
                    )
                    row = await run_config(bk, cpu, addresses, quorums, size, window, args)
                    row["x_fsync_rate"] = round(row["adds_per_s"] / fsync_rate, 1)
                    progress(json.dumps(row))
                    rows.append(row)
            progress("stopping ...")
    except (KeyboardInterrupt, asyncio.CancelledError):
        progress("interrupted")
        raise
    except BaseException:
        remove_base = False
        progress(f"failed; data and logs kept in {base}")
        raise
    finally:
        if remove_base:
            shutil.rmtree(base, ignore_errors=True)
    cpu_after = me.cpu_times()
    print(
        json.dumps(
            {
                "bench": "ledger_write",
                "fsync_per_s": round(fsync_rate, 1),
                "bookies": BOOKIES,
                "cpu_count": os.cpu_count(),
                "latency_mode": LATENCY_MODE,
                "client_cpu_s": round(
                    cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system, 1
                ),
                "results": rows,
            }
        )
    )


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, SIGTERM: cleaned up
        sys.exit(130)
