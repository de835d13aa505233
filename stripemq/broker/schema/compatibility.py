"""Whether a schema may join a topic's schemas (sans-IO): Pulsar's compatibility checks.

``check_compatible(new, history, strategy)`` raises ``IncompatibleSchemaError`` unless
``new`` agrees with the topic's live history (the versions since the last deletion, oldest
first) as ``strategy`` asks: with the latest version, or with each for a transitive one.
Two schemas of different types never agree. Struct schemas (AVRO, JSON, PROTOBUF) are
compared by Avro schema resolution (``avro``): BACKWARD asks the new schema to read data
written with the old, FORWARD the old to read data written with the new, FULL both. A
KEY_VALUE schema agrees when its key and its value each do, a PROTOBUF_NATIVE one when its
root message is the same. The primitives agree with any schema of their own type.

``validate(schema)`` raises ``InvalidSchemaError`` for a definition no client could use
(an AVRO schema that is not Avro), before anything is stored.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence

from stripemq.broker.schema import avro
from stripemq.broker.schema.types import CompatibilityStrategy, SchemaData, SchemaType
from stripemq.errors import IncompatibleSchemaError, InvalidSchemaError

LENGTH = struct.Struct(">i")
# Reasons an incompatibility names at most (a client sees the message).
MAX_REASONS = 5


# A schema's definition and properties, in bytes, at most: each version is one metadata
# node (ZooKeeper's limit is 1 MiB a node, with the base64 and the JSON around it).
MAX_SCHEMA_BYTES = 512 * 1024


# --------------------------------------------------------------------------- KEY_VALUE


def split_key_value(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    """The key and value schemas of a KEY_VALUE schema (Pulsar's ``KeyValueSchemaInfo``:
    two definitions, each after its 4-byte big-endian length, -1 for none; their types in
    the properties ``key.schema.type`` and ``value.schema.type``). Raises
    ``InvalidSchemaError``."""
    data = schema.data
    parts: list[bytes] = []
    offset = 0
    for _ in range(2):
        if len(data) < offset + LENGTH.size:
            raise InvalidSchemaError("a KEY_VALUE schema's data is cut short")
        (length,) = LENGTH.unpack_from(data, offset)
        offset += LENGTH.size
        if length < 0:
            parts.append(b"")
            continue
        if len(data) < offset + length:
            raise InvalidSchemaError("a KEY_VALUE schema's data is cut short")
        parts.append(data[offset : offset + length])
        offset += length
    if offset != len(data):
        raise InvalidSchemaError("a KEY_VALUE schema's data runs on past its two schemas")

    def side(name: str, definition: bytes) -> SchemaData:
        raw = schema.properties.get(f"{name}.schema.type", "BYTES")
        try:
            kind = SchemaType.parse(raw)
        except ValueError:
            raise InvalidSchemaError(f"{name}.schema.type {raw!r} is not a schema type") from None
        return SchemaData(kind, definition)

    return side("key", parts[0]), side("value", parts[1])


def join_key_value(key: SchemaData, value: SchemaData) -> bytes:
    """A KEY_VALUE schema's data from its two sides (``split_key_value`` reversed)."""
    return b"".join(
        LENGTH.pack(len(side.data)) + side.data if side.data else LENGTH.pack(-1)
        for side in (key, value)
    )


# --------------------------------------------------------------------------- validation


def validate(schema: SchemaData) -> None:
    """Raises ``InvalidSchemaError`` unless the definition suits its type and, with its
    properties, fits ``MAX_SCHEMA_BYTES`` (checked first: nothing larger is parsed)."""
    size = len(schema.data) + sum(len(k) + len(v) for k, v in schema.properties.items())
    if size > MAX_SCHEMA_BYTES:
        raise InvalidSchemaError(
            f"a schema of {size} bytes (definition and properties) is over the "
            f"{MAX_SCHEMA_BYTES} this broker keeps"
        )
    if schema.type.is_struct:
        _struct(schema)
    elif schema.type is SchemaType.KEY_VALUE:
        for side in split_key_value(schema):
            validate(side)
    elif schema.type is SchemaType.PROTOBUF_NATIVE:
        _root_message(schema)
    elif schema.type in (SchemaType.AUTO, SchemaType.AUTO_PUBLISH, SchemaType.AUTO_CONSUME):
        raise InvalidSchemaError(f"Schema {schema.type.name} is a client-side schema type")


def _struct(schema: SchemaData) -> avro.AvroType | None:
    """The Avro schema of a struct schema; ``None`` for a JSON schema that gives a JSON
    Schema document instead (old Java clients did). Raises ``InvalidSchemaError``."""
    try:
        return avro.parse_cached(schema.data)
    except avro.InvalidAvroSchemaError as exc:
        if schema.type is SchemaType.JSON and _is_json_object(schema.data):
            return None
        raise InvalidSchemaError(
            f"Invalid schema definition data for {schema.type.name} schema: {exc}"
        ) from None


def _root_message(schema: SchemaData) -> str:
    """The root message of a PROTOBUF_NATIVE schema (Pulsar's ``ProtobufNativeSchemaData``:
    ``fileDescriptorSet`` in base64, ``rootMessageTypeName``, ``rootFileDescriptorName``).
    Raises ``InvalidSchemaError``."""
    invalid = "Invalid schema definition data for PROTOBUF_NATIVE schema"
    try:
        doc = json.loads(schema.data)
    except (ValueError, RecursionError):
        raise InvalidSchemaError(f"{invalid}: not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidSchemaError(f"{invalid}: not a JSON object")
    descriptors, root = doc.get("fileDescriptorSet"), doc.get("rootMessageTypeName")
    try:
        if not isinstance(descriptors, str) or not base64.b64decode(descriptors, validate=True):
            raise ValueError
    except ValueError:
        raise InvalidSchemaError(f"{invalid}: fileDescriptorSet is not base64") from None
    if not isinstance(root, str) or not root:
        raise InvalidSchemaError(f"{invalid}: rootMessageTypeName is missing")
    if not isinstance(doc.get("rootFileDescriptorName"), str):
        raise InvalidSchemaError(f"{invalid}: rootFileDescriptorName is missing")
    return root


def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except (ValueError, RecursionError):
        return False


# --------------------------------------------------------------------------- compatibility


def identical(a: SchemaData, b: SchemaData) -> bool:
    """The same schema, as Pulsar's registry finds one already registered: the same type
    and definition (struct definitions compared as parsed, so layout does not matter),
    whatever the properties (but a KEY_VALUE's sides' types, which they name)."""
    if a.type is not b.type:
        return False
    if a.type is SchemaType.KEY_VALUE:  # the sides' types are in the properties
        try:
            pairs = zip(split_key_value(a), split_key_value(b), strict=True)
        except InvalidSchemaError:
            return a.data == b.data
        return all(identical(x, y) for x, y in pairs)
    if a.data == b.data:
        return True
    if not a.type.is_struct:
        return False
    try:
        return bool(_without_docs(json.loads(a.data)) == _without_docs(json.loads(b.data)))
    except (ValueError, RecursionError):
        return False


def _without_docs(doc: object) -> object:
    """A definition without its ``doc`` strings (Avro's ``Schema.equals`` ignores them)."""
    if isinstance(doc, dict):
        return {k: _without_docs(v) for k, v in doc.items() if k != "doc"}
    if isinstance(doc, list):
        return [_without_docs(v) for v in doc]
    return doc


def check_compatible(
    new: SchemaData, history: Sequence[SchemaData], strategy: CompatibilityStrategy
) -> None:
    """Raises ``IncompatibleSchemaError`` unless ``new`` may follow ``history`` (oldest
    first; tombstones and what precedes them already trimmed)."""
    if not history or strategy is CompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    if strategy is CompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")
    against = history if strategy.transitive else history[-1:]
    for existing in reversed(against):
        reasons = incompatibilities(existing, new, strategy)
        if reasons:
            raise IncompatibleSchemaError(
                f"Incompatible schema with strategy {strategy.value}: {'; '.join(reasons)}"
            )


# A consumer's schema is checked, under these strategies, as BACKWARD against the latest
# version only (Pulsar's ``checkConsumerCompatibility``): it must read what is there.
READ_LATEST_BACKWARD = frozenset(
    {
        CompatibilityStrategy.BACKWARD,
        CompatibilityStrategy.FORWARD,
        CompatibilityStrategy.FORWARD_TRANSITIVE,
        CompatibilityStrategy.FULL,
    }
)


def reader_strategy(strategy: CompatibilityStrategy) -> CompatibilityStrategy:
    """The strategy a consumer's schema is checked with, on a topic that has ``strategy``."""
    return CompatibilityStrategy.BACKWARD if strategy in READ_LATEST_BACKWARD else strategy


def incompatibilities(
    existing: SchemaData, new: SchemaData, strategy: CompatibilityStrategy
) -> list[str]:
    """Why ``new`` cannot follow ``existing`` under ``strategy`` (empty: it can)."""
    if existing.type is not new.type:
        return [f"exists schema type {existing.type.name}, new schema type {new.type.name}"]
    if identical(existing, new):
        return []
    if new.type is SchemaType.KEY_VALUE:
        reasons = []
        for part, old_side, new_side in zip(
            ("key", "value"), split_key_value(existing), split_key_value(new), strict=True
        ):
            reasons += [f"{part} {r}" for r in incompatibilities(old_side, new_side, strategy)]
        return reasons
    if new.type is SchemaType.PROTOBUF_NATIVE:
        # Pulsar's ProtobufNativeSchemaCompatibilityCheck: the root message stays.
        if _root_message(existing) != _root_message(new):
            return ["Protobuf root message isn't allow change!"]
        return []
    if not new.type.is_struct:
        return []
    old_avro, new_avro = _struct(existing), _struct(new)
    if old_avro is None or new_avro is None:
        # A JSON Schema document beside an Avro one cannot be compared (Pulsar lets it
        # pass); two JSON Schema documents must be the same.
        return [] if (old_avro is None) != (new_avro is None) else ["JSON Schema changed"]
    reasons = []
    if strategy.backward:
        errors = avro.read_errors(new_avro, old_avro)
        reasons += [f"new schema cannot read old data: {e}" for e in errors]
    if strategy.forward:
        errors = avro.read_errors(old_avro, new_avro)
        reasons += [f"old schema cannot read new data: {e}" for e in errors]
    return reasons[:MAX_REASONS]
