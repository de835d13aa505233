"""The schema registry: topics' schema versions (``registry``), the rules a new schema
must pass (``compatibility``, with ``avro`` for struct schemas) and their records
(``types``)."""

from stripemq.broker.schema.registry import SchemaRegistry, StoredSchema, schema_id
from stripemq.broker.schema.types import (
    CompatibilityStrategy,
    SchemaData,
    SchemaType,
    decode_version,
    encode_version,
)
from stripemq.errors import InvalidSchemaError

__all__ = [
    "CompatibilityStrategy",
    "InvalidSchemaError",
    "SchemaData",
    "SchemaRegistry",
    "SchemaType",
    "StoredSchema",
    "decode_version",
    "encode_version",
    "schema_id",
]
