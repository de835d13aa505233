"""The chaos workload's payloads: they name their message and send time, and any change to
those bytes is caught by their checksum."""

from __future__ import annotations

import pytest

from stripemq.chaos.history import SUBSCRIPTION_MODES, MessageKey
from stripemq.chaos.workload import (
    SUBSCRIPTIONS,
    CorruptPayloadError,
    decode_payload,
    encode_payload,
    topics,
)

MESSAGE = MessageKey("dedup-p0", "k3", 1234)


def test_a_payload_names_its_message_and_send_time() -> None:
    payload = encode_payload(MESSAGE, 1_700_000_000_123, padding=100)
    assert len(payload) > 100
    assert decode_payload(payload) == (MESSAGE, 1_700_000_000_123)
    assert decode_payload(encode_payload(MESSAGE, 5, padding=0)) == (MESSAGE, 5)


def test_any_changed_byte_of_the_named_part_is_caught() -> None:
    payload = encode_payload(MESSAGE, 42, padding=10)
    named = len(payload) - 10
    for i in range(named):
        damaged = bytearray(payload)
        damaged[i] ^= 0x04
        with pytest.raises(ValueError):  # CorruptPayloadError, or not a payload at all
            decode_payload(bytes(damaged))


def test_a_changed_digit_is_a_checksum_failure() -> None:
    payload = encode_payload(MESSAGE, 42, padding=0)
    with pytest.raises(CorruptPayloadError):
        decode_payload(payload.replace(b'"s":1234', b'"s":1235'))


@pytest.mark.parametrize("data", [b"", b"hello", b"{} zz", b'{"p":1} 00000000'])
def test_foreign_bytes_are_not_a_payload(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_payload(data)


def test_one_subscription_per_mode_on_a_deduplicated_and_a_plain_topic() -> None:
    assert tuple(SUBSCRIPTIONS) == SUBSCRIPTION_MODES
    assert sorted(topics().values()) == [False, True]
