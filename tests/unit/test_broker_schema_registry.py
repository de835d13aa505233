"""The schema registry on a metadata store (memory:// and a real ZooKeeper): versions,
identical schemas, refusals that store nothing, deletion, races between two brokers."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest
from conftest import StoreFactory

from stripemq.broker.schema import CompatibilityStrategy, SchemaData, SchemaRegistry, SchemaType
from stripemq.broker.schema.compatibility import MAX_SCHEMA_BYTES
from stripemq.broker.schema.registry import decode, encode, schema_id
from stripemq.errors import IncompatibleSchemaError, NodeExistsError
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName

FULL = CompatibilityStrategy.FULL
SID = "acme/orders/events"


def avro(*fields: dict[str, object]) -> SchemaData:
    doc = {"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"}, *fields]}
    return SchemaData(SchemaType.AVRO, json.dumps(doc).encode())


V1 = avro()
V2 = avro({"name": "note", "type": "string", "default": ""})
BAD = avro({"name": "note", "type": "string"})  # no default: FULL refuses it after V1


def test_a_partition_shares_its_partitioned_topics_schemas() -> None:
    assert schema_id(TopicName.parse("persistent://acme/orders/a b-partition-3")) == (
        "acme/orders/a%20b"
    )
    assert schema_id(TopicName.parse("non-persistent://acme/orders/x")) == "acme/orders/x"


def test_stored_versions_round_trip() -> None:
    schema = SchemaData(SchemaType.JSON, b"\x00{}", {"k": "v"}, 17, deleted=False)
    assert decode(encode(schema)) == schema
    with pytest.raises(ValueError):
        decode(b'{"type": "NOPE"}')


async def test_versions_count_from_zero_and_the_identical_schema_keeps_its_own(
    store: MetadataStore,
) -> None:
    registry = SchemaRegistry(store)
    assert await registry.latest(SID) is None
    assert await registry.put_if_absent(SID, V1, FULL) == 0
    assert await registry.put_if_absent(SID, V2, FULL) == 1
    assert await registry.put_if_absent(SID, V1, FULL) == 0  # already there
    latest = await registry.latest(SID)
    assert latest is not None and latest.version == 1 and latest.schema.data == V2.data
    assert latest.schema.timestamp_ms > 0
    assert [s.version for s in await registry.history(SID)] == [0, 1]
    assert await registry.find(SID, V2) == 1
    assert await registry.find(SID, BAD) is None


async def test_a_refused_schema_stores_nothing(store: MetadataStore) -> None:
    registry = SchemaRegistry(store)
    await registry.put_if_absent(SID, V1, FULL)
    with pytest.raises(IncompatibleSchemaError, match="strategy FULL"):
        await registry.put_if_absent(SID, BAD, FULL)
    with pytest.raises(IncompatibleSchemaError, match="exists schema type AVRO"):
        await registry.put_if_absent(SID, SchemaData(SchemaType.STRING), FULL)
    with pytest.raises(IncompatibleSchemaError, match="Invalid schema definition"):
        await registry.put_if_absent(SID, SchemaData(SchemaType.AVRO, b"nope"), FULL)
    with pytest.raises(IncompatibleSchemaError, match="over the"):
        big = SchemaData(SchemaType.STRING, b"x" * (MAX_SCHEMA_BYTES + 1))
        await registry.put_if_absent("acme/orders/other", big, FULL)
    assert [s.version for s in await registry.versions(SID)] == [0]
    assert await registry.put_if_absent(SID, BAD, CompatibilityStrategy.ALWAYS_COMPATIBLE) == 1


async def test_deleting_leaves_a_tombstone_and_numbering_goes_on(store: MetadataStore) -> None:
    registry = SchemaRegistry(store)
    await registry.put_if_absent(SID, V1, FULL)
    assert await registry.delete(SID) == 1
    assert await registry.latest(SID) is None
    assert await registry.history(SID) == []
    assert await registry.get(SID, 0) is not None  # the old version is still readable
    assert await registry.get(SID, 1) is None  # the tombstone is not a schema
    assert await registry.delete(SID) is None  # nothing left to delete
    # After a deletion anything may come: no history to agree with.
    assert await registry.put_if_absent(SID, SchemaData(SchemaType.STRING), FULL) == 2


async def test_a_forced_deletion_removes_every_version(store: MetadataStore) -> None:
    registry = SchemaRegistry(store)
    await registry.put_if_absent(SID, V1, FULL)
    await registry.put_if_absent(SID, V2, FULL)
    assert await registry.delete(SID, force=True) == 1
    assert await registry.versions(SID) == []
    assert await store.exists("/stripemq/schemas/acme/orders/events") is None
    assert await registry.put_if_absent(SID, BAD, FULL) == 0


async def test_a_reader_must_read_what_is_registered(store: MetadataStore) -> None:
    registry = SchemaRegistry(store)
    with pytest.raises(IncompatibleSchemaError, match=r"empty\(BYTES\) schema"):
        await registry.check_reader(SID, V1, FULL)
    await registry.put_if_absent(SID, V1, FULL)
    await registry.check_reader(SID, V1, FULL)
    await registry.check_reader(SID, V2, FULL)  # reads V1's data (note has a default)
    with pytest.raises(IncompatibleSchemaError, match="BACKWARD"):
        await registry.check_reader(SID, BAD, FULL)
    assert [s.version for s in await registry.versions(SID)] == [0]  # nothing stored


class RacingStore:
    """A store whose first listing of each caller waits for the other's: both registries
    read the same versions before either writes, so they race for the same next one."""

    def __init__(self, store: MetadataStore, barrier: asyncio.Barrier) -> None:
        self.store = store
        self.barrier = barrier
        self.waited = False
        self.lost = 0  # creates refused because the other got there first

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def children(self, path: str) -> list[str]:
        names = await self.store.children(path)
        if not self.waited:
            self.waited = True
            await self.barrier.wait()
        return names

    async def create(self, path: str, data: bytes = b"", **kw: Any) -> str:
        try:
            return await self.store.create(path, data, **kw)
        except NodeExistsError:
            self.lost += 1
            raise


async def test_two_brokers_registering_at_once_get_one_version_each(
    new_store: StoreFactory,
) -> None:
    """Both race for version 1: one wins, the other reads again, finds that its schema
    agrees with the winner's, and takes version 2."""
    store = await new_store()
    await SchemaRegistry(store).put_if_absent(SID, V1, FULL)
    barrier = asyncio.Barrier(2)
    racers = [RacingStore(await new_store(), barrier) for _ in range(2)]
    one, two = (SchemaRegistry(cast(MetadataStore, r)) for r in racers)
    v3 = avro({"name": "other", "type": "int", "default": 0})
    versions = await asyncio.gather(
        one.put_if_absent(SID, V2, FULL), two.put_if_absent(SID, v3, FULL)
    )
    assert sorted(versions) == [1, 2]
    assert sum(r.lost for r in racers) == 1  # they did race
    assert [s.version for s in await SchemaRegistry(store).versions(SID)] == [0, 1, 2]


async def test_racing_for_the_same_schema_gives_both_one_version(new_store: StoreFactory) -> None:
    barrier = asyncio.Barrier(2)
    racers = [RacingStore(await new_store(), barrier) for _ in range(2)]
    one, two = (SchemaRegistry(cast(MetadataStore, r)) for r in racers)
    assert await asyncio.gather(
        one.put_if_absent(SID, V1, FULL), two.put_if_absent(SID, V1, FULL)
    ) == [0, 0]
    assert sum(r.lost for r in racers) == 1


async def test_an_unreadable_version_is_taken_for_a_deletion(store: MetadataStore) -> None:
    registry = SchemaRegistry(store)
    await registry.put_if_absent(SID, V1, FULL)
    await store.create(f"/stripemq/schemas/{SID}/0000000001", b"garbage")
    await store.create(f"/stripemq/schemas/{SID}/notes", b"")  # not a version: ignored
    assert await registry.latest(SID) is None
    assert await registry.history(SID) == []
    # What came before it no longer binds: BAD is welcome, after the unreadable node.
    assert await registry.put_if_absent(SID, BAD, FULL) == 2


async def test_a_consumer_under_always_compatible_is_never_refused(store: MetadataStore) -> None:
    registry = SchemaRegistry(store)
    await registry.check_reader(SID, V1, CompatibilityStrategy.ALWAYS_COMPATIBLE)
    await registry.put_if_absent(SID, V1, FULL)
    await registry.check_reader(
        SID, SchemaData(SchemaType.STRING), CompatibilityStrategy.ALWAYS_COMPATIBLE
    )


async def test_properties_count_towards_the_size_limit(store: MetadataStore) -> None:
    registry = SchemaRegistry(store)
    heavy = SchemaData(SchemaType.STRING, b"", {"k": "v" * MAX_SCHEMA_BYTES})
    with pytest.raises(IncompatibleSchemaError, match="definition and properties"):
        await registry.put_if_absent(SID, heavy, FULL)
    with pytest.raises(IncompatibleSchemaError, match="definition and properties"):
        await registry.check_reader(SID, heavy, FULL)
    assert await registry.versions(SID) == []
