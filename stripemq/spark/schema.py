"""The rows the ``stripemq`` data source yields: one per message (a batch entry gives one
row per message in it), with the Pulsar Spark connector's column names plus where the
message sits in the bookies.

``__messageId`` is the protocol's ``MessageIdData`` serialized, the bytes the official
clients' ``MessageId.fromByteArray`` / ``MessageId.deserialize`` read. Times are UTC
timestamps; ``__eventTime`` is null when the producer set none.
"""

from __future__ import annotations

import functools
from typing import Any

VALUE = "value"
KEY = "__key"
TOPIC = "__topic"
MESSAGE_ID = "__messageId"
PUBLISH_TIME = "__publishTime"
EVENT_TIME = "__eventTime"
MESSAGE_PROPERTIES = "__messageProperties"
LEDGER_ID = "__ledgerId"
ENTRY_ID = "__entryId"
BATCH_INDEX = "__batchIndex"
PARTITION = "__partition"
SEQUENCE_ID = "__sequenceId"
PRODUCER_NAME = "__producerName"

# (name, Spark SQL type) in column order; the one place the schema is spelled out.
COLUMNS: tuple[tuple[str, str], ...] = (
    (VALUE, "binary"),
    (KEY, "string"),
    (TOPIC, "string"),
    (MESSAGE_ID, "binary"),
    (PUBLISH_TIME, "timestamp"),
    (EVENT_TIME, "timestamp"),
    (MESSAGE_PROPERTIES, "map<string,string>"),
    (LEDGER_ID, "bigint"),
    (ENTRY_ID, "bigint"),
    (BATCH_INDEX, "int"),
    (PARTITION, "int"),
    (SEQUENCE_ID, "bigint"),
    (PRODUCER_NAME, "string"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)


def spark_ddl() -> str:
    """The schema as Spark DDL (what ``DataSource.schema`` returns)."""
    return ", ".join(f"`{name}` {kind}" for name, kind in COLUMNS)


@functools.cache
def arrow_schema() -> Any:
    """The schema as the Arrow types Spark expects back from ``read`` (``pyarrow.Schema``):
    timestamps are microseconds in UTC, map keys are not nullable. Built once."""
    import pyarrow as pa

    types = {
        "binary": pa.binary(),
        "string": pa.string(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
        "bigint": pa.int64(),
        "int": pa.int32(),
    }
    return pa.schema([pa.field(name, types[kind]) for name, kind in COLUMNS])
