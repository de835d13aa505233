"""The Python client's sans-IO parts, driven directly: key hashing and partition routing,
building and unpacking entries (batches, compression), the consumer's ack / nack / ack-timeout
bookkeeping, message ids (and their interop with the official ``pulsar-client``), reader
start filtering, the receiver queue, service URLs and the broker error mapping."""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib

import lz4.block
import pulsar
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from stripemq.client.batching import BatchContainer, OutgoingMessage, build_batch, build_single
from stripemq.client.consumer import _after, _StartFilter
from stripemq.client.message import Message, MessageId
from stripemq.client.options import HashingScheme, PartitionsRoutingMode
from stripemq.client.pool import DEFAULT_PORT, ServiceAddresses, parse_service_url
from stripemq.client.receiver_queue import ReceiverQueue
from stripemq.client.routing import (
    HASHES,
    MessageRouter,
    boost_hash,
    java_string_hash,
    murmur3_32_hash,
)
from stripemq.client.trackers import (
    AckGroupingTracker,
    BatchAcks,
    NegativeAckTracker,
    UnackedMessageTracker,
)
from stripemq.errors import (
    CLIENT_ERRORS_BY_SERVER_ERROR,
    AlreadyClosedError,
    AuthenticationError,
    AuthorizationError,
    ChecksumClientError,
    ClientError,
    ClientTimeoutError,
    ConsumerBusyError,
    ConsumerNotFoundError,
    IncompatibleSchemaError,
    InvalidConfigurationError,
    InvalidMessageError,
    MetadataClientError,
    NotAllowedError,
    PersistenceClientError,
    ProducerBlockedQuotaExceededError,
    ProducerBusyError,
    ProducerFencedError,
    ServerClientError,
    ServiceNotReadyError,
    SubscriptionNotFoundError,
    TooManyRequestsError,
    TopicNotFoundError,
    TopicTerminatedError,
    client_error_from_server,
)
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import bits_of, words_of
from stripemq.proto.compression import compress, decompress
from stripemq.proto.frames import (
    FrameDecoder,
    ProtocolError,
    decode_batch,
    encode_entry,
    encode_payload_command,
    parse_entry,
)

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1
INT_MAX = 0x7FFFFFFF
LONG_MAX = (1 << 63) - 1

# Text protobuf string fields accept (no lone surrogates).
proto_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=20)


# =============================================================================== routing

# Measured with the official C++ client library (boost::hash<std::string>, masked to 31 bits).
BOOST_HASH_GROUND_TRUTH = {
    "": 2133126054,
    "a": 2135870748,
    "ab": 133003382,
    "abc": 1074445565,
    "abcd": 246651746,
    "abcdefg": 1432135526,
    "abcdefgh": 1534298190,
    "abcdefghi": 853264110,
    "key-0": 1719626226,
    "key-42": 1160830588,
    "order-1234567": 2132294139,
    "héllo wörld": 816086940,
    "日本語のキー": 1588404236,
    "a much longer partition key that spans several words": 691756000,
}


@pytest.mark.parametrize(("key", "expected"), sorted(BOOST_HASH_GROUND_TRUTH.items()))
def test_boost_hash_matches_the_official_client(key: str, expected: int) -> None:
    assert boost_hash(key) == expected


@given(proto_text)
def test_boost_hash_is_a_deterministic_31_bit_value(key: str) -> None:
    value = boost_hash(key)
    assert 0 <= value <= INT_MAX
    assert value == boost_hash(str(key))


def test_boost_hash_tells_similar_keys_apart() -> None:
    keys = [f"key-{i}" for i in range(2000)]
    assert len({boost_hash(k) for k in keys}) == len(keys)


def _java_hash_code(text: str) -> int:
    """Java's ``String.hashCode`` (signed int32, over UTF-16 code units)."""
    h = 0
    raw = text.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(raw), 2):
        h = (31 * h + int.from_bytes(raw[i : i + 2], "little")) & M32
    return h - (1 << 32) if h > INT_MAX else h


# Well-known Java ``String.hashCode`` values: positive ones, and negative ones, which the
# Java client masks (``hashCode() & Integer.MAX_VALUE``, JavaStringHash.makeHash).
JAVA_HASH_CODES = {
    "": 0,
    "a": 97,
    "hello": 99162322,
    "Hello": 69609650,
    "hello world": 1794106052,
    "Hello World!": -969099747,
    "polygenelubricants": -(2**31),
    "The quick brown fox jumps over the lazy dog": -609428141,
    "abcdefghij": -634317659,
}


@pytest.mark.parametrize(("key", "hash_code"), sorted(JAVA_HASH_CODES.items()))
def test_reference_java_hash_code_matches_known_values(key: str, hash_code: int) -> None:
    assert _java_hash_code(key) == hash_code


@pytest.mark.parametrize(("key", "hash_code"), sorted(JAVA_HASH_CODES.items()))
def test_java_string_hash_is_java_hash_code_masked_to_31_bits(key: str, hash_code: int) -> None:
    assert java_string_hash(key) == hash_code & INT_MAX


def test_java_string_hash_counts_utf16_code_units() -> None:
    # Outside the BMP a character is two UTF-16 units in Java: U+1F600 = D83D DE00.
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00
    assert java_string_hash("é") == 0xE9


@given(proto_text)
def test_java_string_hash_agrees_with_the_java_algorithm(key: str) -> None:
    assert java_string_hash(key) == _java_hash_code(key) & INT_MAX


def _murmur3_32(data: bytes, seed: int = 0) -> int:
    """A plain reference MurmurHash3 x86_32."""
    c1, c2 = 0xCC9E2D51, 0x1B873593

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & M32

    h = seed
    blocks = len(data) // 4
    for i in range(blocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = rotl((k * c1) & M32, 15) * c2 & M32
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & M32
    tail = data[4 * blocks :]
    k = 0
    for i, byte in enumerate(tail):
        k |= byte << (8 * i)
    if tail:
        h ^= rotl((k * c1) & M32, 15) * c2 & M32
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    h ^= h >> 16
    return h


@pytest.mark.parametrize(
    ("key", "unsigned"),
    [
        ("", 0),
        ("hello", 0x248BFA47),
        ("Hello, world!", 0xC0363E43),
        ("The quick brown fox jumps over the lazy dog", 0x2E4FF723),
    ],
)
def test_murmur3_matches_published_vectors_masked_to_31_bits(key: str, unsigned: int) -> None:
    assert _murmur3_32(key.encode()) == unsigned  # the reference itself is right
    assert murmur3_32_hash(key) == unsigned & INT_MAX


@given(proto_text)
def test_murmur3_is_non_negative_and_hashes_the_utf8_bytes(key: str) -> None:
    value = murmur3_32_hash(key)
    assert 0 <= value <= INT_MAX
    assert value == _murmur3_32(key.encode()) & INT_MAX


def test_every_hashing_scheme_has_a_hash() -> None:
    assert set(HASHES) == set(HashingScheme)


@pytest.mark.parametrize("scheme", list(HashingScheme))
@pytest.mark.parametrize("mode", list(PartitionsRoutingMode))
def test_keyed_messages_always_go_to_the_same_partition(
    scheme: HashingScheme, mode: PartitionsRoutingMode
) -> None:
    clock = FakeClock()
    router = MessageRouter(mode, scheme, batching_window_s=1.0, clock=clock)
    for key in ["a", "key-42", "order-1234567", "日本語のキー"]:
        first = router.choose(key, 7)
        for _ in range(20):
            clock.now += 0.7
            assert router.choose(key, 7) == first
        assert first == HASHES[scheme](key) % 7


def test_boost_hash_routing_agrees_with_the_official_client() -> None:
    router = MessageRouter(PartitionsRoutingMode.RoundRobinDistribution)
    for key, value in BOOST_HASH_GROUND_TRUTH.items():
        if key:  # an empty key is no key
            assert router.choose(key, 5) == value % 5


def test_java_string_hash_routing_agrees_with_the_java_client() -> None:
    router = MessageRouter(
        PartitionsRoutingMode.RoundRobinDistribution, HashingScheme.JavaStringHash
    )
    for key, hash_code in JAVA_HASH_CODES.items():
        if key:
            assert router.choose(key, 7) == (hash_code & INT_MAX) % 7, key


def test_keyed_messages_with_different_keys_reach_every_partition() -> None:
    router = MessageRouter(PartitionsRoutingMode.UseSinglePartition)
    assert {router.choose(f"key-{i}", 4) for i in range(200)} == {0, 1, 2, 3}


def test_round_robin_spreads_messages_evenly() -> None:
    router = MessageRouter(PartitionsRoutingMode.RoundRobinDistribution)
    picks = [router.choose(None, 4) for _ in range(400)]
    assert all(0 <= p < 4 for p in picks)
    assert {p: picks.count(p) for p in range(4)} == {0: 100, 1: 100, 2: 100, 3: 100}
    assert all((b - a) % 4 == 1 for a, b in itertools.pairwise(picks))


def test_an_empty_key_is_routed_like_no_key() -> None:
    router = MessageRouter(PartitionsRoutingMode.RoundRobinDistribution)
    picks = [router.choose("", 3) for _ in range(30)]
    assert set(picks) == {0, 1, 2}


def test_single_partition_mode_sticks_to_one_partition() -> None:
    router = MessageRouter(PartitionsRoutingMode.UseSinglePartition)
    first = router.choose(None, 6)
    assert 0 <= first < 6
    assert all(router.choose(None, 6) == first for _ in range(100))


def test_single_partition_mode_picks_a_random_partition_per_router() -> None:
    chosen = {
        MessageRouter(PartitionsRoutingMode.UseSinglePartition).choose(None, 4) for _ in range(60)
    }
    assert len(chosen) > 1


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_batching_window_keeps_a_partition_until_the_window_passes() -> None:
    clock = FakeClock()
    router = MessageRouter(
        PartitionsRoutingMode.RoundRobinDistribution, batching_window_s=1.0, clock=clock
    )
    first = router.choose(None, 4)
    assert all(router.choose(None, 4) == first for _ in range(50))
    clock.now += 0.5
    assert router.choose(None, 4) == first
    clock.now += 0.499
    assert router.choose(None, 4) == first
    clock.now += 0.001  # one full window since the start
    second = router.choose(None, 4)
    assert second == (first + 1) % 4
    assert all(router.choose(None, 4) == second for _ in range(10))
    clock.now += 0.9  # less than a window since the switch
    assert router.choose(None, 4) == second
    clock.now += 0.1
    assert router.choose(None, 4) == (first + 2) % 4


def test_batching_window_visits_every_partition_over_time() -> None:
    clock = FakeClock()
    router = MessageRouter(
        PartitionsRoutingMode.RoundRobinDistribution, batching_window_s=0.01, clock=clock
    )
    seen = []
    for _ in range(8):
        seen.append(router.choose(None, 4))
        clock.now += 0.01
    assert sorted(seen) == [0, 0, 1, 1, 2, 2, 3, 3]


# ======================================================================== entries, batches


def _round_trip(entry_bytes: bytes) -> tuple[pb.MessageMetadata, bytes]:
    """Metadata and uncompressed payload of an encoded entry, as a consumer reads it."""
    metadata, payload, problem = parse_entry(entry_bytes)
    assert problem is None
    assert metadata is not None
    return metadata, decompress(metadata.compression, payload, metadata.uncompressed_size)


COMPRESSIONS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD]


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


# ---------------------------------------------------------------------------- compression


@pytest.mark.parametrize("kind", COMPRESSIONS)
@pytest.mark.parametrize("data", [b"", b"x", b"hello " * 1000, bytes(range(256)) * 4])
def test_compression_round_trips(kind: int, data: bytes) -> None:
    assert decompress(kind, compress(kind, data), len(data)) == data


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=4096), st.sampled_from(COMPRESSIONS))
def test_compression_round_trips_anything(data: bytes, kind: int) -> None:
    assert decompress(kind, compress(kind, data), len(data)) == data


def test_compressed_forms_are_the_official_clients_formats() -> None:
    data = b"the official clients read this " * 20
    # LZ4: a raw block, no size prefix (the size travels in the metadata).
    assert lz4.block.decompress(compress(pb.LZ4, data), uncompressed_size=len(data)) == data
    # ZLIB: with its zlib header.
    assert zlib.decompress(compress(pb.ZLIB, data)) == data
    # ZSTD: a standard frame.
    assert zstandard.ZstdDecompressor().decompress(compress(pb.ZSTD, data)) == data
    assert compress(pb.NONE, data) == data


def test_payloads_from_other_encoders_decompress() -> None:
    data = b"written elsewhere " * 30
    assert decompress(pb.LZ4, lz4.block.compress(data, store_size=False), len(data)) == data
    assert decompress(pb.ZLIB, zlib.compress(data, 9), len(data)) == data
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(pb.ZSTD, no_size, len(data)) == data


@pytest.mark.parametrize("kind", [pb.LZ4, pb.ZLIB, pb.ZSTD])
@pytest.mark.parametrize(
    "garbage", [b"", b"\x00", b"this is not compressed at all", bytes(range(256))]
)
def test_decompressing_garbage_is_an_invalid_message(kind: int, garbage: bytes) -> None:
    with pytest.raises(InvalidMessageError):
        decompress(kind, garbage, 64)


@pytest.mark.parametrize("kind", [pb.LZ4, pb.ZLIB, pb.ZSTD])
@pytest.mark.parametrize("delta", [-1, 1, 100])
def test_decompressing_to_the_wrong_size_is_an_invalid_message(kind: int, delta: int) -> None:
    data = b"sized payload " * 40
    with pytest.raises(InvalidMessageError):
        decompress(kind, compress(kind, data), len(data) + delta)


def test_snappy_is_refused_both_ways() -> None:
    with pytest.raises(InvalidConfigurationError):
        compress(pb.SNAPPY, b"data")
    with pytest.raises(InvalidMessageError):
        decompress(pb.SNAPPY, b"data", 4)


def test_invalid_message_error_is_a_client_error() -> None:
    with pytest.raises(ClientError):
        decompress(pb.ZLIB, b"junk", 4)


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


# ============================================================================== trackers


def _bits_of(words: list[int]) -> int:
    return sum((w & M64) << (64 * i) for i, w in enumerate(words))


@pytest.mark.parametrize(
    ("unacked", "words"),
    [
        ([True], [1]),
        ([False, True], [2]),
        ([True, False, True, True], [0b1101]),
        ([True] * 64, [-1]),
        ([False] * 63 + [True], [-(2**63)]),
        ([True] * 63 + [False], [LONG_MAX]),
        ([True] * 65, [-1, 1]),
        ([False] * 64 + [True, True], [0, 3]),
    ],
)
def test_ack_set_words_are_java_bitset_long_arrays(unacked: list[bool], words: list[int]) -> None:
    assert words_of(unacked) == words


@given(st.lists(st.booleans(), max_size=300))
def test_ack_set_bit_i_is_set_while_message_i_is_unacked(unacked: list[bool]) -> None:
    words = words_of(unacked)
    assert all(-(2**63) <= w <= LONG_MAX for w in words)  # signed int64, as the proto wants
    assert len(words) <= (len(unacked) + 63) // 64
    assert _bits_of(words) == sum(1 << i for i, u in enumerate(unacked) if u)
    pb.MessageIdData(ledgerId=1, entryId=1, ack_set=words).SerializeToString()  # fits int64


@given(st.lists(st.booleans(), max_size=300))
def test_unacked_bits_reads_what_ack_set_words_writes(unacked: list[bool]) -> None:
    assert bits_of(words_of(unacked), len(unacked)) == unacked


def test_unacked_bits_reads_signed_words_and_missing_words_as_acked() -> None:
    assert bits_of([-1], 64) == [True] * 64
    assert bits_of([-(2**63)], 64) == [False] * 63 + [True]
    assert bits_of([0b101], 3) == [True, False, True]
    # Java's BitSet.toLongArray leaves out trailing all-zero words: those are acked.
    assert bits_of([1], 130) == [True] + [False] * 129
    assert bits_of([0, 1 << 5], 70) == [False] * 69 + [True]


def test_batch_acks_complete_once_every_message_is_acked() -> None:
    acks = BatchAcks(3)
    assert acks.unacked == [True, True, True]
    assert acks.ack(1) is False
    assert acks.ack(1) is False  # again: no change
    assert acks.ack(0) is False
    assert acks.unacked == [False, False, True]
    assert acks.ack(2) is True


def test_batch_acks_ignore_indexes_outside_the_batch() -> None:
    acks = BatchAcks(2)
    assert acks.ack(-1) is False
    assert acks.ack(2) is False
    assert acks.unacked == [True, True]


def test_batch_acks_ack_up_to_an_index() -> None:
    acks = BatchAcks(4)
    assert acks.ack_up_to(1) is False
    assert acks.unacked == [False, False, True, True]
    acks.ack(3)
    assert acks.ack_up_to(2) is True
    assert BatchAcks(3).ack_up_to(99) is True


def test_batch_acks_can_start_from_a_known_state() -> None:
    acks = BatchAcks(3, [False, True, False])
    assert acks.ack(1) is True


def _ids(command: pb.CommandAck) -> list[MessageId]:
    return [MessageId.from_proto(m) for m in command.message_id]


def test_an_empty_tracker_flushes_nothing() -> None:
    tracker = AckGroupingTracker()
    assert not tracker.has_pending and len(tracker) == 0
    assert tracker.flush(1) == []


def test_individual_acks_are_flushed_together_and_forgotten() -> None:
    tracker = AckGroupingTracker(group_time_s=10, max_size=100)
    tracker.add_individual(MessageId(ledger_id=1, entry_id=2))
    tracker.add_individual(
        MessageId(ledger_id=1, entry_id=3, batch_index=0, batch_size=1)
    )  # its whole entry
    tracker.add_individual(MessageId(ledger_id=1, entry_id=2))  # again
    assert len(tracker) == 2 and tracker.has_pending
    [command] = tracker.flush(consumer_id=7)
    assert command.consumer_id == 7
    assert command.ack_type == pb.CommandAck.Individual
    assert sorted(_ids(command)) == [
        MessageId(ledger_id=1, entry_id=2),
        MessageId(ledger_id=1, entry_id=3),
    ]
    assert all(not m.HasField("batch_index") and not m.ack_set for m in command.message_id)
    assert not tracker.has_pending and len(tracker) == 0
    assert tracker.flush(7) == []


def test_cumulative_ack_keeps_the_furthest_position() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_cumulative(MessageId(ledger_id=3, entry_id=5))
    tracker.add_cumulative(MessageId(ledger_id=3, entry_id=2))
    tracker.add_cumulative(MessageId(ledger_id=2, entry_id=9))
    assert tracker.has_pending
    [command] = tracker.flush(consumer_id=4)
    assert command.ack_type == pb.CommandAck.Cumulative
    assert command.consumer_id == 4
    assert _ids(command) == [MessageId(ledger_id=3, entry_id=5)]
    assert tracker.flush(4) == []


def test_cumulative_and_individual_acks_flush_as_two_commands() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_individual(MessageId(ledger_id=1, entry_id=9))
    tracker.add_cumulative(MessageId(ledger_id=1, entry_id=5))
    commands = tracker.flush(2)
    assert [c.ack_type for c in commands] == [pb.CommandAck.Cumulative, pb.CommandAck.Individual]
    assert _ids(commands[0]) == [MessageId(ledger_id=1, entry_id=5)]
    assert _ids(commands[1]) == [MessageId(ledger_id=1, entry_id=9)]


def test_partial_batch_acks_are_sent_with_an_ack_set() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    unacked = [True, False, True, True]
    tracker.add_batch_index(
        MessageId(ledger_id=4, entry_id=8, partition=2, batch_index=1, batch_size=4), unacked
    )
    unacked[0] = False  # the tracker kept its own copy
    [command] = tracker.flush(9)
    assert command.ack_type == pb.CommandAck.Individual
    [data] = command.message_id
    assert (data.ledgerId, data.entryId, data.partition) == (4, 8, 2)
    assert not data.HasField("batch_index")
    assert data.batch_size == 4
    assert bits_of(list(data.ack_set), 4) == [True, False, True, True]


def test_a_later_partial_ack_of_a_batch_replaces_the_earlier_one() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    entry = MessageId(ledger_id=1, entry_id=1, batch_index=0, batch_size=3)
    tracker.add_batch_index(entry, [False, True, True])
    tracker.add_batch_index(entry, [False, True, False])
    assert len(tracker) == 1
    [command] = tracker.flush(1)
    [data] = command.message_id
    assert bits_of(list(data.ack_set), 3) == [False, True, False]


def test_a_whole_entry_ack_supersedes_its_partial_ack() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_batch_index(
        MessageId(ledger_id=1, entry_id=1, batch_index=0, batch_size=3), [False, True, True]
    )
    tracker.add_individual(MessageId(ledger_id=1, entry_id=1, batch_index=2, batch_size=3))
    [command] = tracker.flush(1)
    [data] = command.message_id
    assert MessageId.from_proto(data) == MessageId(ledger_id=1, entry_id=1)
    assert not data.ack_set


def test_pending_acks_mark_arriving_messages_as_duplicates() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_cumulative(MessageId(ledger_id=1, entry_id=5))
    tracker.add_individual(MessageId(ledger_id=1, entry_id=9))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=3))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=5))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=5, batch_index=3, batch_size=4))
    assert tracker.is_duplicate(MessageId(ledger_id=0, entry_id=100))
    assert not tracker.is_duplicate(MessageId(ledger_id=1, entry_id=6))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=9))
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=9, batch_index=0, batch_size=2))
    assert not tracker.is_duplicate(MessageId(ledger_id=2, entry_id=0))
    tracker.flush(1)
    # The cumulative position stays known after it is sent; individual acks are gone.
    assert tracker.is_duplicate(MessageId(ledger_id=1, entry_id=4))
    assert not tracker.is_duplicate(MessageId(ledger_id=1, entry_id=9))


def test_partially_acked_batches_are_not_duplicates() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_batch_index(
        MessageId(ledger_id=1, entry_id=1, batch_index=0, batch_size=2), [False, True]
    )
    assert not tracker.is_duplicate(MessageId(ledger_id=1, entry_id=1, batch_index=1, batch_size=2))


def test_should_flush_once_max_size_acks_wait() -> None:
    tracker = AckGroupingTracker(group_time_s=10, max_size=3)
    assert not tracker.immediate
    tracker.add_individual(MessageId(ledger_id=1, entry_id=1))
    tracker.add_batch_index(
        MessageId(ledger_id=1, entry_id=2, batch_index=0, batch_size=2), [False, True]
    )
    assert not tracker.should_flush()
    tracker.add_individual(MessageId(ledger_id=1, entry_id=1))  # the same entry again: still two
    assert not tracker.should_flush()
    tracker.add_individual(MessageId(ledger_id=1, entry_id=3))
    assert tracker.should_flush()
    tracker.flush(1)
    assert not tracker.should_flush()


def test_group_time_zero_means_immediate_acks() -> None:
    tracker = AckGroupingTracker(group_time_s=0, max_size=1000)
    assert tracker.immediate
    tracker.add_individual(MessageId(ledger_id=1, entry_id=1))
    assert tracker.should_flush()
    [command] = tracker.flush(1)
    assert _ids(command) == [MessageId(ledger_id=1, entry_id=1)]


def test_reset_forgets_everything_waiting() -> None:
    tracker = AckGroupingTracker(group_time_s=10)
    tracker.add_cumulative(MessageId(ledger_id=1, entry_id=5))
    tracker.flush(1)
    tracker.add_cumulative(MessageId(ledger_id=1, entry_id=7))
    tracker.add_individual(MessageId(ledger_id=1, entry_id=9))
    tracker.add_batch_index(
        MessageId(ledger_id=1, entry_id=10, batch_index=0, batch_size=2), [False, True]
    )
    tracker.reset()
    assert not tracker.has_pending and len(tracker) == 0
    assert tracker.flush(1) == []
    assert not tracker.is_duplicate(
        MessageId(ledger_id=1, entry_id=1)
    )  # the sent position is forgotten too
    assert not tracker.is_duplicate(MessageId(ledger_id=1, entry_id=9))


def test_negative_acks_come_due_after_the_delay() -> None:
    tracker = NegativeAckTracker(delay_s=1.0)
    assert tracker.next_deadline() is None and tracker.pop_due(1e9) == []
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=10.0)
    tracker.add(MessageId(ledger_id=1, entry_id=2), now=10.5)
    assert len(tracker) == 2
    assert tracker.next_deadline() == 11.0
    assert tracker.pop_due(10.99) == []
    assert tracker.pop_due(11.0) == [MessageId(ledger_id=1, entry_id=1)]
    assert tracker.next_deadline() == 11.5
    assert tracker.pop_due(20.0) == [MessageId(ledger_id=1, entry_id=2)]
    assert len(tracker) == 0 and tracker.next_deadline() is None


def test_negative_acks_of_one_batch_redeliver_its_entry_once() -> None:
    tracker = NegativeAckTracker(delay_s=0.5)
    tracker.add(MessageId(ledger_id=1, entry_id=4, batch_index=0, batch_size=3), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=4, batch_index=2, batch_size=3), now=0.0)
    assert len(tracker) == 1
    due = tracker.pop_due(1.0)
    assert due == [MessageId(ledger_id=1, entry_id=4)]
    assert due[0].batch_index() == -1


def test_clearing_negative_acks() -> None:
    tracker = NegativeAckTracker(delay_s=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.clear()
    assert len(tracker) == 0 and tracker.pop_due(10.0) == []


def test_unacked_messages_expire_after_the_timeout() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=2), now=1.0)
    assert len(tracker) == 2
    assert tracker.pop_expired(4.99) == []
    assert tracker.pop_expired(5.0) == [MessageId(ledger_id=1, entry_id=1)]
    assert tracker.pop_expired(5.5) == []
    assert tracker.pop_expired(6.0) == [MessageId(ledger_id=1, entry_id=2)]
    assert len(tracker) == 0
    assert tracker.pop_expired(100.0) == []


def test_removed_messages_do_not_expire() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=2), now=0.0)
    tracker.remove(MessageId(ledger_id=1, entry_id=1))
    tracker.remove(MessageId(ledger_id=7, entry_id=7))  # never added: no harm
    assert tracker.pop_expired(10.0) == [MessageId(ledger_id=1, entry_id=2)]


def test_a_message_handed_out_again_expires_from_the_second_time() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.remove(MessageId(ledger_id=1, entry_id=1))
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=3.0)
    assert tracker.pop_expired(5.0) == []
    assert tracker.pop_expired(8.0) == [MessageId(ledger_id=1, entry_id=1)]


def test_a_message_tracked_twice_expires_from_the_first_time() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1), now=3.0)
    assert len(tracker) == 1
    assert tracker.pop_expired(5.0) == [MessageId(ledger_id=1, entry_id=1)]
    assert tracker.pop_expired(8.0) == []


def test_batch_messages_are_tracked_by_entry() -> None:
    tracker = UnackedMessageTracker(timeout_s=1.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1, batch_index=0, batch_size=2), now=0.0)
    tracker.add(MessageId(ledger_id=1, entry_id=1, batch_index=1, batch_size=2), now=0.0)
    assert len(tracker) == 1
    tracker.remove(MessageId(ledger_id=1, entry_id=1, batch_index=1, batch_size=2))
    assert len(tracker) == 0


def test_remove_up_to_clears_everything_at_or_before_a_position() -> None:
    tracker = UnackedMessageTracker(timeout_s=5.0)
    for ledger, entry in [(1, 3), (1, 5), (1, 6), (2, 0)]:
        tracker.add(MessageId(ledger_id=ledger, entry_id=entry), now=0.0)
    tracker.add(MessageId(ledger_id=0, entry_id=99, batch_index=1, batch_size=2), now=0.0)
    tracker.remove_up_to(MessageId(ledger_id=1, entry_id=5, batch_index=0, batch_size=4))
    assert len(tracker) == 2
    assert sorted(tracker.pop_expired(5.0)) == [
        MessageId(ledger_id=1, entry_id=6),
        MessageId(ledger_id=2, entry_id=0),
    ]


def test_remove_all_and_clear() -> None:
    tracker = UnackedMessageTracker(timeout_s=1.0)
    for i in range(5):
        tracker.add(MessageId(ledger_id=1, entry_id=i), now=0.0)
    tracker.remove_all([MessageId(ledger_id=1, entry_id=0), MessageId(ledger_id=1, entry_id=1)])
    assert len(tracker) == 3
    tracker.clear()
    assert len(tracker) == 0 and tracker.pop_expired(10.0) == []


@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 5), st.integers(0, 20)),
        max_size=40,
    )
)
def test_unacked_tracker_expires_exactly_what_a_model_says(
    ops: list[tuple[str, int, int]],
) -> None:
    """Times only move forward; an id expires timeout after it was first added (since its
    last removal) unless it was removed."""
    timeout = 5.0
    tracker = UnackedMessageTracker(timeout)
    model: dict[int, float] = {}
    now = 0.0
    expired_seen: list[int] = []
    for op, entry, step in ops:
        now += step / 4
        for mid in tracker.pop_expired(now):
            expired_seen.append(mid.entry_id())
        expected = sorted(e for e, t in model.items() if t + timeout <= now)
        assert sorted(expired_seen) == expected
        for e in expected:
            del model[e]
        expired_seen.clear()
        if op == "add":
            tracker.add(MessageId(ledger_id=1, entry_id=entry), now)
            model.setdefault(entry, now)
        else:
            tracker.remove(MessageId(ledger_id=1, entry_id=entry))
            model.pop(entry, None)
        assert len(tracker) == len(model)


# ============================================================================ message ids


def test_message_ids_order_by_ledger_then_entry() -> None:
    ids = [
        MessageId(ledger_id=2, entry_id=0),
        MessageId(ledger_id=1, entry_id=7),
        MessageId(ledger_id=1, entry_id=2),
        MessageId(ledger_id=3, entry_id=0),
        MessageId(ledger_id=2, entry_id=1),
    ]
    assert sorted(ids) == [
        MessageId(ledger_id=1, entry_id=2),
        MessageId(ledger_id=1, entry_id=7),
        MessageId(ledger_id=2, entry_id=0),
        MessageId(ledger_id=2, entry_id=1),
        MessageId(ledger_id=3, entry_id=0),
    ]
    assert MessageId(ledger_id=1, entry_id=9) < MessageId(ledger_id=2, entry_id=0)
    assert MessageId(ledger_id=2, entry_id=0) >= MessageId(ledger_id=1, entry_id=9)


def test_a_whole_entry_sorts_after_its_batch_messages() -> None:
    whole = MessageId(ledger_id=5, entry_id=5)
    batch = [MessageId(ledger_id=5, entry_id=5, batch_index=i, batch_size=3) for i in range(3)]
    assert all(m < whole for m in batch)
    assert whole > batch[-1]
    assert sorted([whole, *reversed(batch)]) == [*batch, whole]
    assert MessageId(ledger_id=5, entry_id=4) < batch[0]
    assert whole < MessageId(ledger_id=5, entry_id=6, batch_index=0, batch_size=2)


def test_equality_ignores_topic_and_batch_size() -> None:
    a = MessageId(
        ledger_id=1,
        entry_id=2,
        partition=0,
        batch_index=3,
        batch_size=10,
        topic="persistent://t/n/a",
    )
    b = MessageId(ledger_id=1, entry_id=2, partition=0, batch_index=3, topic="persistent://t/n/b")
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a <= b and a >= b
    assert a != MessageId(ledger_id=1, entry_id=2, partition=1, batch_index=3)
    assert a != MessageId(ledger_id=1, entry_id=2, partition=0, batch_index=4)
    assert a != MessageId(ledger_id=1, entry_id=2, partition=0, batch_index=-1)
    assert a != "1:2:0:3"


def test_accessors_and_the_official_constructor_order() -> None:
    mid = MessageId(3, 10, 20, 4)  # partition, ledger, entry, batch index: the official order
    assert (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index()) == (3, 10, 20, 4)
    official = pulsar.MessageId(3, 10, 20, 4)
    assert MessageId.deserialize(official.serialize()) == mid


def test_entry_id_only_and_with_topic() -> None:
    mid = MessageId(ledger_id=1, entry_id=2, partition=3, batch_index=4, batch_size=5, topic="t")
    entry = mid.entry_id_only()
    assert entry == MessageId(ledger_id=1, entry_id=2, partition=3)
    assert entry.batch_index() == -1 and entry.batch_size == 0 and entry.topic == "t"
    moved = mid.with_topic("u")
    assert moved == mid and moved.topic == "u" and moved.batch_size == 5
    assert mid.topic == "t"


ids_strategy = st.builds(
    MessageId,
    ledger_id=st.integers(-1, LONG_MAX),
    entry_id=st.integers(-1, LONG_MAX),
    partition=st.integers(-1, 1000),
    batch_index=st.integers(-1, 10_000),
    batch_size=st.integers(0, 10_000),
)


@given(ids_strategy, st.none() | st.text(max_size=10))
def test_serialize_round_trips(mid: MessageId, topic: str | None) -> None:
    back = MessageId.deserialize(mid.serialize(), topic)
    assert back == mid
    assert back.batch_size == mid.batch_size
    assert back.topic == topic
    assert MessageId.from_proto(mid.to_proto()) == mid


@given(
    st.integers(-1, 1000),
    st.integers(-1, LONG_MAX),
    st.integers(-1, LONG_MAX),
    st.integers(-1, 10_000),
)
def test_serialized_ids_interoperate_with_the_official_client(
    partition: int, ledger: int, entry: int, batch_index: int
) -> None:
    ours = MessageId(ledger_id=ledger, entry_id=entry, partition=partition, batch_index=batch_index)
    official = pulsar.MessageId(partition, ledger, entry, batch_index)
    assert ours.serialize() == official.serialize()
    theirs = pulsar.MessageId.deserialize(ours.serialize())
    assert (theirs.partition(), theirs.ledger_id(), theirs.entry_id(), theirs.batch_index()) == (
        partition,
        ledger,
        entry,
        batch_index,
    )
    back = MessageId.deserialize(official.serialize())
    assert (back.partition(), back.ledger_id(), back.entry_id(), back.batch_index()) == (
        partition,
        ledger,
        entry,
        batch_index,
    )


@given(
    st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 4)),
    st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 4)),
)
def test_ordering_of_batch_messages_agrees_with_the_official_client(
    a: tuple[int, int, int], b: tuple[int, int, int]
) -> None:
    ours_a, ours_b = MessageId(0, *a), MessageId(0, *b)  # the official argument order
    theirs_a, theirs_b = pulsar.MessageId(0, *a), pulsar.MessageId(0, *b)
    assert (ours_a < ours_b) == (theirs_a < theirs_b)
    assert (ours_a == ours_b) == (theirs_a == theirs_b)


def test_a_batch_size_in_serialized_form_is_kept() -> None:
    data = pb.MessageIdData(ledgerId=1, entryId=2, batch_index=3, batch_size=8)
    mid = MessageId.deserialize(data.SerializeToString())
    assert mid.batch_size == 8 and mid.batch_index() == 3
    assert MessageId.deserialize(mid.serialize()).batch_size == 8


def test_earliest_and_latest_are_the_official_sentinels() -> None:
    assert MessageId.earliest.serialize() == pulsar.MessageId.earliest.serialize()
    assert MessageId.latest.serialize() == pulsar.MessageId.latest.serialize()
    assert MessageId.deserialize(pulsar.MessageId.earliest.serialize()) == MessageId.earliest
    assert MessageId.deserialize(pulsar.MessageId.latest.serialize()) == MessageId.latest
    assert (MessageId.earliest.ledger_id(), MessageId.earliest.entry_id()) == (-1, -1)
    assert (MessageId.latest.ledger_id(), MessageId.latest.entry_id()) == (LONG_MAX, LONG_MAX)
    assert MessageId.earliest != MessageId.latest


@given(st.integers(0, LONG_MAX - 1), st.integers(0, LONG_MAX - 1), st.integers(-1, 100))
def test_earliest_sorts_first_and_latest_last(ledger: int, entry: int, batch: int) -> None:
    mid = MessageId(ledger_id=ledger, entry_id=entry, partition=-1, batch_index=batch)
    assert MessageId.earliest < mid < MessageId.latest


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\xff\xff\xff\xff",
        b"\x08\x01",  # a ledger id, no entry id
        b"\x10\x01",  # an entry id, no ledger id
        b"\x08",  # cut short
        b"not a message id",
    ],
)
def test_deserializing_garbage_is_an_invalid_message(garbage: bytes) -> None:
    with pytest.raises(InvalidMessageError):
        MessageId.deserialize(garbage)


@given(st.binary(max_size=40))
def test_deserializing_any_bytes_either_works_or_is_an_invalid_message(data: bytes) -> None:
    try:
        mid = MessageId.deserialize(data)
    except InvalidMessageError:
        return
    assert isinstance(mid, MessageId)


# ====================================================================== reader start filter


def _kept(start: _StartFilter, ids: list[MessageId]) -> list[MessageId]:
    return [m for m in ids if not start.drops(m)]


def _batch(ledger: int, entry: int, size: int) -> list[MessageId]:
    return [
        MessageId(ledger_id=ledger, entry_id=entry, partition=-1, batch_index=i, batch_size=size)
        for i in range(size)
    ]


def test_start_filter_on_whole_entries() -> None:
    ids = [
        MessageId(ledger_id=1, entry_id=0),
        MessageId(ledger_id=1, entry_id=1),
        MessageId(ledger_id=1, entry_id=2),
        MessageId(ledger_id=2, entry_id=0),
    ]
    assert _kept(_StartFilter(MessageId(ledger_id=1, entry_id=1), inclusive=True), ids) == ids[1:]
    assert _kept(_StartFilter(MessageId(ledger_id=1, entry_id=1), inclusive=False), ids) == ids[2:]
    assert _kept(_StartFilter(MessageId(ledger_id=1, entry_id=2), inclusive=False), ids) == ids[3:]
    assert _kept(_StartFilter(MessageId(ledger_id=2, entry_id=0), inclusive=False), ids) == []


def test_start_filter_on_an_entry_that_is_a_batch() -> None:
    ids = [*_batch(1, 0, 2), *_batch(1, 1, 3), *_batch(1, 2, 2)]
    # The start names the whole batch entry: inclusive keeps all of it, exclusive none.
    assert _kept(_StartFilter(MessageId(ledger_id=1, entry_id=1), inclusive=True), ids) == ids[2:]
    assert _kept(_StartFilter(MessageId(ledger_id=1, entry_id=1), inclusive=False), ids) == ids[5:]


def test_start_filter_on_a_message_inside_a_batch() -> None:
    ids = [*_batch(1, 0, 2), *_batch(1, 1, 4), MessageId(ledger_id=1, entry_id=2)]
    start = MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=2, batch_size=4)
    assert _kept(_StartFilter(start, inclusive=True), ids) == [
        MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=2, batch_size=4),
        MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=3, batch_size=4),
        MessageId(ledger_id=1, entry_id=2),
    ]
    assert _kept(_StartFilter(start, inclusive=False), ids) == [
        MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=3, batch_size=4),
        MessageId(ledger_id=1, entry_id=2),
    ]
    last = MessageId(ledger_id=1, entry_id=1, partition=-1, batch_index=3, batch_size=4)
    assert _kept(_StartFilter(last, inclusive=False), ids) == [MessageId(ledger_id=1, entry_id=2)]


def test_start_filter_at_earliest_drops_nothing() -> None:
    ids = [MessageId(ledger_id=0, entry_id=0), *_batch(0, 1, 3), MessageId(ledger_id=5, entry_id=5)]
    assert _kept(_StartFilter(MessageId.earliest, inclusive=True), ids) == ids
    assert _kept(_StartFilter(MessageId.earliest, inclusive=False), ids) == ids


def test_start_filter_compares_ledgers_before_entries() -> None:
    start = _StartFilter(MessageId(ledger_id=2, entry_id=5), inclusive=True)
    assert start.drops(MessageId(ledger_id=1, entry_id=99))
    assert not start.drops(MessageId(ledger_id=3, entry_id=0))


@st.composite
def topic_layouts(draw: st.DrawFn) -> tuple[list[list[MessageId]], int, int, str, bool]:
    """Entries in order (each the ids of its messages), a chosen message, and how the
    start names it."""
    sizes = draw(st.lists(st.integers(0, 4), min_size=1, max_size=8))
    entries = []
    for n, size in enumerate(sizes):
        ledger, entry = 10 + n // 3, n % 3
        entries.append(
            _batch(ledger, entry, size) if size else [MessageId(ledger_id=ledger, entry_id=entry)]
        )
    e = draw(st.integers(0, len(entries) - 1))
    i = draw(st.integers(0, len(entries[e]) - 1))
    how = draw(st.sampled_from(["message", "entry"]))
    return entries, e, i, how, draw(st.booleans())


@given(topic_layouts())
def test_a_reader_sees_exactly_the_messages_from_its_start(
    layout: tuple[list[list[MessageId]], int, int, str, bool],
) -> None:
    entries, e, i, how, inclusive = layout
    flat = [m for entry in entries for m in entry]
    chosen = entries[e][i]
    if how == "message":
        start = chosen
        position = flat.index(chosen)
        expected = flat[position:] if inclusive else flat[position + 1 :]
    else:
        start = chosen.entry_id_only()
        before = sum(len(x) for x in entries[:e])
        expected = flat[before:] if inclusive else flat[before + len(entries[e]) :]
    assert _kept(_StartFilter(start, inclusive), flat) == expected


def test_after_between_entries() -> None:
    assert _after(MessageId(ledger_id=1, entry_id=5), MessageId(ledger_id=1, entry_id=4))
    assert _after(MessageId(ledger_id=2, entry_id=0), MessageId(ledger_id=1, entry_id=9))
    assert not _after(MessageId(ledger_id=1, entry_id=4), MessageId(ledger_id=1, entry_id=5))
    assert not _after(MessageId(ledger_id=1, entry_id=9), MessageId(ledger_id=2, entry_id=0))
    assert _after(
        MessageId(ledger_id=1, entry_id=5),
        MessageId(ledger_id=1, entry_id=4, partition=-1, batch_index=2, batch_size=3),
    )


def test_after_within_the_last_entry() -> None:
    last = MessageId(ledger_id=1, entry_id=5)
    assert not _after(last, MessageId(ledger_id=1, entry_id=5))  # the whole entry was seen
    assert _after(
        last, MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=0, batch_size=3)
    )
    assert _after(
        last, MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=1, batch_size=3)
    )
    assert not _after(
        last, MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=2, batch_size=3)
    )  # the batch's last message
    assert not _after(
        MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=2, batch_size=3),
        MessageId(ledger_id=1, entry_id=5, partition=-1, batch_index=2, batch_size=3),
    )


# ========================================================================= receiver queue


def _message(n: int, data: bytes = b"x") -> Message:
    return Message(
        _data=data,
        _message_id=MessageId(ledger_id=1, entry_id=n),
        _topic="persistent://public/default/t",
        _properties={},
        _partition_key=None,
        _ordering_key=None,
        _publish_timestamp=0,
        _event_timestamp=0,
        _redelivery_count=0,
        _producer_name="p",
    )


class Taken:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, message: Message) -> None:
        self.messages.append(message)


async def test_take_returns_messages_in_order_and_reports_each() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    messages = [_message(i, b"x" * (i + 1)) for i in range(3)]
    for m in messages:
        queue.put(m)
    assert len(queue) == 3 and queue.bytes == 6
    assert await queue.take() is messages[0]
    assert queue.bytes == 5
    assert queue.take_nowait() is messages[1]
    assert await queue.take(timeout_s=0) is messages[2]
    assert taken.messages == messages
    assert len(queue) == 0 and queue.bytes == 0
    assert queue.take_nowait() is None


async def test_take_waits_for_a_message_put_later() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    task = asyncio.create_task(queue.take(timeout_s=5))
    await asyncio.sleep(0.01)
    assert not task.done()
    message = _message(1)
    queue.put(message)
    assert await asyncio.wait_for(task, 1) is message
    assert taken.messages == [message]


async def test_take_times_out_with_a_client_timeout_error() -> None:
    queue = ReceiverQueue(Taken())
    started = time.monotonic()
    with pytest.raises(ClientTimeoutError) as info:
        await queue.take(timeout_s=0.05)
    assert time.monotonic() - started >= 0.04
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, ClientError)
    with pytest.raises(TimeoutError):  # catchable as the builtin
        await queue.take(timeout_s=0)
    # The queue still works afterwards.
    message = _message(1)
    queue.put(message)
    assert await queue.take(timeout_s=0.05) is message


async def test_a_timed_out_take_loses_no_message() -> None:
    queue = ReceiverQueue(Taken())
    with pytest.raises(ClientTimeoutError):
        await queue.take(timeout_s=0.01)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.take(), 0.01)
    message = _message(1)
    queue.put(message)
    assert len(queue) == 1
    assert queue.take_nowait() is message


async def test_a_cancelled_take_leaves_the_message_queued() -> None:
    queue = ReceiverQueue(Taken())
    task = asyncio.create_task(queue.take())
    await asyncio.sleep(0)
    message = _message(1)
    queue.put(message)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queue.take_nowait() is message


async def test_concurrent_waiters_are_all_served() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    waiters = [asyncio.create_task(queue.take(timeout_s=5)) for _ in range(10)]
    await asyncio.sleep(0)
    messages = [_message(i) for i in range(10)]
    for i, m in enumerate(messages):
        queue.put(m)
        if i % 3 == 0:
            await asyncio.sleep(0)
    got = await asyncio.wait_for(asyncio.gather(*waiters), 2)
    assert sorted(m.message_id() for m in got) == [m.message_id() for m in messages]
    assert len({id(m) for m in got}) == 10
    assert sorted(m.message_id() for m in taken.messages) == [m.message_id() for m in messages]
    assert len(queue) == 0 and queue.bytes == 0


async def test_concurrent_waiters_with_timeouts_all_served_as_messages_trickle_in() -> None:
    queue = ReceiverQueue(Taken())
    # Each message wakes every waiter; those that lose the race wait again, with what is
    # left of their timeout.
    waiters = [asyncio.create_task(queue.take(timeout_s=2.0)) for _ in range(5)]
    await asyncio.sleep(0)
    for i in range(5):
        await asyncio.sleep(0.005)
        queue.put(_message(i))
    got = await asyncio.wait_for(asyncio.gather(*waiters), 2)
    assert sorted(m.message_id().entry_id() for m in got) == [0, 1, 2, 3, 4]


async def test_remove_if_drops_without_reporting_them_taken() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    messages = [_message(i, b"y" * (i + 1)) for i in range(5)]
    for m in messages:
        queue.put(m)
    removed = queue.remove_if(lambda m: m.message_id().entry_id() % 2 == 0)
    assert removed == [messages[0], messages[2], messages[4]]
    assert taken.messages == []
    assert len(queue) == 2 and queue.bytes == 2 + 4
    assert await queue.take() is messages[1]
    assert await queue.take() is messages[3]
    assert taken.messages == [messages[1], messages[3]]
    assert queue.remove_if(lambda m: True) == []


async def test_close_wakes_every_waiter_with_already_closed() -> None:
    queue = ReceiverQueue(Taken())
    waiters = [asyncio.create_task(queue.take()) for _ in range(3)]
    timed = asyncio.create_task(queue.take(timeout_s=10))
    await asyncio.sleep(0.01)
    queue.close()
    results = await asyncio.wait_for(asyncio.gather(*waiters, timed, return_exceptions=True), 1)
    assert all(isinstance(r, AlreadyClosedError) for r in results), results


async def test_a_closed_queue_refuses_takes_even_with_messages() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    queue.put(_message(1))
    queue.close()
    assert queue.closed
    with pytest.raises(AlreadyClosedError):
        await queue.take()
    with pytest.raises(AlreadyClosedError):
        queue.take_nowait()
    assert taken.messages == []


# =========================================================================== service URLs


@pytest.mark.parametrize(
    ("url", "addresses"),
    [
        ("pulsar://localhost:6650", ["localhost:6650"]),
        ("pulsar://localhost", [f"localhost:{DEFAULT_PORT}"]),
        ("pulsar://localhost:6650/", ["localhost:6650"]),
        ("pulsar://broker-1.example.com:7000", ["broker-1.example.com:7000"]),
        ("pulsar://10.0.0.1:6651,10.0.0.2:6652", ["10.0.0.1:6651", "10.0.0.2:6652"]),
        ("pulsar://a:1,b,c:3", ["a:1", "b:6650", "c:3"]),
        ("pulsar://a,b,c", ["a:6650", "b:6650", "c:6650"]),
    ],
)
def test_service_urls_list_their_brokers(url: str, addresses: list[str]) -> None:
    assert parse_service_url(url) == addresses


def test_an_ipv6_broker_without_a_port_gets_the_default_port() -> None:
    assert parse_service_url("pulsar://[::1]:6650") == ["[::1]:6650"]
    assert parse_service_url("pulsar://[::1]") == ["[::1]:6650"]
    assert parse_service_url("pulsar://[fe80::1]:7000,[fe80::2]") == [
        "[fe80::1]:7000",
        "[fe80::2]:6650",
    ]


def test_the_default_port_is_pulsars() -> None:
    assert DEFAULT_PORT == 6650


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8080",
        "https://localhost:8443",
        "pulsar+ssl://localhost:6651",
        "localhost:6650",
        "",
        "pulsar://",
        "pulsar://host:",
        "pulsar://host:port",
        "pulsar://a:1,,b:2",
        "pulsar://:6650",
    ],
)
def test_bad_service_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(InvalidConfigurationError):
        parse_service_url(url)


def test_service_addresses_move_on_after_a_failure() -> None:
    addresses = ServiceAddresses("pulsar://a:1,b:2")
    assert addresses.current() == "a:1"
    addresses.failed("b:2")  # not the current one: no change
    assert addresses.current() == "a:1"
    addresses.failed("a:1")
    assert addresses.current() == "b:2"
    addresses.failed("b:2")
    assert addresses.current() == "a:1"


# ================================================================================= errors


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("ProducerFenced", ProducerFencedError),
        ("TopicNotFound", TopicNotFoundError),
        ("MetadataError", MetadataClientError),
        ("PersistenceError", PersistenceClientError),
        ("AuthenticationError", AuthenticationError),
        ("AuthorizationError", AuthorizationError),
        ("ConsumerBusy", ConsumerBusyError),
        ("ServiceNotReady", ServiceNotReadyError),
        ("ProducerBlockedQuotaExceededError", ProducerBlockedQuotaExceededError),
        ("ProducerBlockedQuotaExceededException", ProducerBlockedQuotaExceededError),
        ("ChecksumError", ChecksumClientError),
        ("SubscriptionNotFound", SubscriptionNotFoundError),
        ("ConsumerNotFound", ConsumerNotFoundError),
        ("TooManyRequests", TooManyRequestsError),
        ("TopicTerminatedError", TopicTerminatedError),
        ("ProducerBusy", ProducerBusyError),
        ("IncompatibleSchema", IncompatibleSchemaError),
        ("NotAllowedError", NotAllowedError),
    ],
)
def test_server_errors_map_to_their_client_errors(name: str, cls: type[Exception]) -> None:
    err = client_error_from_server(name, "the broker says no")
    assert type(err) is cls
    assert isinstance(err, ServerClientError) and isinstance(err, ClientError)
    assert str(err) == "the broker says no"
    assert pb.ServerError.Value(name) >= 0  # a real ServerError name


# The broker's two spellings of one error; the error names the first.
CANONICAL_CODE = {"ProducerBlockedQuotaExceededException": "ProducerBlockedQuotaExceededError"}


def test_mapped_errors_carry_their_server_error_code() -> None:
    for name, cls in CLIENT_ERRORS_BY_SERVER_ERROR.items():
        assert name in pb.ServerError.keys(), name  # no typo'd code
        err = client_error_from_server(name, "")
        assert type(err) is cls
        canonical = CANONICAL_CODE.get(name, name)
        assert err.server_error == canonical  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["UnknownError", "TransactionConflict", "SomethingNew"])
def test_unknown_server_errors_are_server_client_errors_with_the_code(name: str) -> None:
    err = client_error_from_server(name, "details")
    assert type(err) is ServerClientError
    assert err.server_error == name  # type: ignore[attr-defined]
    assert str(err) == "details"
    assert ServerClientError.server_error is None  # the class is left alone
    assert client_error_from_server("TopicNotFound", "").server_error == "TopicNotFound"  # type: ignore[attr-defined]


def test_an_empty_message_falls_back_to_the_code() -> None:
    assert str(client_error_from_server("ProducerFenced", "")) == "ProducerFenced"
    assert str(client_error_from_server("Brand-new", "")) == "Brand-new"


def test_transient_server_errors_are_retriable_and_final_ones_are_not() -> None:
    for name in ("ServiceNotReady", "TooManyRequests", "MetadataError", "PersistenceError"):
        assert client_error_from_server(name, "").retriable, name  # type: ignore[attr-defined]
    for name in ("TopicNotFound", "ProducerFenced", "AuthorizationError", "UnknownError"):
        assert not client_error_from_server(name, "").retriable, name  # type: ignore[attr-defined]


def test_client_timeouts_are_builtin_timeouts() -> None:
    assert issubclass(ClientTimeoutError, TimeoutError)
    assert issubclass(ClientTimeoutError, ClientError)
