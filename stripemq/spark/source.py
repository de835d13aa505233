"""The PySpark data source ``stripemq``: batch reads of topics straight from the bookies,
and (``streaming.py``) micro-batches over the same ledgers.

Spark creates ``StripeMQDataSource`` when a query loads (options are parsed and checked
there, so a bad option fails ``load()``), then pickles it to a planning worker that calls
``reader``, ``pushFilters`` and ``partitions`` on the driver side, and pickles the reader
to the executors, which call ``read`` once per partition. Planning (``catalog``) reads
the metadata store and the open ledgers' LACs; each partition is one ``ReadSplit``, a
bounded entry range of one ledger; reading (``ledger_reader``) opens that ledger read-only
without recovery, so a live writer is never fenced.

The schema is fixed (``schema.COLUMNS``); a query that gives another one is refused.

One option is internal, not for users: ``stripemq.exportSplits`` (``manifest.py``), by
which ``stripemq spark export --writer spark`` hands over the exact entry ranges to read
instead of letting the reader plan. It is checked like the others: every range must
belong to a topic the options name (or match), so it cannot read beyond them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from stripemq.errors import ConfigError
from stripemq.proto.topic_name import InvalidTopicNameError, TopicName
from stripemq.spark import schema
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import Pushdown, ReadSplit, translate_filters

if TYPE_CHECKING:
    from stripemq.spark.streaming import StripeMQStreamReader

log = logging.getLogger(__name__)


class SplitPartition(InputPartition):
    """One Spark partition: one ``ReadSplit`` (picklable, like everything it holds)."""

    def __init__(self, split: ReadSplit) -> None:
        super().__init__(split)

    @property
    def split(self) -> ReadSplit:
        split: ReadSplit = self.value
        return split

    def __repr__(self) -> str:
        s = self.split
        return (
            f"SplitPartition({s.ref.topic} ledger {s.ledger_id} "
            f"entries {s.first_entry}..{s.last_entry})"
        )


def read_partition(partition: InputPartition, options: SourceOptions) -> Iterator[Any]:
    """The Arrow record batches of one partition (none for the placeholder partition Spark
    substitutes when planning found nothing to read)."""
    if not isinstance(partition, SplitPartition):
        return iter(())
    from stripemq.spark.ledger_reader import read_split

    return iter(read_split(partition.split, options))


def check_schema(given: StructType) -> None:
    """Refuse a schema other than the source's own (names and types, in order).

    Raises:
        ConfigError: ``given`` differs; the message shows both.
    """
    got = [(field.name, field.dataType.simpleString()) for field in given.fields]
    if got != list(schema.COLUMNS):
        raise ConfigError(
            "the stripemq source has a fixed schema; do not give one with .schema(...): "
            f"expected {schema.spark_ddl()}, got "
            + ", ".join(f"`{name}` {kind}" for name, kind in got)
        )


def check_exact_splits(options: SourceOptions, splits: Sequence[ReadSplit]) -> None:
    """Refuse internal ``stripemq.exportSplits`` ranges outside what ``options`` names: a
    range of another topic (or one whose names disagree), or not a range of entries.

    Raises:
        ConfigError: naming the first such range.
    """
    for split in splits:
        ref = split.ref
        try:
            topic: TopicName | None = TopicName.parse(ref.topic)
        except InvalidTopicNameError:
            topic = None
        consistent = (
            topic is not None
            and topic.persistent
            and str(topic) == ref.topic
            and topic.managed_ledger_name == ref.managed_ledger
            and topic.partition_index == ref.partition
        )
        if not consistent or topic is None or not _names(options, topic):
            raise ConfigError(
                f"internal option stripemq.exportSplits: a range of {ref.topic!r}, "
                "a topic the options do not name"
            )
        if split.ledger_id < 0 or split.first_entry < 0 or split.last_entry < split.first_entry:
            raise ConfigError(
                f"internal option stripemq.exportSplits: ledger {split.ledger_id} entries "
                f"{split.first_entry}..{split.last_entry} of {ref.topic} is not a range"
            )


def _names(options: SourceOptions, topic: TopicName) -> bool:
    """``options`` name ``topic`` (a partition: or its partitioned topic), as
    ``LedgerCatalog.resolve`` reads them."""
    names = {str(topic), str(topic.partitioned_topic)}
    if options.topics_pattern is None:
        return not names.isdisjoint(options.topics)
    pattern = options.topics_pattern
    if not pattern.startswith("persistent://"):
        pattern = f"persistent://{pattern}"
    return topic.namespace_name == options.pattern_namespace and any(
        re.fullmatch(pattern, name) for name in names
    )


class StripeMQDataSource(DataSource):
    """``spark.read.format("stripemq")`` and ``spark.readStream.format("stripemq")``."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        # PySpark asks not to override this; we only add parsing, so a bad option fails
        # ``load()`` (where Spark creates the source) rather than the first action.
        super().__init__(options)
        self.source_options = SourceOptions.parse(options)
        from stripemq.spark.manifest import EXPORT_SPLITS_OPTION, decode_splits

        exact = next(
            (v for k, v in options.items() if str(k).lower() == EXPORT_SPLITS_OPTION.lower()),
            None,
        )
        # ``stripemq spark export`` hands over the exact entry ranges to read (internal).
        self.exact_splits = decode_splits(exact) if exact is not None else None
        if self.exact_splits is not None:
            check_exact_splits(self.source_options, self.exact_splits)

    @classmethod
    def name(cls) -> str:
        return "stripemq"

    def schema(self) -> str:
        return schema.spark_ddl()

    def reader(self, schema: StructType) -> StripeMQBatchReader:
        check_schema(schema)
        return StripeMQBatchReader(self.source_options, self.exact_splits)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_schema(schema)
        from stripemq.spark.streaming import StripeMQStreamReader

        reader: StripeMQStreamReader = StripeMQStreamReader(self.source_options)
        return reader


class StripeMQBatchReader(DataSourceReader):
    """Plans a batch read of the topics (with what ``pushFilters`` allows it to prune) and
    reads one split per partition.

    After ``partitions()`` the plan stays readable as ``planned`` (tests inspect it); it is
    left out when Spark pickles the reader to the executors, which need only the options
    (each partition carries its split), and so are the export's ``exact`` splits."""

    def __init__(self, options: SourceOptions, exact: list[ReadSplit] | None = None) -> None:
        self.options = options
        self.exact = exact  # splits to read instead of planning (the export's)
        self.pushdown = Pushdown()
        self.planned: list[SplitPartition] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["planned"] = None
        state["exact"] = None
        return state

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Keep what prunes ledgers and partitions; hand every filter back to Spark (by
        reference, as Spark requires), since pruning is coarse."""
        self.pushdown, remaining = translate_filters(filters)
        log.debug("pushdown %s from %s", self.pushdown, filters)
        return list(remaining)

    def partitions(self) -> list[SplitPartition]:
        """Plan now: the topics' ledgers as the metadata store lists them, open ledgers up
        to their LAC.

        Raises:
            UnknownTopicError, SparkSourceError: see ``LedgerCatalog.plan``.
        """
        if self.exact is not None:
            splits = self.exact
        else:
            splits = asyncio.run(_plan(self.options, self.pushdown))
        self.planned = [SplitPartition(split) for split in splits]
        log.info(
            "planned %d splits (%d entries) over %s",
            len(splits),
            sum(s.entries for s in splits),
            self.options.topics or self.options.topics_pattern,
        )
        return self.planned

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition, self.options)


async def _plan(options: SourceOptions, pushdown: Pushdown) -> list[ReadSplit]:
    from stripemq.spark.catalog import LedgerCatalog, connect

    async with connect(options.metadata) as conn:
        return await LedgerCatalog(conn).plan(options, pushdown)
