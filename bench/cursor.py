"""Cursor acknowledgement rate, memory per hole, and snapshot size and time.

Starts a real ZooKeeper and three ``stripemq bookie`` processes (fsync on) on free 127.0.0.1
ports in a temp dir; the cursor lives in this process and persists to its own ledger on
them (E/Qw/Qa 2/2/2, Pulsar's defaults), its snapshots throttled as configured by default.

* ``acks_per_s``: individual acks, one call per entry, of ``--entries`` entries in order
  with a random 10% never acknowledged, so every ack lands among holes (a Shared
  subscription with slow messages); background snapshots run meanwhile.
* ``bytes_per_million_holes``: memory the hole set holds (``sys.getsizeof`` accounting,
  checked against tracemalloc by the tests) with one million holes (every other entry of
  two million acknowledged), per million holes.
* ``snapshot_bytes_100k_holes`` / ``snapshot_ms_100k_holes``: a complete snapshot of a cursor
  with 100,000 holes written to a new cursor ledger (chunks, marker, metadata node update);
  median of ``--repeat`` runs. ``incremental_snapshot_*`` rows: after 100 more acks.

Prints progress to stderr and one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stripemq.bookie.client import BookKeeper
from stripemq.managed_ledger.cursor.config import CursorConfig
from stripemq.managed_ledger.cursor.managed_cursor import CursorEnvironment, ManagedCursor
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.testing.bench import bench_cluster, progress

BOOKIES = 3
LEDGER = 1  # a synthetic topic ledger: cursors only need to know how many entries it has


async def new_cursor(
    store: MetadataStore, bk: BookKeeper, name: str, entries: int
) -> ManagedCursor:
    chain = LedgerChain([LedgerInfo(LEDGER, entries, closed=True)])
    env = CursorEnvironment(store=store, bk=bk, chain=chain, config=CursorConfig())
    return await ManagedCursor.create(name, f"/bench/cursors/{name}", env, Position(LEDGER, -1))


async def ack_rate(store: MetadataStore, bk: BookKeeper, entries: int) -> dict[str, float]:
    cursor = await new_cursor(store, bk, "acks", entries)
    rng = random.Random(7)
    order = [Position(LEDGER, i) for i in range(entries) if rng.random() >= 0.10]
    start = time.perf_counter()
    for i, position in enumerate(order):
        cursor.ack([position])
        if i % 1000 == 0:
            await asyncio.sleep(0)  # let background snapshots run, as a broker would
    elapsed = time.perf_counter() - start
    await cursor.flush()
    row = {
        "acks": len(order),
        "acks_per_s": round(len(order) / elapsed),
        "holes": cursor.state.holes_count,
        "snapshots": cursor.snapshots,
    }
    await cursor.delete()
    return row


async def memory_per_million(store: MetadataStore, bk: BookKeeper) -> int:
    cursor = await new_cursor(store, bk, "memory", 2_000_000)
    cursor.ack([Position(LEDGER, i) for i in range(1, 2_000_000, 2)])
    assert cursor.state.holes_count == 1_000_000
    held = cursor.state.memory_bytes()
    await cursor.delete()
    return held


async def snapshot_cost(
    store: MetadataStore, bk: BookKeeper, repeat: int
) -> tuple[list[float], int, list[float], int]:
    cursor = await new_cursor(store, bk, "snapshot", 200_000)
    cursor.ack([Position(LEDGER, i) for i in range(1, 200_000, 2)])
    assert cursor.state.holes_count == 100_000
    full_ms: list[float] = []
    incremental_ms: list[float] = []
    incremental_bytes = 0
    full_bytes = 0
    for run in range(repeat):
        start = time.perf_counter()
        await cursor.flush(full=True)
        full_ms.append((time.perf_counter() - start) * 1000)
        full_bytes = cursor.last_snapshot_bytes
        cursor.ack([Position(LEDGER, 2 * (run * 100 + i)) for i in range(1, 101)])
        start = time.perf_counter()
        await cursor.flush()
        incremental_ms.append((time.perf_counter() - start) * 1000)
        incremental_bytes = cursor.last_snapshot_bytes
    await cursor.delete()
    return full_ms, full_bytes, incremental_ms, incremental_bytes


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=500_000, help="entries for the ack rate")
    parser.add_argument("--repeat", type=int, default=5, help="snapshot runs (median)")
    parser.add_argument("--data-dir", help="keep data here instead of a temp dir")
    return parser.parse_args()


async def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    base = Path(args.data_dir or tempfile.mkdtemp(prefix="stripemq-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        async with bench_cluster(base, BOOKIES) as running:
            store, bk = running.store, running.bk
            progress(f"{args.entries} individual acks, 10% of entries left unacked ...")
            acks = await ack_rate(store, bk, args.entries)
            progress(json.dumps(acks))
            progress("one million holes ...")
            per_million = await memory_per_million(store, bk)
            progress(f"{per_million} bytes")
            progress("snapshots of 100,000 holes ...")
            full_ms, full_bytes, inc_ms, inc_bytes = await snapshot_cost(store, bk, args.repeat)
    finally:
        if args.data_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    result = {
        "bench": "cursor",
        "acks_per_s": acks["acks_per_s"],
        "bytes_per_million_holes": per_million,
        "snapshot_bytes_100k_holes": full_bytes,
        "snapshot_ms_100k_holes": round(statistics.median(full_ms), 1),
        "results": [
            {"case": "individual acks, 10% holes", **acks},
            {"case": "memory", "holes": 1_000_000, "bytes": per_million},
            {
                "case": "complete snapshot, 100k holes, new ledger",
                "bytes": full_bytes,
                "ms_median": round(statistics.median(full_ms), 1),
                "ms_all": [round(ms, 1) for ms in full_ms],
            },
            {
                "case": "incremental snapshot after 100 acks",
                "bytes": inc_bytes,
                "ms_median": round(statistics.median(inc_ms), 1),
            },
        ],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
