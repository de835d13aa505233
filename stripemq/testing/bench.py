"""Helpers every benchmark under ``bench/`` shares: progress lines, the disk's fsync rate
(the physical reference for storage figures), percentiles and a running cluster."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from stripemq.bookie.client import BookKeeper, ClientConfig
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.zookeeper import ZooKeeperServer


def progress(message: str) -> None:
    """A progress line on stderr (stdout's last line is the benchmark's JSON)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def measure_fsync_rate(directory: Path, seconds: float = 2.0) -> float:
    """Sequential 4 KiB appends, each followed by fdatasync: the disk's durable-write rate."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    block = os.urandom(4096)
    count = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        path.unlink()
    return count / (time.perf_counter() - start)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass
class BenchCluster:
    """A running ZooKeeper and bookie processes, with a ledger client on them."""

    url: str
    bookies: BookieCluster
    store: MetadataStore
    bk: BookKeeper


@contextlib.asynccontextmanager
async def bench_cluster(
    base: Path, bookies: int, client_config: ClientConfig | None = None
) -> AsyncIterator[BenchCluster]:
    """ZooKeeper and ``bookies`` bookie processes under ``base``, stopped on the way out."""
    async with contextlib.AsyncExitStack() as stack:
        zk = ZooKeeperServer(data_dir=base / "zookeeper")
        stack.callback(zk.stop)
        progress("starting ZooKeeper ...")
        zk.start()
        url = zk.url("/stripemq-bench")
        cluster = BookieCluster(url, base / "bookies", bookies)
        stack.callback(cluster.stop)
        progress(f"starting {bookies} bookies ...")
        await cluster.start()
        store = create_metadata_store(url)
        await store.start()
        stack.push_async_callback(store.close)
        bk = BookKeeper(store, client_config or ClientConfig())
        await bk.start()
        stack.push_async_callback(bk.close)
        yield BenchCluster(url, cluster, store, bk)
