"""Topic compaction: the keep rules driven directly on entries (sans-IO), the compacted
ledger's frame and search, then whole runs on a topic over a managed ledger (memory://
metadata, the in-memory ledger client)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper, FakeLedgerHandle

from stripemq.bookie.client import BookKeeper
from stripemq.bookie.client.reader import ReadHandle
from stripemq.broker.compaction import (
    CompactedLedger,
    CompactionInProgressError,
    CompactionStatus,
)
from stripemq.broker.compaction.compacted_ledger import decode_kept, encode_kept
from stripemq.broker.compaction.rules import (
    LatestByKey,
    compact_entry,
    compacted_out,
    read_messages,
)
from stripemq.broker.compaction.threshold import compact_if_due, uncompacted_bytes
from stripemq.broker.compaction.topic_compaction import COMPACTED_LEDGER_PROPERTY
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.names import (
    COMPACTION_CURSOR,
    ReservedSubscriptionNameError,
    check_subscription_name,
)
from stripemq.broker.topic import Consumer, PersistentTopic
from stripemq.errors import (
    InvalidEntryError,
    ManagedLedgerError,
    MetadataError,
    NoSuchLedgerError,
)
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.compression import compress, decompress
from stripemq.proto.frames import (
    BatchMessage,
    decode_batch,
    encode_batch,
    encode_entry,
    parse_entry,
)
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.polling import until
from stripemq.testing.sinks import NullSink

SubType = pb.CommandSubscribe.SubType


def single(key: str | None, value: bytes, *, null_value: bool = False, seq: int = 0) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
    if key is not None:
        metadata.partition_key = key
    if null_value:
        metadata.null_value = True
    return encode_entry(metadata, value)


def batch(
    messages: list[tuple[str | None, bytes]],
    compression: int = pb.NONE,
    *,
    encrypted: bool = False,
) -> bytes:
    parts = []
    for key, value in messages:
        meta = pb.SingleMessageMetadata(payload_size=len(value))
        if key is not None:
            meta.partition_key = key
        parts.append(BatchMessage(meta, value))
    raw = encode_batch(parts)
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        num_messages_in_batch=len(messages),
        compression=compression,  # type: ignore[arg-type]
        uncompressed_size=len(raw),
    )
    if encrypted:
        metadata.encryption_keys.add(key="k", value=b"secret")
    return encode_entry(metadata, compress(compression, raw))


def batch_contents(data: bytes) -> list[tuple[str, bytes, bool]]:
    """(key, value, compacted out) of each message of a stored batch entry."""
    metadata, payload, problem = parse_entry(data)
    assert metadata is not None and problem is None
    raw = decompress(metadata.compression, payload, metadata.uncompressed_size)
    return [
        (m.metadata.partition_key, m.payload, m.metadata.compacted_out)
        for m in decode_batch(raw, metadata.num_messages_in_batch)
    ]


def compact_all(
    entries: list[bytes], *, retain_null_key: bool = False
) -> tuple[list[tuple[Position, bytes]], int]:
    """Both phases over ``entries`` (at 1:0, 1:1, ...): what is kept, messages removed."""
    positions = [Position(1, i) for i in range(len(entries))]
    latest = LatestByKey()
    for position, data in zip(positions, entries, strict=True):
        latest.add(position, read_messages(data))
    kept, removed = [], 0
    for position, data in zip(positions, entries, strict=True):
        result = compact_entry(
            position, data, read_messages(data), latest, retain_null_key=retain_null_key
        )
        removed += result.removed
        if result.data is not None:
            kept.append((position, result.data))
    return kept, removed


# ---------------------------------------------------------------------------- keep rules


def test_the_latest_message_of_each_key_is_kept_in_order() -> None:
    entries = [single("a", b"1"), single("b", b"1"), single("a", b"2"), single("c", b"1")]
    kept, removed = compact_all(entries)
    assert [p.entry_id for p, _ in kept] == [1, 2, 3]
    assert kept[1][1] == entries[2]  # kept entries are stored unchanged
    assert removed == 1


def test_a_tombstone_deletes_its_key_and_is_not_kept() -> None:
    entries = [single("a", b"1"), single("b", b"1"), single("a", b""), single("b", b"x")]
    entries.append(single("b", b"ignored", null_value=True))
    kept, removed = compact_all(entries)
    assert kept == []
    assert removed == 5


@pytest.mark.parametrize("retain_null_key", [False, True])
def test_removed_events_are_counted_as_pulsar_counts_them(retain_null_key: bool) -> None:
    """A replaced value, a tombstone and a dropped keyless message are one event each; a
    value a tombstone deletes is not counted again."""
    latest = LatestByKey(retain_null_key=retain_null_key)
    entries = [
        single("a", b"1"),
        single("a", b"2"),  # replaces a=1
        single("a", b""),  # a tombstone
        single("b", b"1"),
        single(None, b"x"),  # keyless
        batch([("b", b"2"), ("c", b"1"), ("c", b"")]),  # replaces b=1; a tombstone
    ]
    for i, data in enumerate(entries):
        latest.add(Position(1, i), read_messages(data))
    assert latest.removed_events == (4 if retain_null_key else 5)


def test_a_key_written_again_after_its_tombstone_comes_back() -> None:
    kept, _ = compact_all([single("a", b"1"), single("a", b""), single("a", b"3")])
    assert [p.entry_id for p, _ in kept] == [2]


def test_messages_without_a_key_are_left_out_unless_retained() -> None:
    entries = [single(None, b"x"), single("a", b"1"), single(None, b"y")]
    assert [p.entry_id for p, _ in compact_all(entries)[0]] == [1]
    kept, removed = compact_all(entries, retain_null_key=True)
    assert [p.entry_id for p, _ in kept] == [0, 1, 2]
    assert removed == 0


@pytest.mark.parametrize("compression", [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD])
def test_a_batch_keeps_its_indexes_with_obscured_messages_compacted_out(compression: int) -> None:
    entries = [
        batch([("a", b"a1"), ("b", b"b1"), ("c", b"c1")], compression),
        single("b", b"b2"),
    ]
    kept, removed = compact_all(entries)
    assert removed == 1
    assert [p.entry_id for p, _ in kept] == [0, 1]
    assert batch_contents(kept[0][1]) == [
        ("a", b"a1", False),
        ("b", b"", True),
        ("c", b"c1", False),
    ]


def test_a_batch_whose_messages_are_all_obscured_is_dropped() -> None:
    entries = [batch([("a", b"1"), ("a", b"2")]), single("a", b"3")]
    kept, removed = compact_all(entries)
    assert [p.entry_id for p, _ in kept] == [1]
    assert removed == 2


def test_a_batch_compacted_before_is_compacted_again_by_its_live_messages() -> None:
    first, _ = compact_all([batch([("a", b"1"), ("b", b"1")]), single("a", b"2")])
    rewritten = first[0][1]
    again, removed = compact_all([rewritten, single("a", b"2"), single("b", b"2")])
    assert [p.entry_id for p, _ in again] == [1, 2]
    assert removed == 1  # b's first value; a's was gone already


def test_a_batch_that_cannot_be_opened_is_compacted_whole_by_its_entry_key() -> None:
    locked = batch([("a", b"1"), ("b", b"1")], encrypted=True)
    metadata, _, _ = parse_entry(locked)
    assert metadata is not None
    metadata.partition_key = "k"
    _, payload, _ = parse_entry(locked)
    locked = encode_entry(metadata, payload)
    kept, _ = compact_all([locked, single("x", b"1")])
    assert kept[0][1] == locked  # unchanged: it cannot be rewritten
    kept, _ = compact_all([locked, single("k", b"2")])
    assert [p.entry_id for p, _ in kept] == [1]


def test_an_entry_without_readable_metadata_is_left_out() -> None:
    kept, removed = compact_all([b"\x00\x01garbage", single("a", b"1")])
    assert [p.entry_id for p, _ in kept] == [1]
    assert removed == 1


# ---------------------------------------------------------------------------- compacted ledger


def test_a_kept_entry_frames_its_position_as_pulsars_raw_message() -> None:
    raw = encode_kept(Position(12, 34), b"entry bytes")
    entry = decode_kept(raw)
    assert (entry.position, entry.data) == (Position(12, 34), b"entry bytes")
    ident_size = int.from_bytes(raw[:4], "big")
    message_id = pb.MessageIdData.FromString(raw[4 : 4 + ident_size])
    assert (message_id.ledgerId, message_id.entryId) == (12, 34)


@pytest.mark.parametrize(
    "raw", [b"", b"\x00\x00\x00\x09abc", encode_kept(Position(1, 2), b"x")[:-1]]
)
def test_a_damaged_kept_entry_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidEntryError):
        decode_kept(raw)


async def compacted_ledger(positions: list[Position], horizon: Position) -> CompactedLedger:
    bk = FakeBookKeeper()
    handle: FakeLedgerHandle = await bk.create_ledger()
    for position in positions:
        await handle.add_entry(encode_kept(position, f"{position}".encode()))
    return await CompactedLedger.open(cast(ReadHandle, handle), horizon)


async def test_reads_start_at_the_first_kept_entry_at_or_after_the_position() -> None:
    kept = [Position(3, 1), Position(3, 7), Position(5, 0), Position(5, 4), Position(8, 2)]
    ledger = await compacted_ledger(kept, Position(8, 9))
    assert ledger.first == Position(3, 1)
    assert [e.position for e in await ledger.read_from(Position(-1, -1), 2)] == kept[:2]
    assert [e.position for e in await ledger.read_from(Position(3, 8), 10)] == kept[2:]
    assert [e.position for e in await ledger.read_from(Position(5, 4), 1)] == [Position(5, 4)]
    assert await ledger.read_from(Position(8, 3), 10) == []  # none left before the horizon
    assert await ledger.read_from(Position(9, 0), 10) == []  # past the horizon


async def test_reading_on_from_where_the_last_read_ended_needs_no_search() -> None:
    kept = [Position(1, i * 2) for i in range(50)]
    ledger = await compacted_ledger(kept, Position(1, 99))
    got = await ledger.read_from(Position(1, 0), 10)
    reads = 0
    original = ledger.reader.read_entries

    async def counting(first: int, last: int) -> list[object]:
        nonlocal reads
        reads += 1
        return await original(first, last)  # type: ignore[return-value]

    ledger.reader.read_entries = counting  # type: ignore[method-assign]
    more = await ledger.read_from(got[-1].position.next(), 10)
    assert [e.position for e in more] == kept[10:20]
    assert reads == 1


# ---------------------------------------------------------------------------- runs on a topic


async def live_topic(store: MetadataStore, bk: FakeBookKeeper | None = None) -> PersistentTopic:
    name = "persistent://acme/orders/compacted"
    ml = ManagedLedger(
        TopicName.parse(name).managed_ledger_name,
        store,
        cast(BookKeeper, bk or FakeBookKeeper()),
        ManagedLedgerConfig(),
    )
    await ml.open(create=True)
    return PersistentTopic(TopicName.parse(name), ml)


async def publish(topic: PersistentTopic, *messages: tuple[str | None, bytes]) -> list[Position]:
    return [await topic.ml.add_entry(single(k, v)) for k, v in messages]


async def compacted_now(topic: PersistentTopic) -> None:
    topic.compaction.trigger()
    await topic.compaction.wait()
    assert topic.compaction.status is CompactionStatus.SUCCESS, topic.compaction.last_error


async def kept_values(topic: PersistentTopic) -> list[tuple[Position, bytes]]:
    compacted = await topic.compaction.compacted()
    assert compacted is not None
    entries = await compacted.read_from(Position(-1, -1), 1000)
    return [(e.position, parse_entry(e.data)[1]) for e in entries]


async def test_a_run_writes_the_compacted_ledger_and_records_it_on_the_cursor(
    store: MetadataStore,
) -> None:
    topic = await live_topic(store)
    assert topic.compaction.status is CompactionStatus.NOT_RUN
    at = await publish(topic, ("a", b"1"), ("b", b"1"), ("a", b"2"))
    await compacted_now(topic)
    assert await kept_values(topic) == [(at[1], b"1"), (at[2], b"2")]
    cursor = topic.ml.cursors[COMPACTION_CURSOR]
    assert cursor.mark_delete_position == at[2]
    compacted = await topic.compaction.compacted()
    assert compacted is not None
    assert cursor.state.properties[COMPACTED_LEDGER_PROPERTY] == compacted.ledger_id
    stats = topic.compaction.stats.to_json()
    assert stats["lastCompactionRemovedEventCount"] == 1
    assert stats["lastCompactionSucceedTimestamp"] > 0
    assert COMPACTION_CURSOR in topic.subscription_names()


async def test_the_next_run_compacts_the_last_one_with_what_came_since(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    topic = await live_topic(store, bk)
    at = await publish(topic, ("a", b"1"), ("b", b"1"))
    await compacted_now(topic)
    first = await topic.compaction.compacted()
    assert first is not None
    at += await publish(topic, ("a", b"2"), ("c", b"1"), ("b", b""))
    await compacted_now(topic)
    assert await kept_values(topic) == [(at[2], b"2"), (at[3], b"1")]
    assert first.ledger_id in bk.deleted  # the ledger it replaced


async def test_a_run_with_nothing_new_keeps_the_compacted_ledger(store: MetadataStore) -> None:
    topic = await live_topic(store)
    await compacted_now(topic)  # an empty topic: nothing to compact
    assert await topic.compaction.compacted() is None
    await publish(topic, ("a", b"1"))
    await compacted_now(topic)
    before = await topic.compaction.compacted()
    await compacted_now(topic)
    assert await topic.compaction.compacted() is before


async def test_a_second_trigger_while_one_runs_is_refused(store: MetadataStore) -> None:
    bk = FakeBookKeeper()
    topic = await live_topic(store, bk)
    await publish(topic, ("a", b"1"))
    bk.gate = asyncio.Event()  # the new ledger's creation waits
    topic.compaction.trigger()
    await until(lambda: bk.held == 1)
    assert topic.compaction.status is CompactionStatus.RUNNING
    with pytest.raises(CompactionInProgressError, match="Compaction already in progress"):
        topic.compaction.trigger()
    bk.gate.set()
    await topic.compaction.wait()
    assert topic.compaction.status is CompactionStatus.SUCCESS


async def test_a_failed_run_says_why_and_leaves_the_last_compaction(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await live_topic(store)
    await publish(topic, ("a", b"1"))
    await compacted_now(topic)
    before = await topic.compaction.compacted()
    await publish(topic, ("a", b"2"))

    async def broken(*args: object, **kwargs: object) -> object:
        raise ManagedLedgerError("reading failed")

    monkeypatch.setattr(topic.ml, "read_entries", broken)
    topic.compaction.trigger()
    await topic.compaction.wait()
    assert topic.compaction.status is CompactionStatus.ERROR
    assert topic.compaction.last_error == "reading failed"
    assert topic.compaction.stats.failed_timestamp > 0
    assert await topic.compaction.compacted() is before


async def test_a_topic_loaded_again_reads_the_compacted_ledger_from_its_cursor(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    topic = await live_topic(store, bk)
    at = await publish(topic, ("a", b"1"), ("a", b"2"))
    await compacted_now(topic)
    await topic.close()
    again = await live_topic(store, bk)
    assert again.compaction.has_compacted
    assert await kept_values(again) == [(at[1], b"2")]


async def test_deleting_the_topic_deletes_its_compacted_ledger(store: MetadataStore) -> None:
    bk = FakeBookKeeper()
    topic = await live_topic(store, bk)
    await publish(topic, ("a", b"1"))
    await compacted_now(topic)
    compacted = await topic.compaction.compacted()
    assert compacted is not None
    await topic.delete()
    assert compacted.ledger_id in bk.deleted


class Collect(NullSink):
    """Keeps what it is sent: (position, payload)."""

    def __init__(self) -> None:
        self.got: list[tuple[Position, bytes]] = []

    def send_message(
        self,
        consumer_id: int,
        message_id: pb.MessageIdData,
        redelivery_count: int,
        entry: bytes,
        ack_set: list[int] | None = None,
    ) -> None:
        self.got.append((Position(message_id.ledgerId, message_id.entryId), parse_entry(entry)[1]))


async def test_a_consumer_reading_compacted_gets_the_kept_entries_then_the_rest(
    store: MetadataStore,
) -> None:
    topic = await live_topic(store)
    at = await publish(topic, ("a", b"1"), ("b", b"1"), ("a", b"2"))
    await compacted_now(topic)
    at += await publish(topic, ("a", b"3"))
    for read_compacted, expected in [
        (True, [(at[1], b"1"), (at[2], b"2"), (at[3], b"3")]),
        (False, [(p, v) for p, v in zip(at, [b"1", b"1", b"2", b"3"], strict=True)]),
    ]:
        name = f"reader-{read_compacted}"
        sub = await topic.subscribe(name, SubType.Exclusive, InitialPosition.Earliest)
        sink = Collect()
        consumer = Consumer(ConsumerSlot(1, "c"), sink, sub, read_compacted=read_compacted)
        sub.add_consumer(consumer)
        sub.flow(consumer, 100)
        count = len(expected)
        await until(lambda sink=sink, count=count: len(sink.got) == count)
        assert sink.got == expected
        await sub.close()


async def test_reading_compacted_from_the_earliest_reaches_into_trimmed_ledgers(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    topic = await live_topic(store, bk)
    at = await publish(topic, ("a", b"1"), ("a", b"2"), ("b", b"1"))
    await compacted_now(topic)
    await topic.close()
    topic = await live_topic(store, bk)  # on a new ledger; the old one goes
    at += await publish(topic, ("d", b"1"))
    assert await topic.ml.trim() == [at[0].ledger_id]
    await topic.compaction.compacted()
    sub = topic.subscribe_non_durable("reader", SubType.Exclusive, Position(-1, -1))
    sub.read_compacted_from_earliest()
    sink = Collect()
    consumer = Consumer(ConsumerSlot(1, "c"), sink, sub, read_compacted=True)
    sub.add_consumer(consumer)  # an exclusive consumer rewinds: to the kept entries still
    sub.flow(consumer, 100)
    await until(lambda: len(sink.got) == 3)
    assert sink.got == [(at[1], b"2"), (at[2], b"1"), (at[3], b"1")]
    await sub.close()


def test_a_batchs_compacted_out_messages_are_found() -> None:
    entries = [batch([("a", b"1"), ("b", b"1"), ("c", b"1")]), single("b", b"2")]
    kept, _ = compact_all(entries)
    assert compacted_out(kept[0][1]) == (3, [1])
    assert compacted_out(entries[0]) is None  # nothing compacted out
    assert compacted_out(single("a", b"1")) is None


# ---------------------------------------------------------------------------- by size


async def test_a_topic_past_its_threshold_is_compacted(store: MetadataStore) -> None:
    topic = await live_topic(store)
    await publish(topic, ("a", b"1" * 100), ("a", b"2" * 100))
    assert not await compact_if_due(topic)  # no threshold: never
    topic.policies = dataclasses.replace(topic.policies, compaction_threshold_bytes=10_000)
    assert uncompacted_bytes(topic) == topic.ml.chain.size  # nothing holds it: all of it
    assert not await compact_if_due(topic)
    topic.policies = dataclasses.replace(topic.policies, compaction_threshold_bytes=100)
    assert await compact_if_due(topic)
    await topic.compaction.wait()
    assert topic.compaction.status is CompactionStatus.SUCCESS
    assert uncompacted_bytes(topic) == 0  # the compaction cursor read it all
    assert not await compact_if_due(topic)
    await publish(topic, ("b", b"3" * 200))
    assert uncompacted_bytes(topic) > 100
    assert await compact_if_due(topic)
    await topic.compaction.wait()


async def test_without_a_compaction_cursor_the_backlog_counts(store: MetadataStore) -> None:
    topic = await live_topic(store)
    await topic.subscribe("s", SubType.Exclusive, InitialPosition.Latest)
    await publish(topic, ("a", b"1"))
    assert uncompacted_bytes(topic) == topic.estimated_backlog_size() > 0


async def test_a_read_of_a_compacted_ledger_replaced_meanwhile_reads_the_new_one(
    store: MetadataStore,
) -> None:
    topic = await live_topic(store)
    at = await publish(topic, ("a", b"1"), ("a", b"2"))
    await compacted_now(topic)
    old = await topic.compaction.compacted()
    at += await publish(topic, ("b", b"1"))
    await compacted_now(topic)
    new = await topic.compaction.compacted()
    assert old is not None and new is not None and new is not old

    async def switched_and_deleted(start: Position, max_entries: int) -> list[object]:
        topic.compaction._compacted = new  # the run finished while this read was out
        raise NoSuchLedgerError(f"ledger {old.ledger_id} is gone")

    old.read_from = switched_and_deleted  # type: ignore[method-assign]
    topic.compaction._compacted = old  # the read begins on the old ledger
    sub = await topic.subscribe("s", SubType.Exclusive, InitialPosition.Earliest)
    sub.consumers[1] = Consumer(ConsumerSlot(1, "c"), Collect(), sub, read_compacted=True)
    entries = await sub._read(Position(-1, -1), 10)
    assert [e.position for e in entries] == [at[1], at[2]]


def test_clients_may_not_subscribe_as_the_compaction_cursor() -> None:
    with pytest.raises(ReservedSubscriptionNameError):
        check_subscription_name(COMPACTION_CURSOR)


async def test_deleting_the_compaction_subscription_deletes_the_compacted_ledger(
    store: MetadataStore,
) -> None:
    bk = FakeBookKeeper()
    topic = await live_topic(store, bk)
    await publish(topic, ("a", b"1"))
    await compacted_now(topic)
    compacted = await topic.compaction.compacted()
    assert compacted is not None
    await topic.remove_subscription(COMPACTION_CURSOR)
    assert compacted.ledger_id in bk.deleted
    assert not topic.compaction.has_compacted
    assert COMPACTION_CURSOR not in topic.subscription_names()


async def test_a_cursor_write_that_fails_leaves_the_last_compaction_recorded(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    bk = FakeBookKeeper()
    topic = await live_topic(store, bk)
    at = await publish(topic, ("a", b"1"))
    await compacted_now(topic)
    before = await topic.compaction.compacted()
    assert before is not None
    await publish(topic, ("a", b"2"))
    cursor = topic.ml.cursors[COMPACTION_CURSOR]

    async def failing(**kwargs: object) -> None:
        raise MetadataError("the store is away")

    monkeypatch.setattr(cursor, "flush", failing)
    topic.compaction.trigger()
    await topic.compaction.wait()
    assert topic.compaction.status is CompactionStatus.ERROR
    assert "the compaction cursor could not be written" in topic.compaction.last_error
    assert await topic.compaction.compacted() is before
    assert cursor.mark_delete_position == at[0]
    assert cursor.state.properties[COMPACTED_LEDGER_PROPERTY] == before.ledger_id
    assert bk.deleted and bk.deleted[-1] != before.ledger_id  # the new one went


async def test_acknowledging_what_a_compacted_read_gave_clears_the_backlog(
    store: MetadataStore,
) -> None:
    topic = await live_topic(store)
    at = await publish(topic, ("a", b"1"), ("b", b"1"), ("a", b"2"), ("b", b"2"), ("c", b"1"))
    await compacted_now(topic)
    sub = await topic.subscribe("s", SubType.Exclusive, InitialPosition.Earliest)
    sink = Collect()
    consumer = Consumer(ConsumerSlot(1, "c"), sink, sub, read_compacted=True)
    sub.add_consumer(consumer)
    sub.flow(consumer, 100)
    await until(lambda: len(sink.got) == 3)
    assert [p for p, _ in sink.got] == at[2:]
    assert sub.cursor.backlog == 3  # what compaction left out is acknowledged already
    sub.ack(
        consumer,
        pb.CommandAck(
            consumer_id=1,
            ack_type=pb.CommandAck.Individual,
            message_id=[pb.MessageIdData(ledgerId=p.ledger_id, entryId=p.entry_id) for p in at[2:]],
        ),
    )
    assert sub.cursor.backlog == 0
    await sub.close()
