"""Schemas with the official ``pulsar-client`` against a real ``stripemq standalone``: a
producer's schema is registered and versioned, an incompatible one is refused with
``IncompatibleSchema``, consumers are checked, the namespace's schema policies apply live,
and the admin API shows what the clients registered."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, JsonSchema, Record, String, StringSchema

from stripemq.broker.schema import encode_version
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import FrameDecoder, command_body, encode_command
from stripemq.testing.polling import until_blocking
from stripemq.testing.rest import rest
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def namespace(standalone: StandaloneProcess) -> str:
    """A namespace of the test's own (its policies start unset)."""
    name = f"public/schemas-{uuid.uuid4().hex[:8]}"
    assert rest(standalone.web_url, "PUT", f"/admin/v2/namespaces/{name}")[0] == 204
    return name


def event(*fields: dict[str, Any]) -> AvroSchema:
    definition = {
        "type": "record",
        "name": "Event",
        "fields": [{"name": "id", "type": "long"}, *fields],
    }
    return AvroSchema(None, schema_definition=definition)


V1 = event()
V2 = event({"name": "note", "type": "string", "default": ""})  # FULL-compatible with V1
V_BAD = event({"name": "note", "type": "int"})  # V1's data lacks it, V2's is a string


class Greeting(Record):
    text = String()


def client(standalone: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(standalone.service_url, operation_timeout_seconds=10)


def refused(work: Any) -> bool:
    try:
        work()
    except pulsar.IncompatibleSchema:
        return True
    return False


def test_producers_register_versions_and_incompatible_ones_are_refused(
    standalone: StandaloneProcess, namespace: str
) -> None:
    topic = f"persistent://{namespace}/events"
    c = client(standalone)
    try:
        first = c.create_producer(topic, schema=V1)
        first.send({"id": 1})
        second = c.create_producer(topic, schema=V2)
        second.send({"id": 2, "note": "two"})
        assert refused(lambda: c.create_producer(topic, schema=V_BAD))
        assert refused(lambda: c.create_producer(topic, schema=StringSchema()))
        raw = c.create_producer(topic)  # bytes: allowed unless the namespace enforces
        raw.send(V1.encode({"id": 3}))
        consumer = c.subscribe(
            topic, "reader", schema=V2, initial_position=pulsar.InitialPosition.Earliest
        )
        got = [consumer.receive(10_000) for _ in range(3)]
        # Each message names the version it was written with (none for the bytes one).
        versions = [m.schema_version() for m in got]
        assert versions[:2] == ["\x00" * 7 + "\x00", "\x00" * 7 + "\x01"]
        assert versions[2] == ""
        assert got[1].value() == {"id": 2, "note": "two"}
    finally:
        c.close()
    status, doc = rest(standalone.web_url, "GET", f"/admin/v2/schemas/{namespace}/events/schemas")
    assert status == 200
    assert [(r["version"], r["type"]) for r in doc["getSchemaResponses"]] == [
        (0, "AVRO"),
        (1, "AVRO"),
    ]


def test_consumers_are_checked_and_an_idle_topic_takes_their_schema(
    standalone: StandaloneProcess, namespace: str
) -> None:
    idle = f"persistent://{namespace}/idle"
    c = client(standalone)
    try:
        c.subscribe(idle, "s", schema=JsonSchema(Greeting)).close()  # registers it
        status, doc = rest(standalone.web_url, "GET", f"/admin/v2/schemas/{namespace}/idle/schema")
        assert (status, doc["type"]) == (200, "JSON")
        assert refused(lambda: c.subscribe(idle, "t", schema=StringSchema()))
        producer = c.create_producer(idle, schema=JsonSchema(Greeting))
        producer.send(Greeting(text="hello"))
        consumer = c.subscribe(
            idle,
            "u",
            schema=JsonSchema(Greeting),
            initial_position=pulsar.InitialPosition.Earliest,
        )
        assert consumer.receive(10_000).value().text == "hello"

        # A topic with messages but no schema: a consumer with a schema has nothing to
        # read it by (Pulsar refuses it too); one of bytes is fine.
        plain = f"persistent://{namespace}/plain"
        c.create_producer(plain).send(b"bytes")
        assert refused(lambda: c.subscribe(plain, "s", schema=StringSchema()))
        c.subscribe(plain, "bytes").close()
    finally:
        c.close()


def test_namespace_policies_apply_to_served_topics(
    standalone: StandaloneProcess, namespace: str
) -> None:
    web, ns_path = standalone.web_url, f"/admin/v2/namespaces/{namespace}"
    topic = f"persistent://{namespace}/policed"
    c = client(standalone)
    try:
        c.create_producer(topic, schema=V1).close()
        # Enforced: a producer without a schema is refused on a topic with one.
        assert rest(web, "POST", f"{ns_path}/schemaValidationEnforced", True)[0] == 204
        until_blocking(
            lambda: refused(lambda: c.create_producer(topic).close()), "enforced", interval=0.2
        )
        # Auto-update off: only registered schemas are accepted.
        assert rest(web, "POST", f"{ns_path}/isAllowAutoUpdateSchema", False)[0] == 204
        until_blocking(
            lambda: refused(lambda: c.create_producer(topic, schema=V2)),
            "no auto-update",
            interval=0.2,
        )
        c.create_producer(topic, schema=V1).close()
        # ALWAYS_COMPATIBLE (and auto-update back on): anything of the same type goes.
        assert rest(web, "POST", f"{ns_path}/isAllowAutoUpdateSchema", True)[0] == 204
        strategy = f"{ns_path}/schemaCompatibilityStrategy"
        assert rest(web, "PUT", strategy, "ALWAYS_COMPATIBLE")[0] == 204
        until_blocking(
            lambda: not refused(lambda: c.create_producer(topic, schema=V_BAD)),
            "ALWAYS_COMPATIBLE",
            interval=0.2,
        )
    finally:
        c.close()
    status, doc = rest(web, "GET", f"/admin/v2/schemas/{namespace}/policed/schema")
    assert (status, doc["version"]) == (200, 1)


def test_a_partitioned_topic_has_one_schema_for_every_partition(
    standalone: StandaloneProcess, namespace: str
) -> None:
    web = standalone.web_url
    assert rest(web, "PUT", f"/admin/v2/persistent/{namespace}/parts/partitions", 3)[0] == 204
    topic = f"persistent://{namespace}/parts"
    c = client(standalone)
    try:
        producer = c.create_producer(topic, schema=V1)
        for i in range(6):
            producer.send({"id": i}, partition_key=str(i))
        assert refused(lambda: c.create_producer(topic, schema=V_BAD))
        consumer = c.subscribe(
            topic, "all", schema=V1, initial_position=pulsar.InitialPosition.Earliest
        )
        ids = sorted(consumer.receive(10_000).value()["id"] for _ in range(6))
        assert ids == list(range(6))
    finally:
        c.close()
    status, doc = rest(web, "GET", f"/admin/v2/schemas/{namespace}/parts/schemas")
    assert status == 200 and [r["version"] for r in doc["getSchemaResponses"]] == [0]


async def ask(port: int, *commands: Any) -> list[Any]:
    """Send each of ``commands``, one after the other's answer, after CONNECT on a raw
    connection; their answers' bodies."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    decoder = FrameDecoder()
    pending: list[Any] = []

    async def next_answer() -> Any:
        while not pending:
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data, "the broker closed the connection"
            pending.extend(command_body(frame.command) for frame in decoder.feed(data))
        return pending.pop(0)

    try:
        writer.write(encode_command(pb.CommandConnect(client_version="raw", protocol_version=20)))
        await next_answer()  # CONNECTED
        answers = []
        for command in commands:
            writer.write(encode_command(command))
            answers.append(await next_answer())
        return answers
    finally:
        writer.close()


async def test_get_schema_and_get_or_create_schema_on_the_wire(
    standalone: StandaloneProcess, namespace: str
) -> None:
    topic = f"persistent://{namespace}/wire"
    definition = json.dumps(json.loads(V1.schema_info().schema())).encode()
    avro = pb.Schema(name="wire", schema_data=definition, type=pb.Schema.Avro)
    assert rest(standalone.web_url, "PUT", f"/admin/v2/persistent/{namespace}/wire")[0] == 204
    before, created, again, latest, first, missing, other = await ask(
        standalone.port,
        pb.CommandGetSchema(request_id=1, topic=topic),
        pb.CommandGetOrCreateSchema(request_id=2, topic=topic, schema=avro),
        pb.CommandGetOrCreateSchema(request_id=3, topic=topic, schema=avro),
        pb.CommandGetSchema(request_id=4, topic=topic),
        pb.CommandGetSchema(request_id=5, topic=topic, schema_version=encode_version(0)),
        pb.CommandGetSchema(request_id=6, topic=topic, schema_version=encode_version(9)),
        pb.CommandGetOrCreateSchema(
            request_id=7,
            topic=topic,
            schema=pb.Schema(name="wire", schema_data=b"", type=pb.Schema.String),
        ),
    )
    assert before.error_code == pb.TopicNotFound
    assert before.error_message == f"Topic not found or no-schema {topic}"
    assert created.schema_version == again.schema_version == encode_version(0)
    assert latest.schema_version == encode_version(0)
    assert (latest.schema.type, latest.schema.schema_data) == (pb.Schema.Avro, definition)
    assert first.schema == latest.schema
    assert missing.error_code == pb.TopicNotFound
    assert other.error_code == pb.IncompatibleSchema
    assert "exists schema type AVRO, new schema type STRING" in other.error_message
    # GET_OR_CREATE_SCHEMA never makes a topic.
    (unknown,) = await ask(
        standalone.port,
        pb.CommandGetOrCreateSchema(request_id=8, topic=f"{topic}-none", schema=avro),
    )
    assert unknown.error_code == pb.TopicNotFound


async def test_a_schema_type_pulsar_does_not_define_is_refused(
    standalone: StandaloneProcess, namespace: str
) -> None:
    """A type number outside the enum parses as unset: the command lacks a required field,
    so the connection is closed (as for any malformed command), never taken for bytes."""
    topic = f"persistent://{namespace}/odd"
    schema = pb.Schema(name="t", schema_data=b"", type=pb.Schema.Avro)
    raw = encode_command(
        pb.CommandProducer(topic=topic, producer_id=1, request_id=1, schema=schema)
    )
    assert raw.count(b"\x20\x04") == 1  # the schema's type field: AVRO
    reader, writer = await asyncio.open_connection("127.0.0.1", standalone.port)
    try:
        writer.write(encode_command(pb.CommandConnect(client_version="raw", protocol_version=20)))
        writer.write(raw.replace(b"\x20\x04", b"\x20\x63"))  # type 99
        decoder, answers = FrameDecoder(), []
        while data := await asyncio.wait_for(reader.read(65536), 10):
            answers += [command_body(frame.command) for frame in decoder.feed(data)]
    finally:
        writer.close()
    # Closed with at most CONNECTED said (the malformed command may come first).
    assert all(isinstance(a, pb.CommandConnected) for a in answers)
    (fine,) = await ask(standalone.port, pb.CommandGetSchema(request_id=2, topic=topic))
    assert fine.error_code == pb.TopicNotFound  # the broker serves on; nothing registered


def test_a_topics_own_strategy_wins_over_its_namespaces(
    standalone: StandaloneProcess, namespace: str
) -> None:
    web = standalone.web_url
    topic = f"persistent://{namespace}/own"
    path = f"/admin/v2/persistent/{namespace}/own/schemaCompatibilityStrategy"
    c = client(standalone)
    try:
        c.create_producer(topic, schema=V1).close()  # the namespace's strategy: FULL
        assert refused(lambda: c.create_producer(topic, schema=V_BAD))
        assert rest(web, "PUT", path, "ALWAYS_COMPATIBLE")[0] == 204
        until_blocking(
            lambda: not refused(lambda: c.create_producer(topic, schema=V_BAD).close()),
            "the topic's own strategy applies",
            interval=0.2,
        )
        assert rest(web, "GET", path) == (200, "ALWAYS_COMPATIBLE")
        # Another topic of the namespace still has the namespace's strategy.
        other = f"persistent://{namespace}/other"
        c.create_producer(other, schema=V1).close()
        assert refused(lambda: c.create_producer(other, schema=V_BAD))
    finally:
        c.close()
