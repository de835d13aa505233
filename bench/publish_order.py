"""Publish order across ledger rollovers: the broker-hardening issue's reproduction.

A ``stripemq standalone`` rolls its ledger over every ``--roll-every`` entries (minimum
rollover time 0). For each client (the official ``pulsar-client`` and ``stripemq.client``)
and each of batching off and on, a producer pipelines ``--count`` ``send_async`` calls
(``max_pending_messages=500``, ``block_if_queue_full``), then a consumer reads everything
back up to an end marker sent after them. Each row: ``received`` (should equal ``sent``),
``duplicates``, ``reorderings`` (places where a value is lower than the one before it),
``send_errors`` and ``publish_msgs_per_s``.

Prints progress to stderr and one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shutil
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pulsar

import stripemq.client
from stripemq.testing.bench import progress
from stripemq.testing.pipelined import send_all_then_read
from stripemq.testing.standalone import running_standalone

CLIENTS: dict[str, ModuleType] = {"pulsar-client": pulsar, "stripemq": stripemq.client}


def run(module: ModuleType, url: str, count: int, batching: bool) -> dict[str, Any]:
    topic = f"bench-order-{time.monotonic_ns()}"
    result = send_all_then_read(
        module, url, topic, count, batching_enabled=batching, max_pending_messages=500
    )
    received = result.received
    return {
        "sent": count,
        "received": len(received),
        "duplicates": len(received) - len(set(received)),
        "reorderings": sum(1 for a, b in itertools.pairwise(received) if b < a),
        "send_errors": len(result.failures),
        "publish_msgs_per_s": round(count / result.publish_s),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--roll-every", type=int, default=20)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stripemq-bench-order-"))
    settings: dict[str, object] = {
        "managed_ledger_max_entries_per_ledger": args.roll_every,
        "managed_ledger_min_ledger_rollover_time_minutes": 0,
    }
    results = []
    try:
        async with running_standalone(base, settings) as url:
            for name, module in CLIENTS.items():
                for batching in (False, True):
                    progress(f"{name}, batching {'on' if batching else 'off'} ...")
                    row = await asyncio.to_thread(run, module, url, args.count, batching)
                    results.append({"client": name, "batching": batching, **row})
                    progress(f"  {row}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"bench": "publish_order", "roll_every": args.roll_every, "results": results}))


if __name__ == "__main__":
    asyncio.run(main())
