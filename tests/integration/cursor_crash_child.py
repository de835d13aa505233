"""Child of the cursor crash test: appends, then acknowledges out of order until killed.

Prints one line per event on stdout (flushed): ``order <json>`` once the entries are
written (every position, in the order it will acknowledge them), ``acked <n>`` after each
acknowledgement, and ``persisted <n>`` after a snapshot holding the first ``n``
acknowledgements has been written.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

from stripemq.bookie.client import BookKeeper, ClientConfig
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.cursor.config import CursorConfig
from stripemq.managed_ledger.managed_ledger import ManagedLedgerFactory
from stripemq.metadata import create_metadata_store
from stripemq.proto.initial_position import InitialPosition

CONFIG = ManagedLedgerConfig(
    max_entries_per_ledger=500,
    min_rollover_time_s=0,
    retention_time_s=-1,
    retention_size_bytes=-1,
    # Small snapshots, often: the kill lands between, during and after them.
    cursor=CursorConfig(
        snapshot_interval_ms=20,
        snapshot_max_unpersisted_acks=50,
        snapshot_chunk_bytes=65536,
        max_entries_per_ledger=40,
    ),
)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(metadata_url: str, topic: str, entries: int, seed: int) -> None:
    rng = random.Random(seed)
    store = create_metadata_store(metadata_url)
    await store.start()
    bk = BookKeeper(store, ClientConfig(explicit_lac_interval_ms=100))
    await bk.start()
    ml = await ManagedLedgerFactory(store, bk, CONFIG).open(topic)
    cursor = await ml.open_cursor("sub", InitialPosition.Earliest)
    positions = list(await asyncio.gather(*(ml.add_entry(b"m%d" % i) for i in range(entries))))
    order = positions[:]
    rng.shuffle(order)
    say("order " + json.dumps([str(p) for p in order]))
    acked = 0
    for position in order:
        cursor.ack([position])
        acked += 1
        say(f"acked {acked}")
        if rng.random() < 0.02:
            await cursor.flush()  # everything acked so far is now persisted
            say(f"persisted {acked}")
        elif rng.random() < 0.3:
            await asyncio.sleep(0.001)  # let background snapshots run
    await cursor.flush()
    say(f"persisted {acked}")
    await asyncio.sleep(3600)  # wait for the kill


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
