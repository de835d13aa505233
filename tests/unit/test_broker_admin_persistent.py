"""``/admin/v2/persistent`` over HTTP (aiohttp's test server) on a memory:// store, with a
real ``BrokerService`` over an in-memory ledger client (``ledger_fakes``); a stand-in for
another broker's web service where a bundle belongs to it. Also the sans-IO parts (message
ids, peek headers) and the managed ledger's termination, which ``/terminate`` relies on."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import quote, unquote

import pytest
from admin_app import admin_app
from aiohttp import web
from aiohttp.test_utils import TestClient
from ledger_fakes import FakeBookKeeper
from yarl import URL

from stripemq.bookie.client import BookKeeper
from stripemq.broker.admin.persistent import (
    MessageIdBody,
    format_time,
    nth_unacknowledged,
    parse_message_id,
    peek_response,
    target_position,
)
from stripemq.broker.admin.rest import RestError
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.ownership import BROKERS_ROOT, BrokerInfo, bundle_of
from stripemq.broker.partitions import partition_count
from stripemq.broker.service import BrokerService
from stripemq.broker.topic import Consumer, PersistentTopic, Producer
from stripemq.errors import ManagedLedgerTerminatedError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.ledger_list import managed_ledger_path
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.compression import compress
from stripemq.proto.frames import BatchMessage, encode_batch, encode_entry
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.metadata import metadata_tree
from stripemq.testing.polling import until
from stripemq.testing.sinks import NullSink

P = "/admin/v2/persistent/public/default"


def entry(payload: bytes, publish_time: int = 1_000, **properties: str) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=publish_time)
    for key, value in properties.items():
        metadata.properties.add(key=key, value=value)
    return encode_entry(metadata, payload)


class RecordingSink(NullSink):
    """A connection that remembers what the broker told it."""

    def __init__(self) -> None:
        self.closed_consumers: list[int] = []
        self.closed_producers: list[int] = []
        self.ended: list[int] = []

    def close_consumer(self, consumer_id: int) -> None:
        self.closed_consumers.append(consumer_id)

    def close_producer(self, producer_id: int) -> None:
        self.closed_producers.append(producer_id)

    def send_reached_end_of_topic(self, consumer_id: int) -> None:
        self.ended.append(consumer_id)


@dataclass
class Remote:
    """Another broker's web service: answers 204 and records what it was asked."""

    url: str = ""
    calls: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.calls.append(f"{request.method} {request.path_qs}")
        return web.Response(status=204)


@dataclass
class Admin:
    client: TestClient
    service: BrokerService
    store: MetadataStore
    remote: Remote

    async def call(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        """(status, decoded JSON body or None); redirects are not followed."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        response = await self.client.request(method, path, data=data, allow_redirects=False)
        text = await response.read()
        try:
            return response.status, (json.loads(text) if text else None)
        except ValueError:
            return response.status, text

    async def topic(
        self, name: str, entries: int = 0, subs: tuple[str, ...] = ()
    ) -> PersistentTopic:
        topic = await self.service.get_topic(TopicName.parse(name))
        for sub in subs:
            await topic.subscribe(sub, pb.CommandSubscribe.Shared, InitialPosition.Earliest)
        for i in range(entries):
            await topic.ml.add_entry(entry(f"m{i}".encode(), publish_time=1_000 * (i + 1)))
        return topic

    async def remote_owns(self, topic: str) -> None:
        info = BrokerInfo("remote:6650", "pulsar://remote:6650", self.remote.url)
        await self.store.create(
            bundle_of(TopicName.parse(topic)).path, info.encode(), ephemeral=True
        )


@pytest.fixture
async def admin(store: MetadataStore) -> AsyncIterator[Admin]:
    remote = Remote()
    async with admin_app(store, remote=remote.handle) as app:
        remote.url = app.remote_url
        yield Admin(app.client, app.service, store, remote)


# --------------------------------------------------------------------------- sans-IO


def test_message_ids() -> None:
    assert parse_message_id({"ledgerId": 3, "entryId": 4}) == MessageIdBody(3, 4)
    earliest = parse_message_id({"ledgerId": -1, "entryId": -1, "partitionIndex": 2})
    assert earliest.earliest and earliest.partition_index == 2
    unsigned = parse_message_id({"ledgerId": (1 << 64) - 1, "entryId": (1 << 64) - 1})
    assert unsigned.earliest
    assert parse_message_id({"ledgerId": (1 << 63) - 1, "entryId": (1 << 63) - 1}).latest
    excluded = parse_message_id({"ledgerId": 3, "entryId": 4, "isExcluded": True})
    first, end = Position(1, 0), Position(5, 2)
    assert target_position(excluded, first, end) == Position(3, 5)
    assert target_position(earliest, first, end) == first
    assert (
        target_position(parse_message_id({"ledgerId": 2**63 - 1, "entryId": 0}), first, end) == end
    )


@pytest.mark.parametrize(
    "body",
    [
        [1, 2],
        {"entryId": 1},
        {"ledgerId": "1", "entryId": 1},
        {"ledgerId": True, "entryId": 1},
        {"ledgerId": 1, "entryId": 1.5},
        {"ledgerId": -2, "entryId": 0},
        {"ledgerId": 1, "entryId": 0, "isExcluded": "yes"},
    ],
)
def test_bad_message_ids_are_refused(body: object) -> None:
    with pytest.raises(RestError) as caught:
        parse_message_id(body)
    assert caught.value.status == 412


def test_publish_time_format() -> None:
    assert format_time(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert format_time(0) == "1970-01-01T00:00:00.000Z"


def test_peek_response_of_a_message() -> None:
    metadata = pb.MessageMetadata(
        producer_name="prod", sequence_id=3, publish_time=1_000, event_time=2_000
    )
    metadata.properties.add(key="color", value="red")
    metadata.partition_key = "key-1"
    metadata.compression = pb.LZ4
    metadata.uncompressed_size = 11
    data = encode_entry(metadata, compress(pb.LZ4, b"hello world"))
    headers, body = peek_response(Position(4, 2), data)
    assert body == b"hello world"
    assert headers["X-Pulsar-Message-ID"] == "4:2"
    assert headers["X-Pulsar-PROPERTY-color"] == "red"
    assert json.loads(headers["X-Pulsar-PROPERTY"]) == {"color": "red"}
    assert headers["X-Pulsar-publish-time"] == "1970-01-01T00:00:01.000Z"
    assert headers["X-Pulsar-event-time"] == "1970-01-01T00:00:02.000Z"
    assert headers["X-Pulsar-producer-name"] == "prod"
    assert headers["X-Pulsar-sequence-id"] == "3"
    assert headers["X-Pulsar-partition-key"] == "key-1"
    assert headers["X-Pulsar-compression"] == "LZ4"
    assert "X-Pulsar-num-batch-message" not in headers


def test_peek_response_of_a_batch_is_the_whole_batch() -> None:
    messages = [
        BatchMessage(pb.SingleMessageMetadata(payload_size=0), f"b{i}".encode()) for i in range(3)
    ]
    payload = encode_batch(messages)
    metadata = pb.MessageMetadata(
        producer_name="prod", sequence_id=0, publish_time=5, num_messages_in_batch=3
    )
    headers, body = peek_response(Position(1, 0), encode_entry(metadata, payload))
    assert body == payload
    assert headers["X-Pulsar-num-batch-message"] == "3"
    assert headers["X-Pulsar-batch-size"] == str(len(payload))


def test_peek_response_of_garbage_is_an_error() -> None:
    with pytest.raises(RestError) as caught:
        peek_response(Position(1, 0), b"\x00\x01garbage")
    assert caught.value.status == 500


# --------------------------------------------------------------------------- topics


async def test_create_list_and_delete(admin: Admin) -> None:
    assert (await admin.call("PUT", f"{P}/t1"))[0] == 204
    assert (await admin.call("PUT", f"{P}/t1")) == (409, {"reason": "This topic already exists"})
    assert await admin.call("GET", P) == (200, ["persistent://public/default/t1"])
    assert await admin.call("GET", f"{P}/t1/partitions") == (200, {"partitions": 0})
    assert (await admin.call("DELETE", f"{P}/t1"))[0] == 204
    assert await admin.call("GET", P) == (200, [])
    assert (await admin.call("DELETE", f"{P}/t1"))[0] == 404
    assert (await admin.call("GET", f"{P}/t1/partitions"))[0] == 404


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("PUT", "/admin/v2/persistent/nobody/ns/t", 404),
        ("PUT", "/admin/v2/persistent/public/none/t", 404),
        ("GET", "/admin/v2/persistent/public/none", 404),
        ("GET", "/admin/v2/persistent/public/none/partitioned", 404),
        ("GET", "/admin/v2/persistent/pub lic/default/t/stats", 412),
        ("GET", f"{P}/missing/stats", 404),
        ("GET", f"{P}/missing/internalStats", 404),
        ("POST", f"{P}/missing/terminate", 404),
        ("GET", f"{P}/missing/subscriptions", 404),
        ("GET", f"{P}/missing/partitioned-stats", 404),
        ("DELETE", f"{P}/missing", 404),
        ("PUT", f"{P}/missing/unload", 404),
        ("PUT", f"{P}/ghost-partition-0", 409),  # no partitioned topic ghost
    ],
)
async def test_unknown_things_are_refused_and_nothing_is_written(
    admin: Admin, method: str, path: str, status: int
) -> None:
    before = await metadata_tree(admin.store)
    answer = await admin.call(method, path)
    assert answer[0] == status
    assert answer[1]["reason"]
    assert await metadata_tree(admin.store) == before


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("PUT", "/%2e%2e"),
        ("PUT", "/%2e"),
        ("GET", "/%2e%2e/stats"),
        ("GET", "/%2e%2e/partitions"),
        ("PUT", "/%2e%2e/partitions"),
        ("GET", "/%2e%2e/lastMessageId"),
        ("PUT", "/t/subscription/%2e%2e"),
        ("PUT", "/t/subscription/a%00b"),
    ],
)
async def test_names_no_metadata_node_could_have_are_412(
    admin: Admin, method: str, suffix: str
) -> None:
    """``.``, ``..`` and NUL, sent encoded as they are (not resolved as a relative path):
    refused as names, never a 500 from the metadata store."""
    await admin.topic("persistent://public/default/t")
    before = await metadata_tree(admin.store)
    url = URL(str(admin.client.make_url(P)) + suffix, encoded=True)
    response = await admin.client.session.request(method, url, data=b"2")
    assert response.status == 412, await response.text()
    assert (await response.json())["reason"]
    assert await metadata_tree(admin.store) == before


async def test_delete_refuses_a_topic_with_clients_unless_forced(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/busy", entries=2, subs=("s",))
    sink = RecordingSink()
    await topic.add_producer(Producer(1, "p1", topic, sink))
    assert await admin.call("DELETE", f"{P}/busy") == (
        412,
        {"reason": "Topic has active producers/subscriptions"},
    )
    assert await admin.store.exists(managed_ledger_path(topic.topic_name.managed_ledger_name))
    assert (await admin.call("DELETE", f"{P}/busy?force=true"))[0] == 204
    assert sink.closed_producers == [1]
    assert (
        await admin.store.exists(managed_ledger_path(topic.topic_name.managed_ledger_name)) is None
    )
    assert "persistent://public/default/busy" not in admin.service.topics


# --------------------------------------------------------------------------- partitions


async def test_partitioned_topics(admin: Admin) -> None:
    assert (await admin.call("PUT", f"{P}/pt/partitions", raw=b"3"))[0] == 204
    assert await admin.call("GET", f"{P}/pt/partitions") == (200, {"partitions": 3})
    assert await admin.call("GET", f"{P}/partitioned") == (200, ["persistent://public/default/pt"])
    assert await admin.call("GET", P) == (
        200,
        [f"persistent://public/default/pt-partition-{i}" for i in range(3)],
    )
    assert (await admin.call("PUT", f"{P}/pt/partitions", raw=b"3"))[0] == 409
    assert (await admin.call("PUT", f"{P}/pt"))[0] == 409
    assert (await admin.call("DELETE", f"{P}/pt"))[0] == 409
    # A subscription on every partition, then growing copies it to the new ones.
    assert (await admin.call("PUT", f"{P}/pt/subscription/s"))[0] == 204
    assert (await admin.call("PUT", f"{P}/pt/subscription/s"))[0] == 409
    status, reason = await admin.call("POST", f"{P}/pt/partitions", raw=b"2")
    assert status == 422 and "less than" in reason["reason"]
    assert (await admin.call("POST", f"{P}/pt/partitions", raw=b"0"))[0] == 406
    assert (await admin.call("POST", f"{P}/pt/partitions", raw=b"100000"))[0] == 422
    assert (await admin.call("POST", f"{P}/pt/partitions", raw=b"5"))[0] == 204
    assert await partition_count(admin.store, TopicName.parse("public/default/pt")) == 5
    assert await admin.call("GET", f"{P}/pt-partition-4/subscriptions") == (200, ["s"])
    assert await admin.call("GET", f"{P}/pt/subscriptions") == (200, ["s"])
    # Whole-topic operations that Pulsar refuses on a partitioned topic.
    for method, suffix in [
        ("POST", "/subscription/s/skip/1"),
        ("GET", "/subscription/s/position/1"),
        ("POST", "/terminate"),
        ("GET", "/lastMessageId"),
    ]:
        assert (await admin.call(method, f"{P}/pt{suffix}"))[0] == 405
    assert (await admin.call("DELETE", f"{P}/pt/partitions"))[0] == 204
    assert await admin.call("GET", f"{P}/partitioned") == (200, [])
    assert await admin.call("GET", P) == (200, [])


@pytest.mark.parametrize(
    ("method", "raw", "status"),
    [
        ("PUT", b"0", 406),
        ("PUT", b"-3", 406),
        ("PUT", b'"3"', 412),
        ("PUT", b"true", 412),
        ("PUT", b"{", 400),
        ("PUT", b"", 412),
        ("PUT", b"100000", 406),
        ("PUT", b'{"partitions": 0}', 406),
        ("PUT", b'{"partitions": 2, "properties": {"a": 1}}', 412),
        ("PUT", b'{"properties": {}}', 412),
        ("POST", b"4", 409),  # not partitioned
        ("POST", b"0", 406),
        ("POST", b"-1", 406),
    ],
)
async def test_bad_partition_counts(admin: Admin, method: str, raw: bytes, status: int) -> None:
    before = await metadata_tree(admin.store)
    assert (await admin.call(method, f"{P}/bad/partitions", raw=raw))[0] == status
    assert await metadata_tree(admin.store) == before


async def test_a_partitioned_topic_with_properties(admin: Admin) -> None:
    """What the Java admin client sends with properties: PartitionedTopicMetadata."""
    body = {"partitions": 2, "properties": {"team": "billing"}}
    assert (await admin.call("PUT", f"{P}/props/partitions", body))[0] == 204
    assert await admin.call("GET", f"{P}/props/partitions") == (200, body)
    assert (await admin.call("POST", f"{P}/props/partitions", 3))[0] == 204
    assert await admin.call("GET", f"{P}/props/partitions") == (
        200,
        {"partitions": 3, "properties": {"team": "billing"}},
    )


async def test_only_partitions_of_a_partitioned_topic_can_be_made(admin: Admin) -> None:
    """Pulsar's validateNonPartitionTopicName: ``-partition-<n>`` is a partition's name."""
    assert (await admin.call("PUT", f"{P}/pt/partitions", raw=b"4"))[0] == 204
    before = await metadata_tree(admin.store)
    status, answer = await admin.call("PUT", f"{P}/pt-partition-7")
    assert status == 412 and "4 partitions" in answer["reason"]
    assert (await admin.call("PUT", f"{P}/pt-partition-4"))[0] == 412
    assert (await admin.call("PUT", f"{P}/pt-partition-3"))[0] == 409  # exists with pt
    status, answer = await admin.call("PUT", f"{P}/foo-partition-0")
    assert status == 409 and "isn't a partitioned topic foo" in answer["reason"]
    assert await metadata_tree(admin.store) == before
    assert (await admin.call("PUT", f"{P}/pt-partition-x"))[0] == 204  # not a partition name


async def test_delete_partitioned_checks_every_partition_first(admin: Admin) -> None:
    assert (await admin.call("PUT", f"{P}/dp/partitions", raw=b"3"))[0] == 204
    busy = await admin.topic("persistent://public/default/dp-partition-2", subs=("s",))
    await busy.add_producer(Producer(1, "p1", busy, RecordingSink()))
    status, answer = await admin.call("DELETE", f"{P}/dp/partitions")
    assert status == 412 and "active" in answer["reason"]
    for index in range(3):  # none was deleted
        name = TopicName.parse(f"public/default/dp-partition-{index}").managed_ledger_name
        assert await admin.store.exists(managed_ledger_path(name)), index
    assert (await admin.call("DELETE", f"{P}/dp/partitions?force=true"))[0] == 204
    assert await admin.call("GET", f"{P}/partitioned") == (200, [])


async def test_delete_partitioned_refuses_a_non_partitioned_topic(admin: Admin) -> None:
    assert (await admin.call("DELETE", f"{P}/none/partitions"))[0] == 404
    assert (await admin.call("PUT", f"{P}/plain"))[0] == 204
    status, body = await admin.call("DELETE", f"{P}/plain/partitions")
    assert status == 409 and "non-partitioned" in body["reason"]


async def test_partitioned_stats_add_the_partitions_up(admin: Admin) -> None:
    assert (await admin.call("PUT", f"{P}/ps/partitions", raw=b"2"))[0] == 204
    for index, count in ((0, 2), (1, 3)):
        topic = await admin.topic(f"persistent://public/default/ps-partition-{index}")
        for i in range(count):
            await topic.publish(entry(f"x{i}".encode()))
    status, stats = await admin.call("GET", f"{P}/ps/partitioned-stats")
    assert status == 200
    assert stats["metadata"] == {"partitions": 2}
    assert set(stats["partitions"]) == {
        "persistent://public/default/ps-partition-0",
        "persistent://public/default/ps-partition-1",
    }
    status, stats = await admin.call("GET", f"{P}/ps/partitioned-stats?perPartition=false")
    assert stats["partitions"] == {}
    status, internal = await admin.call("GET", f"{P}/ps/partitioned-internalStats")
    assert status == 200 and internal["metadata"] == {"partitions": 2}
    entries = [p["numberOfEntries"] for p in internal["partitions"].values()]
    assert sorted(entries) == [2, 3]


# --------------------------------------------------------------------------- subscriptions


async def test_subscription_lifecycle(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/subs", entries=4)
    assert (await admin.call("PUT", f"{P}/subs/subscription/latest"))[0] == 204
    body = {"ledgerId": -1, "entryId": -1}
    assert (await admin.call("PUT", f"{P}/subs/subscription/early", body))[0] == 204
    assert (await admin.call("PUT", f"{P}/subs/subscription/early", body))[0] == 409
    assert await admin.call("GET", f"{P}/subs/subscriptions") == (200, ["early", "latest"])
    assert topic.ml.cursors["latest"].backlog == 0
    assert topic.ml.cursors["early"].backlog == 4
    # A consumer keeps a subscription from being deleted, unless forced.
    subscription = topic.subscriptions["early"]
    sink = RecordingSink()
    subscription.add_consumer(Consumer(ConsumerSlot(9, "c"), sink, subscription))
    assert await admin.call("DELETE", f"{P}/subs/subscription/early") == (
        412,
        {"reason": "Subscription has active connected consumers"},
    )
    assert (await admin.call("DELETE", f"{P}/subs/subscription/early?force=true"))[0] == 204
    assert sink.closed_consumers == [9]
    assert await admin.call("GET", f"{P}/subs/subscriptions") == (200, ["latest"])
    assert (await admin.call("DELETE", f"{P}/subs/subscription/early"))[0] == 404
    assert (await admin.call("PUT", f"{P}/subs/subscription/pulsar.dedup"))[0] == 412


async def test_a_subscription_on_a_topic_not_made_yet_makes_it(admin: Admin) -> None:
    """Pulsar's internalCreateSubscription: the topic is made when auto creation allows it
    (``pulsar-admin topics create-subscription`` on a new topic)."""
    assert (await admin.call("PUT", f"{P}/fresh/subscription/s"))[0] == 204
    assert await admin.call("GET", f"{P}/fresh/subscriptions") == (200, ["s"])
    assert await admin.call("GET", P) == (200, ["persistent://public/default/fresh"])
    # A namespace whose policy makes topics partitioned: the subscription is on each.
    body = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2}
    assert (
        await admin.call("POST", "/admin/v2/namespaces/public/default/autoTopicCreation", body)
    )[0] == 204
    assert (await admin.call("PUT", f"{P}/split/subscription/s"))[0] == 204
    assert await admin.call("GET", f"{P}/split/partitions") == (200, {"partitions": 2})
    assert await admin.call("GET", f"{P}/split-partition-1/subscriptions") == (200, ["s"])


async def test_no_subscription_makes_a_topic_when_auto_creation_is_off(admin: Admin) -> None:
    body = {"allowAutoTopicCreation": False}
    assert (
        await admin.call("POST", "/admin/v2/namespaces/public/default/autoTopicCreation", body)
    )[0] == 204
    before = await metadata_tree(admin.store)
    status, answer = await admin.call("PUT", f"{P}/never/subscription/s")
    assert status == 404 and answer["reason"]
    assert await metadata_tree(admin.store) == before


async def test_expire_messages_up_to_a_position(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/ep", entries=5, subs=("s",))
    cursor = topic.subscriptions["s"].cursor
    ledger = topic.ml.last_confirmed.ledger_id
    url = f"{P}/ep/subscription/s/expireMessages"
    excluded = {"ledgerId": ledger, "entryId": 2, "isExcluded": True}
    assert (await admin.call("POST", url, excluded))[0] == 204
    assert cursor.backlog == 3  # entries 0 and 1
    assert topic.subscriptions["s"].stats.last_expire_ms > 0
    assert (await admin.call("POST", url, {"ledgerId": ledger, "entryId": 2}))[0] == 204
    assert cursor.backlog == 2  # the entry itself too
    assert (await admin.call("POST", url, {"ledgerId": ledger, "entryId": 99}))[0] == 412
    assert (await admin.call("POST", url, {"ledgerId": -1, "entryId": -1}))[0] == 204
    assert cursor.backlog == 2  # nothing is before the earliest
    latest = {"ledgerId": (1 << 63) - 1, "entryId": (1 << 63) - 1}
    assert (await admin.call("POST", url, latest))[0] == 204
    assert cursor.backlog == 0
    assert (await admin.call("POST", f"{P}/ep/subscription/none/expireMessages", latest))[0] == 404
    assert (await admin.call("PUT", f"{P}/ept/partitions", raw=b"2"))[0] == 204
    assert (await admin.call("POST", f"{P}/ept/subscription/s/expireMessages", latest))[0] == 405


async def test_subscription_at_a_message_id(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/at", entries=4)
    ledger = topic.ml.last_confirmed.ledger_id
    body = {"ledgerId": ledger, "entryId": 2, "partitionIndex": -1}
    assert (await admin.call("PUT", f"{P}/at/subscription/s", body))[0] == 204
    assert topic.ml.cursors["s"].backlog == 2
    beyond = {"ledgerId": ledger + 5, "entryId": 0}
    assert (await admin.call("PUT", f"{P}/at/subscription/x", beyond))[0] == 412
    assert "x" not in topic.ml.cursors


async def test_skip_skip_all_and_expire(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/sk", entries=6, subs=("s",))
    cursor = topic.subscriptions["s"].cursor
    assert (await admin.call("POST", f"{P}/sk/subscription/s/skip/2"))[0] == 204
    assert cursor.backlog == 4
    assert (await admin.call("POST", f"{P}/sk/subscription/s/skip/-1"))[0] == 412
    assert (await admin.call("POST", f"{P}/sk/subscription/s/skip/x"))[0] == 412
    # Entries were published at 1s, 2s, ... 6s after the epoch: all long expired.
    assert (await admin.call("POST", f"{P}/sk/subscription/s/expireMessages/10"))[0] == 204
    assert cursor.backlog == 0
    assert (await admin.call("POST", f"{P}/sk/subscription/s/resetcursor/0"))[0] == 204
    assert cursor.backlog == 6
    assert (await admin.call("POST", f"{P}/sk/subscription/s/skip_all"))[0] == 204
    assert cursor.backlog == 0
    assert (await admin.call("POST", f"{P}/sk/subscription/none/skip_all"))[0] == 404


async def test_reset_cursor_moves_and_disconnects_consumers(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/rs", entries=5, subs=("s",))
    subscription = topic.subscriptions["s"]
    sink = RecordingSink()
    subscription.add_consumer(Consumer(ConsumerSlot(3, "c"), sink, subscription))
    assert (await admin.call("POST", f"{P}/rs/subscription/s/skip_all"))[0] == 204
    assert sink.closed_consumers == []  # skipping leaves consumers connected
    # By publish time: the first entry published at or after 3s is the third.
    assert (await admin.call("POST", f"{P}/rs/subscription/s/resetcursor/3000"))[0] == 204
    assert subscription.cursor.backlog == 3
    assert sink.closed_consumers == [3]
    ledger = topic.ml.last_confirmed.ledger_id
    body = {"ledgerId": ledger, "entryId": 3, "isExcluded": True}
    assert (await admin.call("POST", f"{P}/rs/subscription/s/resetcursor", body))[0] == 204
    assert subscription.cursor.backlog == 1
    body = {"ledgerId": -1, "entryId": -1}
    assert (await admin.call("POST", f"{P}/rs/subscription/s/resetcursor", body))[0] == 204
    assert subscription.cursor.backlog == 5
    assert (await admin.call("POST", f"{P}/rs/subscription/s/resetcursor", [1]))[0] == 412
    assert (await admin.call("POST", f"{P}/rs/subscription/s/resetcursor"))[0] == 412


async def test_peek(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/pk", subs=("s",))
    for i in range(3):
        await topic.ml.add_entry(entry(f"body-{i}".encode(), publish_time=1_000, n=str(i)))
    response = await admin.client.get(f"{P}/pk/subscription/s/position/2")
    assert response.status == 200
    assert await response.read() == b"body-1"
    assert response.headers["X-Pulsar-PROPERTY-n"] == "1"
    ledger = topic.ml.last_confirmed.ledger_id
    assert response.headers["X-Pulsar-Message-ID"] == f"{ledger}:1"
    assert response.headers["Content-Type"] == "application/octet-stream"
    # Peeking acknowledges nothing; position counts from the first unacknowledged.
    assert topic.subscriptions["s"].cursor.backlog == 3
    topic.subscriptions["s"].cursor.ack([Position(ledger, 0)])
    response = await admin.client.get(f"{P}/pk/subscription/s/position/1")
    assert await response.read() == b"body-1"
    assert (await admin.call("GET", f"{P}/pk/subscription/s/position/3"))[0] == 404
    assert (await admin.call("GET", f"{P}/pk/subscription/s/position/0"))[0] == 412
    assert (await admin.call("GET", f"{P}/pk/subscription/none/position/1"))[0] == 404


async def test_examine_message_counts_from_either_end(admin: Admin) -> None:
    path = f"{P}/ex/examinemessage"
    assert (await admin.call("PUT", f"{P}/ex"))[0] == 204
    status, body = await admin.call("GET", path)
    assert status == 412 and "total message is zero" in body["reason"]
    topic = await admin.topic("persistent://public/default/ex")
    for i in range(3):
        await topic.ml.add_entry(entry(f"body-{i}".encode(), publish_time=1_000))
    for query, expected in [
        ("", b"body-2"),  # latest, 1
        ("?initialPosition=earliest", b"body-0"),
        ("?initialPosition=earliest&messagePosition=2", b"body-1"),
        ("?initialPosition=latest&messagePosition=3", b"body-0"),
        ("?initialPosition=Earliest&messagePosition=99", b"body-2"),  # clamped to the last
    ]:
        response = await admin.client.get(path + query)
        assert response.status == 200, query
        assert await response.read() == expected, query
    ledger = topic.ml.last_confirmed.ledger_id
    response = await admin.client.get(path)
    assert response.headers["X-Pulsar-Message-ID"] == f"{ledger}:2"
    for bad in ("?messagePosition=0", "?messagePosition=x", "?initialPosition=middle"):
        assert (await admin.call("GET", path + bad))[0] == 412, bad
    assert (await admin.call("GET", f"{P}/none/examinemessage"))[0] == 404


async def test_get_message_by_id(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/byid")
    for i in range(2):
        await topic.ml.add_entry(entry(f"body-{i}".encode(), publish_time=1_000, n=str(i)))
    ledger = topic.ml.last_confirmed.ledger_id
    response = await admin.client.get(f"{P}/byid/ledger/{ledger}/entry/1")
    assert response.status == 200 and await response.read() == b"body-1"
    assert response.headers["X-Pulsar-PROPERTY-n"] == "1"
    for missing in (f"{ledger}/entry/2", f"{ledger + 100}/entry/0", "-1/entry/0"):
        status, body = await admin.call("GET", f"{P}/byid/ledger/{missing}")
        assert (status, body["reason"]) == (404, "Message not found"), missing
    assert (await admin.call("GET", f"{P}/byid/ledger/x/entry/0"))[0] == 412


async def test_examine_and_get_by_id_refuse_a_partitioned_topic(admin: Admin) -> None:
    assert (await admin.call("PUT", f"{P}/parts/partitions", 2))[0] == 204
    assert (await admin.call("GET", f"{P}/parts/examinemessage"))[0] == 405
    assert (await admin.call("GET", f"{P}/parts/ledger/1/entry/0"))[0] == 405


async def test_nth_unacknowledged_skips_individually_acked_entries(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/nth", entries=5, subs=("s",))
    subscription = topic.subscriptions["s"]
    ledger = topic.ml.last_confirmed.ledger_id
    subscription.cursor.ack([Position(ledger, 1), Position(ledger, 2)])
    assert nth_unacknowledged(subscription, 1) == Position(ledger, 0)
    assert nth_unacknowledged(subscription, 2) == Position(ledger, 3)
    assert nth_unacknowledged(subscription, 3) == Position(ledger, 4)
    assert nth_unacknowledged(subscription, 4) is None


# --------------------------------------------------------------------------- termination


async def test_terminate(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/end", entries=3, subs=("s",))
    subscription = topic.subscriptions["s"]
    sink = RecordingSink()
    consumer = Consumer(ConsumerSlot(5, "c"), sink, subscription)
    subscription.add_consumer(consumer)
    subscription.flow(consumer, 3)  # all it gets: the end is told with no permits left
    await topic.add_producer(Producer(2, "p", topic, sink))
    last = topic.ml.last_confirmed
    expected = {"ledgerId": last.ledger_id, "entryId": last.entry_id, "partitionIndex": -1}
    assert await admin.call("POST", f"{P}/end/terminate") == (200, expected)
    assert await admin.call("POST", f"{P}/end/terminate") == (200, expected)  # again: same
    assert await admin.call("GET", f"{P}/end/lastMessageId") == (200, expected)
    assert sink.closed_producers == [2]
    with pytest.raises(ManagedLedgerTerminatedError):
        topic.publish(entry(b"late"))
    with pytest.raises(Exception, match="terminated"):
        await topic.add_producer(Producer(3, "q", topic, sink))
    # Sent everything, the consumer hears the topic ended only once it acknowledged it all
    # (as Pulsar: told sooner, a client may stop acknowledging what it holds).
    await until(lambda: len(consumer.slot.pending) == 3, "all three sent", timeout=5)
    await until(lambda: subscription.idle, "dispatch waits", timeout=5)
    assert sink.ended == []
    ack = pb.CommandAck(consumer_id=5, ack_type=pb.CommandAck.Individual)
    for position in sorted(consumer.slot.pending):
        ack.message_id.add(ledgerId=position.ledger_id, entryId=position.entry_id)
    subscription.ack(consumer, ack)
    await until(lambda: sink.ended == [5], "the consumer hears the topic ended", timeout=5)


async def test_termination_survives_a_new_owner(store: MetadataStore) -> None:
    bk = cast(BookKeeper, FakeBookKeeper())
    config = ManagedLedgerConfig()
    first = ManagedLedger("public/default/persistent/term", store, bk, config)
    await first.open(create=True)
    await first.add_entry(entry(b"a"))
    appending = first.add_entry_async(entry(b"b"))  # in flight: completes before the end
    last = await first.terminate()
    assert (await appending) == last
    assert first.terminated
    with pytest.raises(ManagedLedgerTerminatedError):
        first.add_entry_async(entry(b"c"))
    await first.close()
    second = ManagedLedger("public/default/persistent/term", store, bk, config)
    await second.open(create=False)
    assert second.terminated_position == last
    with pytest.raises(ManagedLedgerTerminatedError):
        second.add_entry_async(entry(b"c"))
    cursor = await second.open_cursor("late", InitialPosition.Earliest)  # reading goes on
    assert cursor.backlog == 2
    await second.close()


async def test_an_empty_terminated_topic_ends_at_once_for_a_new_owners_consumers(
    store: MetadataStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Reopened, an empty terminated topic keeps only its empty last ledger: a consumer that
    subscribes there hears the topic ended, and dispatch does not fail on the empty chain."""
    bk = cast(BookKeeper, FakeBookKeeper())
    config = ManagedLedgerConfig()
    first = ManagedLedger("public/default/persistent/void", store, bk, config)
    await first.open(create=True)
    await first.terminate()
    await first.close()
    second = ManagedLedger("public/default/persistent/void", store, bk, config)
    await second.open(create=False)
    assert len(second.chain) == 1  # its one ledger, empty, kept
    topic = PersistentTopic(TopicName.parse("void"), second)
    subscription = await topic.subscribe(
        "s", pb.CommandSubscribe.Exclusive, InitialPosition.Earliest
    )
    sink = RecordingSink()
    consumer = Consumer(ConsumerSlot(7, "c"), sink, subscription)
    subscription.add_consumer(consumer)
    subscription.flow(consumer, 100)
    await until(lambda: sink.ended == [7], "the consumer hears the topic ended", timeout=5)
    assert not [r for r in caplog.records if "dispatch failed" in r.getMessage()]
    await topic.close()


# --------------------------------------------------------------------------- owners


async def test_a_topic_owned_elsewhere_is_redirected(admin: Admin) -> None:
    await admin.remote_owns("persistent://public/default/far")
    assert (await admin.call("PUT", f"{P}/far"))[0] == 204  # creating needs no owner
    for method, suffix in [
        ("GET", "/stats"),
        ("DELETE", "?force=true"),
        ("POST", "/subscription/s/skip_all"),
        ("PUT", "/unload"),
    ]:
        path = f"{P}/far{suffix}"
        response = await admin.client.request(method, path, allow_redirects=False)
        assert response.status == 307, (method, path)
        assert response.headers["Location"] == f"{admin.remote.url}{path}"
    # Followed, the request reaches the owner as it was made.
    response = await admin.client.post(f"{P}/far/subscription/s/skip_all?x=1")
    assert response.status == 204
    assert admin.remote.calls[-1] == f"POST {P}/far/subscription/s/skip_all?x=1"


async def test_an_unowned_topic_goes_to_the_least_loaded_broker(admin: Admin) -> None:
    # A broker with no bundles at all is less loaded than this one, which owns some.
    await admin.topic("persistent://public/default/here")
    idle = BrokerInfo("idle:6650", "pulsar://idle:6650", admin.remote.url)
    await admin.store.create(f"{BROKERS_ROOT}/idle:6650", idle.encode(0), ephemeral=True)
    name = next(
        f"t{i}"
        for i in range(100)
        if bundle_of(TopicName.parse(f"public/default/t{i}")) not in admin.service.ownership.owned
    )
    await admin.call("PUT", f"{P}/{name}")
    response = await admin.client.get(f"{P}/{name}/stats", allow_redirects=False)
    assert response.status == 307
    assert response.headers["Location"] == f"{admin.remote.url}{P}/{name}/stats?authoritative=true"
    # Authoritative: this broker takes it, as the one asked to.
    assert (await admin.call("GET", f"{P}/{name}/stats?authoritative=true"))[0] == 200


async def test_expire_on_every_subscription_and_terminate_every_partition(admin: Admin) -> None:
    topic = await admin.topic("persistent://public/default/ex", entries=3, subs=("a", "b"))
    assert (await admin.call("POST", f"{P}/ex/all_subscription/expireMessages/1"))[0] == 204
    assert [s.cursor.backlog for s in topic.subscriptions.values()] == [0, 0]
    assert (await admin.call("PUT", f"{P}/tp/partitions", raw=b"2"))[0] == 204
    assert (await admin.call("POST", f"{P}/ex/terminate/partitions"))[0] == 404
    status, answer = await admin.call("POST", f"{P}/tp/terminate/partitions")
    assert status == 200 and set(answer) == {"0", "1"}
    assert answer["1"]["partitionIndex"] == 1
    partition = admin.service.topics["persistent://public/default/tp-partition-0"]
    assert partition.ml.terminated


async def test_names_that_need_encoding(admin: Admin) -> None:
    name = "odd name%2F&x"
    encoded = quote(name, safe="")
    assert (await admin.call("PUT", f"{P}/{encoded}"))[0] == 204
    assert await admin.call("GET", P) == (200, [f"persistent://public/default/{name}"])
    sub = quote("a sub/1", safe="")
    assert (await admin.call("PUT", f"{P}/{encoded}/subscription/{sub}"))[0] == 204
    assert await admin.call("GET", f"{P}/{encoded}/subscriptions") == (200, ["a sub/1"])
    await admin.service.unload(bundle_of(TopicName.parse(f"public/default/{name}")))
    await admin.remote_owns(f"persistent://public/default/{name}")
    response = await admin.client.get(f"{P}/{encoded}/stats?x=a%20b", allow_redirects=False)
    assert response.status == 307
    expected = f"{admin.remote.url}{P}/{encoded}/stats?x=a%20b"
    assert unquote(response.headers["Location"]) == unquote(expected)
