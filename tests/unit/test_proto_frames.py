"""The Pulsar frame codec: layout, round trips, limits, and fuzzing."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import (
    BatchMessage,
    FrameDecoder,
    FrameTooLargeError,
    ProtocolError,
    base_command,
    command_body,
    decode_batch,
    encode_batch,
    encode_command,
    encode_entry,
    encode_payload_command,
    parse_entry,
)


def metadata(sequence_id: int = 7, **fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="p-1", sequence_id=sequence_id, publish_time=1_700_000_000_000, **fields
    )


def test_a_ping_frame_is_laid_out_as_the_protocol_says() -> None:
    # type = 18 (field 1, varint), then field 18 (ping), an empty message.
    assert encode_command(pb.CommandPing()).hex() == "00000009000000050812920100"


def test_the_checksum_is_crc32c_over_metadata_size_metadata_and_payload() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # the Castagnoli check value
    entry = encode_entry(metadata(), b"hello")
    magic, checksum = struct.unpack_from(">HI", entry)
    assert magic == 0x0E01 and checksum == crc32c.crc32c(entry[6:])
    (meta_size,) = struct.unpack_from(">I", entry, 6)
    assert entry[10 + meta_size :] == b"hello"


def test_send_round_trips_and_keeps_the_entry_as_sent() -> None:
    entry = encode_entry(metadata(num_messages_in_batch=2), b"payload")
    frame_bytes = encode_payload_command(pb.CommandSend(producer_id=1, sequence_id=7), entry)
    [frame] = FrameDecoder().feed(frame_bytes)
    assert frame.command.type == pb.BaseCommand.SEND
    assert command_body(frame.command) == pb.CommandSend(producer_id=1, sequence_id=7)
    assert frame.entry == entry and frame.payload == b"payload" and frame.checksum_ok
    assert frame.metadata is not None and frame.metadata.HasField("num_messages_in_batch")
    assert frame.size == len(frame_bytes)


def test_message_frames_carry_broker_entry_metadata_before_the_entry() -> None:
    entry = encode_entry(metadata(), b"x", checksum=False)
    frame_bytes = encode_payload_command(
        pb.CommandMessage(consumer_id=3, message_id=pb.MessageIdData(ledgerId=4, entryId=5)),
        entry,
        broker_entry_metadata=pb.BrokerEntryMetadata(broker_timestamp=9, index=10),
    )
    [frame] = FrameDecoder().feed(frame_bytes)
    assert frame.broker_entry_metadata == pb.BrokerEntryMetadata(broker_timestamp=9, index=10)
    assert frame.entry == entry and frame.payload == b"x" and frame.problem is None


def test_a_corrupt_entry_is_reported_on_the_frame_not_raised() -> None:
    entry = bytearray(encode_entry(metadata(), b"payload"))
    entry[-1] ^= 0xFF
    [frame] = FrameDecoder().feed(
        encode_payload_command(pb.CommandSend(producer_id=1, sequence_id=7), bytes(entry))
    )
    assert not frame.checksum_ok and frame.problem == "checksum mismatch"
    [frame] = FrameDecoder().feed(
        encode_payload_command(pb.CommandSend(producer_id=1, sequence_id=7), b"\x00\x00\x00\x05abc")
    )
    assert frame.problem is not None and frame.metadata is None


def test_frames_split_anywhere_decode_the_same() -> None:
    stream = b"".join(
        [
            encode_command(pb.CommandConnect(client_version="t", protocol_version=20)),
            encode_payload_command(
                pb.CommandSend(producer_id=1, sequence_id=1), encode_entry(metadata(1), b"a" * 300)
            ),
            encode_command(pb.CommandFlow(consumer_id=1, messagePermits=1000)),
        ]
    )
    whole = FrameDecoder().feed(stream)
    decoder = FrameDecoder()
    pieces = [f for i in range(len(stream)) for f in decoder.feed(stream[i : i + 1])]
    assert [f.command for f in pieces] == [f.command for f in whole]
    assert [f.command.type for f in whole] == [
        pb.BaseCommand.CONNECT,
        pb.BaseCommand.SEND,
        pb.BaseCommand.FLOW,
    ]
    assert decoder.buffered == 0


def test_an_oversized_frame_is_refused_before_its_body_arrives() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(struct.pack(">I", 1025))


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack(">II", 4, 0),  # an empty command
        struct.pack(">II", 6, 9) + b"ab",  # command size beyond the frame
        struct.pack(">II", 7, 3) + b"\xff\xff\xff",  # not a protobuf
        struct.pack(">II", 6, 2) + b"\x08\x63",  # type 99: no such command
        struct.pack(">I", 2) + b"ab",  # no room for a command size
    ],
)
def test_malformed_frames_raise_protocol_errors(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(raw)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_bytes_give_frames_or_a_protocol_error_and_nothing_else(raw: bytes) -> None:
    try:
        frames = FrameDecoder(max_frame_size=4096).feed(raw)
    except ProtocolError:
        return
    assert all(frame.command.IsInitialized() for frame in frames)  # only whole commands


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.integers(0, 119), st.integers(0, 255))
def test_a_flipped_byte_in_a_send_never_escapes_as_another_exception(
    payload: bytes, where: int, value: int
) -> None:
    frame_bytes = bytearray(
        encode_payload_command(
            pb.CommandSend(producer_id=1, sequence_id=2), encode_entry(metadata(), payload)
        )
    )
    frame_bytes[where % len(frame_bytes)] = value
    try:
        frames = FrameDecoder(max_frame_size=4096).feed(bytes(frame_bytes))
    except ProtocolError:
        return
    for frame in frames:  # decoded, perhaps incomplete, or flagged with a problem
        assert frame.problem is not None or frame.metadata is not None or not frame.entry


@given(
    st.lists(
        st.tuples(st.binary(max_size=50), st.one_of(st.none(), st.text(max_size=10))),
        min_size=1,
        max_size=8,
    )
)
def test_batches_round_trip(items: list[tuple[bytes, str | None]]) -> None:
    messages = [
        BatchMessage(
            pb.SingleMessageMetadata(payload_size=0, partition_key=key)
            if key is not None
            else pb.SingleMessageMetadata(payload_size=0),
            payload,
        )
        for payload, key in items
    ]
    decoded = decode_batch(encode_batch(messages), len(messages))
    assert [m.payload for m in decoded] == [p for p, _ in items]
    assert [
        m.metadata.partition_key if m.metadata.HasField("partition_key") else None for m in decoded
    ] == [k for _, k in items]
    with pytest.raises(ProtocolError):
        decode_batch(encode_batch(messages), len(messages) + 1)
    with pytest.raises(ProtocolError):
        decode_batch(encode_batch(messages)[:-1] if items[-1][0] else b"\x00", len(messages))


def test_base_command_wraps_any_sub_command() -> None:
    command = base_command(pb.CommandLookupTopic(topic="persistent://a/b/c", request_id=4))
    assert command.type == pb.BaseCommand.LOOKUP
    assert command.lookupTopic.topic == "persistent://a/b/c"
    with pytest.raises(TypeError):
        base_command(pb.MessageIdData(ledgerId=1, entryId=2))
    unknown = pb.BaseCommand(type=pb.BaseCommand.NEW_TXN)  # parsed, body not modelled
    assert command_body(unknown) is None
    assert parse_entry(b"")[2] is not None


def test_entries_and_batches_missing_required_fields_are_refused() -> None:
    partial = pb.MessageMetadata(sequence_id=1)  # no producer name, no publish time
    raw = partial.SerializePartialToString()
    entry = struct.pack(">I", len(raw)) + raw + b"x"
    metadata_, _, problem = parse_entry(entry)
    assert metadata_ is None and problem is not None and "producer_name" in problem
    no_size = pb.SingleMessageMetadata(partition_key="k").SerializePartialToString()
    with pytest.raises(ProtocolError, match="payload size"):
        decode_batch(struct.pack(">I", len(no_size)) + no_size, 1)
