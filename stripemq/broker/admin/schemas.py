"""``/admin/v2/schemas/{tenant}/{namespace}/{topic}``: Pulsar's schemas resource.

- ``GET .../schema``: the topic's schema, as Pulsar's ``GetSchemaResponse``
  (``{"version": 0, "type": "AVRO", "timestamp": ..., "data": "...", "properties": {}}``);
  404 "Schema not found" when it has none (never had, or deleted). ``GET .../schema/{version}``
  answers that version (404 for one that does not exist or was deleted), and ``GET
  .../schemas`` every live version, as ``{"getSchemaResponses": [...]}``.
- ``POST .../schema`` with a ``PostSchemaPayload`` (``{"type": "AVRO", "schema": "...",
  "properties": {}}``) registers it as a producer's schema would be (the identical schema's
  version, else a new one that passes the namespace's compatibility strategy) and answers
  ``{"version": {"version": N}}``; 409 when it is incompatible, 422 when its definition is
  not valid for its type.
- ``DELETE .../schema`` deletes the schema (a tombstone version, answered as ``{"version":
  N}``); with ``?force=true`` every version goes and numbering starts over (``-1``).
- ``POST .../compatibility`` with a payload answers ``{"compatibility": true|false,
  "schemaCompatibilityStrategy": "FULL"}`` without storing anything; ``POST .../version``
  the version of an identical registered schema (-1: none).

A KEY_VALUE schema's ``data`` (and payload ``schema``) is ``{"key": ..., "value": ...}``,
each side its own definition (parsed JSON, or ``""`` for a primitive), as Pulsar shows it.
The schemas live in the metadata store (``stripemq.broker.schema.registry``), so any broker
answers for any topic; the topic need not exist, and a partition's schemas are its
partitioned topic's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from stripemq.broker.admin.rest import (
    AdminContext,
    RestError,
    flag,
    not_found,
    ok_json,
    precondition_failed,
    read_json,
    topic_of,
)
from stripemq.broker.namespaces import check_namespace
from stripemq.broker.schema import (
    InvalidSchemaError,
    SchemaData,
    SchemaRegistry,
    SchemaType,
    StoredSchema,
    schema_id,
)
from stripemq.broker.schema.compatibility import (
    join_key_value,
    split_key_value,
    validate,
)
from stripemq.broker.schema.types import CompatibilityStrategy
from stripemq.errors import IncompatibleSchemaError
from stripemq.proto.topic_name import TopicName

BASE = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
NOT_FOUND = "Schema not found"


# --------------------------------------------------------------------------- JSON (sans-IO)


def _definition_text(schema: SchemaData) -> str:
    return schema.data.decode("utf-8", errors="replace")


def _side_json(side: SchemaData) -> object:
    """One side of a KEY_VALUE schema as Pulsar shows it: its definition parsed, or ``""``."""
    if not side.data or not side.type.is_struct:
        return ""
    try:
        return json.loads(side.data)
    except ValueError:
        return _definition_text(side)


def schema_data_text(schema: SchemaData) -> str:
    """``data`` of a ``GetSchemaResponse``."""
    if schema.type is SchemaType.KEY_VALUE:
        try:
            key, value = split_key_value(schema)
        except InvalidSchemaError:
            return _definition_text(schema)
        return json.dumps({"key": _side_json(key), "value": _side_json(value)})
    return _definition_text(schema)


def get_schema_response(stored: StoredSchema) -> dict[str, Any]:
    """Pulsar's ``GetSchemaResponse``."""
    schema = stored.schema
    return {
        "version": stored.version,
        "type": schema.type.name,
        "timestamp": schema.timestamp_ms,
        "data": schema_data_text(schema),
        "properties": dict(schema.properties),
    }


def parse_payload(body: object) -> SchemaData:
    """A ``PostSchemaPayload``; 422 for one that names no schema type, or a definition
    that is not valid for it (before anything is stored)."""
    if not isinstance(body, Mapping):
        raise RestError(422, "the payload must be an object with type, schema and properties")
    try:
        kind = SchemaType.parse(body.get("type"))
    except ValueError as exc:
        raise RestError(422, str(exc)) from None
    if kind.carries_no_schema:
        raise RestError(422, f"Schema {kind.name} cannot be registered")
    definition = body.get("schema", "")
    properties = body.get("properties") or {}
    if not isinstance(properties, Mapping) or not all(
        isinstance(v, str) for v in properties.values()
    ):
        raise RestError(422, "properties must be an object of strings")
    props = {str(k): v for k, v in properties.items()}
    if kind is SchemaType.KEY_VALUE:
        data = _key_value_data(definition, props)
    elif isinstance(definition, str):
        data = definition.encode()
    elif definition is None:
        data = b""
    else:
        raise RestError(422, "schema must be a string: the definition")
    schema = SchemaData(kind, data, props)
    try:
        validate(schema)
    except InvalidSchemaError as exc:
        raise RestError(422, str(exc)) from None
    return schema


def _key_value_data(definition: object, properties: Mapping[str, str]) -> bytes:
    """A KEY_VALUE payload's ``{"key": ..., "value": ...}`` (as a string or an object) as
    the two encoded definitions."""
    doc = definition
    if isinstance(definition, str):
        try:
            doc = json.loads(definition)
        except ValueError:
            raise RestError(422, 'a KEY_VALUE schema is {"key": ..., "value": ...}') from None
    if not isinstance(doc, Mapping) or "key" not in doc or "value" not in doc:
        raise RestError(422, 'a KEY_VALUE schema is {"key": ..., "value": ...}')

    def side(name: str) -> SchemaData:
        part = doc[name]
        raw = part if isinstance(part, str) else json.dumps(part, separators=(",", ":"))
        try:
            kind = SchemaType.parse(properties.get(f"{name}.schema.type", "BYTES"))
        except ValueError as exc:
            raise RestError(422, f"{name}.schema.type: {exc}") from None
        return SchemaData(kind, raw.encode())

    return join_key_value(side("key"), side("value"))


def parse_version(raw: str) -> int:
    try:
        version = int(raw)
    except ValueError:
        raise precondition_failed(f"Invalid schema version: {raw!r}") from None
    if version < 0:
        raise precondition_failed(f"Invalid schema version: {raw!r}")
    return version


# --------------------------------------------------------------------------- resource


class SchemasResource:
    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx

    @property
    def registry(self) -> SchemaRegistry:
        return self.ctx.service.schemas

    async def _topic(self, request: web.Request) -> tuple[TopicName, str]:
        topic = topic_of(request)
        await check_namespace(self.ctx.store, topic.namespace_name)
        return topic, schema_id(topic)

    async def _strategy(self, topic: TopicName) -> CompatibilityStrategy:
        policies = await self.ctx.service.effective_policies(topic, watch=False)
        return policies.schema_compatibility_strategy

    async def get_latest(self, request: web.Request) -> web.Response:
        _, sid = await self._topic(request)
        stored = await self.registry.latest(sid)
        if stored is None:
            raise not_found(NOT_FOUND)
        return ok_json(get_schema_response(stored))

    async def get_version(self, request: web.Request) -> web.Response:
        _, sid = await self._topic(request)
        version = parse_version(request.match_info["version"])
        live = {s.version: s for s in await self.registry.history(sid)}
        stored = live.get(version)
        if stored is None:
            raise not_found(NOT_FOUND)
        return ok_json(get_schema_response(stored))

    async def get_all(self, request: web.Request) -> web.Response:
        _, sid = await self._topic(request)
        history = await self.registry.history(sid)
        return ok_json({"getSchemaResponses": [get_schema_response(s) for s in history]})

    async def post(self, request: web.Request) -> web.Response:
        topic, sid = await self._topic(request)
        schema = parse_payload(await read_json(request))
        try:
            version = await self.registry.put_if_absent(sid, schema, await self._strategy(topic))
        except InvalidSchemaError as exc:
            raise RestError(422, str(exc)) from None
        except IncompatibleSchemaError as exc:
            raise RestError(409, str(exc)) from None
        return ok_json({"version": {"version": version}})

    async def delete(self, request: web.Request) -> web.Response:
        _, sid = await self._topic(request)
        force = flag(request, "force")
        version = await self.registry.delete(sid, force=force)
        return ok_json({"version": -1 if force or version is None else version})

    async def compatibility(self, request: web.Request) -> web.Response:
        topic, sid = await self._topic(request)
        schema = parse_payload(await read_json(request))
        strategy = await self._strategy(topic)
        try:
            await self.registry.check(sid, schema, strategy)
            compatible = True
        except IncompatibleSchemaError:
            compatible = False
        return ok_json({"compatibility": compatible, "schemaCompatibilityStrategy": strategy.value})

    async def version(self, request: web.Request) -> web.Response:
        _, sid = await self._topic(request)
        schema = parse_payload(await read_json(request))
        found = await self.registry.find(sid, schema)
        return ok_json({"version": -1 if found is None else found})


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    resource = SchemasResource(ctx)
    router.add_get(f"{BASE}/schema", resource.get_latest)
    router.add_post(f"{BASE}/schema", resource.post)
    router.add_delete(f"{BASE}/schema", resource.delete)
    router.add_get(f"{BASE}/schema/{{version}}", resource.get_version)
    router.add_get(f"{BASE}/schemas", resource.get_all)
    router.add_post(f"{BASE}/compatibility", resource.compatibility)
    router.add_post(f"{BASE}/version", resource.version)
