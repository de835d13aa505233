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

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from stripemq.spark.schema import PARTITION, PUBLISH_TIME, TOPIC

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = datetime.resolution  # timedelta(microseconds=1)
_FOREVER_MS = 2**62  # an open ledger's end: later than any publish time


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
        if self.empty:
            return False
        if self.upper_ms is not None and first_ms - skew_ms > self.upper_ms:
            return False
        return self.lower_ms is None or last_ms + skew_ms >= self.lower_ms

    def covers(self, first_ms: int, last_ms: int, skew_ms: int) -> bool:
        """Whether every time in ``[first_ms - skew, last_ms + skew]`` is within the bounds
        (a ledger wholly inside needs no narrowing)."""
        if self.empty:
            return False
        if self.lower_ms is not None and first_ms - skew_ms < self.lower_ms:
            return False
        return self.upper_ms is None or last_ms + skew_ms <= self.upper_ms

    def intersect(self, other: TimeBounds) -> TimeBounds:
        """Both bounds at once (filters are ANDed)."""
        lowers = [b for b in (self.lower_ms, other.lower_ms) if b is not None]
        uppers = [b for b in (self.upper_ms, other.upper_ms) if b is not None]
        return TimeBounds(max(lowers) if lowers else None, min(uppers) if uppers else None)


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
    keeps rows outside the bounds).

    Filters are matched by class name, so this module loads without PySpark. Spark's
    timestamps have microseconds and publish times milliseconds: a bound is rounded to the
    whole milliseconds that satisfy it (``> 12:00:00.000500`` is ``>= 12:00:00.001``)."""
    time = TimeBounds()
    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    for spark_filter in filters:
        kind = type(spark_filter).__name__
        column = _column(spark_filter)
        if column == PUBLISH_TIME:
            bounds = _time_bounds(kind, getattr(spark_filter, "value", None))
            if bounds is not None:
                time = time.intersect(bounds)
        elif column == TOPIC:
            names = _values(kind, getattr(spark_filter, "value", None), str)
            if names is not None:
                topics = names if topics is None else topics & names
        elif column == PARTITION:
            indexes = _values(kind, getattr(spark_filter, "value", None), int)
            if indexes is not None:
                partitions = indexes if partitions is None else partitions & indexes
    return Pushdown(time, topics, partitions), list(filters)


def _column(spark_filter: Any) -> str | None:
    """The filter's column when it is a top-level one (``("a",)``), else ``None``."""
    attribute = getattr(spark_filter, "attribute", None)
    if isinstance(attribute, tuple) and len(attribute) == 1 and isinstance(attribute[0], str):
        return attribute[0]
    return None


def _epoch_us(value: Any) -> int | None:
    """Microseconds since the epoch of a ``datetime`` (naive ones are UTC), else ``None``."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // _ONE_US


def _time_bounds(kind: str, value: Any) -> TimeBounds | None:
    """The whole milliseconds a comparison of ``__publishTime`` with ``value`` allows."""
    if kind == "In":
        if not isinstance(value, tuple | list) or not value:
            return None
        found = [_epoch_us(v) for v in value]
        if any(us is None for us in found):
            return None  # a null or an odd literal: do not guess
        known = [us for us in found if us is not None]
        return TimeBounds(-(-min(known) // 1000), max(known) // 1000)
    us = _epoch_us(value)
    if us is None:
        return None
    floor_ms, ceil_ms = us // 1000, -(-us // 1000)
    match kind:
        case "EqualTo":
            return TimeBounds(ceil_ms, floor_ms)  # empty when ``value`` has spare microseconds
        case "GreaterThan":
            return TimeBounds(lower_ms=floor_ms + 1)
        case "GreaterThanOrEqual":
            return TimeBounds(lower_ms=ceil_ms)
        case "LessThan":
            return TimeBounds(upper_ms=ceil_ms - 1)
        case "LessThanOrEqual":
            return TimeBounds(upper_ms=floor_ms)
    return None


def _values(kind: str, value: Any, expected: type) -> frozenset[Any] | None:
    """The values an ``EqualTo``/``In`` allows, when all are of the ``expected`` type."""
    if kind == "EqualTo":
        values: tuple[Any, ...] = (value,)
    elif kind == "In" and isinstance(value, tuple | list):
        values = tuple(value)
    else:
        return None
    if not all(type(v) is expected for v in values):  # bool is not a partition index
        return None
    return frozenset(values)


def ref_selected(ref: TopicPartitionRef, pushdown: Pushdown) -> bool:
    """Whether ``ref`` passes the topic and partition filters (and the time bounds are not
    empty): what can be decided before reading any of its ledgers."""
    if pushdown.time.empty:
        return False
    if pushdown.topics is not None and ref.topic not in pushdown.topics:
        return False
    return pushdown.partitions is None or ref.partition in pushdown.partitions


def ledger_time_span(span: LedgerSpan) -> tuple[int, int]:
    """When the broker may have written ``span``'s entries (ms): from its creation to its
    close; an unknown creation is the epoch, an open ledger (or an unknown close) reaches
    into the future."""
    first = span.created_ms if span.created_ms > 0 else 0
    last = span.closed_ms if span.closed and span.closed_ms > 0 else _FOREVER_MS
    return first, max(first, last)


def prune_snapshot(snapshot: TopicSnapshot, pushdown: Pushdown, skew_ms: int) -> list[LedgerSpan]:
    """The snapshot's non-empty ledgers that may hold a matching message (none when the
    topic or partition is filtered out)."""
    if not ref_selected(snapshot.ref, pushdown):
        return []
    kept = []
    for span in snapshot.ledgers:
        if span.last_entry < 0:
            continue
        if pushdown.time.unbounded or pushdown.time.overlaps(*ledger_time_span(span), skew_ms):
            kept.append(span)
    return kept


def split_range(
    ref: TopicPartitionRef,
    span: LedgerSpan,
    first_entry: int,
    last_entry: int,
    max_entries: int,
    max_bytes: int,
) -> list[ReadSplit]:
    """``first_entry..last_entry`` of ``span`` cut into splits of at most ``max_entries``
    entries and about ``max_bytes`` bytes (by the ledger's average entry size).

    The splits are as even as possible (their entry counts differ by at most one), so the
    last one is not a sliver."""
    first_entry = max(first_entry, 0)
    last_entry = min(last_entry, span.last_entry)
    count = last_entry - first_entry + 1
    if count <= 0:
        return []
    average = span.size / span.entries if span.entries > 0 and span.size > 0 else 0.0
    per_split = max(1, max_entries)
    if average > 0:
        per_split = min(per_split, max(1, int(max_bytes // average)))
    pieces = -(-count // per_split)
    base, extra = divmod(count, pieces)
    splits = []
    start = first_entry
    for index in range(pieces):
        entries = base + (1 if index < extra else 0)
        splits.append(
            ReadSplit(
                ref=ref,
                ledger_id=span.ledger_id,
                first_entry=start,
                last_entry=start + entries - 1,
                estimated_bytes=round(average * entries),
            )
        )
        start += entries
    return splits


PublishTimeProbe = Callable[[int], Awaitable[int]]  # entry id -> its publish time (ms)


async def narrow_by_publish_time(
    probe: PublishTimeProbe, first: int, last: int, bounds: TimeBounds, skew_ms: int
) -> tuple[int, int] | None:
    """The sub-range of entries ``first..last`` of one ledger that may match ``bounds``,
    found by binary search over publish times read with ``probe`` (about 2·log2(n) reads),
    or ``None`` if none can. Publish times within a ledger are taken as ordered up to
    ``skew_ms``; the result keeps that much slack on both sides.

    "Ordered up to skew" means an entry is never more than ``skew_ms`` older than one
    before it. So an entry published before ``lower - skew`` proves every entry before it
    too early, and one published after ``upper + skew`` proves every entry after it too
    late: each probe that finds such an entry drops a whole side, whatever the order of
    the entries between, and the search never drops a possible match."""
    if first > last or bounds.empty:
        return None
    if bounds.unbounded:
        return first, last
    seen: dict[int, int] = {}

    async def publish_time(entry_id: int) -> int:
        if entry_id not in seen:
            seen[entry_id] = await probe(entry_id)
        return seen[entry_id]

    start = first
    if bounds.lower_ms is not None:
        # Smallest ``start`` such that every entry before it is proven too early.
        low, high = first, last + 1
        while low < high:
            mid = (low + high) // 2
            if await publish_time(mid) + skew_ms < bounds.lower_ms:
                low = mid + 1  # mid and everything before it are too early
            else:
                high = mid
        start = low
        if start > last:
            return None
    end = last
    if bounds.upper_ms is not None:
        # Smallest ``stop`` such that it and every entry after it are proven too late.
        low, high = start, last + 1
        while low < high:
            mid = (low + high) // 2
            if await publish_time(mid) - skew_ms > bounds.upper_ms:
                high = mid  # mid and everything after it are too late
            else:
                low = mid + 1
        end = low - 1
        if end < start:
            return None
    log.debug(
        "narrowed entries %d..%d to %d..%d with %d probes", first, last, start, end, len(seen)
    )
    return start, end


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
    splits: list[ReadSplit] = []
    for snapshot in snapshots:
        for span in prune_snapshot(snapshot, pushdown, skew_ms):
            splits.extend(
                split_range(snapshot.ref, span, 0, span.last_entry, max_entries, max_bytes)
            )
    return splits
