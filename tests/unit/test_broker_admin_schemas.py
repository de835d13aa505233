"""``/admin/v2/schemas`` and the namespace's schema policies over HTTP (aiohttp's test
server) on a memory:// store with a real ``BrokerService``: Pulsar's JSON, status codes
and reasons, and what each change stores."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from admin_app import App, admin_app

from stripemq.broker.config import BrokerConfig
from stripemq.broker.schema import SchemaType, schema_id
from stripemq.broker.schema.compatibility import split_key_value
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName

TOPIC = "/admin/v2/schemas/public/default/orders"
NS = "/admin/v2/namespaces/public/default"


def avro(*fields: dict[str, object]) -> str:
    return json.dumps(
        {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, *fields]}
    )


V1 = {"type": "AVRO", "schema": avro(), "properties": {"owner": "shop"}}
V2 = {"type": "AVRO", "schema": avro({"name": "note", "type": "string", "default": ""})}
BAD = {"type": "AVRO", "schema": avro({"name": "note", "type": "string"})}


@pytest.fixture
async def app(store: MetadataStore) -> AsyncIterator[App]:
    async with admin_app(store, BrokerConfig(is_schema_validation_enforced=True)) as a:
        yield a


async def test_upload_get_and_list_versions(app: App) -> None:
    assert await app.call("GET", f"{TOPIC}/schema") == (404, {"reason": "Schema not found"})
    assert await app.call("POST", f"{TOPIC}/schema", V1) == (200, {"version": {"version": 0}})
    assert await app.call("POST", f"{TOPIC}/schema", V2) == (200, {"version": {"version": 1}})
    assert await app.call("POST", f"{TOPIC}/schema", V1) == (200, {"version": {"version": 0}})
    status, latest = await app.call("GET", f"{TOPIC}/schema")
    assert status == 200
    assert latest["version"] == 1 and latest["type"] == "AVRO" and latest["data"] == V2["schema"]
    assert latest["properties"] == {} and latest["timestamp"] > 0
    status, first = await app.call("GET", f"{TOPIC}/schema/0")
    assert (status, first["data"], first["properties"]) == (200, V1["schema"], {"owner": "shop"})
    assert (await app.call("GET", f"{TOPIC}/schema/7"))[0] == 404
    assert (await app.call("GET", f"{TOPIC}/schema/x"))[0] == 412
    status, everything = await app.call("GET", f"{TOPIC}/schemas")
    assert status == 200 and [r["version"] for r in everything["getSchemaResponses"]] == [0, 1]


async def test_a_partition_answers_its_partitioned_topics_schema(app: App) -> None:
    await app.call("POST", f"{TOPIC}/schema", V1)
    status, doc = await app.call("GET", f"{TOPIC}-partition-2/schema")
    assert (status, doc["version"]) == (200, 0)


async def test_refusals_store_nothing(app: App) -> None:
    await app.call("POST", f"{TOPIC}/schema", V1)
    status, body = await app.call("POST", f"{TOPIC}/schema", BAD)
    assert status == 409 and "Incompatible schema with strategy FULL" in body["reason"]
    status, body = await app.call("POST", f"{TOPIC}/schema", {"type": "STRING", "schema": ""})
    assert status == 409 and "exists schema type AVRO, new schema type STRING" in body["reason"]
    for payload in (
        {"type": "AVRO", "schema": "{nope"},
        {"type": "WHAT", "schema": ""},
        {"type": "BYTES"},
        {"type": "AVRO", "schema": 3},
        {"type": "STRING", "properties": {"a": 1}},
        ["not", "an", "object"],
    ):
        status, body = await app.call("POST", f"{TOPIC}/schema", payload)
        assert status == 422, (payload, body)
    assert (await app.call("POST", "/admin/v2/schemas/public/nowhere/t/schema", V1))[0] == 404
    status, doc = await app.call("GET", f"{TOPIC}/schemas")
    assert [r["version"] for r in doc["getSchemaResponses"]] == [0]


async def test_delete_and_force_delete(app: App) -> None:
    await app.call("POST", f"{TOPIC}/schema", V1)
    assert await app.call("DELETE", f"{TOPIC}/schema") == (200, {"version": 1})
    assert (await app.call("GET", f"{TOPIC}/schema"))[0] == 404
    assert await app.call("GET", f"{TOPIC}/schemas") == (200, {"getSchemaResponses": []})
    # After a deletion the topic takes any schema, numbered on.
    string = {"type": "STRING", "schema": ""}
    assert await app.call("POST", f"{TOPIC}/schema", string) == (200, {"version": {"version": 2}})
    assert await app.call("DELETE", f"{TOPIC}/schema?force=true") == (200, {"version": -1})
    assert await app.call("POST", f"{TOPIC}/schema", V1) == (200, {"version": {"version": 0}})


async def test_compatibility_and_version_lookups_store_nothing(app: App) -> None:
    empty = await app.call("POST", f"{TOPIC}/compatibility", BAD)
    assert empty == (200, {"compatibility": True, "schemaCompatibilityStrategy": "FULL"})
    await app.call("POST", f"{TOPIC}/schema", V1)
    for payload, answer in ((V2, True), (BAD, False), (V1, True)):
        status, doc = await app.call("POST", f"{TOPIC}/compatibility", payload)
        assert (status, doc["compatibility"]) == (200, answer)
    assert await app.call("POST", f"{TOPIC}/version", V1) == (200, {"version": 0})
    assert await app.call("POST", f"{TOPIC}/version", V2) == (200, {"version": -1})
    assert [
        r["version"] for r in (await app.call("GET", f"{TOPIC}/schemas"))[1]["getSchemaResponses"]
    ] == [0]


async def test_the_namespace_strategy_decides(app: App) -> None:
    await app.call("POST", f"{TOPIC}/schema", V1)
    assert await app.call("GET", f"{NS}/schemaCompatibilityStrategy") == (200, "UNDEFINED")
    assert (await app.call("PUT", f"{NS}/schemaCompatibilityStrategy", "forward"))[0] == 204
    assert await app.call("GET", f"{NS}/schemaCompatibilityStrategy") == (200, "FORWARD")
    status, body = await app.call("PUT", f"{NS}/schemaCompatibilityStrategy", "SIDEWAYS")
    assert status == 412 and "unknown schema compatibility strategy" in body["reason"]
    # FORWARD: old readers read data with a new required field.
    assert await app.call("POST", f"{TOPIC}/schema", BAD) == (200, {"version": {"version": 1}})
    _, policies = await app.call("GET", NS)
    assert policies["schema_compatibility_strategy"] == "FORWARD"
    assert (await app.call("DELETE", f"{NS}/schemaCompatibilityStrategy"))[0] == 204
    assert await app.call("GET", f"{NS}/schemaCompatibilityStrategy") == (200, "UNDEFINED")


async def test_auto_update_and_validation_flags(app: App) -> None:
    # Unset: the broker's settings (auto-update on; enforcement on in this broker's config).
    assert await app.call("GET", f"{NS}/isAllowAutoUpdateSchema") == (200, True)
    assert (await app.call("POST", f"{NS}/isAllowAutoUpdateSchema", False))[0] == 204
    assert await app.call("GET", f"{NS}/isAllowAutoUpdateSchema") == (200, False)
    assert await app.call("GET", f"{NS}/schemaValidationEnforced") == (200, False)
    assert await app.call("GET", f"{NS}/schemaValidationEnforced?applied=true") == (200, True)
    assert (await app.call("POST", f"{NS}/schemaValidationEnforced", True))[0] == 204
    assert await app.call("GET", f"{NS}/schemaValidationEnforced") == (200, True)
    assert (await app.call("POST", f"{NS}/schemaValidationEnforced", "yes"))[0] == 412
    _, policies = await app.call("GET", NS)
    assert policies["is_allow_auto_update_schema"] is False
    assert policies["schema_validation_enforced"] is True


async def test_key_value_schemas_show_their_sides(app: App) -> None:
    payload = {
        "type": "KEY_VALUE",
        "schema": json.dumps({"key": "", "value": json.loads(avro())}),
        "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO"},
    }
    assert (await app.call("POST", f"{TOPIC}/schema", payload))[0] == 200
    status, doc = await app.call("GET", f"{TOPIC}/schema")
    assert status == 200 and json.loads(doc["data"]) == {"key": "", "value": json.loads(avro())}
    stored = await app.service.schemas.latest(schema_id(TopicName.parse("public/default/orders")))
    assert stored is not None
    key, value = split_key_value(stored.schema)
    assert (key.type, key.data, value.type) == (SchemaType.STRING, b"", SchemaType.AVRO)
    bad = {**payload, "schema": '{"key": ""}'}
    assert (await app.call("POST", "/admin/v2/schemas/public/default/kv2/schema", bad))[0] == 422


async def test_deleting_a_topic_or_its_namespace_deletes_its_schemas(app: App) -> None:
    assert (await app.call("PUT", "/admin/v2/persistent/public/default/orders"))[0] == 204
    await app.call("POST", f"{TOPIC}/schema", V1)
    assert (await app.call("DELETE", "/admin/v2/persistent/public/default/orders"))[0] == 204
    assert (await app.call("GET", f"{TOPIC}/schema"))[0] == 404
    assert await app.store.exists("/stripemq/schemas/public/default/orders") is None
    # Partitioned: the partitioned topic's schemas go when it is deleted.
    parts = "/admin/v2/persistent/public/default/parts/partitions"
    assert (await app.call("PUT", parts, 2))[0] == 204
    await app.call("POST", "/admin/v2/schemas/public/default/parts/schema", V1)
    assert (await app.call("DELETE", parts))[0] == 204
    assert (await app.call("GET", "/admin/v2/schemas/public/default/parts/schema"))[0] == 404
    # A schema uploaded for a topic never made goes with its namespace.
    assert (await app.call("PUT", "/admin/v2/namespaces/public/gone"))[0] == 204
    await app.call("POST", "/admin/v2/schemas/public/gone/t/schema", V1)
    assert (await app.call("DELETE", "/admin/v2/namespaces/public/gone"))[0] == 204
    assert await app.store.exists("/stripemq/schemas/public/gone") is None
