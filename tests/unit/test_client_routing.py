"""Key hashing and partition routing (``client.routing``): the official clients' hashes,
checked against ground truth and reference implementations, and the routing modes."""

from __future__ import annotations

import itertools

import pytest
from client_helpers import proto_text
from hypothesis import given

from stripemq.client.options import HashingScheme, PartitionsRoutingMode
from stripemq.client.routing import (
    HASHES,
    MessageRouter,
    boost_hash,
    java_string_hash,
    murmur3_32_hash,
)

M32 = 0xFFFFFFFF
INT_MAX = 0x7FFFFFFF


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
