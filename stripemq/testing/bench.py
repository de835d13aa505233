"""Helpers every benchmark under ``bench/`` shares: progress lines, the disk's fsync rate
(the physical reference for storage figures) and percentiles."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


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
