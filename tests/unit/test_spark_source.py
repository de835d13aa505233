"""The ``stripemq`` data source classes without a cluster: options checked when the
source is created, the fixed schema, filter pushdown handing filters back by reference,
and what Spark pickles (partitions, readers)."""

from __future__ import annotations

import datetime as dt
import pickle

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    StringStartsWith,
)
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from stripemq.errors import ConfigError
from stripemq.spark import schema
from stripemq.spark.manifest import EXPORT_SPLITS_OPTION, encode_splits
from stripemq.spark.planning import ReadSplit, TimeBounds, TopicPartitionRef
from stripemq.spark.source import (
    SplitPartition,
    StripeMQBatchReader,
    StripeMQDataSource,
    check_schema,
)
from stripemq.spark.streaming import StripeMQStreamReader

TOPIC = "persistent://public/default/orders"
OPTIONS = {"metadata": "zk://127.0.0.1:2181/stripemq", "topic": TOPIC}


def our_schema() -> StructType:
    return StructType.fromJson(
        {
            "type": "struct",
            "fields": [
                {"name": name, "type": _json_type(kind), "nullable": True, "metadata": {}}
                for name, kind in schema.COLUMNS
            ],
        }
    )


def _json_type(kind: str) -> object:
    if kind == "map<string,string>":
        return {
            "type": "map",
            "keyType": "string",
            "valueType": "string",
            "valueContainsNull": True,
        }
    return {"bigint": "long", "int": "integer"}.get(kind, kind)


def test_name_and_schema() -> None:
    source = StripeMQDataSource(dict(OPTIONS))
    assert StripeMQDataSource.name() == "stripemq"
    assert source.schema() == schema.spark_ddl()
    assert source.source_options.topics == (TOPIC,)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": TOPIC}, "metadata"),
        ({"metadata": "http://x", "topic": TOPIC}, "zk://"),
        ({"metadata": "zk://h:1/x"}, "exactly one"),
        ({"metadata": "zk://h:1/x", "topic": TOPIC, "topics": "a"}, "exactly one"),
        ({"metadata": "zk://h:1/x", "topic": "non-persistent://public/default/t"}, "persistent"),
        ({"metadata": "zk://h:1/x", "topic": TOPIC, "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"metadata": "zk://h:1/x", "topic": TOPIC, "maxEntriesPerTrigger": "0"}, "positive"),
        (
            {"metadata": "zk://h:1/x", "topic": TOPIC, "startingOffsets": "middle"},
            "startingOffsets",
        ),
        # misspelt options are refused, named as given, with the closest known name
        (
            {"metadata": "zk://h:1/x", "topic": TOPIC, "startingOffset": "latest"},
            'unknown option "startingOffset" \\(did you mean "startingOffsets"\\?\\)',
        ),
        (
            {"metadata": "zk://h:1/x", "topic": TOPIC, "maxentriesperpartiton": "10"},
            'did you mean "maxEntriesPerPartition"',
        ),
        ({"metadata": "zk://h:1/x", "topic": TOPIC, "colour": "red"}, "known: metadata, topic"),
        # what Spark passes for load(path): meaningless here
        ({"metadata": "zk://h:1/x", "topic": TOPIC, "path": "/data"}, "not a path"),
        # errors name options as documented, whatever case Spark hands them in
        (
            {"metadata": "zk://h:1/x", "topic": TOPIC, "maxentriesperpartition": "x"},
            'option "maxEntriesPerPartition" must be an integer',
        ),
    ],
)
def test_bad_options_fail_when_the_source_is_created(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StripeMQDataSource(options)


def test_the_sources_own_schema_is_accepted() -> None:
    source = StripeMQDataSource(dict(OPTIONS))
    check_schema(our_schema())
    assert isinstance(source.reader(our_schema()), StripeMQBatchReader)
    assert isinstance(source.streamReader(our_schema()), StripeMQStreamReader)


def test_another_schema_is_refused_with_both_shown() -> None:
    source = StripeMQDataSource(dict(OPTIONS))
    other = StructType([StructField("value", BinaryType()), StructField("__key", StringType())])
    with pytest.raises(ConfigError, match="fixed schema") as info:
        source.reader(other)
    assert "`__publishTime` timestamp" in str(info.value)
    retyped = StructType(
        [StructField(f.name, LongType()) if f.name == "__topic" else f for f in our_schema().fields]
    )
    with pytest.raises(ConfigError, match="`__topic` bigint"):
        source.streamReader(retyped)


def test_push_filters_keeps_time_bounds_and_hands_every_filter_back() -> None:
    reader = StripeMQDataSource(dict(OPTIONS)).reader(our_schema())
    since = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    until = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
    filters = [
        GreaterThanOrEqual(("__publishTime",), since),
        LessThan(("__publishTime",), until),
        EqualTo(("__partition",), 2),
        StringStartsWith(("__key",), "k"),
    ]
    returned = list(reader.pushFilters(filters))
    assert len(returned) == len(filters)
    assert all(any(r is f for f in filters) for r in returned)  # by reference
    assert reader.pushdown.time.lower_ms == int(since.timestamp() * 1000)
    assert reader.pushdown.time.upper_ms is not None
    assert reader.pushdown.time.upper_ms < int(until.timestamp() * 1000) + 1
    assert reader.pushdown.partitions == frozenset({2})


def test_partitions_pickle_with_their_split() -> None:
    split = ReadSplit(
        TopicPartitionRef(
            f"{TOPIC}-partition-1", 1, "public/default/persistent/orders-partition-1"
        ),
        ledger_id=12,
        first_entry=100,
        last_entry=199,
        estimated_bytes=4096,
    )
    partition = SplitPartition(split)
    again = pickle.loads(pickle.dumps(partition))
    assert isinstance(again, InputPartition)
    assert again.split == split
    assert "ledger 12 entries 100..199" in repr(again)


def test_the_reader_pickles_without_its_plan() -> None:
    split = ReadSplit(TopicPartitionRef(TOPIC, -1, "public/default/persistent/orders"), 3, 0, 9, 10)
    exact = {**OPTIONS, EXPORT_SPLITS_OPTION: encode_splits([split] * 1000)}
    reader = StripeMQDataSource(exact).reader(our_schema())
    assert reader.exact == [split] * 1000
    reader.pushFilters(
        [GreaterThanOrEqual(("__publishTime",), dt.datetime(2026, 1, 1, tzinfo=dt.UTC))]
    )
    split = ReadSplit(TopicPartitionRef(TOPIC, -1, "public/default/persistent/orders"), 3, 0, 9, 10)
    reader.planned = [SplitPartition(split)] * 1000
    again = pickle.loads(pickle.dumps(reader))
    assert again.planned is None and again.exact is None
    assert again.options == reader.options
    assert again.pushdown.time != TimeBounds()
    assert reader.planned is not None  # the driver's copy keeps it
    # the source itself travels to Spark's workers too
    source = pickle.loads(pickle.dumps(StripeMQDataSource(dict(OPTIONS))))
    assert source.source_options.topics == (TOPIC,)


def test_the_placeholder_partition_reads_nothing() -> None:
    reader = StripeMQDataSource(dict(OPTIONS)).reader(our_schema())
    assert list(reader.read(InputPartition(None))) == []


def exact_split(topic: str, ledger: int = 3, first: int = 0, last: int = 9) -> ReadSplit:
    from stripemq.proto.topic_name import TopicName

    name = TopicName.parse(topic)
    return ReadSplit(
        TopicPartitionRef(str(name), name.partition_index, name.managed_ledger_name),
        ledger,
        first,
        last,
        10,
    )


@pytest.mark.parametrize(
    ("options", "split"),
    [
        (OPTIONS, exact_split(TOPIC)),
        ({**OPTIONS, "topic": "orders"}, exact_split(f"{TOPIC}-partition-2")),  # partitioned
        (
            {"metadata": "zk://h:1/x", "topicsPattern": "persistent://public/default/ord.*"},
            exact_split(f"{TOPIC}-partition-0"),
        ),
    ],
)
def test_internal_export_splits_of_the_named_topics_are_read(
    options: dict[str, str], split: ReadSplit
) -> None:
    source = StripeMQDataSource({**options, "STRIPEMQ.EXPORTSPLITS": encode_splits([split])})
    assert source.reader(our_schema()).exact == [split]


@pytest.mark.parametrize(
    ("split", "message"),
    [
        (exact_split("persistent://public/default/fake"), "a topic the options do not name"),
        (exact_split("persistent://other/default/orders"), "a topic the options do not name"),
        (
            ReadSplit(TopicPartitionRef(TOPIC, -1, "public/default/persistent/fake"), 3, 0, 9, 0),
            "a topic the options do not name",
        ),
        (exact_split(TOPIC, first=5, last=4), "is not a range"),
    ],
)
def test_internal_export_splits_beyond_the_named_topics_are_refused(
    split: ReadSplit, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        StripeMQDataSource({**OPTIONS, EXPORT_SPLITS_OPTION: encode_splits([split])})
    pattern = {"metadata": "zk://h:1/x", "topicsPattern": "persistent://public/default/x.*"}
    with pytest.raises(ConfigError, match="do not name"):
        StripeMQDataSource({**pattern, EXPORT_SPLITS_OPTION: encode_splits([exact_split(TOPIC)])})
