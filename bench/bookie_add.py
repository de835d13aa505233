"""Add throughput and latency of one bookie process, fsync on, from one pipelined client.

Prints progress to stderr and one JSON object on the last line of stdout:
``{"bench": "bookie_add", "fsync_per_s": ..., "rss_mb": ..., "results": [...]}`` with two
rows per entry size (``entry_bytes``, ``adds_per_s``, ``mb_per_s``, ``p50_ms``, ``p99_ms``):
a saturated one (many adds in flight: throughput) and a light one (few: latency).
``fsync_per_s`` is this disk's own rate of 4 KiB write + fdatasync, measured in the bookie's
data directory, so the figures can be compared across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
from pathlib import Path

import psutil

from stripemq.bookie.bookie_client import BookieClient
from stripemq.proto.entry import encode_entry
from stripemq.testing.bench import measure_fsync_rate, percentile, progress
from stripemq.testing.bookie import BookieProcess

KEY = b"bench"


async def run_size(
    client: BookieClient, ledger_id: int, entry_bytes: int, seconds: float, window: int
) -> dict[str, float]:
    """Keep ``window`` adds in flight for ``seconds``; return rates and latencies."""
    loop = asyncio.get_running_loop()
    payload = os.urandom(entry_bytes)
    latencies: list[float] = []
    inflight: set[asyncio.Future] = set()
    slot = asyncio.Event()
    next_id = 0
    done_bytes = 0

    def completed(sent_at: float, future: asyncio.Future) -> None:
        nonlocal done_bytes
        inflight.discard(future)
        if future.exception() is not None:
            raise future.exception()  # type: ignore[misc]
        latencies.append((loop.time() - sent_at) * 1000)
        done_bytes += entry_bytes
        slot.set()

    start = loop.time()
    deadline = start + seconds
    while loop.time() < deadline:
        while len(inflight) < window:
            entry = encode_entry(ledger_id, next_id, next_id - 1, payload)
            future = client.add_entry(KEY, entry)
            sent_at = loop.time()
            future.add_done_callback(lambda f, t=sent_at: completed(t, f))
            inflight.add(future)
            next_id += 1
        slot.clear()
        await slot.wait()
    await asyncio.gather(*inflight)
    elapsed = loop.time() - start
    return {
        "entry_bytes": entry_bytes,
        "adds": len(latencies),
        "adds_per_s": round(len(latencies) / elapsed, 1),
        "mb_per_s": round(done_bytes / elapsed / 1e6, 2),
        "p50_ms": round(statistics.median(latencies), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "inflight": window,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="per row")
    parser.add_argument("--sizes", default="100,1024,65536")
    parser.add_argument(
        "--window-bytes",
        type=int,
        default=16 * 1024 * 1024,
        help="bytes in flight for the saturated rows (at most 5,000 adds)",
    )
    parser.add_argument(
        "--light-inflight", type=int, default=16, help="adds in flight for the latency rows"
    )
    parser.add_argument("--data-dir", help="where the bookie keeps its data (default: a temp dir)")
    args = parser.parse_args()

    base = Path(args.data_dir or tempfile.mkdtemp(prefix="stripemq-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    progress(f"measuring fsync rate in {base} ...")
    fsync_rate = measure_fsync_rate(base)
    progress(f"fsync_per_s = {fsync_rate:.0f}")

    bookie = BookieProcess(f"local://{base / 'metadata'}", base / "bookie")
    await bookie.start()
    assert bookie.proc is not None
    proc = psutil.Process(bookie.proc.pid)
    client = BookieClient(bookie.address)
    await client.connect()
    rows, peak_rss = [], 0
    try:
        ledger_id = 0
        for size in (int(s) for s in args.sizes.split(",")):
            saturated = max(8, min(5000, args.window_bytes // size))
            # Saturated rows give throughput; light rows give latency without queueing.
            for load, window in (("saturated", saturated), ("light", args.light_inflight)):
                ledger_id += 1
                progress(f"{size} B entries, {window} in flight, {args.seconds}s ...")
                row = await run_size(client, ledger_id, size, args.seconds, window)
                peak_rss = max(peak_rss, proc.memory_info().rss)
                row["load"] = load
                row["x_fsync_rate"] = round(row["adds_per_s"] / fsync_rate, 1)
                progress(json.dumps(row))
                rows.append(row)
        info = await client.get_info()
    finally:
        await client.close()
        bookie.terminate()
    print(
        json.dumps(
            {
                "bench": "bookie_add",
                "fsync_per_s": round(fsync_rate, 1),
                "rss_mb": round(peak_rss / 1e6, 1),
                "journal_fsyncs": info.journal_fsyncs,
                "results": rows,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
