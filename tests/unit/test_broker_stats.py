"""Topic statistics: the rate meter on a hand-driven clock, and the TopicStats,
PersistentTopicInternalStats and PartitionedTopicStats documents of a topic on a real
managed ledger (in-memory metadata, the fake ledger client)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.stats import (
    LatencyBuckets,
    RateMeter,
    format_individually_deleted,
    format_timestamp,
    internal_stats,
    partitioned_stats,
    record_publish,
    topic_stats,
)
from stripemq.broker.topic import Consumer, PersistentTopic, Producer
from stripemq.managed_ledger.managed_ledger import ManagedLedgerFactory
from stripemq.managed_ledger.position import ENTRY_MASK, Position
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.polling import until
from stripemq.testing.sinks import NullSink

TOPIC = "persistent://public/default/stats"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------- RateMeter


def test_a_meter_counts_totals_and_rates_over_its_window() -> None:
    clock = Clock()
    meter = RateMeter(window_s=10, clock=clock, buckets=10)
    clock.now += 10  # a meter older than its window divides by the window
    for _ in range(5):
        meter.record(2, 200)
        clock.now += 1
    assert (meter.count, meter.bytes) == (10, 1000)
    assert meter.rate() == pytest.approx(1.0)  # 10 messages over 10 s
    assert meter.throughput() == pytest.approx(100.0)
    assert meter.average_size() == pytest.approx(100.0)


def test_what_leaves_the_window_stops_counting_but_totals_stay() -> None:
    clock = Clock()
    meter = RateMeter(window_s=10, clock=clock, buckets=10)
    clock.now += 20
    meter.record(50, 5000)
    clock.now += 5
    assert meter.rate() == pytest.approx(5.0)
    clock.now += 6  # the bucket of the 50 is out of the window now
    assert meter.rate() == 0.0
    assert meter.throughput() == 0.0
    assert meter.average_size() == 0.0
    assert (meter.count, meter.bytes) == (50, 5000)


def test_a_young_meter_divides_by_its_age_not_by_the_whole_window() -> None:
    clock = Clock()
    meter = RateMeter(window_s=60, clock=clock)
    meter.record(100)
    clock.now += 2
    assert meter.rate() == pytest.approx(50.0)
    # Never by less than one bucket: a burst right at the start is not an absurd rate.
    fresh = RateMeter(window_s=60, clock=clock)
    fresh.record(10)
    assert fresh.rate() == pytest.approx(10.0)


def test_a_meter_refuses_a_window_that_is_not_positive() -> None:
    with pytest.raises(ValueError):
        RateMeter(window_s=0)


def test_latency_buckets_count_each_range_once() -> None:
    buckets = LatencyBuckets()
    for value in (0.2, 0.5, 0.7, 3, 1000, 1500):
        buckets.record(value)
    assert buckets.buckets == [2, 1, 1, 0, 0, 0, 0, 0, 1, 1]
    assert buckets.count == 6
    assert buckets.sum_ms == pytest.approx(2504.4)


# ---------------------------------------------------------------------- formats


def test_individually_deleted_ranges_are_written_open_closed_as_pulsar_does() -> None:
    holes = [
        (Position(3, 5), Position(3, 8)),
        (Position(3, 0), Position(3, 1)),
        (Position(4, 7), Position(5, 0)),  # ran to the end of ledger 4
    ]
    text = format_individually_deleted(holes)
    assert text == f"[(3:4..3:7],(3:-1..3:0],(4:6..4:{ENTRY_MASK}]]"
    assert format_individually_deleted([]) == "[]"


def test_timestamps_are_iso_8601_with_milliseconds() -> None:
    text = format_timestamp(1_700_000_000_123)
    assert text.startswith("2023-11-1")
    assert ".123" in text
    assert text.endswith("Z") or text[-6] in "+-"


# ---------------------------------------------------------------------- a real topic


@dataclass
class Recorder(NullSink):
    """A consumer's connection that keeps what it is sent."""

    received: list[pb.MessageIdData]

    def send_message(
        self,
        consumer_id: int,
        message_id: pb.MessageIdData,
        redelivery_count: int,
        entry: bytes,
        ack_set: list[int] | None = None,
    ) -> None:
        self.received.append(message_id)


@pytest.fixture
async def topic(store: MetadataStore) -> AsyncIterator[PersistentTopic]:
    factory = ManagedLedgerFactory(store, cast(BookKeeper, FakeBookKeeper()))
    name = TopicName.parse(TOPIC)
    ml = await factory.open(name.managed_ledger_name)
    topic = PersistentTopic(name, ml)
    yield topic
    await topic.close()


def entry(messages: int = 1, payload: bytes = b"x" * 100) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if messages > 1:
        metadata.num_messages_in_batch = messages
    return encode_entry(metadata, payload)


async def publish(producer: Producer, data: bytes, messages: int = 1) -> Position:
    position = await producer.topic.publish(data)
    record_publish(producer, messages, len(data), 1.0)
    return position


async def test_topic_stats_count_messages_and_bytes_in_and_out(topic: PersistentTopic) -> None:
    producer = Producer(1, "prod", topic, NullSink())
    producer.stats.describe_client(("10.0.0.1", 4242), "Pulsar-CPP-v3.5", [])
    await topic.add_producer(producer)
    sub = await topic.subscribe("sub", pb.CommandSubscribe.Shared, InitialPosition.Earliest)
    single, batch = entry(), entry(messages=10)
    for _ in range(3):
        await publish(producer, single)
    await publish(producer, batch, messages=10)

    received: list[pb.MessageIdData] = []
    consumer = Consumer(ConsumerSlot(5, "cons"), Recorder(received), sub)
    sub.add_consumer(consumer)
    sub.flow(consumer, 100)
    await until(lambda: len(received) == 4)

    stats = topic_stats(topic)
    json.dumps(stats)  # a JSON document, as the admin API sends it
    assert stats["msgInCounter"] == 13
    assert stats["bytesInCounter"] == 3 * len(single) + len(batch)
    assert stats["msgOutCounter"] == 13
    assert stats["bytesOutCounter"] == 3 * len(single) + len(batch)
    assert stats["msgRateIn"] > 0 and stats["msgThroughputIn"] > 0
    assert stats["msgRateOut"] > 0 and stats["msgThroughputOut"] > 0
    assert stats["averageMsgSize"] == pytest.approx(stats["bytesInCounter"] / 13)
    assert stats["storageSize"] == 3 * len(single) + len(batch)
    assert stats["backlogSize"] == stats["storageSize"]  # nothing acknowledged yet
    assert stats["deduplicationStatus"] == "Disabled"

    [publisher] = stats["publishers"]
    assert publisher["producerName"] == "prod"
    assert publisher["producerId"] == 1
    assert publisher["accessMode"] == "Shared"
    assert publisher["address"] == "/10.0.0.1:4242"
    assert publisher["clientVersion"] == "Pulsar-CPP-v3.5"
    assert publisher["msgRateIn"] == pytest.approx(stats["msgRateIn"])
    assert isinstance(publisher["connectedSince"], str)

    subscription = stats["subscriptions"]["sub"]
    assert subscription["type"] == "Shared"
    assert subscription["msgBacklog"] == 4  # entries, as Pulsar counts the backlog
    assert subscription["unackedMessages"] == 13
    assert subscription["msgOutCounter"] == 13
    assert subscription["isDurable"] is True
    assert subscription["msgRateExpired"] == 0.0
    [consumer_stats] = subscription["consumers"]
    assert consumer_stats["consumerName"] == "cons"
    assert consumer_stats["availablePermits"] == 100 - 13
    assert consumer_stats["unackedMessages"] == 13
    assert consumer_stats["msgOutCounter"] == 13

    # Acknowledge the three single entries and 4 messages of the batch.
    ids = [pb.MessageIdData(ledgerId=m.ledgerId, entryId=m.entryId) for m in received]
    sub.ack(
        consumer,
        pb.CommandAck(consumer_id=5, ack_type=pb.CommandAck.Individual, message_id=ids[:3]),
    )
    batch_id = pb.MessageIdData(ledgerId=ids[3].ledgerId, entryId=ids[3].entryId, batch_size=10)
    batch_id.ack_set.extend([0b1111110000])  # set bits: still unacknowledged
    sub.ack(
        consumer,
        pb.CommandAck(consumer_id=5, ack_type=pb.CommandAck.Individual, message_id=[batch_id]),
    )
    stats = topic_stats(topic)
    subscription = stats["subscriptions"]["sub"]
    assert subscription["msgBacklog"] == 1
    assert subscription["unackedMessages"] == 6
    assert subscription["consumers"][0]["unackedMessages"] == 6
    assert subscription["messageAckRate"] > 0
    # Estimated as Pulsar does: the ledger's bytes pro rata by entries left.
    assert stats["backlogSize"] == stats["storageSize"] * 1 // 4


async def test_redeliveries_and_expiries_have_their_rates(topic: PersistentTopic) -> None:
    producer = Producer(1, "prod", topic, NullSink())
    await topic.add_producer(producer)
    sub = await topic.subscribe("sub", pb.CommandSubscribe.Shared, InitialPosition.Earliest)
    for _ in range(2):
        await publish(producer, entry())
    received: list[pb.MessageIdData] = []
    consumer = Consumer(ConsumerSlot(5, "cons"), Recorder(received), sub)
    sub.add_consumer(consumer)
    sub.flow(consumer, 10)
    await until(lambda: len(received) == 2)
    sub.redeliver(consumer, [])
    sub.stats.record_expired(3)
    stats = topic_stats(topic)["subscriptions"]["sub"]
    assert stats["msgRateRedeliver"] > 0
    assert stats["consumers"][0]["msgRateRedeliver"] > 0
    assert stats["msgRateExpired"] > 0
    assert stats["totalMsgExpired"] == 3
    assert stats["lastExpireTimestamp"] > 0


async def test_a_subscription_that_changes_type_keeps_its_counts(topic: PersistentTopic) -> None:
    producer = Producer(1, "prod", topic, NullSink())
    await topic.add_producer(producer)
    sub = await topic.subscribe("sub", pb.CommandSubscribe.Shared, InitialPosition.Earliest)
    await publish(producer, entry())
    received: list[pb.MessageIdData] = []
    consumer = Consumer(ConsumerSlot(5, "cons"), Recorder(received), sub)
    sub.add_consumer(consumer)
    sub.flow(consumer, 10)
    await until(lambda: len(received) == 1)
    sub.remove_consumer(consumer)
    again = await topic.subscribe("sub", pb.CommandSubscribe.Failover, InitialPosition.Earliest)
    stats = topic_stats(topic)["subscriptions"]["sub"]
    assert again.sub_type == pb.CommandSubscribe.Failover and stats["type"] == "Failover"
    assert stats["msgOutCounter"] == 1


async def test_a_subscription_nobody_joined_since_the_load_is_listed_with_no_type(
    store: MetadataStore,
) -> None:
    factory = ManagedLedgerFactory(store, cast(BookKeeper, FakeBookKeeper()))
    name = TopicName.parse(TOPIC)
    topic = PersistentTopic(name, await factory.open(name.managed_ledger_name))
    await topic.subscribe("s1", pb.CommandSubscribe.Shared, InitialPosition.Earliest)
    await topic.subscribe("idle", pb.CommandSubscribe.Exclusive, InitialPosition.Earliest)
    producer = Producer(1, "prod", topic, NullSink())
    await topic.add_producer(producer)
    await publish(producer, entry())
    await topic.close()
    topic = PersistentTopic(name, await factory.open(name.managed_ledger_name))  # reloaded
    subscriptions = topic_stats(topic)["subscriptions"]
    assert set(subscriptions) == {"s1", "idle"}
    assert subscriptions["idle"]["msgBacklog"] == 1
    assert subscriptions["idle"]["type"] == "None"  # as Pulsar: no consumer chose one
    assert subscriptions["idle"]["consumers"] == []
    # A consumer gives it a type.
    sub = await topic.subscribe("idle", pb.CommandSubscribe.Failover, InitialPosition.Earliest)
    sub.add_consumer(Consumer(ConsumerSlot(1, "c"), NullSink(), sub))
    assert topic_stats(topic)["subscriptions"]["idle"]["type"] == "Failover"
    await topic.close()
    await factory.close()


def test_partitioned_stats_take_the_type_a_partition_has() -> None:
    idle = {"type": "None", "msgBacklog": 1, "consumers": []}
    shared = {"type": "Shared", "msgBacklog": 2, "consumers": []}
    for order in ([idle, shared], [shared, idle]):
        parts = {f"p{i}": {"subscriptions": {"s": sub}} for i, sub in enumerate(order)}
        merged = partitioned_stats(parts, partitions=2, per_partition=False)
        assert merged["subscriptions"]["s"]["type"] == "Shared"
        assert merged["subscriptions"]["s"]["msgBacklog"] == 3


async def test_the_backlog_size_leaves_the_deduplication_cursor_out(
    topic: PersistentTopic,
) -> None:
    producer = Producer(1, "prod", topic, NullSink())
    await topic.add_producer(producer)
    for _ in range(3):
        await publish(producer, entry())
    await topic.subscribe("caught-up", pb.CommandSubscribe.Shared, InitialPosition.Latest)
    await topic.apply_policies(EffectivePolicies(deduplication=True))
    await topic.wait_for_deduplication()  # its cursor starts at the earliest entry
    assert "pulsar.dedup" in topic.ml.cursors
    stats = topic_stats(topic)
    assert stats["deduplicationStatus"] == "Enabled"
    assert stats["backlogSize"] == topic.estimated_backlog_size() == 0
    assert "pulsar.dedup" not in stats["subscriptions"]


async def test_internal_stats_describe_ledgers_and_cursors(topic: PersistentTopic) -> None:
    producer = Producer(1, "prod", topic, NullSink())
    await topic.add_producer(producer)
    sub = await topic.subscribe("sub", pb.CommandSubscribe.Shared, InitialPosition.Earliest)
    positions = [await publish(producer, entry()) for _ in range(5)]
    sub.cursor.ack([positions[1], positions[2]])

    stats = internal_stats(topic)
    json.dumps(stats)
    size = len(entry())
    assert stats["entriesAddedCounter"] == 5
    assert stats["numberOfEntries"] == 5
    assert stats["totalSize"] == 5 * size
    assert stats["currentLedgerEntries"] == 5
    assert stats["currentLedgerSize"] == 5 * size
    assert stats["lastConfirmedEntry"] == str(positions[-1])
    assert stats["state"] == "LedgerOpened"
    assert stats["pendingAddEntriesCount"] == 0
    assert isinstance(stats["lastLedgerCreatedTimestamp"], str)
    [ledger] = stats["ledgers"]
    assert ledger == {
        "ledgerId": positions[0].ledger_id,
        "entries": 5,
        "size": 5 * size,
        "offloaded": False,
        "underReplicated": False,
    }
    cursor = stats["cursors"]["sub"]
    ledger_id = positions[0].ledger_id
    assert cursor["markDeletePosition"] == f"{ledger_id}:-1"
    assert cursor["individuallyDeletedMessages"] == f"[({ledger_id}:0..{ledger_id}:2]]"
    assert cursor["totalNonContiguousDeletedMessagesRange"] == 1
    assert cursor["messagesConsumedCounter"] == 5 - 3  # entries added less the backlog
    assert cursor["state"] in ("Open", "NoLedger")
    assert cursor["properties"] == {}

    sub.cursor.ack([positions[0]])  # the mark-delete position moves over the hole
    cursor = internal_stats(topic)["cursors"]["sub"]
    assert cursor["markDeletePosition"] == str(positions[2])
    assert cursor["individuallyDeletedMessages"] == "[]"


# ---------------------------------------------------------------------- partitioned


def partition(rate: float, count: int, producer: str, consumer: str) -> dict[str, object]:
    return {
        "msgRateIn": rate,
        "msgThroughputIn": rate * 10,
        "msgRateOut": rate,
        "msgThroughputOut": rate * 10,
        "bytesInCounter": count * 10,
        "msgInCounter": count,
        "bytesOutCounter": count * 10,
        "msgOutCounter": count,
        "averageMsgSize": 10.0,
        "storageSize": count * 10,
        "backlogSize": 5,
        "publishers": [
            {"producerName": producer, "producerId": 1, "msgRateIn": rate, "averageMsgSize": 10.0}
        ],
        "subscriptions": {
            "sub": {
                "msgBacklog": 2,
                "msgRateOut": rate,
                "unackedMessages": 1,
                "type": "Shared",
                "isDurable": True,
                "consumers": [{"consumerName": consumer, "unackedMessages": 1, "msgRateOut": rate}],
            }
        },
        "deduplicationStatus": "Disabled",
    }


def test_partitioned_stats_add_the_partitions_up() -> None:
    per_partition = {
        f"{TOPIC}-partition-0": partition(1.0, 10, "p", "c"),
        f"{TOPIC}-partition-1": partition(3.0, 30, "p", "c"),
    }
    stats = partitioned_stats(per_partition, partitions=2, per_partition=True)
    json.dumps(stats)
    assert stats["metadata"] == {"partitions": 2}
    assert stats["msgRateIn"] == pytest.approx(4.0)
    assert stats["msgInCounter"] == 40
    assert stats["storageSize"] == 400
    assert stats["backlogSize"] == 10
    assert stats["averageMsgSize"] == pytest.approx(10.0)
    # One partitioned producer and one partitioned consumer: one entry each.
    [publisher] = stats["publishers"]
    assert publisher["producerName"] == "p"
    assert publisher["msgRateIn"] == pytest.approx(4.0)
    subscription = stats["subscriptions"]["sub"]
    assert subscription["msgBacklog"] == 4
    assert subscription["unackedMessages"] == 2
    [consumer] = subscription["consumers"]
    assert consumer["consumerName"] == "c"
    assert consumer["unackedMessages"] == 2
    assert set(stats["partitions"]) == set(per_partition)
    assert stats["partitions"][f"{TOPIC}-partition-0"]["msgInCounter"] == 10
    assert stats["deduplicationStatus"] == "Disabled"


def test_partitioned_stats_without_per_partition_leave_the_partitions_out() -> None:
    per_partition = {
        f"{TOPIC}-partition-0": partition(1.0, 10, "p0", "c0"),
        f"{TOPIC}-partition-1": partition(1.0, 10, "p1", "c1"),
    }
    stats = partitioned_stats(per_partition, partitions=2, per_partition=False)
    assert stats["partitions"] == {}
    assert sorted(p["producerName"] for p in stats["publishers"]) == ["p0", "p1"]
    assert len(stats["subscriptions"]["sub"]["consumers"]) == 2
    # The inputs are not changed by the merge.
    assert per_partition[f"{TOPIC}-partition-0"]["publishers"][0]["msgRateIn"] == 1.0  # type: ignore[index]


def test_partitioned_stats_of_no_partitions_are_zero() -> None:
    stats = partitioned_stats({}, partitions=0, per_partition=True)
    assert stats["msgRateIn"] == 0
    assert stats["subscriptions"] == {}
    assert stats["metadata"] == {"partitions": 0}
