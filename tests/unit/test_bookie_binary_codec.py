"""The binary add protocol's codec, driven directly: round trips, split reads, bad bytes."""

from __future__ import annotations

import struct

import pytest

from stripemq.errors import BookieProtocolError
from stripemq.proto.bookie_binary import (
    MAX_FRAME_BYTES,
    OP_ADD,
    VERSION,
    AddFrame,
    AddResultFrame,
    FrameDecoder,
    encode_add,
    encode_add_result,
)


def test_frames_round_trip_in_one_read() -> None:
    data = (
        encode_add(1, b"key", b"entry bytes", False)
        + encode_add(2**64 - 1, b"", b"", True)
        + encode_add_result(7, 0, 3, 4)
        + encode_add_result(8, -101, 0, 0, "ledger 3 is fenced")
    )
    assert FrameDecoder().feed(data) == [
        AddFrame(1, b"key", b"entry bytes", False),
        AddFrame(2**64 - 1, b"", b"", True),
        AddResultFrame(7, 0, 3, 4, ""),
        AddResultFrame(8, -101, 0, 0, "ledger 3 is fenced"),
    ]


def test_a_frame_split_anywhere_comes_out_whole_once() -> None:
    data = encode_add(5, b"k" * 20, bytes(range(256)) * 4, False) + encode_add_result(5, 0, 9, 1)
    decoder = FrameDecoder()
    frames = []
    for i in range(len(data)):
        frames += decoder.feed(data[i : i + 1])
    assert frames == [
        AddFrame(5, b"k" * 20, bytes(range(256)) * 4, False),
        AddResultFrame(5, 0, 9, 1, ""),
    ]
    assert decoder.buffered == 0


def body_frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (body_frame(bytes([9, OP_ADD]) + b"\x00" * 11), "protocol version 9"),
        (body_frame(bytes([VERSION, 77])), "unknown opcode 77"),
        (body_frame(b""), "no opcode"),
        (body_frame(bytes([VERSION, OP_ADD]) + b"\x00" * 5), "shorter than its fields"),
        (
            body_frame(bytes([VERSION, OP_ADD]) + struct.pack(">QBH", 1, 0, 500) + b"key"),
            "shorter than its master key",
        ),
        (body_frame(bytes([VERSION, 2]) + b"\x00" * 3), "shorter than its fields"),
        (struct.pack(">I", MAX_FRAME_BYTES + 1), "over the limit"),
    ],
)
def test_bytes_that_are_not_frames_are_refused(data: bytes, complaint: str) -> None:
    with pytest.raises(BookieProtocolError, match=complaint) as refused:
        FrameDecoder().feed(data)
    assert refused.value.bk_code == -16  # BookKeeper's ProtocolVersionException


def test_an_oversized_length_is_refused_before_its_bytes_arrive() -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(BookieProtocolError):
        decoder.feed(struct.pack(">I", 1025))


def test_encoding_refuses_what_does_not_fit_a_frame() -> None:
    with pytest.raises(BookieProtocolError):
        encode_add(1, b"k" * 70_000, b"", False)
    assert len(encode_add_result(1, -1, 0, 0, "x" * 10_000)) < 4200  # messages are trimmed
