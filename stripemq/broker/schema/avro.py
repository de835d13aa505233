"""Avro schemas, parsed, and schema resolution as a static check: can a reader schema read
what a writer schema wrote? That is the Avro specification's "Schema Resolution", and the
test behind Pulsar's compatibility strategies for AVRO, JSON and PROTOBUF schemas (Avro's
``SchemaValidatorBuilder``, which Pulsar uses, asks the same question).

``parse`` turns a definition (JSON text) into ``AvroType`` nodes, with named types
(records, enums, fixed) resolved by full name, so a record may refer to itself.
``read_errors(reader, writer)`` lists why the reader cannot read the writer's data; none
means it can. The rules are those of Avro's ``Resolver``, which Pulsar's check runs:

- primitives match themselves; a reader promotes int to long, float or double, long to
  float or double, float to double, and string and bytes to each other;
- records match whatever their names; every reader field is in the writer (by name or by
  one of its aliases) with a readable type, or has a default; writer fields the reader
  lacks are skipped;
- an enum or a fixed keeps its simple name (or a reader alias names the writer's full
  name), a fixed its size; an enum may lose symbols (only a message with one fails);
- each branch of a writer union must be readable; a reader union reads a writer type with
  the branch Avro picks (of the same kind and full name first, then by promotion).

Logical types are not checked (Avro's checker ignores them too).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, TypeAlias

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# Writer primitive -> reader primitives that read it (besides itself).
PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
# Nesting a definition may have; deeper is refused rather than recursed into.
MAX_DEPTH = 200


class InvalidAvroSchemaError(ValueError):
    """The definition is not an Avro schema."""


@dataclass(frozen=True)
class Primitive:
    name: str


@dataclass(eq=False)
class Field:
    name: str
    type: AvroType
    has_default: bool
    aliases: tuple[str, ...] = ()


@dataclass(eq=False)
class Record:
    full_name: str
    aliases: tuple[str, ...] = ()
    fields: list[Field] = field(default_factory=list)


@dataclass(eq=False)
class Enum:
    full_name: str
    symbols: tuple[str, ...]
    has_default: bool = False
    aliases: tuple[str, ...] = ()


@dataclass(eq=False)
class Fixed:
    full_name: str
    size: int
    aliases: tuple[str, ...] = ()


@dataclass(eq=False)
class Array:
    items: AvroType


@dataclass(eq=False)
class Map:
    values: AvroType


@dataclass(eq=False)
class Union:
    branches: tuple[AvroType, ...]


AvroType: TypeAlias = Primitive | Record | Enum | Fixed | Array | Map | Union
Named: TypeAlias = Record | Enum | Fixed


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_name(name: str, what: str) -> str:
    """``name`` (dotted for a full name), unless it is not an Avro name."""
    if not all(NAME.fullmatch(part) for part in name.split(".")):
        raise InvalidAvroSchemaError(f"{what} {name!r} is not an Avro name")
    return name


def simple_name(full_name: str) -> str:
    return full_name.rpartition(".")[2]


# --------------------------------------------------------------------------- parsing


def parse(definition: bytes | str) -> AvroType:
    """The schema a definition spells; raises ``InvalidAvroSchemaError``."""
    try:
        doc = json.loads(definition)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidAvroSchemaError(f"not JSON: {exc}") from None
    except RecursionError:
        raise InvalidAvroSchemaError("nested too deeply") from None
    return _Parser().parse(doc, namespace="", depth=0)


@functools.lru_cache(maxsize=256)
def parse_cached(definition: bytes) -> AvroType:
    """``parse``, remembered: a topic's versions are compared again at every new schema,
    and parsed nodes are never changed."""
    return parse(definition)


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, Named] = {}

    def parse(self, doc: Any, namespace: str, depth: int) -> AvroType:
        if depth > MAX_DEPTH:
            raise InvalidAvroSchemaError("nested too deeply")
        if isinstance(doc, str):
            return self._reference(doc, namespace)
        if isinstance(doc, list):
            branches = tuple(self.parse(b, namespace, depth + 1) for b in doc)
            if any(isinstance(b, Union) for b in branches):
                raise InvalidAvroSchemaError("a union may not hold a union")
            return Union(branches)
        if not isinstance(doc, dict):
            raise InvalidAvroSchemaError(f"not a schema: {json.dumps(doc)[:80]}")
        kind = doc.get("type")
        if kind in ("record", "error"):
            return self._record(doc, namespace, depth)
        if kind == "enum":
            symbols = doc.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
                raise InvalidAvroSchemaError("an enum's symbols must be a list of names")
            if len(set(symbols)) != len(symbols):
                raise InvalidAvroSchemaError("an enum's symbols must be unique")
            name, aliases = self._names(doc, namespace)
            return self._define(Enum(name, tuple(symbols), "default" in doc, aliases))
        if kind == "fixed":
            size = doc.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidAvroSchemaError("a fixed's size must be a whole number")
            name, aliases = self._names(doc, namespace)
            return self._define(Fixed(name, size, aliases))
        if kind == "array":
            if "items" not in doc:
                raise InvalidAvroSchemaError("an array needs items")
            return Array(self.parse(doc["items"], namespace, depth + 1))
        if kind == "map":
            if "values" not in doc:
                raise InvalidAvroSchemaError("a map needs values")
            return Map(self.parse(doc["values"], namespace, depth + 1))
        if isinstance(kind, str) and kind in PRIMITIVES:
            return Primitive(kind)  # with a logicalType, or other attributes
        if isinstance(kind, (dict, list)) or isinstance(kind, str):
            return self.parse(kind, namespace, depth + 1)  # {"type": {"type": ...}}
        raise InvalidAvroSchemaError(f"unknown type {json.dumps(kind)}")

    def _reference(self, name: str, namespace: str) -> AvroType:
        if name in PRIMITIVES:
            return Primitive(name)
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        found = self.named.get(full) or self.named.get(name)
        if found is None:
            raise InvalidAvroSchemaError(f"undefined name: {name}")
        return found

    def _names(self, doc: dict[str, Any], namespace: str) -> tuple[str, tuple[str, ...]]:
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidAvroSchemaError(f"a {doc.get('type')} needs a name")
        own = doc.get("namespace")
        if own is not None and not isinstance(own, str):
            raise InvalidAvroSchemaError("a namespace must be a string")
        space = own if own is not None else namespace
        full = check_name(name if "." in name or not space else f"{space}.{name}", "name")
        aliases = doc.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise InvalidAvroSchemaError("aliases must be a list of names")
        space = full.rpartition(".")[0]
        return full, tuple(a if "." in a or not space else f"{space}.{a}" for a in aliases)

    def _define(self, named: Named) -> Named:
        if named.full_name in self.named:
            raise InvalidAvroSchemaError(f"{named.full_name} is defined twice")
        self.named[named.full_name] = named
        return named

    def _record(self, doc: dict[str, Any], namespace: str, depth: int) -> Record:
        name, aliases = self._names(doc, namespace)
        record = Record(name, aliases)
        self._define(record)  # before its fields: they may refer to it
        fields = doc.get("fields")
        if not isinstance(fields, list):
            raise InvalidAvroSchemaError(f"record {name} needs a list of fields")
        inner = name.rpartition(".")[0]
        seen: set[str] = set()
        for item in fields:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise InvalidAvroSchemaError(f"a field of {name} has no name")
            if "type" not in item:
                raise InvalidAvroSchemaError(f"field {item['name']} of {name} has no type")
            check_name(item["name"], "field name")
            if item["name"] in seen:
                raise InvalidAvroSchemaError(f"field {item['name']} of {name} is defined twice")
            seen.add(item["name"])
            field_aliases = item.get("aliases", [])
            if not isinstance(field_aliases, list):
                raise InvalidAvroSchemaError("aliases must be a list of names")
            record.fields.append(
                Field(
                    item["name"],
                    self.parse(item["type"], inner, depth + 1),
                    "default" in item,
                    tuple(str(a) for a in field_aliases),
                )
            )
        return record


# --------------------------------------------------------------------------- resolution


def can_read(reader: AvroType, writer: AvroType) -> bool:
    return not read_errors(reader, writer)


def read_errors(reader: AvroType, writer: AvroType) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    return _Resolver().check(reader, writer, "/", 0)


class _Resolver:
    """One resolution. Each pair of named types is resolved once (its errors kept): a
    pair met again while being resolved is assumed readable, as Avro's ``seen`` map does,
    so recursive types end and nested unions cost no more than their size."""

    def __init__(self) -> None:
        self.named_pairs: dict[tuple[int, int], list[str]] = {}

    def check(self, reader: AvroType, writer: AvroType, at: str, depth: int) -> list[str]:
        if depth > MAX_DEPTH:
            return [f"{at}: nested deeper than {MAX_DEPTH} levels"]
        if isinstance(writer, Union):
            errors = []
            for i, branch in enumerate(writer.branches):
                errors += self.check(reader, branch, f"{at}{i}/", depth + 1)
            return errors
        if isinstance(reader, Union):
            chosen = self._branch(reader, writer, at, depth)
            if chosen is None:
                return [f"{at}: reader union lacks a branch for the writer's {describe(writer)}"]
            return self.check(chosen, writer, at, depth + 1)
        if isinstance(reader, Primitive) and isinstance(writer, Primitive):
            if writer.name == reader.name or reader.name in PROMOTIONS.get(writer.name, ()):
                return []
        elif isinstance(reader, Array) and isinstance(writer, Array):
            return self.check(reader.items, writer.items, f"{at}items/", depth + 1)
        elif isinstance(reader, Map) and isinstance(writer, Map):
            return self.check(reader.values, writer.values, f"{at}values/", depth + 1)
        elif isinstance(reader, (Record, Enum, Fixed)) and type(reader) is type(writer):
            assert isinstance(writer, (Record, Enum, Fixed))
            return self._named(reader, writer, at, depth)
        return [f"{at}: reader's {describe(reader)} cannot read the writer's {describe(writer)}"]

    def _branch(self, reader: Union, writer: AvroType, at: str, depth: int) -> AvroType | None:
        """The branch of a reader union that reads a writer type, as Avro picks it: the
        first of the same kind (a named type by full name; a record failing that, the
        first that reads it, preferring one of the same simple name), else the first a
        promotion reaches."""
        structural: AvroType | None = None
        for branch in reader.branches:
            if isinstance(writer, Primitive):
                if isinstance(branch, Primitive) and branch.name == writer.name:
                    return branch
            elif isinstance(writer, (Record, Enum, Fixed)):
                if type(branch) is not type(writer):
                    continue
                assert isinstance(branch, (Record, Enum, Fixed))
                if branch.full_name == writer.full_name:
                    return branch
                if isinstance(writer, Record) and not self.check(branch, writer, at, depth + 1):
                    same_name = simple_name(branch.full_name) == simple_name(writer.full_name)
                    if structural is None or same_name:
                        structural = branch
            elif type(branch) is type(writer):
                return branch  # an array or a map
        if structural is not None:
            return structural
        if isinstance(writer, Primitive):
            promoted = PROMOTIONS.get(writer.name, set())
            for branch in reader.branches:
                if isinstance(branch, Primitive) and branch.name in promoted:
                    return branch
        return None

    def _named(self, reader: Named, writer: Named, at: str, depth: int) -> list[str]:
        pair = (id(reader), id(writer))
        known = self.named_pairs.get(pair)
        if known is not None:
            return known  # resolved already, or being resolved (assumed readable)
        self.named_pairs[pair] = []
        errors = self._resolve_named(reader, writer, at, depth)
        self.named_pairs[pair] = errors
        return errors

    def _resolve_named(self, reader: Named, writer: Named, at: str, depth: int) -> list[str]:
        if not isinstance(reader, Record) and not _names_match(reader, writer):
            return [
                f"{at}: reader's name {reader.full_name} is not the writer's {writer.full_name}"
            ]
        if isinstance(reader, Fixed):
            assert isinstance(writer, Fixed)
            if reader.size != writer.size:
                return [f"{at}: fixed {reader.full_name} has size {reader.size}, not {writer.size}"]
            return []
        if isinstance(reader, Enum):
            return []  # a symbol the reader lacks fails only the message that has it
        assert isinstance(reader, Record) and isinstance(writer, Record)
        by_name = {f.name: f for f in writer.fields}
        errors = []
        for field_ in reader.fields:
            found = by_name.get(field_.name) or next(
                (by_name[a] for a in field_.aliases if a in by_name), None
            )
            if found is None:
                if not field_.has_default:
                    errors.append(
                        f"{at}fields/{field_.name}: reader's field {field_.name} of "
                        f"{reader.full_name} has no default, and the writer has no such field"
                    )
                continue
            errors += self.check(field_.type, found.type, f"{at}fields/{field_.name}/", depth + 1)
        return errors


def _names_match(reader: Named, writer: Named) -> bool:
    """An enum's or a fixed's names: the same simple name, or a reader alias naming the
    writer's full name."""
    return (
        simple_name(reader.full_name) == simple_name(writer.full_name)
        or writer.full_name in reader.aliases
    )


def describe(kind: AvroType) -> str:
    if isinstance(kind, Primitive):
        return kind.name
    if isinstance(kind, Record):
        return f"record {kind.full_name}"
    if isinstance(kind, Enum):
        return f"enum {kind.full_name}"
    if isinstance(kind, Fixed):
        return f"fixed {kind.full_name}"
    if isinstance(kind, Array):
        return f"array of {describe(kind.items)}"
    if isinstance(kind, Map):
        return f"map of {describe(kind.values)}"
    return "union of " + ", ".join(describe(b) for b in kind.branches)
