"""``stripemq.spark.decode``: stored entries (as the broker keeps them: checksum, metadata,
payload, maybe compressed, maybe a batch) to Arrow rows in the source's schema, with the
message ids the official client reads; bad entries raise errors naming topic, ledger and
entry."""

from __future__ import annotations

import datetime as dt
import struct

import pulsar
import pytest

from stripemq.errors import CorruptEntryError, SparkSourceError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.compression import compress
from stripemq.proto.frames import BatchMessage, encode_batch, encode_entry
from stripemq.spark.decode import RecordBatchBuilder, entry_publish_time
from stripemq.spark.planning import TopicPartitionRef
from stripemq.spark.schema import arrow_schema

TOPIC = "persistent://public/default/orders"
REF = TopicPartitionRef(TOPIC, -1, "public/default/persistent/orders")
PARTITION_REF = TopicPartitionRef(
    f"{TOPIC}-partition-3", 3, "public/default/persistent/orders-partition-3"
)
PUBLISHED = 1_790_000_000_123  # ms
EVENT = 1_789_999_999_000


def utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def single_entry(
    payload: bytes,
    *,
    key: str | None = None,
    properties: dict[str, str] | None = None,
    event_time: int = 0,
    sequence_id: int = 7,
    compression: int = pb.NONE,
    checksum: bool = True,
    **fields: object,
) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="producer-a",
        sequence_id=sequence_id,
        publish_time=PUBLISHED,
        event_time=event_time,
        **fields,  # type: ignore[arg-type]
    )
    if key is not None:
        metadata.partition_key = key
    for name, value in (properties or {}).items():
        metadata.properties.add(key=name, value=value)
    if compression != pb.NONE:
        metadata.compression = compression  # type: ignore[assignment]
        metadata.uncompressed_size = len(payload)
        payload = compress(compression, payload)
    return encode_entry(metadata, payload, checksum=checksum)


def batch_entry(
    messages: list[pb.SingleMessageMetadata | None],
    payloads: list[bytes],
    *,
    compression: int = pb.NONE,
    count: int | None = None,
    entry_event_time: int = 0,
    sequence_id: int = 100,
) -> bytes:
    batch = encode_batch(
        [
            BatchMessage(meta if meta is not None else pb.SingleMessageMetadata(), payload)
            for meta, payload in zip(messages, payloads, strict=True)
        ]
    )
    metadata = pb.MessageMetadata(
        producer_name="producer-b",
        sequence_id=sequence_id,
        publish_time=PUBLISHED,
        num_messages_in_batch=len(messages) if count is None else count,
        event_time=entry_event_time,
    )
    metadata.properties.add(key="entry-level", value="not a message's")
    metadata.partition_key = "entry-key"
    if compression != pb.NONE:
        metadata.compression = compression  # type: ignore[assignment]
        metadata.uncompressed_size = len(batch)
        batch = compress(compression, batch)
    return encode_entry(metadata, batch)


def rows(builder: RecordBatchBuilder) -> list[dict[str, object]]:
    batch = builder.build()
    assert batch.schema == arrow_schema()
    return batch.to_pylist()  # type: ignore[no-any-return]


COMPRESSIONS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
COMPRESSION_IDS = [pb.CompressionType.Name(kind) for kind in COMPRESSIONS]


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=COMPRESSION_IDS)
def test_a_single_message_entry_gives_one_row_with_every_column(compression: int) -> None:
    builder = RecordBatchBuilder(REF)
    payload = b"order 1 " * 50
    entry = single_entry(
        payload,
        key="customer-9",
        properties={"region": "eu", "kind": "new"},
        event_time=EVENT,
        compression=compression,
    )
    assert builder.add_entry(12, 34, entry) == 1
    assert len(builder) == 1
    assert builder.payload_bytes == len(payload)
    [row] = rows(builder)
    assert row == {
        "value": payload,
        "__key": "customer-9",
        "__topic": TOPIC,
        "__messageId": pb.MessageIdData(ledgerId=12, entryId=34).SerializeToString(),
        "__publishTime": utc(PUBLISHED),
        "__eventTime": utc(EVENT),
        "__messageProperties": [("region", "eu"), ("kind", "new")],
        "__ledgerId": 12,
        "__entryId": 34,
        "__batchIndex": -1,
        "__partition": -1,
        "__sequenceId": 7,
        "__producerName": "producer-a",
    }
    assert len(builder) == 0  # build empties it


def test_absent_key_event_time_and_properties_are_null_or_empty() -> None:
    builder = RecordBatchBuilder(REF)
    builder.add_entry(1, 0, single_entry(b"x"))
    builder.add_entry(1, 1, single_entry(b"y", key=""))  # an empty key is still a key
    builder.add_entry(1, 2, single_entry(b"", null_value=True))
    builder.add_entry(1, 3, single_entry(b"z", checksum=False))  # a producer without CRC
    first, second, third, fourth = rows(builder)
    assert (first["__key"], first["__eventTime"], first["__messageProperties"]) == (None, None, [])
    assert second["__key"] == ""
    assert third["value"] is None  # sent with a null value, as the consumer reports it
    assert fourth["value"] == b"z"


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=COMPRESSION_IDS)
def test_a_batch_gives_a_row_per_message_as_a_consumer_receives_it(compression: int) -> None:
    builder = RecordBatchBuilder(PARTITION_REF)
    first = pb.SingleMessageMetadata(partition_key="k0", event_time=EVENT + 1, sequence_id=41)
    first.properties.add(key="n", value="0")
    second = pb.SingleMessageMetadata()  # no key, no own event time, no own sequence id
    third = pb.SingleMessageMetadata(partition_key="k2", compacted_out=True)
    fourth = pb.SingleMessageMetadata(partition_key="k3", null_value=True)
    fourth.properties.add(key="dup", value="first")
    fourth.properties.add(key="dup", value="last")  # a map keeps the last, as consumers do
    entry = batch_entry(
        [first, second, third, fourth],
        [b"zero", b"one", b"two", b""],
        compression=compression,
        entry_event_time=EVENT,
    )
    assert builder.add_entry(70, 8, entry) == 3  # the compacted-out message is not a row
    got = rows(builder)
    assert [r["value"] for r in got] == [b"zero", b"one", None]
    assert [r["__batchIndex"] for r in got] == [0, 1, 3]
    assert [r["__key"] for r in got] == ["k0", None, "k3"]  # never the entry's key
    assert [r["__eventTime"] for r in got] == [utc(EVENT + 1), utc(EVENT), utc(EVENT)]
    assert [r["__messageProperties"] for r in got] == [[("n", "0")], [], [("dup", "last")]]
    # The message's own sequence id, else the entry's plus its index (Pulsar's raw reader).
    assert [r["__sequenceId"] for r in got] == [41, 101, 103]
    assert {r["__producerName"] for r in got} == {"producer-b"}
    assert {r["__publishTime"] for r in got} == {utc(PUBLISHED)}
    assert {(r["__ledgerId"], r["__entryId"], r["__partition"]) for r in got} == {(70, 8, 3)}
    assert {r["__topic"] for r in got} == {PARTITION_REF.topic}
    expected_ids = [
        pb.MessageIdData(
            ledgerId=70, entryId=8, partition=3, batch_index=index, batch_size=4
        ).SerializeToString()
        for index in (0, 1, 3)
    ]
    assert [r["__messageId"] for r in got] == expected_ids


@pytest.mark.parametrize(
    ("ref", "ledger", "entry", "batch"),
    [
        (REF, 0, 0, None),
        (REF, 127, 128, None),
        (REF, 2**40 + 5, 300_000, (200, 300)),
        (PARTITION_REF, 9, 1, (0, 1)),
        (TopicPartitionRef(TOPIC + "-partition-200", 200, "x"), 2**33, 2**20, (129, 130)),
    ],
)
def test_message_ids_are_the_official_clients_bytes(
    ref: TopicPartitionRef, ledger: int, entry: int, batch: tuple[int, int] | None
) -> None:
    builder = RecordBatchBuilder(ref)
    if batch is None:
        builder.add_entry(ledger, entry, single_entry(b"v"))
        index, size = -1, 0
    else:
        index, size = batch
        messages: list[pb.SingleMessageMetadata | None] = [None] * size
        builder.add_entry(ledger, entry, batch_entry(messages, [b"v"] * size))
    message_id = rows(builder)[max(index, 0)]["__messageId"]
    assert isinstance(message_id, bytes)
    expected = pb.MessageIdData(ledgerId=ledger, entryId=entry)
    if ref.partition >= 0:
        expected.partition = ref.partition
    if index >= 0:
        expected.batch_index = index
        expected.batch_size = size
    assert message_id == expected.SerializeToString()
    official = pulsar.MessageId.deserialize(message_id)
    assert (official.ledger_id(), official.entry_id()) == (ledger, entry)
    assert (official.partition(), official.batch_index()) == (ref.partition, index)


def test_rows_accumulate_over_entries_until_built() -> None:
    builder = RecordBatchBuilder(REF)
    builder.add_entry(5, 0, single_entry(b"a", sequence_id=0))
    builder.add_entry(5, 1, batch_entry([None, None], [b"b", b"c"], sequence_id=1))
    builder.add_entry(6, 0, single_entry(b"d", sequence_id=3))
    batch = builder.build()
    assert batch.num_rows == 4
    assert batch.column("value").to_pylist() == [b"a", b"b", b"c", b"d"]
    assert batch.column("__sequenceId").to_pylist() == [0, 1, 2, 3]
    assert batch.column("__ledgerId").to_pylist() == [5, 5, 5, 6]
    assert batch.column("__entryId").to_pylist() == [0, 1, 1, 0]
    empty = builder.build()
    assert empty.num_rows == 0 and empty.schema == arrow_schema()


def test_values_out_of_a_columns_range() -> None:
    builder = RecordBatchBuilder(REF)
    builder.add_entry(1, 0, single_entry(b"a", sequence_id=2**64 - 1, event_time=2**63))
    [row] = rows(builder)
    assert row["__sequenceId"] == -1  # the uint64 as Java's long
    assert row["__eventTime"] is None  # beyond the year 9999: not a timestamp Spark holds
    with pytest.raises(CorruptEntryError, match="publish time"):
        builder.add_entry(
            1,
            1,
            encode_entry(
                pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=2**62), b"x"
            ),
        )


def test_markers_give_no_rows() -> None:
    builder = RecordBatchBuilder(REF)
    assert builder.add_entry(1, 0, single_entry(b"marker", marker_type=1)) == 0
    assert len(builder) == 0


def where(ledger: int, entry: int) -> str:
    return rf"\[{TOPIC}\] ledger {ledger} entry {entry}"


def test_a_corrupt_checksum_names_topic_ledger_and_entry() -> None:
    entry = bytearray(single_entry(b"payload " * 10))
    entry[-3] ^= 0xFF
    builder = RecordBatchBuilder(REF)
    with pytest.raises(CorruptEntryError, match=where(44, 9) + ": checksum mismatch"):
        builder.add_entry(44, 9, bytes(entry))
    assert len(builder) == 0


@pytest.mark.parametrize("cut", [1, 5, 8, 20])
def test_a_truncated_entry_is_corrupt(cut: int) -> None:
    entry = single_entry(b"payload", checksum=False)
    with pytest.raises(CorruptEntryError, match=where(3, 4)):
        RecordBatchBuilder(REF).add_entry(3, 4, entry[:cut])


def test_metadata_without_its_required_fields_is_corrupt() -> None:
    raw = pb.MessageMetadata(producer_name="p").SerializePartialToString()
    entry = struct.pack(">I", len(raw)) + raw + b"payload"
    with pytest.raises(CorruptEntryError, match=where(3, 4) + ": metadata lacks"):
        RecordBatchBuilder(REF).add_entry(3, 4, entry)


@pytest.mark.parametrize(
    ("count", "payloads", "tail", "problem"),
    [
        (3, [b"a", b"b"], b"", "message 2 of 3 is missing"),
        (1, [b"a", b"b"], b"", r"7 stray bytes"),
        (2, [b"a", b"b"], b"\x00\x00", r"2 stray bytes"),
        (2, [b"a", b"b"], b"", None),  # the good one, for contrast
    ],
)
def test_a_bad_batch_is_corrupt_and_adds_no_rows(
    count: int, payloads: list[bytes], tail: bytes, problem: str | None
) -> None:
    builder = RecordBatchBuilder(REF)
    builder.add_entry(1, 0, single_entry(b"before"))
    batch = encode_batch([BatchMessage(pb.SingleMessageMetadata(), p) for p in payloads]) + tail
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=PUBLISHED, num_messages_in_batch=count
    )
    entry = encode_entry(metadata, batch)
    if problem is None:
        assert builder.add_entry(1, 1, entry) == 2
        return
    with pytest.raises(CorruptEntryError, match=where(1, 1) + f": bad batch of {count}: {problem}"):
        builder.add_entry(1, 1, entry)
    assert [row["value"] for row in rows(builder)] == [b"before"]  # nothing half-added


def test_a_batch_message_running_past_the_payload_is_corrupt() -> None:
    meta = pb.SingleMessageMetadata(payload_size=100).SerializeToString()
    batch = struct.pack(">I", len(meta)) + meta + b"short"
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=PUBLISHED, num_messages_in_batch=1
    )
    with pytest.raises(CorruptEntryError, match="runs past the payload"):
        RecordBatchBuilder(REF).add_entry(1, 1, encode_entry(metadata, batch))


@pytest.mark.parametrize("compression", COMPRESSIONS[1:], ids=COMPRESSION_IDS[1:])
def test_a_payload_that_does_not_decompress_is_corrupt(compression: int) -> None:
    payload = b"hello world " * 100
    good = compress(compression, payload)
    for garbage, size in ((b"\xff" * 40, len(payload)), (good, len(payload) + 1)):
        metadata = pb.MessageMetadata(
            producer_name="p",
            sequence_id=0,
            publish_time=PUBLISHED,
            compression=compression,  # type: ignore[arg-type]
            uncompressed_size=size,
        )
        name = pb.CompressionType.Name(compression)
        with pytest.raises(CorruptEntryError, match=where(2, 5) + f": {name}"):
            RecordBatchBuilder(REF).add_entry(2, 5, encode_entry(metadata, garbage))


def test_chunked_and_encrypted_entries_are_refused_not_misread() -> None:
    with pytest.raises(SparkSourceError, match=where(1, 0) + " holds chunk 0 of 3"):
        RecordBatchBuilder(REF).add_entry(
            1, 0, single_entry(b"part", num_chunks_from_msg=3, chunk_id=0, uuid="u")
        )
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=PUBLISHED)
    metadata.encryption_keys.add(key="k", value=b"v")
    encrypted = encode_entry(metadata, b"secret")
    with pytest.raises(SparkSourceError, match=where(1, 1) + " is encrypted"):
        RecordBatchBuilder(REF).add_entry(1, 1, encrypted)


def test_entry_publish_time_reads_the_metadata_alone() -> None:
    assert entry_publish_time(single_entry(b"x" * 1000)) == PUBLISHED
    assert entry_publish_time(batch_entry([None], [b"x"], compression=pb.ZSTD)) == PUBLISHED
    with pytest.raises(CorruptEntryError):
        entry_publish_time(b"\x00\x00\x00\x50not metadata")
