"""Topic compaction with the official ``pulsar-client`` against a real ``stripemq
standalone``: compaction triggered over REST, readers and consumers that read compacted get
the latest message of each key (batched or not, tombstones honoured), then what came after
the horizon; others still read everything. The compacted ledger outlives an unload that
lets the original ledgers go."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from stripemq import client as stripemq_client
from stripemq.testing.polling import until_blocking
from stripemq.testing.rest import rest
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/compacted-{uuid.uuid4().hex[:8]}"


def admin_path(topic: str, suffix: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://") + suffix


def compact(standalone: StandaloneProcess, topic: str) -> None:
    """Trigger compaction and wait until it succeeded."""
    status, _ = rest(standalone.web_url, "PUT", admin_path(topic, "/compaction"))
    assert status == 204

    def done() -> bool:
        answer = rest(standalone.web_url, "GET", admin_path(topic, "/compaction"))[1]
        assert answer["status"] != "ERROR", answer
        return bool(answer["status"] == "SUCCESS")

    until_blocking(done, timeout=30)


def read_all(client: pulsar.Client, topic: str, *, compacted: bool) -> list[tuple[str, str]]:
    """(key, value) of everything a reader from the earliest reads."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
    got = []
    try:
        while reader.has_message_available():
            message = reader.read_next(10_000)
            got.append((message.partition_key(), message.data().decode()))
    finally:
        reader.close()
    return got


def produce(
    client: pulsar.Client,
    topic: str,
    messages: list[tuple[str, str]],
    batched: bool,
    compression: pulsar.CompressionType = pulsar.CompressionType.NONE,
) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=1000,
        compression_type=compression,
    )
    for key, value in messages:
        producer.send_async(value.encode(), None, partition_key=key)
    producer.flush()
    producer.close()


UPDATES = [("a", "a1"), ("b", "b1"), ("a", "a2"), ("c", "c1"), ("b", "b2"), ("a", "a3")]
LATEST = [("c", "c1"), ("b", "b2"), ("a", "a3")]


@pytest.mark.parametrize("batched", [False, True])
def test_a_compacted_reader_reads_the_latest_value_of_each_key(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str, batched: bool
) -> None:
    produce(client, topic, UPDATES, batched)
    status, answer = rest(standalone.web_url, "GET", admin_path(topic, "/compaction"))
    assert (status, answer) == (200, {"status": "NOT_RUN", "lastError": ""})
    compact(standalone, topic)
    assert read_all(client, topic, compacted=True) == LATEST
    assert read_all(client, topic, compacted=False) == UPDATES
    produce(client, topic, [("b", "b3")], batched)  # after the horizon: read as it is
    assert read_all(client, topic, compacted=True) == [*LATEST, ("b", "b3")]
    stats = rest(standalone.web_url, "GET", admin_path(topic, "/stats"))[1]
    assert stats["compaction"]["lastCompactionRemovedEventCount"] == 3
    assert "__compaction" in stats["subscriptions"]


@pytest.mark.parametrize("codec", ["LZ4", "ZLib", "ZSTD", "SNAPPY"])
def test_compressed_batches_are_compacted_message_by_message(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str, codec: str
) -> None:
    """A compressed batch is opened, its obscured messages marked, and written again in its
    own codec: compacted readers get the latest of each key in every codec."""
    compression = getattr(pulsar.CompressionType, codec)
    produce(client, topic, UPDATES, batched=True, compression=compression)
    compact(standalone, topic)
    assert read_all(client, topic, compacted=True) == LATEST
    stats = rest(standalone.web_url, "GET", admin_path(topic, "/stats"))[1]
    assert stats["compaction"]["lastCompactionRemovedEventCount"] == 3


def test_an_empty_value_deletes_its_key(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    produce(client, topic, [("a", "1"), ("b", "1"), ("a", "")], batched=False)
    compact(standalone, topic)
    assert read_all(client, topic, compacted=True) == [("b", "1")]


# Batched, a compacted entry's left-out messages go as acknowledged (the ack set): the C++
# client completes such an entry by batch-index acks or a cumulative ack (its individual
# acks without batch-index acks wait for every message of the batch, as for any batch the
# broker redelivers in part).
@pytest.mark.parametrize(
    ("batched", "batch_index_acks", "cumulative"),
    [(False, False, False), (True, True, False), (True, False, True)],
)
def test_a_compacted_consumer_acknowledges_and_resumes(
    standalone: StandaloneProcess,
    client: pulsar.Client,
    topic: str,
    batched: bool,
    batch_index_acks: bool,
    cumulative: bool,
) -> None:
    produce(client, topic, UPDATES, batched=batched)
    compact(standalone, topic)

    def subscribe() -> pulsar.Consumer:
        return client.subscribe(
            topic,
            "compacted",
            is_read_compacted=True,
            initial_position=pulsar.InitialPosition.Earliest,
            batch_index_ack_enabled=batch_index_acks,
        )

    consumer = subscribe()
    first = consumer.receive(10_000)
    consumer.acknowledge(first)
    consumer.close()
    consumer = subscribe()
    again = [consumer.receive(10_000) for _ in range(3 if cumulative else 2)]
    got = [(m.partition_key(), m.data().decode()) for m in again]
    # The acknowledged one comes again only inside a batch acknowledged in part without
    # batch-index acks (at least once, as Pulsar).
    assert got == (LATEST if cumulative else LATEST[1:])
    if cumulative:
        consumer.acknowledge_cumulative(again[-1])
    else:
        for message in again:
            consumer.acknowledge(message)

    def caught_up() -> bool:
        stats = rest(standalone.web_url, "GET", admin_path(topic, "/stats"))[1]
        return bool(stats["subscriptions"]["compacted"]["msgBacklog"] == 0)

    until_blocking(caught_up, timeout=10)
    consumer.close()
    consumer = subscribe()
    with pytest.raises(pulsar.Timeout):
        consumer.receive(500)  # nothing comes again
    consumer.close()


def test_compacting_a_topic_that_does_not_exist_is_404(
    standalone: StandaloneProcess,
) -> None:
    missing = f"persistent://public/default/missing-{uuid.uuid4().hex[:8]}"
    status, _ = rest(standalone.web_url, "PUT", admin_path(missing, "/compaction"))
    assert status == 404


def test_what_compaction_kept_outlives_the_ledgers_it_came_from(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    produce(client, topic, UPDATES, batched=False)
    compact(standalone, topic)
    before = rest(standalone.web_url, "GET", admin_path(topic, "/internalStats"))[1]
    first_ledger = before["ledgers"][0]["ledgerId"]
    assert rest(standalone.web_url, "PUT", admin_path(topic, "/unload"))[0] == 204
    produce(client, topic, [("d", "d1")], batched=False)  # loads it again, on a new ledger

    def trimmed() -> bool:
        stats = rest(standalone.web_url, "GET", admin_path(topic, "/internalStats"))[1]
        return all(ledger["ledgerId"] != first_ledger for ledger in stats["ledgers"])

    until_blocking(trimmed, timeout=30)
    assert read_all(client, topic, compacted=True) == [*LATEST, ("d", "d1")]
    assert read_all(client, topic, compacted=False) == [("d", "d1")]
    consumer = client.subscribe(
        topic, "late", is_read_compacted=True, initial_position=pulsar.InitialPosition.Earliest
    )
    expected = [*LATEST, ("d", "d1")]
    for _ in range(2):  # from its start, then again after a seek to the earliest
        got = [consumer.receive(10_000) for _ in expected]
        assert [(m.partition_key(), m.data().decode()) for m in got] == expected
        consumer.seek(pulsar.MessageId.earliest)
    consumer.close()


def test_stripemqs_own_client_reads_compacted_too(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    produce(client, topic, UPDATES, batched=True)
    compact(standalone, topic)
    own = stripemq_client.Client(standalone.service_url)
    try:
        reader = own.create_reader(
            topic, stripemq_client.MessageId.earliest, is_read_compacted=True
        )
        got = []
        while reader.has_message_available():
            message = reader.read_next(10_000)
            got.append((message.partition_key(), message.data().decode()))
    finally:
        own.close()
    assert got == LATEST


def test_a_compacted_reader_after_an_unload_reads_what_was_kept(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    """Loaded again, the topic's current ledger is empty: the last message a compacted
    reader can read is still the last one kept, so it reads them all."""
    produce(client, topic, UPDATES, batched=False)
    compact(standalone, topic)
    compacted = rest(standalone.web_url, "GET", admin_path(topic, "/internalStats"))[1]
    assert compacted["compactedLedger"]["entries"] == len(LATEST)
    assert rest(standalone.web_url, "PUT", admin_path(topic, "/unload"))[0] == 204
    after = rest(standalone.web_url, "GET", admin_path(topic, "/internalStats"))[1]
    assert after["compactedLedger"] == compacted["compactedLedger"]  # before any read
    assert read_all(client, topic, compacted=True) == LATEST


def test_a_compacted_reader_that_starts_inside_the_last_batch_reads_its_rest(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    """The last kept entry is a batch: the last message id names its last index, so a
    reader that starts inside it knows what is left."""
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=1000
    )
    ids: dict[str, pulsar.MessageId] = {}
    for key, value in UPDATES:
        producer.send_async(
            value.encode(), lambda _r, m, v=value: ids.update({v: m}), partition_key=key
        )
    producer.flush()
    producer.close()
    compact(standalone, topic)
    reader = client.create_reader(topic, ids["c1"], is_read_compacted=True)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(10_000).data().decode())
    reader.close()
    assert got == ["b2", "a3"]
    consumer = client.subscribe(topic, "last", is_read_compacted=True)
    last = consumer.get_last_message_id()
    consumer.close()
    assert (last.entry_id(), last.batch_index()) == (ids["a3"].entry_id(), len(UPDATES) - 1)
