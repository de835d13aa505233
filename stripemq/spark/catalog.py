"""The driver's view of what is stored: topics, their ledgers, and the open ledgers' LACs.

``LedgerCatalog`` reads the metadata store (managed-ledger lists, partitioned-topic
counts) and asks the bookies for the LAC of each open ledger, read-only and without
recovery: planning never fences a live writer. ``connect`` opens the store and the ledger
client for one job (a ``local://`` store read-only, beside the standalone that holds it).

Closed ledgers are planned from the ledger list alone (its entry counts and sizes), so a
topic with hundreds of ledgers costs one metadata read; only an open ledger needs the
bookies (its LAC, and its last entry for the bytes written so far). Narrowing a ledger's
range by publish time reads a few entries of the ledgers whose time span straddles the
bounds, no others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from stripemq.bookie.client import BookKeeper, ReadOnlyLedgerHandle
from stripemq.errors import (
    BookieError,
    ConfigError,
    CorruptEntryError,
    DataLossError,
    ManagedLedgerError,
    MetadataError,
    NoSuchLedgerError,
    NotFoundError,
    SparkSourceError,
    UnknownTopicError,
)
from stripemq.managed_ledger.ledger_chain import LedgerInfo
from stripemq.managed_ledger.ledger_list import LedgerList, child_name, managed_ledger_path
from stripemq.metadata import EmbeddedMetadataStore, MetadataStore, create_metadata_store
from stripemq.metadata.partitioned_topics import partition_count
from stripemq.proto.topic_name import TopicName
from stripemq.spark import decode
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import (
    LedgerSpan,
    Pushdown,
    ReadSplit,
    TopicPartitionRef,
    TopicSnapshot,
    ledger_time_span,
    narrow_by_publish_time,
    prune_snapshot,
    ref_selected,
    split_range,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

CONNECT_TIMEOUT_S = 15.0  # how long an unreachable metadata store may keep a job waiting
SNAPSHOT_CONCURRENCY = 16  # topic partitions whose ledgers are listed at once


@dataclass
class Connection:
    """A started metadata store and ledger client, closed together."""

    store: MetadataStore
    bk: BookKeeper


@contextlib.asynccontextmanager
async def connect(
    metadata_url: str, *, timeout_s: float = CONNECT_TIMEOUT_S
) -> AsyncIterator[Connection]:
    """Open ``metadata_url`` (read-only when ``local://``) and a ledger client on it.

    Raises:
        SparkSourceError: the metadata store cannot be reached (the message names it)
        within ``timeout_s``.
    """
    try:
        if metadata_url.startswith("local://"):
            store: MetadataStore = EmbeddedMetadataStore(metadata_url, read_only=True)
        elif metadata_url.startswith("zk://"):
            store = create_metadata_store(metadata_url, connect_timeout=timeout_s)
        else:
            raise ConfigError(f"metadata URL must be zk:// or local://, not {metadata_url!r}")
    except ConfigError as exc:
        raise SparkSourceError(f"metadata store {metadata_url}: {exc}") from exc
    try:
        # ZooKeeper gives up after its connect timeout on its own; the outer bound covers
        # everything else (a chroot that cannot be made, a stuck disk).
        await asyncio.wait_for(store.start(), timeout_s + 5.0)
    except (MetadataError, TimeoutError, OSError) as exc:
        with contextlib.suppress(Exception):
            await store.close()
        reason = str(exc) or f"no answer within {timeout_s:g}s"
        raise SparkSourceError(f"cannot reach metadata store {metadata_url}: {reason}") from exc
    bk = BookKeeper(store)
    try:
        await bk.start()
        yield Connection(store, bk)
    finally:
        try:
            await bk.close()
        finally:
            await store.close()


class LedgerCatalog:
    """Topics and ledgers to plan, read from one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        # Read-only handles opened while planning, by ledger id (each opened once).
        self._handles: dict[int, ReadOnlyLedgerHandle] = {}

    # ------------------------------------------------------------------ topics

    async def resolve(self, options: SourceOptions) -> list[TopicPartitionRef]:
        """The stored topics ``options`` names: each partition of a partitioned topic,
        topics matching ``topicsPattern`` in its namespace; sorted by name (partitions by
        index).

        Raises:
            UnknownTopicError: a named topic has no managed ledger and is not partitioned;
            no stored topic matches ``topicsPattern``.
            SparkSourceError: the metadata store failed.
        """
        refs: dict[str, TopicPartitionRef] = {}
        try:
            if options.topics_pattern is not None:
                for ref in await self._matching(options.topics_pattern, options.pattern_namespace):
                    refs[ref.topic] = ref
            for name in options.topics:
                for ref in await self._named(TopicName.parse(name)):
                    refs[ref.topic] = ref
        except MetadataError as exc:
            raise SparkSourceError(f"cannot list topics in {options.metadata}: {exc}") from exc
        return sorted(refs.values(), key=_ref_order)

    async def _named(self, topic: TopicName) -> list[TopicPartitionRef]:
        """The refs of one named topic: every partition of a partitioned topic, else itself."""
        store = self.conn.store
        partitions = await partition_count(store, topic)  # a partition's: its parent's count
        if topic.partition_index < 0 and partitions > 0:
            return [_ref(topic.partition(index)) for index in range(partitions)]
        if 0 <= topic.partition_index < partitions:
            # A partition that exists (maybe never written: then it has no ledgers yet).
            return [_ref(topic)]
        if await store.exists(managed_ledger_path(topic.managed_ledger_name)) is None:
            raise UnknownTopicError(f"topic {topic} does not exist (no stored ledgers)")
        return [_ref(topic)]

    async def _matching(self, pattern: str, namespace: str) -> list[TopicPartitionRef]:
        """The namespace's stored topics whose full name (or, for a partition, whose
        partitioned topic's name, as Pulsar's pattern consumers match) is ``pattern``."""
        if not pattern.startswith("persistent://"):
            pattern = f"persistent://{pattern}"
        regex = re.compile(pattern)
        prefix = f"{namespace}/persistent"
        try:
            children = await self.conn.store.children(managed_ledger_path(prefix))
        except NotFoundError:
            children = []
        refs = []
        for child in children:
            topic = TopicName.from_managed_ledger_name(f"{prefix}/{child_name(child)}")
            names = {str(topic), str(topic.partitioned_topic)}
            if any(regex.fullmatch(name) for name in names):
                refs.append(_ref(topic))
        if not refs:
            raise UnknownTopicError(
                f"no stored topic of namespace {namespace} matches topicsPattern {pattern!r}"
            )
        return refs

    # ------------------------------------------------------------------ ledgers

    async def snapshot(
        self, ref: TopicPartitionRef, *, fail_on_data_loss: bool = True
    ) -> TopicSnapshot:
        """``ref``'s ledgers now: closed ones whole, the open one to its LAC.

        A topic with no managed ledger (a partition never written) has no ledgers.

        Raises:
            DataLossError: an open ledger of the list has no metadata any more (only
            when ``fail_on_data_loss``; a ledger trimmed meanwhile is skipped).
            SparkSourceError: the metadata store or the bookies failed.
        """
        listed = await self._ledger_list(ref)
        if listed is None:
            return TopicSnapshot(ref, ())
        spans: list[LedgerSpan] = []
        for info in listed.chain:
            if info.closed:
                spans.append(
                    LedgerSpan(
                        ledger_id=info.ledger_id,
                        last_entry=info.entries - 1,
                        size=info.size,
                        created_ms=info.created_ms,
                        closed_ms=info.closed_ms,
                        closed=True,
                    )
                )
                continue
            span = await self._open_span(ref, info, fail_on_data_loss)
            if span is not None:
                spans.append(span)
        return TopicSnapshot(ref, tuple(spans))

    async def _ledger_list(self, ref: TopicPartitionRef) -> LedgerList | None:
        try:
            found = await self.conn.store.get(managed_ledger_path(ref.managed_ledger))
        except MetadataError as exc:
            raise SparkSourceError(f"{ref.topic}: cannot read its ledger list: {exc}") from exc
        if found is None:
            return None
        try:
            return LedgerList.decode(found[0], ref.managed_ledger)
        except ManagedLedgerError as exc:
            raise SparkSourceError(f"{ref.topic}: {exc}") from exc

    async def _open_span(
        self, ref: TopicPartitionRef, info: LedgerInfo, fail_on_data_loss: bool
    ) -> LedgerSpan | None:
        """The open ledger ``info`` cut at its LAC, read from the bookies without recovery;
        ``None`` when it is gone and that is no loss (or loss is allowed)."""
        try:
            handle = await self._handle(ref, info.ledger_id, fresh=True)
            lac = handle.last_add_confirmed
            size = 0
            if lac >= 0:
                if handle.is_closed:
                    size = handle.length
                else:
                    # Every entry records the ledger's length through it: read the LAC's entry.
                    read = handle.read_raw_entries(lac, lac)
                    await self._bookie_call(ref, info.ledger_id, read)
                    size = handle.length
        except (DataLossError, NoSuchLedgerError) as exc:  # deleted, before or after opening
            if not await self._still_listed(ref, info.ledger_id):
                log.info("[%s] ledger %d was trimmed while planning", ref.topic, info.ledger_id)
                return None
            if fail_on_data_loss:
                if isinstance(exc, DataLossError):
                    raise
                raise DataLossError(
                    f"{ref.topic}: ledger {info.ledger_id} was deleted while it was planned"
                ) from exc
            log.warning("[%s] ledger %d is gone: skipped", ref.topic, info.ledger_id)
            return None
        log.debug("[%s] open ledger %d: LAC %d, %d bytes", ref.topic, info.ledger_id, lac, size)
        return LedgerSpan(
            ledger_id=info.ledger_id,
            last_entry=lac,
            size=size,
            created_ms=info.created_ms,
            closed_ms=0,  # closed in BookKeeper maybe, but when is not recorded yet
            closed=handle.is_closed,
        )

    async def _still_listed(self, ref: TopicPartitionRef, ledger_id: int) -> bool:
        listed = await self._ledger_list(ref)
        return listed is not None and ledger_id in listed.chain

    async def _handle(
        self, ref: TopicPartitionRef, ledger_id: int, *, fresh: bool = False
    ) -> ReadOnlyLedgerHandle:
        """A read-only handle on ``ledger_id``, opened without recovery (never fencing);
        ``fresh``: with its LAC read now, also when it was opened before.

        Raises:
            DataLossError: the ledger's metadata is gone. SparkSourceError: see above.
        """
        handle = self._handles.get(ledger_id)
        try:
            if handle is None:
                handle = await self._bookie_call(
                    ref,
                    ledger_id,
                    self.conn.bk.open_ledger(ledger_id, password=None, recovery=False),
                )
                self._handles[ledger_id] = handle
            elif fresh:
                await self._bookie_call(ref, ledger_id, handle.read_last_add_confirmed())
        except NoSuchLedgerError:
            self._handles.pop(ledger_id, None)
            raise DataLossError(
                f"{ref.topic}: ledger {ledger_id} no longer exists (trimmed or deleted)"
            ) from None
        return handle

    async def _bookie_call(self, ref: TopicPartitionRef, ledger_id: int, call: Awaitable[T]) -> T:
        """``call``'s result; errors of the bookies or the store name topic and ledger
        (``NoSuchLedgerError`` passes through for the caller to judge)."""
        try:
            return await call
        except NoSuchLedgerError:
            raise
        except (BookieError, MetadataError) as exc:
            raise SparkSourceError(
                f"{ref.topic}: cannot read ledger {ledger_id} from the bookies: {exc}"
            ) from exc

    async def publish_time(self, ref: TopicPartitionRef, ledger_id: int, entry_id: int) -> int:
        """The publish time (ms) of an entry, from its metadata (a probe for planning).

        Raises:
            DataLossError: the ledger is gone. CorruptEntryError: the entry does not parse.
            SparkSourceError: the bookies could not serve the entry.
        """
        handle = await self._handle(ref, ledger_id)
        if entry_id > handle.last_add_confirmed:  # confirmed since the handle was opened?
            handle = await self._handle(ref, ledger_id, fresh=True)
        try:
            entry = await self._bookie_call(ref, ledger_id, handle.read_entry(entry_id))
        except NoSuchLedgerError:
            raise DataLossError(
                f"{ref.topic}: ledger {ledger_id} no longer exists (trimmed or deleted)"
            ) from None
        try:
            return decode.entry_publish_time(entry.data)
        except CorruptEntryError as exc:
            raise CorruptEntryError(
                f"{ref.topic}: ledger {ledger_id} entry {entry_id}: {exc}"
            ) from exc

    # ------------------------------------------------------------------ planning

    async def plan(self, options: SourceOptions, pushdown: Pushdown) -> list[ReadSplit]:
        """Resolve, snapshot, prune (ledgers, then entry ranges by publish time) and split.

        Splits come in topic, ledger, entry order. A ledger is narrowed by publish time only
        when the pushdown bounds time and the ledger's time span is not wholly inside the
        bounds (a few entry reads each); others are planned from the ledger list alone.

        Raises:
            UnknownTopicError, DataLossError, CorruptEntryError, SparkSourceError.
        """
        refs = [ref for ref in await self.resolve(options) if ref_selected(ref, pushdown)]
        gate = asyncio.Semaphore(SNAPSHOT_CONCURRENCY)

        async def list_ledgers(ref: TopicPartitionRef) -> TopicSnapshot:
            async with gate:
                return await self.snapshot(ref, fail_on_data_loss=options.fail_on_data_loss)

        snapshots = await _gather_or_cancel([list_ledgers(ref) for ref in refs])
        skew = options.publish_time_skew_ms
        splits: list[ReadSplit] = []
        for snapshot in snapshots:
            for span in prune_snapshot(snapshot, pushdown, skew):
                entries = await self._entry_range(snapshot.ref, span, pushdown, options)
                if entries is None:
                    continue
                splits.extend(
                    split_range(
                        snapshot.ref,
                        span,
                        entries[0],
                        entries[1],
                        options.max_entries_per_partition,
                        options.max_bytes_per_partition,
                    )
                )
        log.info(
            "planned %d splits over %d topics (%d entries)",
            len(splits),
            len(refs),
            sum(split.entries for split in splits),
        )
        return splits

    async def _entry_range(
        self,
        ref: TopicPartitionRef,
        span: LedgerSpan,
        pushdown: Pushdown,
        options: SourceOptions,
    ) -> tuple[int, int] | None:
        """The entries of ``span`` to read: all, or those publish times may match."""
        bounds, skew = pushdown.time, options.publish_time_skew_ms
        if bounds.unbounded or bounds.covers(*ledger_time_span(span), skew):
            return 0, span.last_entry

        async def probe(entry_id: int) -> int:
            return await self.publish_time(ref, span.ledger_id, entry_id)

        try:
            return await narrow_by_publish_time(probe, 0, span.last_entry, bounds, skew)
        except DataLossError:
            if not await self._still_listed(ref, span.ledger_id):
                log.info("[%s] ledger %d was trimmed while planning", ref.topic, span.ledger_id)
                return None
            if options.fail_on_data_loss:
                raise
            log.warning("[%s] ledger %d is gone: skipped", ref.topic, span.ledger_id)
            return None


def _ref(topic: TopicName) -> TopicPartitionRef:
    return TopicPartitionRef(str(topic), topic.partition_index, topic.managed_ledger_name)


def _ref_order(ref: TopicPartitionRef) -> tuple[str, int, str]:
    """Topics by name, the partitions of one topic by index (2 before 10)."""
    base = str(TopicName.parse(ref.topic).partitioned_topic) if ref.partition >= 0 else ref.topic
    return base, ref.partition, ref.topic


async def _gather_or_cancel(calls: list[Coroutine[Any, Any, T]]) -> list[T]:
    """The results of ``calls`` run together, in order; the first failure cancels the rest
    (none is left running against a connection about to close) and is raised as it is."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
