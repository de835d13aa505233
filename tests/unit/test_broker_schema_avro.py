"""Avro schemas parsed, and resolution as a static check: which reader reads which writer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stripemq.broker.schema import avro


def record(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


def parse(doc: Any) -> avro.AvroType:
    return avro.parse(json.dumps(doc))


def reads(reader: Any, writer: Any) -> bool:
    return avro.can_read(parse(reader), parse(writer))


# --------------------------------------------------------------------------- parsing


def test_parse_resolves_named_types_in_their_namespace() -> None:
    doc = record(
        "Order",
        field("id", "long"),
        field("address", record("Address", field("city", "string"))),
        field("billing", "Address"),  # a reference, in the enclosing namespace
        namespace="shop",
    )
    parsed = parse(doc)
    assert isinstance(parsed, avro.Record)
    assert parsed.full_name == "shop.Order"
    address, billing = parsed.fields[1].type, parsed.fields[2].type
    assert isinstance(address, avro.Record) and address.full_name == "shop.Address"
    assert billing is address


def test_a_record_may_refer_to_itself() -> None:
    node = parse(record("Node", field("value", "int"), field("next", ["null", "Node"])))
    assert isinstance(node, avro.Record)
    union = node.fields[1].type
    assert isinstance(union, avro.Union) and union.branches[1] is node
    assert avro.can_read(node, node)


@pytest.mark.parametrize(
    ("definition", "complaint"),
    [
        ("not json", "not JSON"),
        ('"Missing"', "undefined name"),
        ('{"type": "record", "fields": []}', "needs a name"),
        ('{"type": "record", "name": "R"}', "list of fields"),
        ('{"type": "record", "name": "R", "fields": [{"name": "a"}]}', "has no type"),
        ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "unique"),
        ('{"type": "fixed", "name": "F", "size": -1}', "whole number"),
        ('{"type": "array"}', "needs items"),
        ('[["int"], "null"]', "union may not hold a union"),
        ('{"type": "decimal"}', "undefined name: decimal"),
        ("3", "not a schema"),
        ('{"type": 3}', "unknown type"),
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
        ('{"type": "record", "name": "1R", "fields": []}', "not an Avro name"),
        ('{"type": "record", "name": "R", "namespace": "a-b", "fields": []}', "not an Avro name"),
        ('{"type": "record", "name": "R", "fields": [{"name": "x y", "type": "int"}]}', "field"),
    ],
)
def test_parse_refuses_what_is_not_avro(definition: str, complaint: str) -> None:
    with pytest.raises(avro.InvalidAvroSchemaError, match=complaint):
        avro.parse(definition)


def test_a_name_defined_twice_is_refused() -> None:
    doc = record("R", field("a", record("A", field("x", "int"))), field("b", record("A")))
    with pytest.raises(avro.InvalidAvroSchemaError, match="defined twice"):
        parse(doc)


# --------------------------------------------------------------------------- resolution


@pytest.mark.parametrize(
    ("writer", "reader"),
    [
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    ],
)
def test_a_reader_promotes_primitives(writer: str, reader: str) -> None:
    assert reads(reader, writer)


@pytest.mark.parametrize(
    ("writer", "reader"),
    [("long", "int"), ("double", "float"), ("string", "int"), ("null", "boolean")],
)
def test_a_reader_never_narrows(writer: str, reader: str) -> None:
    assert not reads(reader, writer)


def test_a_logical_type_reads_as_its_underlying_type() -> None:
    assert reads({"type": "long", "logicalType": "timestamp-millis"}, "long")


def test_an_added_field_needs_a_default_for_old_data() -> None:
    old = record("User", field("name", "string"))
    with_default = record("User", field("name", "string"), field("age", "int", default=0))
    without = record("User", field("name", "string"), field("age", "int"))
    assert reads(with_default, old)
    assert not reads(without, old)
    errors = avro.read_errors(parse(without), parse(old))
    assert errors == [
        "/fields/age: reader's field age of User has no default, and the writer has no such field"
    ]
    assert reads(old, without)  # the field the reader lacks is skipped


def test_fields_match_by_alias_and_types_are_checked_inside() -> None:
    writer = record("User", field("fullName", "string"), field("age", "int"))
    reader = record("User", field("name", "string", aliases=["fullName"]), field("age", "long"))
    assert reads(reader, writer)
    narrowed = record("User", field("fullName", "string"), field("age", "boolean"))
    assert avro.read_errors(parse(narrowed), parse(writer)) == [
        "/fields/age/: reader's boolean cannot read the writer's int"
    ]


def test_records_match_whatever_their_names_as_avros_resolver_does() -> None:
    writer = record("a.User", field("x", "int"))
    assert reads(record("b.User", field("x", "int")), writer)
    assert reads(record("Person", field("x", "int")), writer)


def test_enums_keep_their_name_and_may_lose_symbols() -> None:
    writer = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}
    fewer = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}
    assert reads(fewer, writer)  # only a message holding BLUE fails to read
    assert reads(writer, fewer)
    assert not reads({**writer, "name": "Hue"}, writer)
    assert reads({**writer, "name": "Hue", "aliases": ["Colour"]}, writer)


def test_a_fixed_keeps_its_name_and_size() -> None:
    assert not reads(
        {"type": "fixed", "name": "Key", "size": 16}, {"type": "fixed", "name": "Id", "size": 16}
    )
    assert reads(
        {"type": "fixed", "name": "Id", "size": 16}, {"type": "fixed", "name": "Id", "size": 16}
    )
    assert not reads(
        {"type": "fixed", "name": "Id", "size": 8}, {"type": "fixed", "name": "Id", "size": 16}
    )


def test_arrays_and_maps_resolve_their_items() -> None:
    assert reads({"type": "array", "items": "long"}, {"type": "array", "items": "int"})
    assert not reads({"type": "map", "values": "int"}, {"type": "map", "values": "long"})
    assert not reads({"type": "array", "items": "int"}, {"type": "map", "values": "int"})


def test_unions_every_writer_branch_some_reader_branch() -> None:
    assert reads(["null", "string"], "string")  # a reader union: one branch reads it
    assert not reads("string", ["null", "string"])  # the writer may have written null
    assert reads(["null", "long", "string"], ["null", "int"])
    assert not reads(["null", "string"], ["null", "int"])


def test_recursive_types_resolve_against_each_other() -> None:
    writer = record("Node", field("value", "int"), field("next", ["null", "Node"]))
    reader = record(
        "Node",
        field("value", "long"),
        field("next", ["null", "Node"]),
        field("label", "string", default=""),
    )
    assert reads(reader, writer)
    broken = record("Node", field("value", "boolean"), field("next", ["null", "Node"]))
    assert not reads(broken, writer)


def test_a_reader_union_reads_with_the_branch_avro_picks() -> None:
    old = record("Order", field("id", "int"))
    new = record("Order", field("id", "int"), field("note", "string"))  # no default
    # The branch of the same full name is taken, and it cannot read the writer: refused,
    # though the other record branch could have.
    assert not reads(["null", new, record("Other", field("id", "long"))], old)
    # No branch of that name: the first record that reads it.
    assert reads(["null", record("Other", field("id", "long"))], old)
    # Promotion only when no branch is of the writer's own type.
    assert reads(["null", "double"], "int")
    assert reads(["null", "int", "double"], "int")


def test_nested_unions_resolve_in_linear_time() -> None:
    """Each level a union of null and the next record: resolving it branch by branch
    without remembering what was resolved costs 2^depth (this ran for ever then)."""
    inner: Any = "int"
    for level in range(60):
        inner = ["null", record(f"R{level}", field("v", inner))]
    assert avro.can_read(parse(inner), parse(inner))


def test_a_long_chain_of_named_types_resolves_once_each() -> None:
    """Each record refers to the one before: 3000 named types, each resolved once."""
    fields = [record("R0", field("v", "int"))]
    for level in range(1, 3000):
        fields.append(record(f"R{level}", field("prev", f"R{level - 1}")))
    doc = record("Top", *[field(f"f{i}", r) for i, r in enumerate(fields)])
    assert avro.read_errors(parse(doc), parse(doc)) == []


def test_resolution_stops_at_its_depth_limit() -> None:
    deep: avro.AvroType = avro.Primitive("int")
    for _ in range(avro.MAX_DEPTH * 3):  # deeper than any definition the parser takes
        deep = avro.Array(deep)
    errors = avro.read_errors(deep, deep)
    assert len(errors) == 1 and "nested deeper than" in errors[0]
