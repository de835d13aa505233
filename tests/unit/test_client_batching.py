"""Building what a producer sends (``client.batching``): single messages and batches
encoded as entries and read back as a consumer reads them, and the batch container's limits."""

from __future__ import annotations

import pytest
from client_helpers import COMPRESSIONS, proto_text
from hypothesis import given, settings
from hypothesis import strategies as st

from stripemq.client.batching import BatchContainer, OutgoingMessage, build_batch, build_single
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.compression import decompress
from stripemq.proto.frames import (
    FrameDecoder,
    ProtocolError,
    decode_batch,
    encode_entry,
    encode_payload_command,
    parse_entry,
)


def _round_trip(entry_bytes: bytes) -> tuple[pb.MessageMetadata, bytes]:
    """Metadata and uncompressed payload of an encoded entry, as a consumer reads it."""
    metadata, payload, problem = parse_entry(entry_bytes)
    assert problem is None
    assert metadata is not None
    return metadata, decompress(metadata.compression, payload, metadata.uncompressed_size)


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("checksum", [True, False])
def test_a_single_message_round_trips(compression: int, checksum: bool) -> None:
    message = OutgoingMessage(
        b"payload " * 50,
        sequence_id=42,
        properties={"a": "1", "ünï": "cödé"},
        partition_key="key-1",
        ordering_key=b"\x00ord",
        event_timestamp=1_700_000_000_123,
        deliver_at=1_700_000_009_000,
        replication_clusters=["us-east", "eu-west"],
    )
    built = build_single(message, "producer-1", compression, publish_time=1_700_000_000_500)
    assert not built.batched
    assert built.sequence_id == built.highest_sequence_id == 42
    metadata, payload = _round_trip(encode_entry(built.metadata, built.payload, checksum=checksum))
    assert payload == message.payload
    assert metadata.producer_name == "producer-1"
    assert metadata.sequence_id == 42
    assert metadata.publish_time == 1_700_000_000_500
    assert {p.key: p.value for p in metadata.properties} == message.properties
    assert metadata.partition_key == "key-1"
    assert metadata.ordering_key == b"\x00ord"
    assert metadata.event_time == 1_700_000_000_123
    assert metadata.deliver_at_time == 1_700_000_009_000
    assert list(metadata.replicate_to) == ["us-east", "eu-west"]
    assert not metadata.HasField("num_messages_in_batch")
    if compression == pb.NONE:
        assert built.payload == message.payload
        assert not metadata.HasField("uncompressed_size")
    else:
        assert metadata.compression == compression
        assert metadata.uncompressed_size == len(message.payload)
        assert len(built.payload) < len(message.payload)  # repetitive: it does compress


def test_a_single_message_without_optional_fields_leaves_them_unset() -> None:
    built = build_single(OutgoingMessage(b"x", sequence_id=0), "p", pb.NONE, publish_time=1)
    metadata, payload = _round_trip(encode_entry(built.metadata, built.payload))
    assert payload == b"x"
    for name in ("partition_key", "ordering_key", "event_time", "deliver_at_time"):
        assert not metadata.HasField(name), name
    assert list(metadata.replicate_to) == []
    assert list(metadata.properties) == []


def test_disabling_replication_keeps_a_message_local() -> None:
    message = OutgoingMessage(b"x", sequence_id=1, disable_replication=True)
    built = build_single(message, "p", pb.NONE, publish_time=1)
    assert list(built.metadata.replicate_to) == ["__local__"]
    batch = build_batch([message, OutgoingMessage(b"y", sequence_id=2)], "p", pb.NONE, 1)
    assert list(batch.metadata.replicate_to) == ["__local__"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_batch_round_trips_with_each_message_intact(compression: int) -> None:
    messages = [
        OutgoingMessage(
            f"message {i} ".encode() * (i + 1),
            sequence_id=100 + i,
            properties={"index": str(i)} if i % 2 else {},
            partition_key=f"key-{i}" if i != 1 else None,
            ordering_key=bytes([i]) if i == 2 else None,
            event_timestamp=1000 + i if i else None,
        )
        for i in range(5)
    ]
    built = build_batch(messages, "batcher", compression, publish_time=7)
    assert built.batched
    assert built.messages == messages
    assert (built.sequence_id, built.highest_sequence_id) == (100, 104)
    metadata, payload = _round_trip(encode_entry(built.metadata, built.payload))
    assert metadata.num_messages_in_batch == 5
    assert (metadata.sequence_id, metadata.highest_sequence_id) == (100, 104)
    assert metadata.producer_name == "batcher" and metadata.publish_time == 7
    if compression != pb.NONE:
        assert metadata.compression == compression
        assert metadata.uncompressed_size == len(payload)
    singles = decode_batch(payload, metadata.num_messages_in_batch)
    assert [s.payload for s in singles] == [m.payload for m in messages]
    for single, message in zip(singles, messages, strict=True):
        meta = single.metadata
        assert meta.payload_size == len(message.payload)
        assert meta.sequence_id == message.sequence_id
        assert {p.key: p.value for p in meta.properties} == message.properties
        assert meta.HasField("partition_key") == (message.partition_key is not None)
        if message.partition_key is not None:
            assert meta.partition_key == message.partition_key
        assert meta.HasField("ordering_key") == (message.ordering_key is not None)
        if message.ordering_key is not None:
            assert meta.ordering_key == message.ordering_key
        assert meta.event_time == (message.event_timestamp or 0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=300),
            st.dictionaries(proto_text, proto_text, max_size=3),
            st.none() | proto_text,
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(COMPRESSIONS),
)
def test_any_batch_round_trips(
    contents: list[tuple[bytes, dict[str, str], str | None]], compression: int
) -> None:
    messages = [
        OutgoingMessage(payload, sequence_id=i, properties=props, partition_key=key)
        for i, (payload, props, key) in enumerate(contents)
    ]
    built = build_batch(messages, "p", compression, publish_time=1)
    metadata, payload = _round_trip(encode_entry(built.metadata, built.payload))
    singles = decode_batch(payload, metadata.num_messages_in_batch)
    assert len(singles) == len(messages)
    for single, message in zip(singles, messages, strict=True):
        assert single.payload == message.payload
        assert {p.key: p.value for p in single.metadata.properties} == message.properties
        assert single.metadata.sequence_id == message.sequence_id
        if message.partition_key is None:
            assert not single.metadata.HasField("partition_key")
        else:
            assert single.metadata.partition_key == message.partition_key


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=2000), st.sampled_from(COMPRESSIONS))
def test_any_single_message_round_trips(payload: bytes, compression: int) -> None:
    built = build_single(OutgoingMessage(payload, sequence_id=3), "p", compression, 1)
    _metadata, got = _round_trip(encode_entry(built.metadata, built.payload))
    assert got == payload


def test_a_built_entry_survives_a_send_frame() -> None:
    built = build_batch(
        [OutgoingMessage(b"a", sequence_id=1), OutgoingMessage(b"bb", sequence_id=2)],
        "p",
        pb.LZ4,
        publish_time=1,
    )
    entry = encode_entry(built.metadata, built.payload)
    frame_bytes = encode_payload_command(pb.CommandSend(producer_id=3, sequence_id=1), entry)
    [frame] = FrameDecoder().feed(frame_bytes)
    assert frame.metadata is not None and frame.checksum_ok
    raw = decompress(frame.metadata.compression, frame.payload, frame.metadata.uncompressed_size)
    assert [m.payload for m in decode_batch(raw, 2)] == [b"a", b"bb"]


def test_a_corrupted_entry_is_reported_not_returned() -> None:
    built = build_single(OutgoingMessage(b"important", sequence_id=1), "p", pb.NONE, 1)
    entry = bytearray(encode_entry(built.metadata, built.payload))
    entry[-1] ^= 0x01
    metadata, payload, problem = parse_entry(bytes(entry))
    assert metadata is None and payload == b""
    assert problem == "checksum mismatch"


def test_a_batch_read_with_the_wrong_count_is_a_protocol_error() -> None:
    messages = [OutgoingMessage(b"m%d" % i, sequence_id=i) for i in range(3)]
    built = build_batch(messages, "p", pb.NONE, publish_time=1)
    with pytest.raises(ProtocolError):
        decode_batch(built.payload, 2)  # stray bytes left over
    with pytest.raises(ProtocolError):
        decode_batch(built.payload, 4)  # one missing
    with pytest.raises(ProtocolError):
        decode_batch(built.payload[:-1], 3)  # cut short


# ---------------------------------------------------------------------------- containers


def _out(size: int, seq: int = 0, key: str | None = None) -> OutgoingMessage:
    return OutgoingMessage(b"x" * size, sequence_id=seq, partition_key=key)


def _add(container: BatchContainer[int], message: OutgoingMessage) -> bool:
    return container.add(message, message.sequence_id)


def _single_batch(container: BatchContainer[int]) -> list[OutgoingMessage]:
    """The one batch a default container drains (or [] if empty), checking its tokens."""
    groups = container.drain()
    if not groups:
        return []
    [(messages, tokens)] = groups
    assert tokens == [m.sequence_id for m in messages]
    return messages


def test_container_is_full_at_max_messages() -> None:
    container: BatchContainer[int] = BatchContainer(max_messages=3, max_bytes=1 << 20)
    assert _add(container, _out(1)) is False
    assert _add(container, _out(1)) is False
    assert container.has_room_for(_out(1))
    assert _add(container, _out(1)) is True
    assert len(container) == 3
    assert not container.has_room_for(_out(1))


def test_container_is_bounded_by_bytes() -> None:
    container: BatchContainer[int] = BatchContainer(max_messages=100, max_bytes=10)
    assert _add(container, _out(4)) is False
    assert container.has_room_for(_out(4))
    assert _add(container, _out(4)) is False
    assert container.bytes == 8
    assert not container.has_room_for(_out(4))  # 12 > 10
    assert container.has_room_for(_out(2))  # exactly 10 fits
    assert _add(container, _out(2)) is True  # and then it is full


def test_an_empty_container_takes_an_oversize_message() -> None:
    container: BatchContainer[int] = BatchContainer(max_messages=10, max_bytes=100)
    big = _out(1000)
    assert container.has_room_for(big)
    assert _add(container, big) is True  # full at once
    assert not container.has_room_for(_out(1))
    assert _single_batch(container) == [big]


def test_a_non_empty_container_refuses_an_oversize_message() -> None:
    container: BatchContainer[int] = BatchContainer(max_messages=10, max_bytes=100)
    _add(container, _out(1))
    assert not container.has_room_for(_out(1000))


def test_draining_empties_the_container_in_order() -> None:
    container: BatchContainer[int] = BatchContainer(max_messages=5, max_bytes=100)
    messages = [_out(3, i) for i in range(4)]
    for m in messages:
        _add(container, m)
    assert _single_batch(container) == messages
    assert len(container) == 0 and container.bytes == 0
    assert container.drain() == []
    assert container.has_room_for(_out(100))


def test_nonsensical_limits_still_allow_one_message() -> None:
    container: BatchContainer[int] = BatchContainer(max_messages=0, max_bytes=0)
    assert container.has_room_for(_out(5))
    assert _add(container, _out(5)) is True


def test_a_key_based_container_makes_one_batch_per_key_in_order() -> None:
    container: BatchContainer[int] = BatchContainer(10, 1 << 20, key_based=True)
    keys = ["a", "b", "a", None, "b", "a"]
    for i, key in enumerate(keys):
        _add(container, _out(1, i, key))
    groups = container.drain()
    assert [[m.partition_key for m in messages] for messages, _ in groups] == [
        ["a", "a", "a"],
        ["b", "b"],
        [None],
    ]
    assert [tokens for _, tokens in groups] == [[0, 2, 5], [1, 4], [3]]


@given(
    st.integers(1, 8),
    st.integers(1, 64),
    st.lists(st.integers(0, 100), max_size=60),
)
def test_batches_as_a_producer_makes_them_respect_the_limits(
    max_messages: int, max_bytes: int, sizes: list[int]
) -> None:
    container: BatchContainer[int] = BatchContainer(max_messages, max_bytes)
    batches: list[list[OutgoingMessage]] = []
    messages = [_out(size, i) for i, size in enumerate(sizes)]
    for message in messages:
        if not container.has_room_for(message):
            batches.append(_single_batch(container))
        if _add(container, message):
            batches.append(_single_batch(container))
    if len(container):
        batches.append(_single_batch(container))
    assert [m for batch in batches for m in batch] == messages
    for batch in batches:
        assert 1 <= len(batch) <= max_messages
        assert len(batch) == 1 or sum(m.size for m in batch) <= max_bytes
