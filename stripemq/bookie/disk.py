"""When a bookie turns read-only and when it may take writes again (sans-IO).

A bookie is read-only while it has at least one reason to be:

- ``DISK_USAGE``: the fullest disk is over the threshold (cleared below the low-water mark);
- ``DISK_FULL``: a journal write hit ENOSPC (cleared when a disk check finds room again);
- ``CHECKPOINT_FAILED``: the last checkpoint failed. Only a checkpoint that succeeds clears
  it, never a disk check: memtable entries that cannot reach the entry logs must not keep
  piling up while the disk monitor reports healthy usage.
"""

from __future__ import annotations

import enum
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


class ReadOnlyReason(enum.Enum):
    """Why a bookie refuses writes; the value is how a log line or an error says it."""

    DISK_USAGE = "disk usage over threshold"
    DISK_FULL = "a journal write found the disk full"
    CHECKPOINT_FAILED = "the last checkpoint failed"


# Reasons a disk check may clear: those that are about free space and nothing else.
_SPACE_REASONS = frozenset({ReadOnlyReason.DISK_USAGE, ReadOnlyReason.DISK_FULL})


class ReadOnlyState:
    """The set of reasons a bookie is read-only, and the events that add or clear them."""

    def __init__(self, policy: DiskUsagePolicy) -> None:
        self.policy = policy
        self._reasons: set[ReadOnlyReason] = set()

    @property
    def read_only(self) -> bool:
        return bool(self._reasons)

    @property
    def reasons(self) -> frozenset[ReadOnlyReason]:
        return frozenset(self._reasons)

    def describe(self) -> str:
        """The reasons in words, for errors and log lines ("writable" when there are none)."""
        if not self._reasons:
            return "writable"
        return ", ".join(sorted(reason.value for reason in self._reasons))

    def disk_checked(self, usage: float) -> None:
        """A disk check measured ``usage`` (0..1) on the fullest disk."""
        space_short = bool(self._reasons & _SPACE_REASONS)
        self.set_space_verdict(self.policy.read_only_after(space_short, usage))

    def set_space_verdict(self, short_of_space: bool) -> None:
        """Record whether the disks are short of space; other reasons are left as they are."""
        if short_of_space:
            self._reasons.add(ReadOnlyReason.DISK_USAGE)
        else:
            self._reasons -= _SPACE_REASONS

    def disk_full(self) -> None:
        """A journal write failed with ENOSPC (or a quota, or a file size limit)."""
        self._reasons.add(ReadOnlyReason.DISK_FULL)

    def checkpoint_failed(self) -> None:
        self._reasons.add(ReadOnlyReason.CHECKPOINT_FAILED)

    def checkpoint_succeeded(self) -> None:
        self._reasons.discard(ReadOnlyReason.CHECKPOINT_FAILED)


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
