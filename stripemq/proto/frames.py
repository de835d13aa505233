"""The Pulsar binary protocol's framing, sans-IO: bytes in, ``Frame``\\ s out, and back.

A simple frame is ``total_size:u32 | command_size:u32 | BaseCommand``. SEND and MESSAGE
frames carry a payload after the command: an optional broker-entry block (``0x0e02``, size,
``BrokerEntryMetadata``; MESSAGE only), an optional checksum (``0x0e01``, CRC32C of
everything after it), then ``metadata_size:u32 | MessageMetadata | payload``. Everything
after the command is what a broker stores as the entry and sends back unchanged.

``FrameDecoder`` raises ``ProtocolError`` for bytes no peer should send (the connection is
then closed); a bad checksum or unreadable metadata is reported on the frame instead, so
the broker can refuse that one message and keep the connection.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import cast

import crc32c
from google.protobuf.message import DecodeError, Message

from stripemq.errors import StripeMQError
from stripemq.proto import pulsar_api_pb2 as pb

MAGIC_CHECKSUM = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_PADDING = 10 * 1024  # room for the command and headers around a maximal message

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_PAYLOAD_TYPES = frozenset({pb.BaseCommand.SEND, pb.BaseCommand.MESSAGE})


class ProtocolError(StripeMQError):
    """The peer sent bytes that are not a valid frame: close the connection."""


class FrameTooLargeError(ProtocolError):
    """A frame announced more bytes than the limit."""


@dataclass
class Frame:
    """One decoded frame. For SEND and MESSAGE, ``entry`` is everything after the command."""

    command: pb.BaseCommand
    entry: bytes | None = None
    metadata: pb.MessageMetadata | None = None
    payload: bytes = b""
    checksum_ok: bool = True  # also True when the sender added no checksum
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None
    problem: str | None = None  # why the entry is unusable (bad checksum, bad metadata)
    size: int = field(default=0, repr=False)


# ---------------------------------------------------------------------------- commands

_FIELD_OF_MESSAGE = {
    f.message_type.full_name: f.name
    for f in pb.BaseCommand.DESCRIPTOR.fields
    if f.message_type is not None
}


def base_command(body: Message) -> pb.BaseCommand:
    """Wrap a ``Command*`` message in a ``BaseCommand`` of the matching type."""
    name = _FIELD_OF_MESSAGE.get(body.DESCRIPTOR.full_name)
    if name is None:
        raise TypeError(f"{body.DESCRIPTOR.name} is not a BaseCommand sub-command")
    number = pb.BaseCommand.DESCRIPTOR.fields_by_name[name].number
    # Each field's number is its type's value.
    command = pb.BaseCommand(type=cast("pb.BaseCommand.Type", number))
    getattr(command, name).CopyFrom(body)
    return command


def command_body(command: pb.BaseCommand) -> Message | None:
    """The sub-command ``command.type`` names, or ``None`` if it is absent or unknown."""
    field_desc = pb.BaseCommand.DESCRIPTOR.fields_by_number.get(command.type)
    if field_desc is None or field_desc.message_type is None:
        return None
    if not command.HasField(field_desc.name):
        return None
    body: Message = getattr(command, field_desc.name)
    return body


# ---------------------------------------------------------------------------- encoding


def _missing_fields(message: Message) -> list[str]:
    """Required fields left unset (protobuf's runtime has this; its type stubs do not)."""
    missing: list[str] = message.FindInitializationErrors()  # type: ignore[attr-defined]
    return missing


def encode_command(command: pb.BaseCommand | Message) -> bytes:
    """A simple frame."""
    if not isinstance(command, pb.BaseCommand):
        command = base_command(command)
    body = command.SerializeToString()
    return _U32.pack(4 + len(body)) + _U32.pack(len(body)) + body


def encode_entry(metadata: pb.MessageMetadata, payload: bytes, *, checksum: bool = True) -> bytes:
    """What follows a SEND command: optional checksum, metadata, payload."""
    meta = metadata.SerializeToString()
    body = _U32.pack(len(meta)) + meta + payload
    if not checksum:
        return body
    return _U16.pack(MAGIC_CHECKSUM) + _U32.pack(crc32c.crc32c(body)) + body


def encode_payload_command(
    command: pb.BaseCommand | Message,
    entry: bytes,
    *,
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None,
) -> bytes:
    """A SEND or MESSAGE frame around ``entry`` (as made by ``encode_entry``, or stored)."""
    if not isinstance(command, pb.BaseCommand):
        command = base_command(command)
    body = command.SerializeToString()
    prefix = b""
    if broker_entry_metadata is not None:
        raw = broker_entry_metadata.SerializeToString()
        prefix = _U16.pack(MAGIC_BROKER_ENTRY_METADATA) + _U32.pack(len(raw)) + raw
    total = 4 + len(body) + len(prefix) + len(entry)
    return b"".join((_U32.pack(total), _U32.pack(len(body)), body, prefix, entry))


# ---------------------------------------------------------------------------- decoding


class FrameDecoder:
    """Feed it bytes as they arrive; it returns every frame they complete."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= 4:
            (total,) = _U32.unpack_from(self._buffer, 0)
            if total > self.max_frame_size:
                raise FrameTooLargeError(
                    f"frame of {total} bytes exceeds the limit of {self.max_frame_size}"
                )
            if len(self._buffer) < 4 + total:
                break
            raw = bytes(self._buffer[4 : 4 + total])
            del self._buffer[: 4 + total]
            frames.append(decode_frame(raw))
        return frames


def decode_frame(raw: bytes) -> Frame:
    """One frame without its leading total size."""
    if len(raw) < 4:
        raise ProtocolError(f"frame of {len(raw)} bytes has no command size")
    (size,) = _U32.unpack_from(raw, 0)
    if size == 0 or size > len(raw) - 4:
        raise ProtocolError(f"command size {size} does not fit a frame of {len(raw)} bytes")
    command = pb.BaseCommand()
    try:
        command.ParseFromString(raw[4 : 4 + size])
    except (DecodeError, RuntimeError) as exc:
        raise ProtocolError(f"unreadable command: {exc}") from None
    if not command.IsInitialized():  # an unknown type, or a required field missing
        missing = ", ".join(_missing_fields(command))
        raise ProtocolError(f"command lacks required fields: {missing}")
    frame = Frame(command=command, size=len(raw) + 4)
    if command.type in _PAYLOAD_TYPES:
        _decode_entry(frame, memoryview(raw)[4 + size :])
    return frame


def _decode_entry(frame: Frame, rest: memoryview) -> None:
    if frame.command.type == pb.BaseCommand.MESSAGE and _magic(rest) == MAGIC_BROKER_ENTRY_METADATA:
        if len(rest) < 6:
            raise ProtocolError("broker entry metadata cut short")
        (length,) = _U32.unpack_from(rest, 2)
        if 6 + length > len(rest):
            raise ProtocolError("broker entry metadata runs past the frame")
        frame.broker_entry_metadata = pb.BrokerEntryMetadata()
        try:
            frame.broker_entry_metadata.ParseFromString(bytes(rest[6 : 6 + length]))
        except DecodeError as exc:
            raise ProtocolError(f"unreadable broker entry metadata: {exc}") from None
        rest = rest[6 + length :]
    frame.entry = bytes(rest)
    metadata, payload, problem = parse_entry(frame.entry)
    frame.metadata, frame.payload, frame.problem = metadata, payload, problem
    frame.checksum_ok = problem != "checksum mismatch"


def _magic(data: memoryview) -> int | None:
    return _U16.unpack_from(data, 0)[0] if len(data) >= 2 else None


def parse_entry(entry: bytes) -> tuple[pb.MessageMetadata | None, bytes, str | None]:
    """``(metadata, payload, problem)`` of a stored or sent entry; ``problem`` says why the
    entry cannot be used (its checksum or metadata), ``None`` if it can."""
    metadata, rest, problem = _read_metadata(memoryview(entry), verify=True)
    return metadata, bytes(rest) if metadata is not None else b"", problem


def entry_metadata(entry: bytes) -> pb.MessageMetadata | None:
    """The metadata of an entry verified when it arrived (the broker's stored entries):
    no second checksum pass over the payload, and no copy of it. ``None`` if unreadable."""
    metadata, _rest, _problem = _read_metadata(memoryview(entry), verify=False)
    return metadata


def _read_metadata(
    view: memoryview, *, verify: bool
) -> tuple[pb.MessageMetadata | None, memoryview, str | None]:
    """The metadata, the payload after it, and what is wrong if anything."""
    empty = memoryview(b"")
    if _magic(view) == MAGIC_CHECKSUM:
        if len(view) < 6:
            return None, empty, "checksum cut short"
        (expected,) = _U32.unpack_from(view, 2)
        view = view[6:]
        if verify and crc32c.crc32c(view) != expected:
            return None, empty, "checksum mismatch"
    if len(view) < 4:
        return None, empty, "no metadata size"
    (length,) = _U32.unpack_from(view, 0)
    if 4 + length > len(view):
        return None, empty, f"metadata size {length} runs past the entry"
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(bytes(view[4 : 4 + length]))
    except (DecodeError, RuntimeError) as exc:
        return None, empty, f"unreadable metadata: {exc}"
    if not metadata.IsInitialized():
        return None, empty, "metadata lacks " + ", ".join(_missing_fields(metadata))
    return metadata, view[4 + length :], None


# ---------------------------------------------------------------------------- batches


@dataclass(frozen=True)
class BatchMessage:
    metadata: pb.SingleMessageMetadata
    payload: bytes


def encode_batch(messages: list[BatchMessage]) -> bytes:
    """A batch payload: each message as ``size:u32 | SingleMessageMetadata | payload``."""
    parts: list[bytes] = []
    for message in messages:
        meta = pb.SingleMessageMetadata()
        meta.CopyFrom(message.metadata)
        meta.payload_size = len(message.payload)
        raw = meta.SerializeToString()
        parts += (_U32.pack(len(raw)), raw, message.payload)
    return b"".join(parts)


def decode_batch(payload: bytes, count: int) -> list[BatchMessage]:
    """The ``count`` messages of an (uncompressed) batch payload; ``ProtocolError`` if it
    does not hold exactly that."""
    view = memoryview(payload)
    offset = 0
    messages: list[BatchMessage] = []
    for i in range(count):
        if offset + 4 > len(view):
            raise ProtocolError(f"batch message {i} of {count} is missing")
        (length,) = _U32.unpack_from(view, offset)
        offset += 4
        if offset + length > len(view):
            raise ProtocolError(f"batch message {i}: metadata runs past the payload")
        meta = pb.SingleMessageMetadata()
        try:
            meta.ParseFromString(bytes(view[offset : offset + length]))
        except (DecodeError, RuntimeError) as exc:
            raise ProtocolError(f"batch message {i}: unreadable metadata: {exc}") from None
        if not meta.IsInitialized():
            raise ProtocolError(f"batch message {i}: metadata lacks its payload size")
        offset += length
        end = offset + meta.payload_size
        if meta.payload_size < 0 or end > len(view):
            raise ProtocolError(f"batch message {i} runs past the payload")
        messages.append(BatchMessage(meta, bytes(view[offset:end])))
        offset = end
    if offset != len(view):
        raise ProtocolError(f"{len(view) - offset} stray bytes after {count} batch messages")
    return messages
