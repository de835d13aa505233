"""The records of the schema registry: schema types, compatibility strategies, one stored
schema, and the wire form of a schema version.

A schema is what Pulsar's ``SchemaData`` holds: a type, its definition (``data``: an Avro
record's JSON for AVRO and JSON, empty or ``null`` for the primitive types, the encoded pair
for KEY_VALUE) and string properties. Versions are numbered from 0 per topic; on the wire
(``schema_version`` of PRODUCER_SUCCESS, a message's metadata, GET_SCHEMA) a version is its
number as an 8-byte big-endian integer, as Pulsar's ``LongSchemaVersion`` writes it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from stripemq.proto import pulsar_api_pb2 as pb

VERSION_BYTES = struct.Struct(">q")


class SchemaType(enum.Enum):
    """Pulsar's ``SchemaType``: the REST name, and the number the protocol carries (the
    negative ones never travel: a client with BYTES sends no schema, or type 0)."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20
    AUTO_CONSUME = 21  # the protocol's number; Pulsar's enum says -3
    BYTES = -1
    AUTO = -2
    AUTO_PUBLISH = -4

    @classmethod
    def parse(cls, name: object) -> SchemaType:
        """The type a REST payload names (``"AVRO"``); raises ``ValueError`` otherwise."""
        if isinstance(name, str):
            try:
                return cls[name.upper()]
            except KeyError:
                pass
        raise ValueError(f"unknown schema type {name!r}")

    @property
    def is_struct(self) -> bool:
        """Defined by an Avro schema (Pulsar's struct schemas)."""
        return self in STRUCT_TYPES

    @property
    def carries_no_schema(self) -> bool:
        """A client with this type reads and writes bytes: nothing to register or check."""
        return self in NO_SCHEMA_TYPES


STRUCT_TYPES = frozenset({SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF})
NO_SCHEMA_TYPES = frozenset(
    {SchemaType.NONE, SchemaType.BYTES, SchemaType.AUTO_CONSUME, SchemaType.AUTO}
)


class CompatibilityStrategy(enum.Enum):
    """Pulsar's ``SchemaCompatibilityStrategy``: which earlier versions a new schema must
    agree with, and how (BACKWARD: it reads what they wrote; FORWARD: they read what it
    writes; FULL: both). UNDEFINED, a namespace's "not set", defers to the broker."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, name: object) -> CompatibilityStrategy:
        """The strategy a body or setting names; raises ``ValueError`` otherwise."""
        if isinstance(name, str):
            try:
                return cls[name.strip().upper()]
            except KeyError:
                pass
        names = ", ".join(s.value for s in cls)
        raise ValueError(f"unknown schema compatibility strategy {name!r} (one of {names})")

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        """The new schema must read data written with the earlier ones."""
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        """The earlier schemas must read data written with the new one."""
        return self.value.startswith(("FORWARD", "FULL"))


@dataclass(frozen=True)
class SchemaData:
    """One schema as the registry keeps it (Pulsar's ``SchemaData``); ``deleted`` marks the
    tombstone a deletion leaves, after which the topic has no schema."""

    type: SchemaType
    data: bytes = b""
    properties: Mapping[str, str] = field(default_factory=dict)
    timestamp_ms: int = 0
    deleted: bool = False

    @classmethod
    def from_proto(cls, schema: pb.Schema, timestamp_ms: int = 0) -> SchemaData:
        """The schema a PRODUCER, SUBSCRIBE or GET_OR_CREATE_SCHEMA carries (its type is
        one of the protocol's, which are all Pulsar's)."""
        kind = SchemaType(schema.type)
        # The stubs name the properties' type after Schema.Type.KeyValue, not the message.
        properties: Iterable[pb.KeyValue] = schema.properties
        return cls(
            type=kind,
            data=schema.schema_data,
            properties={p.key: p.value for p in properties},
            timestamp_ms=timestamp_ms,
        )

    def to_proto(self, name: str) -> pb.Schema:
        """The schema as GET_SCHEMA answers it (``name``: the topic's)."""
        return pb.Schema(
            name=name,
            schema_data=self.data,
            type=self.type.value if self.type.value >= 0 else SchemaType.NONE.value,  # type: ignore[arg-type]
            properties=[{"key": k, "value": v} for k, v in sorted(self.properties.items())],
        )


def encode_version(version: int) -> bytes:
    """A version as the protocol carries it."""
    return VERSION_BYTES.pack(version)


def decode_version(raw: bytes) -> int:
    """The version a client sent; raises ``ValueError`` unless it is 8 bytes, 0 or more."""
    if len(raw) != VERSION_BYTES.size:
        raise ValueError(f"a schema version is {VERSION_BYTES.size} bytes, not {len(raw)}")
    (version,) = VERSION_BYTES.unpack(raw)
    if version < 0:
        raise ValueError(f"schema version {version} is negative")
    return int(version)
