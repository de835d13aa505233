"""Disk-usage policy: when a bookie turns read-only and when it may take writes again."""

from __future__ import annotations

import shutil
from dataclasses import dataclass


@dataclass(frozen=True)
class DiskUsage:
    total_bytes: int
    free_bytes: int

    @property
    def fraction(self) -> float:
        return 1.0 - self.free_bytes / self.total_bytes if self.total_bytes else 1.0


@dataclass(frozen=True)
class DiskUsagePolicy:
    """Hysteresis between the threshold and the low-water mark, as BookKeeper does."""

    threshold: float
    low_water_mark: float

    def read_only_after(self, currently_read_only: bool, usage: float) -> bool:
        if not currently_read_only:
            return usage >= self.threshold
        return usage >= self.low_water_mark


def fullest_disk(paths: list[str]) -> DiskUsage:
    """Usage of the fullest filesystem among ``paths`` (blocking: call off the loop)."""
    worst: DiskUsage | None = None
    for path in paths:
        total, _used, free = shutil.disk_usage(path)
        usage = DiskUsage(total, free)
        if worst is None or usage.fraction > worst.fraction:
            worst = usage
    assert worst is not None
    return worst
