"""The ``stripemq`` streaming source: offsets are positions in ledger chains.

An offset is a JSON object keyed by managed-ledger name (one per topic partition)::

    {"public/default/persistent/orders-partition-0":
        {"ledger": 17, "entry": 42, "closed": false}, ...}

Each position is the **last entry consumed**: entry ``-1`` means nothing of ledger ``L``
was consumed yet (every ledger before it was), ``{"ledger": -1, "entry": -1}`` means nothing
at all. ``closed`` says the entry was the last one of a ledger that was closed when the
position was taken, so nothing more can be missed in that ledger. Positions are compared
as ``(ledger, entry)``: ledger ids grow along a chain. A partition a query has never seen
(a new partition, a new topic matching ``topicsPattern``) starts from nothing.

Positions are kept *forward-normalized*: once a closed ledger has been consumed to its end
and the chain shows a later ledger holding entries, the position becomes ``(that ledger,
-1)``. A position never stands on a ledger without entries: a broker that loads the topic
again (a restart, an unload) drops empty ledgers from the list, the open one it was
writing included, so such a position would look lost. Until a later ledger has entries,
the position stays on the last entry of the closed ledger, ``closed`` set (and the end of
a chain whose open ledger is empty is the last entry before it). So a position whose
ledger has vanished from the chain (trimmed by retention, or deleted) tells whether
anything was lost: if ``closed``, reading goes on with the next ledger that exists;
otherwise entries after it may be gone, which is a ``DataLossError`` naming topic and ledger
(``failOnDataLoss=false`` logs a warning and skips to what exists). Ledgers are trimmed
only from the front of a chain, so a chain that ends *before* a position's ledger is not
loss but a metadata server lagging behind the one that gave the position (ZooKeeper
followers may): planning reads the lists again (``SnapshotBehindError``) rather than skip.
The one case this cannot tell apart: a position on the last entry of a closed ledger with
no later entries seen, when the next ledger(s) were created, filled, closed and trimmed
before the next micro-batch: those are skipped unseen. A subscription or retention on the
topic keeps ledgers for a stream that runs less often than they roll over.

Admission control: ``maxEntriesPerTrigger`` caps the **entries** (not rows) of one
micro-batch, spread over partitions in proportion to their backlog, with at least one
for every partition waiting when the cap has that many (``allocate``). Spark's built-in read
limits only count rows, files or bytes; the source hands its cap to Spark as
``ReadMaxRows(maxEntriesPerTrigger)`` (the only limit carrying a count) and reads a
``ReadMaxRows(n)`` back as at most ``n`` entries. That is exact when producers do not
batch; a batch entry counts once however many messages it holds, so a micro-batch can hold
more rows than ``n``. ``ReadAllAvailable`` (``Trigger.Once``) reads everything, as Spark
requires; other limits are not produced by this source and read everything too.
``Trigger.AvailableNow`` is supported: the ends seen when the query starts are the target,
reached in capped steps, and nothing written later is read in that run.

Commits are no-ops: no broker or cursor holds state for a Spark query; Spark's checkpoint
is the only record of what was consumed.

The decisions (where each partition's next range starts and ends, what is lost, how a cap
is shared) are plain functions over ledger chains; ``StripeMQStreamReader`` only fetches
chains and hands the results to Spark.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from stripemq.errors import DataLossError, Retry, SparkSourceError
from stripemq.proto.topic_name import TopicName
from stripemq.retry import Backoff
from stripemq.spark.catalog import LedgerCatalog, connect
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import LedgerSpan, ReadSplit, TopicPartitionRef, split_range
from stripemq.spark.source import SplitPartition, read_partition

log = logging.getLogger(__name__)

# How long a micro-batch's planning waits for the metadata store to show the ledgers its end
# offset names (a ZooKeeper follower may lag behind the one ``latestOffset`` asked).
CATCH_UP_S = 15.0


class SnapshotBehindError(SparkSourceError):
    """A ledger list read now ends before a position taken earlier: this metadata server
    lags behind the one that gave the position. Reading would skip what it does not show
    yet, so the caller asks again."""

    retry = Retry.ALWAYS


@dataclass(frozen=True)
class Position:
    """The last entry consumed of one topic partition (see the module docstring)."""

    ledger: int
    entry: int
    closed: bool = False

    @property
    def key(self) -> tuple[int, int]:
        """What positions are ordered by."""
        return (self.ledger, self.entry)

    def to_json(self) -> dict[str, Any]:
        return {"ledger": self.ledger, "entry": self.entry, "closed": self.closed}

    @classmethod
    def from_json(cls, raw: Any) -> Position:
        """Raises: SparkSourceError: ``raw`` is not a position this source wrote."""
        try:
            ledger, entry, closed = raw["ledger"], raw["entry"], raw.get("closed", False)
        except (TypeError, KeyError, AttributeError):
            raise SparkSourceError(f"not a stripemq stream position: {raw!r}") from None
        valid = isinstance(ledger, int) and isinstance(entry, int) and isinstance(closed, bool)
        if not valid or ledger < -1 or entry < -1:
            raise SparkSourceError(f"not a stripemq stream position: {raw!r}")
        return cls(ledger, entry, closed)


NOTHING = Position(-1, -1)

Offset = dict[str, Position]  # managed-ledger name -> position


def encode_offset(offset: Mapping[str, Position]) -> dict[str, Any]:
    """The JSON Spark checkpoints; keys sorted, since Spark compares offsets as text."""
    return {name: offset[name].to_json() for name in sorted(offset)}


def decode_offset(raw: Any) -> Offset:
    """An offset from Spark's checkpoint (what ``encode_offset`` wrote).

    Raises:
        SparkSourceError: it is not one.
    """
    if not isinstance(raw, Mapping):
        raise SparkSourceError(f"not a stripemq stream offset: {raw!r}")
    return {str(name): Position.from_json(pos) for name, pos in raw.items()}


@dataclass(frozen=True)
class EntryRange:
    """Entries ``first..last`` (inclusive) of one ledger, to read next."""

    span: LedgerSpan
    first: int
    last: int

    @property
    def entries(self) -> int:
        return self.last - self.first + 1


def later(a: Position, b: Position) -> Position:
    """The later of two positions (``a`` when equal)."""
    return b if b.key > a.key else a


def earlier(a: Position, b: Position) -> Position:
    """The earlier of two positions (``a`` when equal)."""
    return b if b.key < a.key else a


def normalize(pos: Position, chain: Sequence[LedgerSpan]) -> Position:
    """``pos`` moved forward over closed ledgers it has consumed to their end, to ``(next
    ledger with entries, -1)``; ``closed`` set when it sits on the last entry of a closed
    ledger with no later entries in ``chain`` (never onto an empty ledger: a broker drops
    those from the list when it loads the topic again)."""
    index = {span.ledger_id: i for i, span in enumerate(chain)}
    while pos.ledger in index:
        i = index[pos.ledger]
        span = chain[i]
        if not (span.closed and pos.entry >= span.last_entry):
            break
        nxt = next((later for later in chain[i + 1 :] if later.last_entry >= 0), None)
        if nxt is None:
            return Position(pos.ledger, pos.entry, closed=True)
        pos = Position(nxt.ledger_id, -1, closed=False)
    return pos


def chain_end(chain: Sequence[LedgerSpan]) -> Position:
    """The position after consuming everything readable in ``chain`` now (the open ledger
    up to its LAC): the last entry of its last ledger holding one, so never a ledger a
    broker may drop as empty; ``NOTHING`` when no ledger holds an entry."""
    for span in reversed(chain):
        if span.last_entry >= 0:
            return Position(span.ledger_id, span.last_entry, closed=span.closed)
    return NOTHING


def pending(
    start: Position,
    end: Position,
    chain: Sequence[LedgerSpan],
    *,
    topic: str,
    fail_on_data_loss: bool,
) -> list[EntryRange]:
    """The entries after ``start`` up to and including ``end``, over ``chain`` (the ledgers
    that exist now).

    Raises:
        DataLossError: some of them are gone (``start``'s ledger vanished before it was
        consumed to its close, or ``end``'s ledger vanished) and ``fail_on_data_loss``.
        SnapshotBehindError: ``chain`` ends before ``end``'s ledger (a lagging metadata
        server; ledgers are trimmed only from the front, so this is never loss).
    """
    if end.key <= start.key:
        return []
    if chain and end.ledger > chain[-1].ledger_id:
        # Ledgers are only ever added at the tail: this list is older than ``end``.
        raise SnapshotBehindError(
            f"{topic}: the ledger list ends at ledger {chain[-1].ledger_id}, before "
            f"ledger {end.ledger} of the planned end"
        )
    if not chain and start.ledger < 0:
        # Nothing read yet and no ledgers listed, though ``end`` saw some: a lagging server
        # (or a topic deleted at once; retrying ends with this error then).
        raise SnapshotBehindError(
            f"{topic}: no ledgers listed, yet ledger {end.ledger} was seen before "
            "(the metadata server is behind, or the topic was deleted)"
        )
    index = {span.ledger_id: i for i, span in enumerate(chain)}
    if start.ledger < 0:
        i, first = 0, 0
    elif start.ledger in index:
        i, first = index[start.ledger], start.entry + 1
    else:
        i = next((n for n, s in enumerate(chain) if s.ledger_id > start.ledger), len(chain))
        first = 0
        if not start.closed:
            _lost(
                topic,
                start.ledger,
                f"entries after {start.entry} were not read yet",
                fail_on_data_loss,
            )
    if end.entry >= 0 and end.ledger not in index and end.ledger != start.ledger:
        _lost(topic, end.ledger, f"entries up to {end.entry} were not read yet", fail_on_data_loss)
    ranges: list[EntryRange] = []
    for span in chain[i:]:
        if span.ledger_id > end.ledger:
            break
        if span.ledger_id == end.ledger:
            # Read to the planned end even if this snapshot saw a lower LAC: entries up to
            # an LAC once seen are confirmed.
            last = end.entry
            if last > span.last_entry:
                span = dataclasses.replace(span, last_entry=last)
        else:
            last = span.last_entry
        if first <= last:
            ranges.append(EntryRange(span, first, last))
        first = 0
    return ranges


def _lost(topic: str, ledger: int, what: str, fail: bool) -> None:
    message = f"{topic}: ledger {ledger} is gone (trimmed or deleted) and {what}"
    if fail:
        raise DataLossError(f"{message}; set failOnDataLoss=false to skip what is gone")
    log.warning("[%s] %s; skipping to what exists (failOnDataLoss=false)", topic, message)


def take(ranges: Sequence[EntryRange], count: int) -> list[EntryRange]:
    """The first ``count`` entries of ``ranges``."""
    taken: list[EntryRange] = []
    for rng in ranges:
        if count <= 0:
            break
        last = min(rng.last, rng.first + count - 1)
        taken.append(EntryRange(rng.span, rng.first, last))
        count -= last - rng.first + 1
    return taken


def position_after(start: Position, ranges: Sequence[EntryRange]) -> Position:
    """Where a partition stands once ``ranges`` (read after ``start``) are consumed."""
    if not ranges:
        return start
    rng = ranges[-1]
    return Position(
        rng.span.ledger_id, rng.last, rng.span.closed and rng.last >= rng.span.last_entry
    )


def allocate(backlog: Mapping[str, int], cap: int) -> dict[str, int]:
    """Share ``cap`` entries over partitions: all of it when the backlog fits, never more
    than a partition has. Otherwise in proportion to the backlogs, the odd entries going
    to the largest fractions (then the largest backlogs, then names); and when the cap
    has an entry for every partition waiting, none is left without one (taken from the
    largest shares). So no partition starves under a small cap: one that got nothing has
    the larger backlog next time."""
    total = sum(backlog.values())
    if total <= cap:
        return dict(backlog)
    shares = {name: waiting * cap // total for name, waiting in backlog.items()}
    left = cap - sum(shares.values())
    by_fraction = sorted(backlog, key=lambda n: (-(backlog[n] * cap % total), -backlog[n], n))
    for name in by_fraction[:left]:  # fewer than the partitions with a fraction
        shares[name] += 1
    waiting = [name for name in backlog if backlog[name] > 0]
    if len(waiting) <= cap:
        for name in sorted(waiting, key=lambda n: (-backlog[n], n)):
            if shares[name] == 0:
                richest = max(waiting, key=lambda n: (shares[n], -backlog[n]))
                shares[richest] -= 1  # it has two or more: the shares sum to ``cap``
                shares[name] = 1
    return shares


def entry_cap(limit: Any) -> int | None:
    """The entries one micro-batch may take under Spark's ``limit`` (``None``: no cap).
    ``ReadMaxRows(n)`` is read as ``n`` entries (see the module docstring)."""
    if isinstance(limit, ReadMaxRows):
        return max(1, int(limit.max_rows))
    return None


def default_read_limit(options: SourceOptions) -> ReadLimit:
    """The limit this source asks Spark to apply: ``maxEntriesPerTrigger`` as
    ``ReadMaxRows``, else everything available."""
    if options.max_entries_per_trigger is not None:
        return ReadMaxRows(options.max_entries_per_trigger)
    return ReadAllAvailable()


@dataclass(frozen=True)
class Partition:
    """One topic partition as the stream sees it now: its ref and its ledger chain."""

    ref: TopicPartitionRef
    chain: tuple[LedgerSpan, ...]


def initial_offset(partitions: Mapping[str, Partition], starting: str) -> Offset:
    """``startingOffsets``: ``earliest`` is nothing consumed, ``latest`` each partition's
    end now (what is written afterwards is read)."""
    if starting == "latest":
        return {name: normalize(chain_end(p.chain), p.chain) for name, p in partitions.items()}
    return {name: NOTHING for name in partitions}


def next_offset(
    start: Mapping[str, Position],
    partitions: Mapping[str, Partition],
    *,
    cap: int | None,
    target: Mapping[str, Position] | None,
    fail_on_data_loss: bool,
) -> Offset:
    """Where the next micro-batch ends: each partition's end now, no further than
    ``target`` (``Trigger.AvailableNow``; a partition it lacks reads nothing), with at
    most ``cap`` entries over all partitions. A partition no longer listed keeps its
    position; the result never goes back from ``start``.

    Raises:
        DataLossError: see ``pending``.
    """
    ends: Offset = {}
    for name, part in partitions.items():
        begin = start.get(name, NOTHING)
        end = chain_end(part.chain)
        if target is not None:
            end = earlier(end, target.get(name, NOTHING))
        ends[name] = later(begin, end)
    result: Offset = {name: pos for name, pos in start.items() if name not in partitions}
    if cap is None:
        for name, end in ends.items():
            result[name] = normalize(end, partitions[name].chain)
        return result
    ranges = {
        name: pending(
            start.get(name, NOTHING),
            end,
            partitions[name].chain,
            topic=partitions[name].ref.topic,
            fail_on_data_loss=fail_on_data_loss,
        )
        for name, end in ends.items()
    }
    backlog = {name: sum(r.entries for r in rs) for name, rs in ranges.items()}
    shares = allocate(backlog, cap)
    for name, end in ends.items():
        chain = partitions[name].chain
        if backlog[name] == 0:
            # Nothing to read up to the end (or only what is lost): moving there is free.
            result[name] = normalize(end, chain)
        else:
            taken = take(ranges[name], shares[name])
            result[name] = normalize(position_after(start.get(name, NOTHING), taken), chain)
    return result


def plan_batch(
    start: Mapping[str, Position],
    end: Mapping[str, Position],
    partitions: Mapping[str, Partition],
    *,
    max_entries: int,
    max_bytes: int,
    fail_on_data_loss: bool,
) -> list[ReadSplit]:
    """The splits of one micro-batch: the entries in ``(start, end]`` of every partition
    over the chains now, cut like a batch read. A partition missing from ``start`` starts
    from nothing; one missing from ``partitions`` (its topic is gone) is data loss if it
    had anything left to read.

    Raises:
        DataLossError, SnapshotBehindError: see ``pending``.
    """
    splits: list[ReadSplit] = []
    for name in sorted(end):
        begin, stop = start.get(name, NOTHING), end[name]
        if stop.key <= begin.key:
            continue
        part = partitions.get(name)
        if part is None:
            topic = str(TopicName.from_managed_ledger_name(name))
            _lost(topic, stop.ledger, "the topic's ledgers are no longer listed", fail_on_data_loss)
            continue
        for rng in pending(
            begin, stop, part.chain, topic=part.ref.topic, fail_on_data_loss=fail_on_data_loss
        ):
            splits.extend(
                split_range(part.ref, rng.span, rng.first, rng.last, max_entries, max_bytes)
            )
    return splits


def ref_of(managed_ledger: str) -> TopicPartitionRef:
    """The ref of a topic partition known only by its managed-ledger name (an offset key)."""
    topic = TopicName.from_managed_ledger_name(managed_ledger)
    return TopicPartitionRef(str(topic), topic.partition_index, managed_ledger)


async def fetch_partitions(
    options: SourceOptions, extra: Sequence[str] = ()
) -> dict[str, Partition]:
    """Every topic partition ``options`` names now with its chain, plus those named by
    managed ledger in ``extra`` (offset keys; a topic that is gone has an empty chain).

    Raises:
        UnknownTopicError, DataLossError, SparkSourceError: see ``LedgerCatalog``.
    """
    async with connect(options.metadata) as conn:
        catalog = LedgerCatalog(conn)
        refs = {ref.managed_ledger: ref for ref in await catalog.resolve(options)}
        for name in extra:
            refs.setdefault(name, ref_of(name))
        snapshots = await asyncio.gather(
            *(
                catalog.snapshot(ref, fail_on_data_loss=options.fail_on_data_loss)
                for ref in refs.values()
            )
        )
    # A topic that is gone has no ledgers: ``pending`` judges what that loses.
    return {snap.ref.managed_ledger: Partition(snap.ref, snap.ledgers) for snap in snapshots}


class StripeMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over ledger chains (see the module docstring).

    Spark keeps one instance on the driver for the query's planning calls (so the
    ``Trigger.AvailableNow`` target lives here) and pickles another to the executors, which
    only call ``read``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: Offset | None = None

    def _partitions(self, extra: Sequence[str] = ()) -> dict[str, Partition]:
        return asyncio.run(fetch_partitions(self.options, extra))

    def initialOffset(self) -> dict[str, Any]:
        offset = initial_offset(self._partitions(), self.options.starting_offsets)
        log.info(
            "stream over %d topic partitions starts at %s",
            len(offset),
            self.options.starting_offsets,
        )
        return encode_offset(offset)

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit(self.options)

    def prepareForTriggerAvailableNow(self) -> None:
        parts = self._partitions()
        self._target = {name: chain_end(p.chain) for name, p in parts.items()}
        log.info("Trigger.AvailableNow: reading %d topic partitions up to now", len(parts))
        log.debug("Trigger.AvailableNow target %s", self._target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = decode_offset(start)
        parts = self._partitions()
        end = next_offset(
            begin,
            parts,
            cap=entry_cap(limit),
            target=self._target,
            fail_on_data_loss=self.options.fail_on_data_loss,
        )
        return encode_offset(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = decode_offset(start), decode_offset(end)
        splits = asyncio.run(self._plan(begin, stop))
        log.debug("micro-batch %s -> %s: %d splits", start, end, len(splits))
        return [SplitPartition(split) for split in splits]

    async def _plan(self, begin: Offset, stop: Offset) -> list[ReadSplit]:
        """``plan_batch`` over chains fetched now, fetched again (a new session, maybe
        another server) while they lag behind ``stop``."""
        moving = [name for name in stop if stop[name].key > begin.get(name, NOTHING).key]
        if not moving:
            return []
        backoff = Backoff(initial=0.1, maximum=2.0, deadline=CATCH_UP_S)
        while True:
            parts = await fetch_partitions(self.options, extra=moving)
            try:
                return plan_batch(
                    begin,
                    stop,
                    parts,
                    max_entries=self.options.max_entries_per_partition,
                    max_bytes=self.options.max_bytes_per_partition,
                    fail_on_data_loss=self.options.fail_on_data_loss,
                )
            except SnapshotBehindError as exc:
                if backoff.expired:
                    raise
                log.info("%s; reading the ledger lists again", exc)
                await backoff.sleep()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: no broker state; Spark's checkpoint records the progress."""
