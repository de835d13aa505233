"""The schema registry: each topic's schema versions, kept in the metadata store.

Layout: ``/stripemq/schemas/<tenant>/<namespace>/<topic>/<version>``, one node per version
(the version as 10 digits, so that child order is version order), holding JSON::

    {"type": "AVRO", "data": "<base64>", "properties": {}, "timestamp": 1733580000000,
     "deleted": false}

A partition's schemas are its partitioned topic's (Pulsar's ``getSchemaName``), and a
topic's schema id is ``<tenant>/<namespace>/<topic>``. A new version is the node after the
last one, made with ``create``: of two brokers registering at once one wins and the other
reads again and checks its schema against the winner's. Deleting a schema adds a tombstone
version (after it the topic has no schema, and numbering goes on); a forced deletion removes
every version, and numbering starts over.

Pulsar keeps schemas in BookKeeper ledgers indexed from ZooKeeper; definitions are small,
so here they live in the metadata store itself (each under
``compatibility.MAX_SCHEMA_BYTES``). A node no registry could have written (unreadable) is
taken for a deletion: the versions before it are not held against new schemas.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from stripemq.broker.schema.compatibility import (
    check_compatible,
    identical,
    reader_strategy,
    validate,
)
from stripemq.broker.schema.types import CompatibilityStrategy, SchemaData, SchemaType
from stripemq.clock import now_ms
from stripemq.errors import (
    IncompatibleSchemaError,
    MetadataError,
    NodeExistsError,
    NotEmptyError,
)
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName

log = logging.getLogger(__name__)

ROOT = "/stripemq/schemas"
# Registrations that lost the race for the next version, before giving up.
MAX_ATTEMPTS = 20


@dataclass(frozen=True)
class StoredSchema:
    """One version of a topic's schema."""

    version: int
    schema: SchemaData


def schema_id(topic: TopicName) -> str:
    """The id a topic's schemas are kept under: its partitioned topic's, without domain."""
    base = topic.partitioned_topic
    return f"{base.tenant}/{base.namespace}/{quote(base.local_name, safe='')}"


def schemas_path(schema_id: str) -> str:
    return f"{ROOT}/{schema_id}"


def namespace_schemas_path(namespace: str) -> str:
    return f"{ROOT}/{namespace}"


def _version_path(schema_id: str, version: int) -> str:
    return f"{ROOT}/{schema_id}/{version:010d}"


def encode(schema: SchemaData) -> bytes:
    return json.dumps(
        {
            "type": schema.type.name,
            "data": base64.b64encode(schema.data).decode(),
            "properties": dict(schema.properties),
            "timestamp": schema.timestamp_ms,
            "deleted": schema.deleted,
        },
        sort_keys=True,
    ).encode()


def decode(raw: bytes) -> SchemaData:
    """A stored version; raises ``ValueError`` for a node no registry wrote."""
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("a schema version is a JSON object")
    properties = doc.get("properties") or {}
    if not isinstance(properties, dict):
        raise ValueError("a schema's properties are an object")
    return SchemaData(
        type=SchemaType.parse(doc.get("type")),
        data=base64.b64decode(doc.get("data", ""), validate=True),
        properties={str(k): str(v) for k, v in properties.items()},
        timestamp_ms=int(doc.get("timestamp", 0)),
        deleted=bool(doc.get("deleted", False)),
    )


def live(versions: Sequence[StoredSchema]) -> list[StoredSchema]:
    """The versions since the last tombstone (Pulsar's ``trimDeletedSchemaAndGetList``)."""
    for i in range(len(versions) - 1, -1, -1):
        if versions[i].schema.deleted:
            return list(versions[i + 1 :])
    return list(versions)


class SchemaRegistry:
    """Reads, registers and deletes topics' schemas (ids from ``schema_id``)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._unreadable: set[tuple[str, int]] = set()  # logged once each

    async def versions(self, schema_id: str) -> list[StoredSchema]:
        """Every stored version, oldest first, tombstones included. Raises
        ``MetadataError``."""
        return (await self._listing(schema_id))[0]

    async def _listing(self, schema_id: str) -> tuple[list[StoredSchema], int]:
        """The readable versions, and the number the next one takes (after every node,
        readable or not)."""
        names = await self.store.children(schemas_path(schema_id))
        numbers = sorted(int(name) for name in names if name.isdigit())
        found = await asyncio.gather(*(self._read(schema_id, n) for n in numbers))
        next_version = numbers[-1] + 1 if numbers else 0
        return [stored for stored in found if stored is not None], next_version

    async def _read(self, schema_id: str, version: int) -> StoredSchema | None:
        """That version (an unreadable one as a tombstone); ``None`` if it is gone."""
        got = await self.store.get(_version_path(schema_id, version))
        if got is None:
            return None  # deleted since it was listed
        try:
            return StoredSchema(version, decode(got[0]))
        except (ValueError, TypeError) as exc:
            if (schema_id, version) not in self._unreadable:
                self._unreadable.add((schema_id, version))
                log.warning(
                    "[%s] schema version %d is unreadable (%s): taken for a deletion",
                    schema_id,
                    version,
                    exc,
                )
            return StoredSchema(version, SchemaData(SchemaType.NONE, deleted=True))

    async def history(self, schema_id: str) -> list[StoredSchema]:
        """The live versions (since the last deletion), oldest first."""
        return live(await self.versions(schema_id))

    async def latest(self, schema_id: str) -> StoredSchema | None:
        """The topic's schema now; ``None`` when it has none (never had, or deleted)."""
        names = await self.store.children(schemas_path(schema_id))
        for number in sorted((int(n) for n in names if n.isdigit()), reverse=True):
            stored = await self._read(schema_id, number)
            if stored is not None:  # else deleted since it was listed: the one before
                return None if stored.schema.deleted else stored
        return None

    async def get(self, schema_id: str, version: int) -> StoredSchema | None:
        """That version, unless it does not exist or is a tombstone."""
        stored = await self._read(schema_id, version)
        return None if stored is None or stored.schema.deleted else stored

    async def find(self, schema_id: str, schema: SchemaData) -> int | None:
        """The live version identical to ``schema``, if any."""
        return _identical(await self.history(schema_id), schema)

    async def check(
        self, schema_id: str, schema: SchemaData, strategy: CompatibilityStrategy
    ) -> None:
        """Raises ``IncompatibleSchemaError`` unless ``schema`` is registered or would be
        accepted (nothing is stored)."""
        validate(schema)
        history = await self.history(schema_id)
        if _identical(history, schema) is None:
            check_compatible(schema, [s.schema for s in history], strategy)

    async def check_reader(
        self, schema_id: str, schema: SchemaData, strategy: CompatibilityStrategy
    ) -> None:
        """Raises ``IncompatibleSchemaError`` unless a consumer with ``schema`` may read
        the topic: its schema is registered, or reads it as ``reader_strategy`` asks. A
        topic without a schema has nothing to check against: refused too."""
        validate(schema)
        if strategy is CompatibilityStrategy.ALWAYS_COMPATIBLE:
            return
        history = await self.history(schema_id)
        if _identical(history, schema) is not None:
            return
        if not history:
            raise IncompatibleSchemaError(
                "Failed to add schema to an active topic with empty(BYTES) schema: new schema "
                f"type {schema.type.name}"
            )
        check_compatible(schema, [s.schema for s in history], reader_strategy(strategy))

    async def put_if_absent(
        self, schema_id: str, schema: SchemaData, strategy: CompatibilityStrategy
    ) -> int:
        """The version of ``schema``: the identical live one, else a new one if it agrees
        with the history as ``strategy`` asks.

        Raises ``IncompatibleSchemaError`` (``InvalidSchemaError`` for a bad definition),
        ``MetadataError``."""
        validate(schema)
        for _ in range(MAX_ATTEMPTS):
            versions, version = await self._listing(schema_id)
            history = live(versions)
            found = _identical(history, schema)
            if found is not None:
                return found
            check_compatible(schema, [s.schema for s in history], strategy)
            if await self._append(schema_id, version, schema):
                log.info(
                    "[%s] registered schema version %d (%s)", schema_id, version, schema.type.name
                )
                return version
        raise MetadataError(f"[{schema_id}] lost the race for a new schema version too often")

    async def _append(self, schema_id: str, version: int, schema: SchemaData) -> bool:
        """Store ``version``; False if another writer took that version first."""
        stamped = SchemaData(
            schema.type,
            schema.data,
            schema.properties,
            schema.timestamp_ms or now_ms(),
            schema.deleted,
        )
        try:
            await self.store.create(_version_path(schema_id, version), encode(stamped))
        except NodeExistsError:
            return False
        return True

    async def delete(self, schema_id: str, *, force: bool = False) -> int | None:
        """Delete the topic's schema: a tombstone version (its number is returned), or with
        ``force`` every version (the last live one's number is returned). ``None`` when the
        topic has no schema: nothing changes. Raises ``MetadataError``."""
        for _ in range(MAX_ATTEMPTS):
            versions, version = await self._listing(schema_id)
            if not versions or versions[-1].schema.deleted:
                if force and versions:
                    await self.delete_all(schema_id)
                return None
            if force:
                await self.delete_all(schema_id)
                log.info("[%s] deleted every schema version", schema_id)
                return versions[-1].version
            tombstone = SchemaData(SchemaType.NONE, b"", {}, now_ms(), deleted=True)
            if await self._append(schema_id, version, tombstone):
                log.info("[%s] deleted its schema (version %d)", schema_id, version)
                return version
        raise MetadataError(f"[{schema_id}] lost the race to delete its schema too often")

    async def delete_all(self, schema_id: str) -> None:
        """Remove every version (the topic is deleted), also one registered meanwhile.
        Raises ``MetadataError``."""
        for _ in range(MAX_ATTEMPTS):
            try:
                await self.store.delete_recursive(schemas_path(schema_id))
                return
            except NotEmptyError:
                continue  # a version was added while the others went: again
        raise MetadataError(f"[{schema_id}] schema versions kept coming while being deleted")


def _identical(history: Sequence[StoredSchema], schema: SchemaData) -> int | None:
    for stored in reversed(history):
        if identical(stored.schema, schema):
            return stored.version
    return None
