"""Batch-index ack sets (``proto.ack_set``): Java ``BitSet`` long arrays, a bit set while
its message is unacknowledged."""

from __future__ import annotations

import pytest
from client_helpers import LONG_MAX
from hypothesis import given
from hypothesis import strategies as st

from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import bits_of, words_of

M64 = (1 << 64) - 1


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
