"""The stripemq Python client against a real standalone, and against the official
``pulsar-client`` in both directions, in every subscription type."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pulsar
import pytest

import stripemq.client as smq
from stripemq.client import aio
from stripemq.client.dead_letter import ORIGIN_MESSAGE_ID, REAL_TOPIC, RECONSUME_TIMES
from stripemq.testing.polling import next_millisecond, until_blocking
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration

SUB_TYPES = ["Exclusive", "Failover", "Shared", "KeyShared"]
# (batching, our compression, official compression)
VARIANTS = {
    "batched-lz4": (True, smq.CompressionType.LZ4, pulsar.CompressionType.LZ4),
    "batched-zstd": (True, smq.CompressionType.ZSTD, pulsar.CompressionType.ZSTD),
    "single-zlib": (False, smq.CompressionType.ZLib, pulsar.CompressionType.ZLib),
    "batched-snappy": (True, smq.CompressionType.SNAPPY, pulsar.CompressionType.SNAPPY),
}
COUNT = 120
KEYS = 6


@pytest.fixture
def url(standalone: StandaloneProcess) -> str:
    return standalone.service_url


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^\w-]", "-", request.node.name)[:60]
    return f"persistent://public/default/{name}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def client(url: str) -> Iterator[smq.Client]:
    c = smq.Client(url, operation_timeout_seconds=15)
    yield c
    c.close()


@pytest.fixture
def official(url: str) -> Iterator[pulsar.Client]:
    c = pulsar.Client(url, operation_timeout_seconds=15)
    yield c
    c.close()


def _expected() -> list[tuple[str, str]]:
    return [(f"key-{i % KEYS}", f"message {i}") for i in range(COUNT)]


def _check_received(received: list[tuple[str, str, dict[str, str]]]) -> None:
    """Every message once, with its key and properties, in order per key."""
    assert sorted(r[1] for r in received) == sorted(m for _, m in _expected())
    by_key: dict[str, list[int]] = {}
    for key, data, properties in received:
        index = int(data.split()[1])
        assert key == f"key-{index % KEYS}"
        assert properties == {"index": str(index), "origin": "test"}
        by_key.setdefault(key, []).append(index)
    for indexes in by_key.values():
        assert indexes == sorted(indexes)


def _receive_all(consumer, count: int) -> list[tuple[str, str, dict[str, str]]]:  # type: ignore[no-untyped-def]
    received = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=10_000)
        received.append(
            (message.partition_key(), message.data().decode(), dict(message.properties()))
        )
        consumer.acknowledge(message)
    return received


@pytest.mark.parametrize("sub_type", SUB_TYPES)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_official_producer_to_stripemq_consumer(
    client: smq.Client, official: pulsar.Client, topic: str, sub_type: str, variant: str
) -> None:
    batching, _, official_compression = VARIANTS[variant]
    consumer = client.subscribe(topic, "sub", consumer_type=getattr(smq.ConsumerType, sub_type))
    producer = official.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_publish_delay_ms=5,
        compression_type=official_compression,
    )
    for i, (key, data) in enumerate(_expected()):
        producer.send_async(
            data.encode(),
            None,
            partition_key=key,
            properties={"index": str(i), "origin": "test"},
        )
    producer.flush()
    _check_received(_receive_all(consumer, COUNT))
    consumer.close()
    again = client.subscribe(topic, "sub", consumer_type=getattr(smq.ConsumerType, sub_type))
    with pytest.raises(TimeoutError):  # every ack reached the broker
        again.receive(timeout_millis=500)


@pytest.mark.parametrize("sub_type", SUB_TYPES)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_stripemq_producer_to_official_consumer(
    client: smq.Client, official: pulsar.Client, topic: str, sub_type: str, variant: str
) -> None:
    batching, compression, _ = VARIANTS[variant]
    consumer = official.subscribe(
        topic, "sub", consumer_type=getattr(pulsar.ConsumerType, sub_type)
    )
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_publish_delay_ms=5,
        compression_type=compression,
    )
    results: list[smq.Result] = []
    for i, (key, data) in enumerate(_expected()):
        producer.send_async(
            data.encode(),
            lambda result, _id: results.append(result),
            partition_key=key,
            properties={"index": str(i), "origin": "test"},
        )
    producer.flush()
    assert results == [smq.Result.Ok] * COUNT
    _check_received(_receive_all(consumer, COUNT))


def test_message_fields_survive_the_round_trip(client: smq.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, producer_name="fields")
    sent = producer.send(
        b"payload",
        properties={"a": "1"},
        partition_key="pk",
        ordering_key="ok",
        event_timestamp=1234,
    )
    message = consumer.receive(timeout_millis=5000)
    assert message.message_id() == sent
    assert message.data() == b"payload" and message.value() == b"payload"
    assert message.properties() == {"a": "1"}
    assert message.partition_key() == "pk" and message.ordering_key() == b"ok"
    assert message.event_timestamp() == 1234
    assert abs(message.publish_timestamp() - time.time() * 1000) < 60_000
    assert message.producer_name() == "fields" == producer.producer_name()
    assert message.topic_name() == topic and message.redelivery_count() == 0
    assert producer.last_sequence_id() == 0


def _receive_in_turn(
    consumers: list[smq.Consumer], count: int, timeout_s: float = 30
) -> list[tuple[int, smq.Message]]:
    """``count`` messages from the consumers taken in turn (each acknowledged), with the
    index of the consumer that got each."""
    got: list[tuple[int, smq.Message]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} messages arrived"
        for number, consumer in enumerate(consumers):
            try:
                message = consumer.receive(timeout_millis=100)
            except TimeoutError:
                continue
            consumer.acknowledge(message)
            got.append((number, message))
    return got


def test_key_shared_keeps_each_key_on_one_consumer(client: smq.Client, topic: str) -> None:
    consumers = [
        client.subscribe(topic, "ks", consumer_type=smq.ConsumerType.KeyShared) for _ in range(2)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(200):
        producer.send_async(f"{i}".encode(), None, partition_key=f"k{i % 20}")
    producer.flush()
    owner: dict[str, int] = {}
    seen: dict[str, list[int]] = {}
    for number, message in _receive_in_turn(consumers, 200):
        key = message.partition_key()
        assert owner.setdefault(key, number) == number
        seen.setdefault(key, []).append(int(message.data()))
    assert all(v == sorted(v) for v in seen.values())
    assert len(set(owner.values())) == 2


def test_negative_ack_redelivers_after_the_delay(client: smq.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=smq.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=300,
    )
    client.create_producer(topic).send(b"again")
    first = consumer.receive(timeout_millis=5000)
    consumer.negative_acknowledge(first)
    started = time.monotonic()
    second = consumer.receive(timeout_millis=5000)
    assert time.monotonic() - started >= 0.25
    assert second.data() == b"again" and second.message_id() == first.message_id()
    assert second.redelivery_count() == 1
    consumer.acknowledge(second)


def test_negative_ack_on_an_exclusive_subscription_rewinds(client: smq.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", negative_ack_redelivery_delay_ms=200)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    messages = [consumer.receive(timeout_millis=5000) for _ in range(3)]
    consumer.acknowledge(messages[0])
    consumer.negative_acknowledge(messages[1])
    consumer.acknowledge(messages[2])
    again = consumer.receive(timeout_millis=5000)
    assert again.data() == b"m1"


def test_ack_timeout_redelivers_unacknowledged_messages(client: smq.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic, "sub", consumer_type=smq.ConsumerType.Shared, unacked_messages_timeout_ms=1000
    )
    client.create_producer(topic).send(b"forgotten")
    first = consumer.receive(timeout_millis=5000)
    started = time.monotonic()
    second = consumer.receive(timeout_millis=5000)  # not acknowledged: comes back
    assert time.monotonic() - started >= 0.5
    assert second.message_id() == first.message_id() and second.redelivery_count() >= 1
    consumer.acknowledge(second)
    with pytest.raises(TimeoutError):
        consumer.receive(timeout_millis=2000)


def test_dead_letter_policy_moves_a_message_after_max_redeliveries(
    client: smq.Client, topic: str
) -> None:
    dlq_topic = f"{topic}-dead"
    dlq = client.subscribe(dlq_topic, "dlq-sub")
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=smq.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=smq.ConsumerDeadLetterPolicy(
            max_redeliver_count=2, dead_letter_topic=dlq_topic
        ),
    )
    producer = client.create_producer(topic)
    poison = producer.send(b"poison", properties={"kind": "bad"}, partition_key="p")
    producer.send(b"fine")
    deliveries = 0
    fine_seen = False
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (deliveries < 3 or not fine_seen):
        try:
            message = consumer.receive(timeout_millis=500)
        except TimeoutError:
            continue
        if message.data() == b"fine":
            fine_seen = True
            consumer.acknowledge(message)
        else:
            deliveries += 1
            consumer.negative_acknowledge(message)
    assert deliveries == 3 and fine_seen  # the first delivery plus max_redeliver_count
    dead = dlq.receive(timeout_millis=10_000)
    assert dead.data() == b"poison" and dead.partition_key() == "p"
    properties = dead.properties()
    assert properties["kind"] == "bad" and properties[REAL_TOPIC] == topic
    assert properties[ORIGIN_MESSAGE_ID] == str(poison)
    with pytest.raises(TimeoutError):  # acknowledged on the original subscription
        consumer.receive(timeout_millis=1000)


def test_only_the_unacknowledged_part_of_a_batch_is_dead_lettered(
    client: smq.Client, topic: str
) -> None:
    dlq = client.subscribe(f"{topic}-DLQ", "dlq-sub")
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=smq.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=smq.ConsumerDeadLetterPolicy(
            max_redeliver_count=1, dead_letter_topic=f"{topic}-DLQ"
        ),
    )
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4)
    for i in range(4):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            message = consumer.receive(timeout_millis=500)
        except TimeoutError:
            continue
        if message.data() in (b"0", b"1"):
            consumer.acknowledge(message)
        else:
            consumer.negative_acknowledge(message)
        if message.redelivery_count() >= 1 and message.data() == b"3":
            break
    dead = sorted(dlq.receive(timeout_millis=10_000).data() for _ in range(2))
    assert dead == [b"2", b"3"]
    with pytest.raises(TimeoutError):  # the acknowledged half stayed where it was
        dlq.receive(timeout_millis=1000)


def test_retry_letter_topic_brings_a_message_back_then_dead_letters_it(
    client: smq.Client, topic: str
) -> None:
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=smq.ConsumerType.Shared,
        retry_enable=True,
        dead_letter_policy=smq.ConsumerDeadLetterPolicy(
            max_redeliver_count=2, initial_subscription_name="dlq-sub"
        ),
    )
    client.create_producer(topic).send(b"later")
    times = []
    waited = []
    for _ in range(3):
        started = time.monotonic()
        message = consumer.receive(timeout_millis=10_000)
        waited.append(time.monotonic() - started)
        assert message.data() == b"later"
        times.append(message.properties().get(RECONSUME_TIMES))
        consumer.reconsume_later(message, 500)
    assert times == [None, "1", "2"]
    assert min(waited[1:]) >= 0.45  # the retry topic delivers after the delay
    # The dead-letter topic's subscription was made with its producer: nothing is lost
    # although nobody subscribed before the message went there.
    dlq = client.subscribe(f"{topic}-sub-DLQ", "dlq-sub")
    dead = dlq.receive(timeout_millis=10_000)
    assert dead.data() == b"later" and dead.properties()[REAL_TOPIC] == topic
    with pytest.raises(TimeoutError):
        consumer.receive(timeout_millis=1000)


def test_command_line_produce_and_consume(url: str, topic: str) -> None:
    base = [sys.executable, "-m", "stripemq", "client", "--url", url]
    produced = subprocess.run(
        [*base, "produce", topic, "-m", "hello", "-m", "world", "-n", "2", "-k", "k1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    assert "4 messages produced" in produced.stdout
    consumed = subprocess.run(
        [*base, "consume", topic, "-s", "cli", "-p", "Earliest", "-n", "4", "-t", "Shared"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.count("content: hello") == 2
    assert consumed.stdout.count("content: world") == 2
    assert "key: [k1]" in consumed.stdout and "4 messages received" in consumed.stdout


def test_cumulative_ack_and_redelivery_of_the_rest(client: smq.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=smq.ConsumerType.Failover)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=5)
    for i in range(10):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    messages = [consumer.receive(timeout_millis=5000) for _ in range(10)]
    consumer.acknowledge_cumulative(messages[4])  # the end of the first batch
    consumer.close()
    again = client.subscribe(topic, "sub", consumer_type=smq.ConsumerType.Failover)
    assert again.receive(timeout_millis=5000).data() == b"5"


@pytest.mark.parametrize("which", ["stripemq", "official"])
def test_batch_index_acks_redeliver_only_the_unacknowledged_part_of_a_batch(
    client: smq.Client, official: pulsar.Client, topic: str, which: str
) -> None:
    """Both clients' batch-index acks (the official C++ client's name no batch size)."""
    module, consuming = (smq, client) if which == "stripemq" else (pulsar, official)

    def subscribe():  # type: ignore[no-untyped-def]
        return consuming.subscribe(
            topic,
            "sub",
            consumer_type=module.ConsumerType.Shared,
            batch_index_ack_enabled=True,
        )

    consumer = subscribe()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    for i in range(10):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    messages = [consumer.receive(timeout_millis=5000) for _ in range(10)]
    assert len({m.message_id().entry_id() for m in messages}) == 1  # one batch entry
    for message in messages[::2]:
        consumer.acknowledge(message)
    consumer.close()  # sends the grouped acks first
    again = subscribe()
    rest = [again.receive(timeout_millis=5000).data() for _ in range(5)]
    assert rest == [f"{i}".encode() for i in range(1, 10, 2)]
    with pytest.raises((TimeoutError, pulsar.Timeout)):
        again.receive(timeout_millis=500)


def test_partly_acknowledged_batches_do_not_stall_a_small_receiver_queue(
    client: smq.Client, topic: str
) -> None:
    """Messages of a redelivered batch acknowledged before give their permits back."""
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=smq.ConsumerType.Shared,
        receiver_queue_size=10,
        batch_index_ack_enabled=True,
        negative_ack_redelivery_delay_ms=200,
    )
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    for i in range(50):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    acked: set[int] = set()
    refused: set[int] = set()
    while len(acked) < 50:
        message = consumer.receive(timeout_millis=10_000)  # a stall times out here
        number = int(message.data())
        if number % 2 == 0 or number in refused:
            consumer.acknowledge(message)
            acked.add(number)
        else:
            refused.add(number)
            consumer.negative_acknowledge(message)


def test_key_based_batching_spreads_keys_over_key_shared_consumers(
    client: smq.Client, topic: str
) -> None:
    consumers = [
        client.subscribe(topic, "ks", consumer_type=smq.ConsumerType.KeyShared) for _ in range(2)
    ]
    producer = client.create_producer(
        topic, batching_enabled=True, batching_type=smq.BatchingType.KeyBased
    )
    # 50 keys: with consumer names drawn at random, all keys on one consumer's hash ranges
    # is a 2 * 2**-50 chance (10 keys made it one run in a few hundred).
    for i in range(200):
        producer.send_async(f"{i}".encode(), None, partition_key=f"k{i % 50}")
    producer.flush()
    owners: dict[str, set[int]] = {}
    for number, message in _receive_in_turn(consumers, 200):
        owners.setdefault(message.partition_key(), set()).add(number)
    assert all(len(o) == 1 for o in owners.values())  # each key on one consumer
    assert {n for o in owners.values() for n in o} == {0, 1}  # and both get keys


def test_a_producer_rides_through_dropped_connections(client: smq.Client, topic: str) -> None:
    """Connections cut under in-flight single sends: every message is stored (at least
    once, in order), and the topic keeps taking messages."""
    producer = client.create_producer(
        topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=100
    )
    results: list[smq.Result] = []
    for i in range(1500):
        producer.send_async(f"{i}".encode(), lambda r, _id: results.append(r))
        if i % 300 == 150:
            connection = producer._impl.connection  # cut it, as a network failure would
            if connection is not None:
                client._run.loop.call_soon_threadsafe(connection._abort, "test cut")
    producer.flush()
    assert results == [smq.Result.Ok] * 1500
    reader = client.create_reader(topic, smq.MessageId.earliest)
    numbers = []
    while reader.has_message_available():
        numbers.append(int(reader.read_next(timeout_millis=5000).data()))
    assert sorted(set(numbers)) == list(range(1500))
    firsts = [n for i, n in enumerate(numbers) if n not in numbers[:i]]
    assert firsts == list(range(1500))  # resends only repeat, never reorder


def test_reader_from_latest_sees_what_comes_after_it(client: smq.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    producer.send(b"old")
    reader = client.create_reader(topic, smq.MessageId.latest)
    assert not reader.has_message_available()
    producer.send(b"new")
    assert reader.has_message_available()
    assert reader.read_next(timeout_millis=5000).data() == b"new"
    assert not reader.has_message_available()


def test_positional_arguments_follow_the_official_api(client: smq.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "pos", smq.ConsumerType.Shared)
    assert consumer._impl.config.consumer_type is smq.ConsumerType.Shared
    producer = client.create_producer(topic, "named-producer")
    assert producer.producer_name() == "named-producer"
    assert smq.MessageId(2, 10, 20, 3).partition() == 2  # partition, ledger, entry, batch


def test_batch_receive_and_message_listener(client: smq.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic,
        "batch",
        batch_receive_policy=smq.BatchReceivePolicy(max_num_messages=7, timeout_ms=2000),
    )
    got: list[bytes] = []
    done = threading.Event()

    def listener(listening: smq.Consumer, message: smq.Message) -> None:
        got.append(message.data())
        listening.acknowledge(message)
        if len(got) == 10:
            done.set()

    listening = client.subscribe(topic, "listen", message_listener=listener)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"{i}".encode())
    batch = consumer.batch_receive()
    assert [m.data() for m in batch] == [f"{i}".encode() for i in range(7)]
    assert done.wait(10) and got == [f"{i}".encode() for i in range(10)]
    listening.close()


def test_reader_positions_and_seek(client: smq.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(10):
        ids.append(producer.send(f"m{i}".encode()))
        next_millisecond()  # distinct publish times, for the seek by time below

    def read_all(reader: smq.Reader) -> list[str]:
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(timeout_millis=5000).data().decode())
        return out

    assert read_all(client.create_reader(topic, smq.MessageId.earliest)) == [
        f"m{i}" for i in range(10)
    ]
    assert read_all(client.create_reader(topic, smq.MessageId.latest)) == []
    assert read_all(client.create_reader(topic, ids[4])) == [f"m{i}" for i in range(5, 10)]
    inclusive = client.create_reader(topic, ids[4], start_message_id_inclusive=True)
    assert read_all(inclusive) == [f"m{i}" for i in range(4, 10)]
    inclusive.seek(ids[7])
    assert read_all(inclusive) == ["m7", "m8", "m9"]
    by_time = client.create_reader(topic, smq.MessageId.earliest)
    publish_time = client.subscribe(topic, "peek", initial_position=smq.InitialPosition.Earliest)
    times = [publish_time.receive(timeout_millis=5000).publish_timestamp() for _ in range(10)]
    by_time.seek(times[6])
    assert read_all(by_time)[0] == "m6"


def test_official_reader_reads_batches_written_by_stripemq(
    client: smq.Client, official: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=True)
    for i in range(25):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    reader = official.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(timeout_millis=5000).data() for _ in range(25)]
    assert got == [f"{i}".encode() for i in range(25)]


def test_consumer_seek_replays_from_the_start(client: smq.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"{i}".encode())
    for _ in range(5):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    consumer.seek(smq.MessageId.earliest)
    assert [consumer.receive(timeout_millis=5000).data() for _ in range(5)] == [
        f"{i}".encode() for i in range(5)
    ]


def test_unsubscribe_deletes_the_subscription(client: smq.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "gone")
    producer.send(b"before")
    consumer.unsubscribe()
    producer.send(b"after")
    fresh = client.subscribe(topic, "gone")  # a new subscription starts at the end
    with pytest.raises(TimeoutError):
        fresh.receive(timeout_millis=500)


def test_multi_topic_and_regex_subscriptions(client: smq.Client, topic: str) -> None:
    topics = [f"{topic}-a", f"{topic}-b"]
    for name in topics:
        client.create_producer(name).send(name.encode())
    listed = client.subscribe(topics, "multi", initial_position=smq.InitialPosition.Earliest)
    got = {listed.receive(timeout_millis=5000).data().decode() for _ in range(2)}
    assert got == set(topics)
    pattern = re.compile(re.escape(topic) + "-.*")
    regex = client.subscribe(
        pattern,
        "regex",
        initial_position=smq.InitialPosition.Earliest,
        pattern_auto_discovery_period=1,
    )
    seen = set()
    for _ in range(2):
        message = regex.receive(timeout_millis=5000)
        seen.add(message.topic_name())
        regex.acknowledge(message)
    assert seen == set(topics)
    late = f"{topic}-c"
    client.create_producer(late).send(b"late")  # found by the next discovery
    message = regex.receive(timeout_millis=10_000)
    assert message.topic_name() == late and message.data() == b"late"


async def test_asyncio_api(url: str, topic: str) -> None:
    async with aio.Client(url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(topic, "sub")
        producer = await client.create_producer(topic, batching_enabled=True)
        futures = [await producer.send_async(f"{i}".encode(), None) for i in range(50)]
        await producer.flush()
        assert all(f.done() for f in futures)
        got = []
        for _ in range(50):
            message = await consumer.receive(timeout_millis=5000)
            got.append(message.data())
            await consumer.acknowledge(message)
        assert got == [f"{i}".encode() for i in range(50)]


# ---------------------------------------------------------------------------- bad input


def test_clear_errors_for_bad_use(client: smq.Client, url: str, topic: str) -> None:
    with pytest.raises(smq.InvalidTopicNameError):
        client.create_producer("bogus://x/y/z")
    producer = client.create_producer(topic)
    with pytest.raises(smq.MessageTooBigError):
        producer.send(b"x" * (6 * 1024 * 1024))
    with pytest.raises(TypeError):
        producer.send("not bytes")  # type: ignore[arg-type]
    shared = client.subscribe(topic, "shared", consumer_type=smq.ConsumerType.Shared)
    other = client.subscribe(f"{topic}-other", "sub")
    client.create_producer(f"{topic}-other").send(b"elsewhere")
    foreign = other.receive(timeout_millis=5000)
    with pytest.raises(smq.InvalidMessageError):
        shared.acknowledge(foreign)
    with pytest.raises(smq.CumulativeAcknowledgementNotAllowedError):
        shared.acknowledge_cumulative(foreign)
    exclusive = client.subscribe(topic, "held")
    with pytest.raises(smq.ConsumerBusyError):
        client.subscribe(topic, "held")
    exclusive.close()
    with pytest.raises(smq.AlreadyClosedError):
        exclusive.receive(timeout_millis=10)
    producer.close()
    with pytest.raises(smq.AlreadyClosedError):
        producer.send(b"late")
    closed = smq.Client(url)
    closed.close()
    with pytest.raises(smq.AlreadyClosedError):
        closed.create_producer(topic)


def test_exclusive_producer_access(client: smq.Client, topic: str) -> None:
    client.create_producer(topic, access_mode=smq.ProducerAccessMode.Exclusive)
    with pytest.raises((smq.ProducerBusyError, smq.ProducerFencedError)):
        client.create_producer(topic, access_mode=smq.ProducerAccessMode.Exclusive)


def test_full_queue_fails_fast_or_blocks(client: smq.Client, topic: str) -> None:
    failing = client.create_producer(
        topic, max_pending_messages=2, batching_enabled=True, batching_max_publish_delay_ms=1000
    )
    results: list[smq.Result] = []
    for _ in range(3):
        failing.send_async(b"x", lambda result, _id: results.append(result))
    assert smq.Result.ProducerQueueIsFull in results
    failing.flush()
    blocking = client.create_producer(
        topic, max_pending_messages=2, block_if_queue_full=True, batching_enabled=False
    )
    for _ in range(20):
        blocking.send_async(b"y", None)
    blocking.flush()


def test_unknown_broker_gives_a_connect_error() -> None:
    from stripemq.testing.ports import free_port

    with pytest.raises((smq.ConnectError, TimeoutError)):
        smq.Client(
            f"pulsar://127.0.0.1:{free_port()}", operation_timeout_seconds=2
        ).create_producer("t")


def test_connection_is_reused_and_reconnects(client: smq.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    producer.send(b"one")
    impl = client._impl
    connection = next(iter(impl.pool._connections.values()))
    asyncio.run_coroutine_threadsafe(connection.close(), client._run.loop).result()
    until_blocking(producer.is_connected, "the producer reconnected")
    producer.send(b"two")
