"""A topic's admission of producers' and consumers' schemas (Pulsar's ``addSchema`` and
``addSchemaIfIdleOrCheckCompatible``), over a real managed ledger on a memory:// store and
an in-memory ledger client, with the namespace policies that decide."""

from __future__ import annotations

import dataclasses
import json
from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.schema import CompatibilityStrategy, SchemaData, SchemaRegistry, SchemaType
from stripemq.broker.topic import Consumer, PersistentTopic, Producer
from stripemq.errors import BrokerError, IncompatibleSchemaError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.sinks import NullSink

NAME = "persistent://acme/orders/events"


def avro(*fields: dict[str, object]) -> SchemaData:
    doc = {"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"}, *fields]}
    return SchemaData(SchemaType.AVRO, json.dumps(doc).encode())


V1 = avro()
V2 = avro({"name": "note", "type": "string", "default": ""})
BAD = avro({"name": "note", "type": "int"})
STRING = SchemaData(SchemaType.STRING)


async def topic_on(store: MetadataStore, name: str = NAME, **policies: object) -> PersistentTopic:
    ml = ManagedLedger(
        TopicName.parse(name).managed_ledger_name,
        store,
        cast(BookKeeper, FakeBookKeeper()),
        ManagedLedgerConfig(),
    )
    await ml.open(create=True)
    topic = PersistentTopic(TopicName.parse(name), ml, schemas=SchemaRegistry(store))
    await topic.apply_policies(dataclasses.replace(EffectivePolicies(), **policies))
    return topic


async def test_producers_register_versions_and_incompatible_ones_are_refused(
    store: MetadataStore,
) -> None:
    topic = await topic_on(store)
    assert await topic.add_schema(None) is None  # bytes: nothing registered
    assert await topic.add_schema(V1) == 0
    assert await topic.add_schema(V2) == 1
    assert await topic.add_schema(V1) == 0
    with pytest.raises(IncompatibleSchemaError):
        await topic.add_schema(BAD)
    with pytest.raises(IncompatibleSchemaError, match="new schema type STRING"):
        await topic.add_schema(STRING)
    assert await topic.add_schema(SchemaData(SchemaType.NONE)) is None  # a Java BYTES one


async def test_a_partition_registers_for_its_partitioned_topic(store: MetadataStore) -> None:
    first = await topic_on(store, f"{NAME}-partition-0")
    second = await topic_on(store, f"{NAME}-partition-1")
    assert await first.add_schema(V1) == 0
    with pytest.raises(IncompatibleSchemaError):
        await second.add_schema(BAD)
    assert await second.add_schema(V1) == 0


async def test_enforced_validation_refuses_producers_without_a_schema(
    store: MetadataStore,
) -> None:
    topic = await topic_on(store, schema_validation_enforced=True)
    assert await topic.add_schema(None) is None  # no schema yet: nothing to enforce
    await topic.add_schema(V1)
    with pytest.raises(IncompatibleSchemaError, match="SchemaValidationEnforced"):
        await topic.add_schema(None)


async def test_without_auto_update_only_registered_schemas_are_taken(
    store: MetadataStore,
) -> None:
    topic = await topic_on(store)
    await topic.add_schema(V1)
    await topic.apply_policies(dataclasses.replace(topic.policies, allow_auto_update_schema=False))
    assert await topic.add_schema(V1) == 0
    with pytest.raises(IncompatibleSchemaError, match="auto updating is disabled"):
        await topic.add_schema(V2)


async def test_a_consumer_on_an_idle_topic_registers_its_schema(store: MetadataStore) -> None:
    topic = await topic_on(store)
    await topic.add_consumer_schema(V1)
    assert await topic.add_schema(V1) == 0  # the consumer's version


async def test_a_consumer_must_read_the_topics_schema(store: MetadataStore) -> None:
    topic = await topic_on(store)
    await topic.add_schema(V1)
    await topic.add_consumer_schema(V1)
    await topic.add_consumer_schema(V2)  # reads V1's data: the note has a default
    await topic.add_consumer_schema(None)  # bytes
    with pytest.raises(IncompatibleSchemaError):
        await topic.add_consumer_schema(BAD)
    with pytest.raises(IncompatibleSchemaError):
        await topic.add_consumer_schema(STRING)


@pytest.mark.parametrize("activity", ["message", "producer", "consumer"])
async def test_a_busy_topic_without_a_schema_refuses_a_consumers_schema(
    store: MetadataStore, activity: str
) -> None:
    topic = await topic_on(store)
    if activity == "message":
        meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        await topic.publish(encode_entry(meta, b"bytes"))
    elif activity == "producer":
        await topic.add_producer(Producer(1, "p", topic, NullSink()))
    else:
        sub = await topic.subscribe("s", pb.Shared, InitialPosition.Latest)
        sub.add_consumer(Consumer(ConsumerSlot(1, "c", 0), NullSink(), sub))
    with pytest.raises(IncompatibleSchemaError, match=r"empty\(BYTES\) schema"):
        await topic.add_consumer_schema(V1)
    await topic.apply_policies(
        dataclasses.replace(
            topic.policies, schema_compatibility_strategy=CompatibilityStrategy.ALWAYS_COMPATIBLE
        )
    )
    await topic.add_consumer_schema(V1)  # nothing is checked under ALWAYS_COMPATIBLE


async def test_a_topic_without_a_registry_refuses_schemas(store: MetadataStore) -> None:
    ml = ManagedLedger(
        "acme/orders/persistent/bare",
        store,
        cast(BookKeeper, FakeBookKeeper()),
        ManagedLedgerConfig(),
    )
    await ml.open(create=True)
    topic = PersistentTopic(TopicName.parse("acme/orders/bare"), ml)
    with pytest.raises(BrokerError, match="keeps no schemas"):
        await topic.add_schema(V1)


async def test_deleting_the_topic_deletes_its_schemas_first(store: MetadataStore) -> None:
    topic = await topic_on(store)
    await topic.add_schema(V1)
    await topic.delete()
    assert await store.exists("/stripemq/schemas/acme/orders/events") is None
