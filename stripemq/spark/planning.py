"""Spark's planning over ledgers, sans-IO: which entry ranges of which ledgers to read.

A topic partition's snapshot is its ledger chain as the metadata store holds it, with the
open ledger cut at its last-add-confirmed at planning time. Planning prunes whole ledgers
by publish-time bounds (a ledger's creation and close times, widened by the allowed clock
skew) and topics/partitions by equality filters, then cuts each ledger's range into
splits of at most ``max_entries`` entries and about ``max_bytes`` bytes, so a large topic
spreads over executors. Pruning only ever drops what cannot match: Spark still applies
every filter to the rows read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TopicPartitionRef:
    """One stored topic: a non-partitioned topic, or one partition of a partitioned one."""

    topic: str  # full name of what is stored (a partition's own name, ``...-partition-3``)
    partition: int  # -1 for a topic that is not a partition
    managed_ledger: str  # ``tenant/ns/persistent/<local, quoted>``: TopicName.managed_ledger_name


@dataclass(frozen=True)
class LedgerSpan:
    """One ledger of a snapshot: entries ``0..last_entry`` are readable."""

    ledger_id: int
    last_entry: int  # closed: its last entry; open: its LAC at planning; -1 when empty
    size: int  # bytes through ``last_entry`` (an estimate for the open ledger)
    created_ms: int
    closed_ms: int  # 0 while open
    closed: bool

    @property
    def entries(self) -> int:
        return self.last_entry + 1


@dataclass(frozen=True)
class TopicSnapshot:
    """A topic partition's ledgers, oldest first, as seen at planning time."""

    ref: TopicPartitionRef
    ledgers: tuple[LedgerSpan, ...]


@dataclass(frozen=True)
class ReadSplit:
    """One Spark partition: entries ``first_entry..last_entry`` (inclusive) of one ledger."""

    ref: TopicPartitionRef
    ledger_id: int
    first_entry: int
    last_entry: int
    estimated_bytes: int

    @property
    def entries(self) -> int:
        return self.last_entry - self.first_entry + 1


@dataclass(frozen=True)
class TimeBounds:
    """Publish-time bounds in epoch milliseconds, both inclusive; ``None`` is unbounded."""

    lower_ms: int | None = None
    upper_ms: int | None = None

    @property
    def unbounded(self) -> bool:
        return self.lower_ms is None and self.upper_ms is None

    @property
    def empty(self) -> bool:
        lower, upper = self.lower_ms, self.upper_ms
        return lower is not None and upper is not None and lower > upper

    def overlaps(self, first_ms: int, last_ms: int, skew_ms: int) -> bool:
        """Whether any time in ``[first_ms - skew, last_ms + skew]`` is within the bounds."""
        raise NotImplementedError


@dataclass(frozen=True)
class Pushdown:
    """What ``pushFilters`` took from Spark's filters (all of them ANDed)."""

    time: TimeBounds = TimeBounds()
    topics: frozenset[str] | None = None  # ``__topic`` must be one of these
    partitions: frozenset[int] | None = None  # ``__partition`` must be one of these


def translate_filters(filters: Sequence[Any]) -> tuple[Pushdown, list[Any]]:
    """Split Spark's ``pyspark.sql.datasource`` filters into what planning can use and what
    Spark must still evaluate (returned by reference, as ``pushFilters`` requires).

    Used: ``EqualTo``/``GreaterThan``/``GreaterThanOrEqual``/``LessThan``/``LessThanOrEqual``
    on ``__publishTime`` (a ``datetime``), and ``EqualTo``/``In`` on ``__topic`` and
    ``__partition``. Every filter is also returned, since pruning is coarse (a whole split
    keeps rows outside the bounds)."""
    raise NotImplementedError


def prune_snapshot(snapshot: TopicSnapshot, pushdown: Pushdown, skew_ms: int) -> list[LedgerSpan]:
    """The snapshot's non-empty ledgers that may hold a matching message (none when the
    topic or partition is filtered out)."""
    raise NotImplementedError


def split_range(
    ref: TopicPartitionRef,
    span: LedgerSpan,
    first_entry: int,
    last_entry: int,
    max_entries: int,
    max_bytes: int,
) -> list[ReadSplit]:
    """``first_entry..last_entry`` of ``span`` cut into splits of at most ``max_entries``
    entries and about ``max_bytes`` bytes (by the ledger's average entry size)."""
    raise NotImplementedError


PublishTimeProbe = Callable[[int], Awaitable[int]]  # entry id -> its publish time (ms)


async def narrow_by_publish_time(
    probe: PublishTimeProbe, first: int, last: int, bounds: TimeBounds, skew_ms: int
) -> tuple[int, int] | None:
    """The sub-range of entries ``first..last`` of one ledger that may match ``bounds``,
    found by binary search over publish times read with ``probe`` (about 2·log2(n) reads),
    or ``None`` if none can. Publish times within a ledger are taken as ordered up to
    ``skew_ms``; the result keeps that much slack on both sides."""
    raise NotImplementedError


def plan_splits(
    snapshots: Iterable[TopicSnapshot],
    pushdown: Pushdown,
    *,
    max_entries: int,
    max_bytes: int,
    skew_ms: int,
) -> list[ReadSplit]:
    """Every split to read, in topic then ledger then entry order, ledger-level pruning only
    (``LedgerCatalog.plan`` narrows ranges within ledgers with ``narrow_by_publish_time``)."""
    raise NotImplementedError
