"""The schema rules (sans-IO): each compatibility strategy, types, KEY_VALUE, validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stripemq.broker.schema import CompatibilityStrategy, SchemaData, SchemaType
from stripemq.broker.schema.compatibility import (
    InvalidSchemaError,
    check_compatible,
    identical,
    join_key_value,
    reader_strategy,
    split_key_value,
    validate,
)
from stripemq.broker.schema.types import decode_version, encode_version
from stripemq.errors import IncompatibleSchemaError
from stripemq.proto import pulsar_api_pb2 as pb

S = CompatibilityStrategy


def user(*extra: dict[str, Any], kind: SchemaType = SchemaType.AVRO) -> SchemaData:
    fields = [{"name": "name", "type": "string"}, *extra]
    return SchemaData(
        kind, json.dumps({"type": "record", "name": "User", "fields": fields}).encode()
    )


V1 = user()
V2_DEFAULTED = user({"name": "age", "type": "int", "default": 0})  # adds a defaulted field
V2_REQUIRED = user({"name": "age", "type": "int"})  # adds a field without a default
V3_REMOVED = SchemaData(
    SchemaType.AVRO,
    json.dumps({"type": "record", "name": "User", "fields": []}).encode(),
)


def compatible(new: SchemaData, history: list[SchemaData], strategy: S) -> bool:
    try:
        check_compatible(new, history, strategy)
    except IncompatibleSchemaError:
        return False
    return True


@pytest.mark.parametrize(
    ("strategy", "defaulted", "required", "removed"),
    [
        # BACKWARD: the new schema reads old data (an added field needs a default).
        (S.BACKWARD, True, False, True),
        # FORWARD: old readers read new data (a removed field must have had a default).
        (S.FORWARD, True, True, False),
        (S.FULL, True, False, False),
        (S.ALWAYS_COMPATIBLE, True, True, True),
        (S.ALWAYS_INCOMPATIBLE, False, False, False),
    ],
)
def test_each_strategy_against_the_latest_version(
    strategy: S, defaulted: bool, required: bool, removed: bool
) -> None:
    assert compatible(V2_DEFAULTED, [V1], strategy) is defaulted
    assert compatible(V2_REQUIRED, [V1], strategy) is required
    assert compatible(V3_REMOVED, [V1], strategy) is removed


def test_the_identical_schema_always_agrees_but_under_always_incompatible() -> None:
    assert compatible(V1, [V1], S.FULL)
    with pytest.raises(IncompatibleSchemaError, match="ALWAYS_INCOMPATIBLE"):
        check_compatible(V2_DEFAULTED, [V1], S.ALWAYS_INCOMPATIBLE)


def test_no_history_accepts_anything() -> None:
    assert compatible(V2_REQUIRED, [], S.ALWAYS_INCOMPATIBLE)


def test_forward_transitive_asks_every_old_reader() -> None:
    v1 = V2_REQUIRED  # {name, age}: its readers need an age
    v2 = V2_DEFAULTED  # {name, age=0}
    v3 = V1  # {name}: age dropped
    assert compatible(v3, [v1, v2], S.FORWARD)  # v2's readers default the age
    assert not compatible(v3, [v1, v2], S.FORWARD_TRANSITIVE)  # v1's cannot


def test_backward_transitive_catches_what_the_latest_alone_does_not() -> None:
    v1 = user()  # {name}
    v2 = user({"name": "age", "type": "int", "default": 0})  # {name, age=0}
    v3 = SchemaData(
        SchemaType.AVRO,
        json.dumps(
            {
                "type": "record",
                "name": "User",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "age", "type": "int"},  # the default is gone
                ],
            }
        ).encode(),
    )
    assert compatible(v3, [v1, v2], S.BACKWARD)  # v2's data has age
    assert not compatible(v3, [v1, v2], S.BACKWARD_TRANSITIVE)  # v1's has not
    with pytest.raises(IncompatibleSchemaError, match="BACKWARD_TRANSITIVE: new schema cannot"):
        check_compatible(v3, [v1, v2], S.BACKWARD_TRANSITIVE)


def test_schemas_of_different_types_never_agree() -> None:
    string = SchemaData(SchemaType.STRING, b"")
    with pytest.raises(
        IncompatibleSchemaError, match="exists schema type AVRO, new schema type STRING"
    ):
        check_compatible(string, [V1], S.FULL)
    assert compatible(string, [V1], S.ALWAYS_COMPATIBLE)


def test_primitive_schemas_agree_with_their_own_type() -> None:
    python_string = SchemaData(SchemaType.STRING, b"null")  # what the Python client sends
    java_string = SchemaData(SchemaType.STRING, b"")
    assert compatible(python_string, [java_string], S.FULL)
    assert not identical(python_string, java_string)


def test_struct_definitions_are_identical_whatever_their_layout() -> None:
    pretty = SchemaData(SchemaType.JSON, json.dumps(json.loads(V1.data), indent=2).encode())
    assert identical(pretty, SchemaData(SchemaType.JSON, V1.data))
    assert not identical(pretty, V1)  # another type
    assert identical(SchemaData(SchemaType.AVRO, V1.data, {"a": "b"}), V1)  # properties aside


def test_a_json_schema_document_is_kept_but_not_compared() -> None:
    legacy = SchemaData(SchemaType.JSON, b'{"$schema": "http://json-schema.org/draft-04/schema#"}')
    validate(legacy)
    other = SchemaData(SchemaType.JSON, b'{"$schema": "x", "title": "other"}')
    assert not compatible(other, [legacy], S.FULL)
    assert compatible(user(kind=SchemaType.JSON), [legacy], S.FULL)


# --------------------------------------------------------------------------- readers


@pytest.mark.parametrize(
    ("strategy", "checked_as"),
    [
        (S.BACKWARD, S.BACKWARD),
        (S.FORWARD, S.BACKWARD),
        (S.FULL, S.BACKWARD),
        (S.FORWARD_TRANSITIVE, S.BACKWARD),
        (S.BACKWARD_TRANSITIVE, S.BACKWARD_TRANSITIVE),
        (S.FULL_TRANSITIVE, S.FULL_TRANSITIVE),
        (S.ALWAYS_COMPATIBLE, S.ALWAYS_COMPATIBLE),
    ],
)
def test_a_consumer_schema_is_checked_to_read_what_is_there(strategy: S, checked_as: S) -> None:
    assert reader_strategy(strategy) is checked_as


# --------------------------------------------------------------------------- KEY_VALUE


def key_value(key: SchemaData, value: SchemaData) -> SchemaData:
    return SchemaData(
        SchemaType.KEY_VALUE,
        join_key_value(key, value),
        {"key.schema.type": key.type.name, "value.schema.type": value.type.name},
    )


def test_key_value_data_splits_back_into_its_sides() -> None:
    kv = key_value(SchemaData(SchemaType.STRING), V1)
    key, value = split_key_value(kv)
    assert (key.type, key.data) == (SchemaType.STRING, b"")
    assert (value.type, value.data) == (SchemaType.AVRO, V1.data)
    assert kv.data[:4] == b"\xff\xff\xff\xff"  # an empty side is written -1, as Pulsar does


@pytest.mark.parametrize(
    "data", [b"", b"\x00\x00\x00\x05ab", b"\xff\xff\xff\xff", b"\x00\x00\x00\x00" * 3]
)
def test_malformed_key_value_data_is_invalid(data: bytes) -> None:
    with pytest.raises(InvalidSchemaError):
        split_key_value(SchemaData(SchemaType.KEY_VALUE, data))


def test_key_value_schemas_agree_side_by_side() -> None:
    old = key_value(SchemaData(SchemaType.STRING), V1)
    assert compatible(key_value(SchemaData(SchemaType.STRING), V2_DEFAULTED), [old], S.FULL)
    with pytest.raises(IncompatibleSchemaError, match="value new schema cannot read old data"):
        check_compatible(key_value(SchemaData(SchemaType.STRING), V2_REQUIRED), [old], S.FULL)
    with pytest.raises(IncompatibleSchemaError, match="key exists schema type STRING"):
        check_compatible(key_value(SchemaData(SchemaType.INT64), V1), [old], S.FULL)


# --------------------------------------------------------------------------- validation


def test_validation_refuses_bad_definitions_for_their_type() -> None:
    with pytest.raises(InvalidSchemaError, match="Invalid schema definition data for AVRO"):
        validate(SchemaData(SchemaType.AVRO, b"{not json"))
    with pytest.raises(InvalidSchemaError, match="client-side schema type"):
        validate(SchemaData(SchemaType.AUTO_PUBLISH))
    with pytest.raises(InvalidSchemaError):
        validate(key_value(SchemaData(SchemaType.STRING), SchemaData(SchemaType.AVRO, b"[")))
    validate(SchemaData(SchemaType.STRING, b"null"))  # primitives: anything goes


# --------------------------------------------------------------------------- records


def test_versions_travel_as_eight_byte_big_endian_numbers() -> None:
    assert encode_version(3) == b"\x00" * 7 + b"\x03"
    assert decode_version(encode_version(2**40)) == 2**40
    for bad in (b"", b"\x00" * 4, b"\xff" * 8):
        with pytest.raises(ValueError):
            decode_version(bad)


def test_schemas_from_and_to_the_protocol() -> None:
    proto = pb.Schema(
        name="t", schema_data=V1.data, type=pb.Schema.Avro, properties=[{"key": "k", "value": "v"}]
    )
    schema = SchemaData.from_proto(proto)
    assert (schema.type, schema.data, dict(schema.properties)) == (
        SchemaType.AVRO,
        V1.data,
        {"k": "v"},
    )
    assert schema.to_proto("t") == proto


def test_strategy_names_parse_in_any_case() -> None:
    assert S.parse("backward_transitive") is S.BACKWARD_TRANSITIVE
    with pytest.raises(ValueError, match="one of UNDEFINED"):
        S.parse("sideways")
    assert SchemaType.parse("key_value") is SchemaType.KEY_VALUE


# --------------------------------------------------------------------------- PROTOBUF_NATIVE


def protobuf_native(root: str) -> SchemaData:
    doc = {
        "fileDescriptorSet": "CgZhLnByb3Rv",  # any descriptor set, in base64
        "rootMessageTypeName": root,
        "rootFileDescriptorName": "a.proto",
    }
    return SchemaData(SchemaType.PROTOBUF_NATIVE, json.dumps(doc).encode())


def test_a_protobuf_native_schema_keeps_its_root_message() -> None:
    person = protobuf_native("qa.Person")
    validate(person)
    assert compatible(protobuf_native("qa.Person"), [person], S.FULL)
    with pytest.raises(IncompatibleSchemaError, match="root message isn't allow change"):
        check_compatible(protobuf_native("qa.Animal"), [person], S.BACKWARD)
    assert compatible(protobuf_native("qa.Animal"), [person], S.ALWAYS_COMPATIBLE)


@pytest.mark.parametrize(
    "data",
    [
        b"garbage",
        b"[]",
        b'{"fileDescriptorSet": "***", "rootMessageTypeName": "a.B", "rootFileDescriptorName": ""}',
        b'{"fileDescriptorSet": "CgZh", "rootFileDescriptorName": "a.proto"}',
        b'{"fileDescriptorSet": "CgZh", "rootMessageTypeName": "a.B"}',
    ],
)
def test_a_protobuf_native_definition_must_name_its_descriptors(data: bytes) -> None:
    with pytest.raises(InvalidSchemaError, match="PROTOBUF_NATIVE"):
        validate(SchemaData(SchemaType.PROTOBUF_NATIVE, data))


def test_docs_do_not_make_a_schema_new() -> None:
    documented = json.loads(V1.data)
    documented["doc"] = "who signed up"
    documented["fields"][0]["doc"] = "their name"
    assert identical(SchemaData(SchemaType.AVRO, json.dumps(documented).encode()), V1)
