"""The broker against the official pulsar-client: real ZooKeeper, bookies and ledgers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from stripemq.bookie.client import BookKeeper, ClientConfig
from stripemq.broker.server import BrokerServer
from stripemq.broker.service import TopicPolicies
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.metadata import MetadataStore
from stripemq.testing.broker import broker_on_bookies
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.polling import next_millisecond
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration

Target = BrokerServer | StandaloneProcess


@pytest.fixture
async def broker(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[BrokerServer]:
    config = ManagedLedgerConfig(max_entries_per_ledger=50, min_rollover_time_s=0)
    async with broker_on_bookies(metadata_url, store, tmp_path, ml_config=config) as server:
        yield server


@pytest.fixture(params=["broker", "standalone"])
async def target(
    request: pytest.FixtureRequest, metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[Target]:
    """The same scenarios against a broker on a bookie cluster and against a standalone."""
    if request.param == "standalone":
        standalone = StandaloneProcess(tmp_path / "standalone")
        await standalone.start()
        try:
            yield standalone
        finally:
            standalone.kill()
        return
    async with broker_on_bookies(metadata_url, store, tmp_path) as server:
        yield server


async def in_thread(work, *args):  # type: ignore[no-untyped-def]
    return await asyncio.get_running_loop().run_in_executor(None, work, *args)


def produce(url: str, topic: str, count: int, batching: bool) -> list[str]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(
            topic, batching_enabled=batching, batching_max_publish_delay_ms=5
        )
        ids = []
        for i in range(count):
            producer.send_async(f"message {i}".encode(), lambda r, m: ids.append(str(m)))
        producer.flush()
        producer.close()
        return ids
    finally:
        client.close()


def consume(url: str, topic: str, sub: str, count: int, ack: bool = True) -> list[str]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(
            topic,
            sub,
            initial_position=pulsar.InitialPosition.Earliest,
            consumer_type=pulsar.ConsumerType.Exclusive,
        )
        got = []
        for _ in range(count):
            message = consumer.receive(timeout_millis=10_000)
            got.append(message.data().decode())
            if ack:
                consumer.acknowledge(message)
        consumer.close()
        return got
    finally:
        client.close()


def nothing_left(url: str, topic: str, sub: str) -> bool:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Exclusive)
        try:
            consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            return True
        return False
    finally:
        client.close()


@pytest.mark.parametrize("batching", [False, True])
async def test_produce_and_consume_with_the_official_client(target: Target, batching: bool) -> None:
    url = target.service_url
    topic = f"persistent://public/default/interop-{batching}"
    # The subscription exists before the messages: without one (and without retention)
    # a topic keeps nothing it has rolled past, as in Pulsar.
    assert await in_thread(nothing_left, url, topic, "sub")
    ids = await in_thread(produce, url, topic, 200, batching)
    assert len(ids) == 200
    got = await in_thread(consume, url, topic, "sub", 200)
    assert got == [f"message {i}" for i in range(200)]
    assert await in_thread(nothing_left, url, topic, "sub")  # acks were persisted


def shared_round(url: str, topic: str) -> tuple[list[str], list[str], list[str]]:
    """Two Shared consumers split the messages; one leaves without acking its share."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        first = client.subscribe(
            topic, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
        )
        second = client.subscribe(
            topic, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
        )
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):
            producer.send(f"m{i}".encode())
        got_first = []
        for _ in range(5):
            got_first.append(first.receive(timeout_millis=10_000).data().decode())
        first.close()  # without acknowledging: its messages go to the other consumer
        got_second = []
        while True:
            try:
                message = second.receive(timeout_millis=2000)
            except pulsar.Timeout:
                break
            got_second.append(message.data().decode())
            second.acknowledge(message)
        return got_first, got_second, []
    finally:
        client.close()


async def test_shared_consumers_split_messages_and_inherit_unacked_ones(
    target: Target,
) -> None:
    first, second, _ = await in_thread(shared_round, target.service_url, "shared-topic")
    assert len(first) == 5
    assert sorted(second, key=lambda m: int(m[1:])) == [f"m{i}" for i in range(40)]


async def test_garbage_closes_that_connection_only(
    target: Target,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", target.port)
    writer.write(b"\x00\x00\x00\x08\x00\x00\x00\x04GET ")
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the broker
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", target.port)
    writer.write(b"\x7f\xff\xff\xff")  # a 2 GB frame
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    url = target.service_url
    assert await in_thread(nothing_left, url, "after-garbage", "sub")  # still serving


def failover_round(url: str, topic: str) -> tuple[list[str], list[str]]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        kwargs = dict(consumer_type=pulsar.ConsumerType.Failover, receiver_queue_size=5)
        second = client.subscribe(topic, "fo", consumer_name="b-standby", **kwargs)
        first = client.subscribe(topic, "fo", consumer_name="a-active", **kwargs)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"m{i}".encode())
        got_first = []
        for _ in range(10):
            message = first.receive(timeout_millis=10_000)
            got_first.append(message.data().decode())
            first.acknowledge(message)
        with pytest.raises(pulsar.Timeout):
            second.receive(timeout_millis=500)  # standing by
        first.close()
        got_second = []
        for _ in range(20):
            message = second.receive(timeout_millis=10_000)
            got_second.append(message.data().decode())
            second.acknowledge(message)
        return got_first, got_second
    finally:
        client.close()


async def test_failover_has_one_active_consumer_and_hands_over(
    target: Target,
) -> None:
    first, second = await in_thread(failover_round, target.service_url, "failover-topic")
    assert first == [f"m{i}" for i in range(10)]
    assert second == [f"m{i}" for i in range(10, 30)]


def key_shared_round(url: str, topic: str) -> dict[str, list[tuple[str, int]]]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumers = [
            client.subscribe(
                topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=f"c{i}"
            )
            for i in range(3)
        ]
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(300):
            producer.send(f"{i}".encode(), partition_key=f"key-{i % 10}")
        seen: dict[str, list[tuple[str, int]]] = {}
        for index, consumer in enumerate(consumers):
            while True:
                try:
                    message = consumer.receive(timeout_millis=1500)
                except pulsar.Timeout:
                    break
                seen.setdefault(message.partition_key(), []).append(
                    (f"c{index}", int(message.data()))
                )
                consumer.acknowledge(message)
        return seen
    finally:
        client.close()


async def test_key_shared_keeps_each_key_on_one_consumer_in_order(
    target: Target,
) -> None:
    seen = await in_thread(key_shared_round, target.service_url, "key-shared-topic")
    assert sorted(seen) == [f"key-{k}" for k in range(10)]
    for key, deliveries in seen.items():
        assert len({consumer for consumer, _ in deliveries}) == 1, key
        values = [value for _, value in deliveries]
        assert values == sorted(values) and len(values) == 30
    assert len({c for d in seen.values() for c, _ in d}) >= 2  # keys spread over consumers


def partitioned_round(url: str, topic: str) -> tuple[set[int], dict[str, list[int]]]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(90):
            producer.send(f"{i}".encode(), partition_key=f"k{i % 9}")
        partitions: set[int] = set()
        by_key: dict[str, list[int]] = {}
        for _ in range(90):
            message = consumer.receive(timeout_millis=10_000)
            partitions.add(message.message_id().partition())
            by_key.setdefault(message.partition_key(), []).append(int(message.data()))
            consumer.acknowledge(message)
        return partitions, by_key
    finally:
        client.close()


async def test_partitioned_topics(broker: BrokerServer) -> None:
    from stripemq.broker.partitions import create_partitioned_topic
    from stripemq.proto.topic_name import TopicName

    topic = "persistent://public/default/partitioned"
    assert broker.service is not None
    await create_partitioned_topic(broker.service.store, TopicName.parse(topic), 3)
    partitions, by_key = await in_thread(partitioned_round, broker.service_url, topic)
    assert partitions == {0, 1, 2}
    assert sorted(v for values in by_key.values() for v in values) == list(range(90))
    for values in by_key.values():  # one key, one partition: in order
        assert values == sorted(values)


def reader_and_seek_round(url: str, topic: str) -> dict[str, list[str]]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    results: dict[str, list[str]] = {}
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = []
        for i in range(20):
            ids.append(producer.send(f"m{i}".encode()))
            next_millisecond()  # distinct publish times, for the seek by time below

        def read_all(reader) -> list[str]:  # type: ignore[no-untyped-def]
            got = []
            while reader.has_message_available():
                got.append(reader.read_next(timeout_millis=5000).data().decode())
            return got

        earliest = client.create_reader(topic, pulsar.MessageId.earliest)
        results["earliest"] = read_all(earliest)
        earliest.close()
        after_ten = client.create_reader(topic, ids[9])  # exclusive: starts after m9
        results["after_ten"] = read_all(after_ten)
        after_ten.close()
        latest = client.create_reader(topic, pulsar.MessageId.latest)
        producer.send(b"late")
        results["latest"] = [latest.read_next(timeout_millis=5000).data().decode()]
        latest.close()

        consumer = client.subscribe(
            topic, "seeker", initial_position=pulsar.InitialPosition.Earliest
        )
        published = []
        for _ in range(21):
            message = consumer.receive(timeout_millis=5000)
            published.append(message.publish_timestamp())
            consumer.acknowledge(message)
        # The broker restarts at m15; the C++ client, like Pulsar's, then skips the message
        # it sought to (start ids are exclusive unless asked otherwise).
        consumer.seek(ids[15])
        results["after_seek"] = [
            consumer.receive(timeout_millis=5000).data().decode() for _ in range(3)
        ]
        consumer.close()
        # By publish time, from m12 itself (on a consumer that has not sought by id: the C++
        # client would keep filtering up to the id it sought to before).
        timed = client.subscribe(topic, "timed", initial_position=pulsar.InitialPosition.Earliest)
        for _ in range(21):
            timed.acknowledge(timed.receive(timeout_millis=5000))
        timed.seek(published[12])
        results["after_time_seek"] = [
            timed.receive(timeout_millis=5000).data().decode() for _ in range(2)
        ]
        return results
    finally:
        client.close()


async def test_readers_and_seek(target: Target) -> None:
    results = await in_thread(reader_and_seek_round, target.service_url, "reader-topic")
    assert results["earliest"] == [f"m{i}" for i in range(20)]
    assert results["after_ten"] == [f"m{i}" for i in range(10, 20)]
    assert results["latest"] == ["late"]
    assert results["after_seek"] == ["m16", "m17", "m18"]
    assert results["after_time_seek"] == ["m12", "m13"]


@pytest.fixture
async def dedup_cluster(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[tuple[MetadataStore, BookKeeper]]:
    async with BookieCluster(metadata_url, tmp_path / "bookies", 2):
        bk = BookKeeper(store, ClientConfig(explicit_lac_interval_ms=100))
        await bk.start()
        try:
            yield store, bk
        finally:
            await bk.close()


def send_with_sequence_ids(url: str, topic: str, ids: list[int]) -> int:
    """Send one message per sequence id as producer "dedup-p"; returns the broker's last
    sequence id for that producer as seen when it connected."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        client.subscribe(topic, "sub").close()
        producer = client.create_producer(topic, producer_name="dedup-p", batching_enabled=False)
        last = producer.last_sequence_id()
        for sequence_id in ids:
            producer.send(f"s{sequence_id}".encode(), sequence_id=sequence_id)
        return last
    finally:
        client.close()


def drain(url: str, topic: str) -> list[str]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub")
        got = []
        while True:
            try:
                message = consumer.receive(timeout_millis=2000)
            except pulsar.Timeout:
                return got
            got.append(message.data().decode())
            consumer.acknowledge(message)
    finally:
        client.close()


async def test_deduplication_survives_a_broker_restart(
    dedup_cluster: tuple[MetadataStore, BookKeeper],
) -> None:
    store, bk = dedup_cluster
    topic = "persistent://public/default/dedup"

    async def broker() -> BrokerServer:
        server = BrokerServer(store, bk, port=0, policies=TopicPolicies(deduplication=True))
        await server.start()
        return server

    server = await broker()
    try:
        assert (
            await in_thread(send_with_sequence_ids, server.service_url, topic, list(range(50)))
            == -1
        )
        # A resend of 40..59: 40..49 are acknowledged without being stored twice.
        last = await in_thread(
            send_with_sequence_ids, server.service_url, topic, list(range(40, 60))
        )
        assert last == 49
    finally:
        await server.stop()  # closes the topic; a new broker object reopens it
    server = await broker()
    try:
        last = await in_thread(send_with_sequence_ids, server.service_url, topic, [55, 60])
        assert last == 59  # remembered across the restart; 55 is a duplicate
        got = await in_thread(drain, server.service_url, topic)
        assert got == [f"s{i}" for i in range(61)]
    finally:
        await server.stop()


def access_modes_round(url: str) -> dict[str, str]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    outcome: dict[str, str] = {}
    try:
        first = client.create_producer(
            "exclusive-topic", access_mode=pulsar.ProducerAccessMode.Exclusive
        )
        first.send(b"one")
        try:
            client.create_producer("exclusive-topic")
            outcome["shared_beside_exclusive"] = "created"
        except pulsar.PulsarException as exc:
            outcome["shared_beside_exclusive"] = type(exc).__name__
        fencer = client.create_producer(
            "exclusive-topic", access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing
        )
        fencer.send(b"two")
        outcome["fencer"] = "sent"
    finally:
        client.close()
    return outcome


async def test_producer_access_modes(target: Target) -> None:
    outcome = await in_thread(access_modes_round, target.service_url)
    assert outcome["shared_beside_exclusive"] == "ProducerBusy"
    assert outcome["fencer"] == "sent"


async def test_a_silent_client_is_pinged_then_dropped(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    from stripemq.proto import pulsar_api_pb2 as pb
    from stripemq.proto.frames import FrameDecoder, encode_command

    bk = BookKeeper(store)
    await bk.start()
    server = BrokerServer(store, bk, port=0, keepalive_s=0.3)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_command(pb.CommandConnect(client_version="t", protocol_version=20)))
        received = []
        decoder = FrameDecoder()
        while data := await asyncio.wait_for(reader.read(4096), 5):
            received += [pb.BaseCommand.Type.Name(f.command.type) for f in decoder.feed(data)]
        assert received[:2] == ["CONNECTED", "PING"]  # then closed: no PONG came back
        writer.close()
    finally:
        await server.stop()
        await bk.close()


def compression_round(url: str, topic: str, compression: object) -> list[str]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(
            topic,
            compression_type=compression,
            batching_enabled=True,
            batching_max_publish_delay_ms=5,
        )
        for i in range(50):
            producer.send_async(f"compressed {i} ".encode() * 20, lambda r, m: None)
        producer.flush()
        got = []
        for _ in range(50):
            message = consumer.receive(timeout_millis=10_000)
            got.append(message.data().decode())
            consumer.acknowledge(message)
        return got
    finally:
        client.close()


@pytest.mark.parametrize("codec", ["LZ4", "ZSTD", "ZLib", "SNAPPY"])
async def test_compressed_batches_pass_through_unchanged(target: Target, codec: str) -> None:
    got = await in_thread(
        compression_round,
        target.service_url,
        f"compressed-{codec}",
        getattr(pulsar.CompressionType, codec),
    )
    assert got == [f"compressed {i} " * 20 for i in range(50)]


def redelivery_round(url: str, topic: str) -> dict[str, object]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        nacking = client.subscribe(
            topic,
            "nack",
            consumer_type=pulsar.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
        )
        timing_out = client.subscribe(
            topic,
            "timeout",
            consumer_type=pulsar.ConsumerType.Shared,
            unacked_messages_timeout_ms=10_000,
        )
        cumulative = client.subscribe(topic, "cumulative")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode())
        outcome: dict[str, object] = {}
        first = nacking.receive(timeout_millis=5000)
        nacking.negative_acknowledge(first)
        seen = [first.data().decode()]
        counts = {}
        for _ in range(5):
            message = nacking.receive(timeout_millis=5000)
            seen.append(message.data().decode())
            counts[message.data().decode()] = message.redelivery_count()
            nacking.acknowledge(message)
        outcome["nack_seen"] = seen
        outcome["nack_redelivery_count"] = counts[first.data().decode()]
        held = [timing_out.receive(timeout_millis=5000) for _ in range(5)]  # never acked
        again = timing_out.receive(timeout_millis=20_000)  # after the ack timeout
        outcome["timeout_again"] = again.data().decode() in {m.data().decode() for m in held}
        last = None
        for _ in range(5):
            last = cumulative.receive(timeout_millis=5000)
        cumulative.acknowledge_cumulative(last)
        cumulative.close()
        cumulative = client.subscribe(topic, "cumulative")
        try:
            cumulative.receive(timeout_millis=1000)
            outcome["cumulative_left"] = True
        except pulsar.Timeout:
            outcome["cumulative_left"] = False
        return outcome
    finally:
        client.close()


async def test_negative_acks_ack_timeouts_and_cumulative_acks(
    target: Target,
) -> None:
    outcome = await in_thread(redelivery_round, target.service_url, "redelivery-topic")
    assert sorted(outcome["nack_seen"]) == sorted(  # type: ignore[arg-type]
        ["m0", "m0", "m1", "m2", "m3", "m4"]
    )
    assert outcome["nack_redelivery_count"] == 1
    assert outcome["timeout_again"] is True
    assert outcome["cumulative_left"] is False


def try_produce(url: str, topic: str) -> str:
    client = pulsar.Client(url, operation_timeout_seconds=5)
    try:
        client.create_producer(topic).send(b"x")
        return "ok"
    except pulsar.PulsarException as exc:
        return type(exc).__name__
    finally:
        client.close()


def partitions_of(url: str, topic: str) -> int:
    client = pulsar.Client(url, operation_timeout_seconds=5)
    try:
        return len(client.get_topic_partitions(topic))
    finally:
        client.close()


async def test_topic_auto_creation_policies(
    dedup_cluster: tuple[MetadataStore, BookKeeper],
) -> None:
    store, bk = dedup_cluster
    strict = BrokerServer(store, bk, port=0, policies=TopicPolicies(auto_create=False))
    await strict.start()
    try:
        url = strict.service_url
        assert await in_thread(try_produce, url, "never-made") == "TopicNotFound"
        assert await in_thread(try_produce, url, "persistent://nobody/none/t") == "TopicNotFound"
    finally:
        await strict.stop()
    partitioned = BrokerServer(
        store,
        bk,
        port=0,
        policies=TopicPolicies(auto_create_partitioned=True, default_partitions=3),
    )
    await partitioned.start()
    try:
        url = partitioned.service_url
        assert await in_thread(partitions_of, url, "auto-partitioned") == 3
        assert await in_thread(try_produce, url, "auto-partitioned") == "ok"
    finally:
        await partitioned.stop()
    strict = BrokerServer(store, bk, port=0, policies=TopicPolicies(auto_create=False))
    await strict.start()
    try:  # the partitions of a declared partitioned topic may be used
        assert await in_thread(try_produce, strict.service_url, "auto-partitioned") == "ok"
    finally:
        await strict.stop()


async def test_unloading_a_bundle_moves_clients_without_loss(broker: BrokerServer) -> None:
    from stripemq.broker.ownership import bundle_of
    from stripemq.proto.topic_name import TopicName

    topic = "persistent://public/default/unloaded"
    loop = asyncio.get_running_loop()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30)
    try:
        consumer = await loop.run_in_executor(None, lambda: client.subscribe(topic, "sub"))
        producer = await loop.run_in_executor(
            None, lambda: client.create_producer(topic, batching_enabled=False)
        )
        for i in range(10):
            await loop.run_in_executor(None, producer.send, f"m{i}".encode())
        assert broker.service is not None
        closed = await broker.service.unload(bundle_of(TopicName.parse(topic)))
        assert closed == [topic]
        for i in range(10, 20):  # the producer reconnects through a lookup
            await loop.run_in_executor(None, producer.send, f"m{i}".encode())
        got = []
        for _ in range(20):
            message = await loop.run_in_executor(None, consumer.receive, 10_000)
            got.append(message.data().decode())
            consumer.acknowledge(message)
        assert sorted(set(got), key=lambda m: int(m[1:])) == [f"m{i}" for i in range(20)]
    finally:
        await loop.run_in_executor(None, client.close)


def pattern_round(url: str) -> list[str]:
    import re

    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        for name in ("multi-a", "multi-b", "other"):
            client.subscribe(name, "sub").close()
        consumer = client.subscribe(re.compile("persistent://public/default/multi-.*"), "sub")
        for name in ("multi-a", "multi-b", "other"):
            client.create_producer(name).send(name.encode())
        got = []
        while True:
            try:
                message = consumer.receive(timeout_millis=3000)
            except pulsar.Timeout:
                return sorted(got)
            got.append(message.data().decode())
            consumer.acknowledge(message)
    finally:
        client.close()


async def test_pattern_subscriptions_list_the_namespace(
    target: Target,
) -> None:
    assert await in_thread(pattern_round, target.service_url) == ["multi-a", "multi-b"]


def second_exclusive(url: str) -> str:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        client.subscribe("exclusive-sub", "only", consumer_type=pulsar.ConsumerType.Exclusive)
        try:
            client.subscribe("exclusive-sub", "only", consumer_type=pulsar.ConsumerType.Exclusive)
            return "subscribed"
        except pulsar.PulsarException as exc:
            return type(exc).__name__
    finally:
        client.close()


async def test_a_second_exclusive_consumer_is_refused(
    target: Target,
) -> None:
    assert await in_thread(second_exclusive, target.service_url) == "ConsumerBusy"


async def test_bad_requests_get_protocol_errors_and_the_connection_stays(
    target: Target,
) -> None:
    from stripemq.proto import pulsar_api_pb2 as pb
    from stripemq.proto.frames import (
        FrameDecoder,
        encode_command,
        encode_entry,
        encode_payload_command,
    )

    reader, writer = await asyncio.open_connection("127.0.0.1", target.port)
    decoder = FrameDecoder()

    async def reply(*frames: bytes) -> pb.BaseCommand:
        for frame in frames:
            writer.write(frame)
        while True:
            got = decoder.feed(await asyncio.wait_for(reader.read(65536), 10))
            if got:
                return got[0].command

    connected = await reply(
        encode_command(pb.CommandConnect(client_version="t", protocol_version=20))
    )
    assert connected.type == pb.BaseCommand.CONNECTED
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    # SEND before PRODUCER
    answer = await reply(
        encode_payload_command(
            pb.CommandSend(producer_id=9, sequence_id=1), encode_entry(metadata, b"x")
        )
    )
    assert (
        answer.type == pb.BaseCommand.SEND_ERROR and answer.send_error.error == pb.NotAllowedError
    )
    # an invalid topic name
    answer = await reply(encode_command(pb.CommandLookupTopic(topic="bad://x", request_id=1)))
    assert answer.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
    assert answer.lookupTopicResponse.error == pb.InvalidTopicName
    # a corrupted entry
    answer = await reply(
        encode_command(pb.CommandProducer(topic="checksums", producer_id=1, request_id=2))
    )
    assert answer.type == pb.BaseCommand.PRODUCER_SUCCESS
    entry = bytearray(encode_entry(metadata, b"payload"))
    entry[-1] ^= 0x01
    answer = await reply(
        encode_payload_command(pb.CommandSend(producer_id=1, sequence_id=1), bytes(entry))
    )
    assert answer.type == pb.BaseCommand.SEND_ERROR and answer.send_error.error == pb.ChecksumError
    # ... and the connection still works
    answer = await reply(
        encode_payload_command(
            pb.CommandSend(producer_id=1, sequence_id=2), encode_entry(metadata, b"payload")
        )
    )
    assert answer.type == pb.BaseCommand.SEND_RECEIPT
    writer.close()


def consume_terminated_topic(url: str, topic: str, other: str) -> tuple[list[bytes], bytes]:
    """Everything of a terminated topic, received and acknowledged for three seconds; then
    a message through another topic on the same connection."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        other_consumer = client.subscribe(other, "s")
        other_producer = client.create_producer(other)
        got = []
        for _ in range(30):
            try:
                message = consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            got.append(message.data())
            consumer.acknowledge(message)
        other_producer.send(b"still connected")
        return got, other_consumer.receive(timeout_millis=10_000).data()
    finally:
        client.close()


async def test_a_terminated_topic_is_consumed_once_and_the_connection_stays(
    broker: BrokerServer,
) -> None:
    """The end of the topic is told once all is acknowledged, and not to the C++ client
    at all (its connection would close on it, losing acks and redelivering for ever)."""
    from stripemq.proto.topic_name import TopicName

    topic = "persistent://public/default/ended"
    assert await in_thread(produce, broker.service_url, topic, 2, False)
    served = await broker.service.get_topic(TopicName.parse(topic))
    await served.terminate()
    got, through_other = await in_thread(
        consume_terminated_topic, broker.service_url, topic, "persistent://public/default/beside"
    )
    assert got == [b"message 0", b"message 1"]
    assert through_other == b"still connected"
    assert served.subscriptions["s"].cursor.backlog == 0


def chunked_round(url: str, topic: str, message: bytes) -> bytes:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(
            topic, chunking_enabled=True, batching_enabled=False, send_timeout_millis=10_000
        )
        producer.send(message)
        return consumer.receive(timeout_millis=10_000).data()
    finally:
        client.close()


async def test_a_message_larger_than_the_maximum_goes_in_chunks(broker: BrokerServer) -> None:
    """Chunks are the broker's maximum message size plus their metadata: stored, not
    refused (a refusal made the client resend for ever, storing the chunks that fit)."""
    from stripemq.proto.topic_name import TopicName

    topic = "persistent://public/default/chunked"
    message = bytes(range(256)) * (11 * 1024 * 1024 // 256)  # 11 MiB: three chunks
    assert await in_thread(chunked_round, broker.service_url, topic, message) == message
    served = await broker.service.get_topic(TopicName.parse(topic))
    assert served.ml.chain.entries == 3
    assert served.stats.chunk_published  # Pulsar's msgChunkPublished


def wait_for_exclusive_round(url: str, topic: str) -> dict[str, object]:
    """An Exclusive producer holds the topic. A WaitForExclusive producer whose client
    gives up (the C++ client bounds a producer's creation by its operation timeout) is
    withdrawn; one that waits on takes the topic once the holder closes; and after it, a
    Shared producer is admitted: no withdrawn waiter holds the topic."""
    import threading
    import time

    holder = pulsar.Client(url, operation_timeout_seconds=10)
    quitter = pulsar.Client(url, operation_timeout_seconds=2)
    waiter = pulsar.Client(url, operation_timeout_seconds=30)
    wait_mode = pulsar.ProducerAccessMode.WaitForExclusive
    outcome: dict[str, object] = {}
    try:
        first = holder.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
        first.send(b"from the first")
        try:
            quitter.create_producer(topic, access_mode=wait_mode)
            outcome["quitter"] = "created"
        except pulsar.PulsarException as exc:
            outcome["quitter"] = type(exc).__name__

        def close_later() -> None:
            time.sleep(1)
            first.close()

        threading.Thread(target=close_later, daemon=True).start()
        started = time.monotonic()
        second = waiter.create_producer(topic, access_mode=wait_mode)
        outcome["waited_s"] = time.monotonic() - started
        second.send(b"from the second")
        second.close()
        shared = holder.create_producer(topic)
        shared.send(b"shared")
        outcome["shared"] = "sent"
    finally:
        for client in (holder, quitter, waiter):
            with contextlib.suppress(Exception):
                client.close()
    return outcome


async def test_wait_for_exclusive_waits_and_a_withdrawn_waiter_leaves_no_ghost(
    broker: BrokerServer,
) -> None:
    outcome = await in_thread(
        wait_for_exclusive_round, broker.service_url, "persistent://public/default/waited"
    )
    assert outcome["quitter"] == "Timeout"
    assert outcome["waited_s"] >= 0.5  # type: ignore[operator]
    assert outcome["shared"] == "sent"


def reader_seeks(url: str, topic: str) -> list[list[str]]:
    """A reader sought forward, back, and back to the earliest: what it reads after each."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(6)]
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        rounds = []
        for target in (ids[4], ids[1], pulsar.MessageId.earliest):
            reader.seek(target)
            got = []
            with contextlib.suppress(pulsar.Timeout):
                while True:
                    got.append(reader.read_next(timeout_millis=1000).data().decode())
            rounds.append(got)
        return rounds
    finally:
        client.close()


async def test_a_reader_seeks_back_as_well_as_forward(broker: BrokerServer) -> None:
    """The seek's consumers are closed before it is answered (as Pulsar does): answered
    first, the C++ client resubscribed after its last message and read nothing."""
    rounds = await in_thread(reader_seeks, broker.service_url, "persistent://public/default/sk")
    assert rounds == [
        ["m5"],  # after the message sought, as the C++ reader starts (not inclusive)
        ["m2", "m3", "m4", "m5"],
        [f"m{i}" for i in range(6)],
    ]


def read_inside_a_batch(url: str, topic: str) -> dict[str, object]:
    """Readers that start inside the topic's last entry, a batch of three messages."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=50
        )
        ids: list[pulsar.MessageId] = []
        for i in range(3):
            producer.send_async(f"b{i}".encode(), lambda _r, m: ids.append(m))
        producer.flush()
        ids.sort(key=lambda m: m.batch_index())
        seen: dict[str, object] = {"entries": {(m.ledger_id(), m.entry_id()) for m in ids}}

        def drain(reader: pulsar.Reader) -> list[str]:
            got = []
            while reader.has_message_available():
                got.append(reader.read_next(timeout_millis=5000).data().decode())
            return got

        after_first = client.create_reader(topic, ids[0])
        seen["after_first"] = drain(after_first)
        from_last = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
        seen["from_last"] = drain(from_last)
        consumer = client.subscribe(topic, "last-id")
        last = consumer.get_last_message_id()
        seen["last"] = (last.ledger_id(), last.entry_id(), last.batch_index())
        seen["ids"] = [(m.ledger_id(), m.entry_id(), m.batch_index()) for m in ids]
        return seen
    finally:
        client.close()


async def test_the_last_message_id_names_the_last_index_of_a_batch(target: Target) -> None:
    """GET_LAST_MESSAGE_ID carries the batch's last index: without it, a reader that
    starts inside the last batch thinks nothing is left after where it starts."""
    seen = await in_thread(
        read_inside_a_batch, target.service_url, "persistent://public/default/lb"
    )
    assert len(seen["entries"]) == 1  # type: ignore[arg-type]  # one batch
    assert seen["after_first"] == ["b1", "b2"]
    assert seen["from_last"] == ["b2"]
    assert seen["last"] == seen["ids"][-1]  # type: ignore[index]
