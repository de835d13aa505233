"""The bookie's binary add protocol (sans-IO): the write path without gRPC.

BookKeeper's own clients add entries over a lean length-prefixed protocol (its "v2 wire
protocol", which Pulsar brokers use by default). This is stripemq's equivalent for adds only;
reads, fencing and the rest stay on the bookie's gRPC service. Each frame is::

    length:u32 | version:u8 | opcode:u8 | body          (big-endian; length counts
                                                          everything after itself)
    ADD         body = request_id:u64 | flags:u8 | key_length:u16 | master_key | entry
    ADD_RESULT  body = request_id:u64 | code:i32 | ledger_id:u64 | entry_id:u64 | message

``flags`` bit 0 marks a recovery add; ``code`` is the BookKeeper return code (0 = stored) and
``message`` its UTF-8 explanation. Results come back in any order, tagged with the
``request_id`` the client chose, as on the gRPC add stream.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from stripemq.errors import BookieProtocolError

VERSION = 1
OP_ADD = 1
OP_ADD_RESULT = 2
FLAG_RECOVERY_ADD = 0x01
# Larger than any entry a broker writes (5 MiB) plus its framing; anything bigger is not ours.
MAX_FRAME_BYTES = 64 * 1024 * 1024

_LENGTH = struct.Struct(">I")
_PREAMBLE = struct.Struct(">IBB")  # length, version, opcode
_ADD = struct.Struct(">QBH")
_ADD_RESULT = struct.Struct(">QiQQ")
_ADD_FIXED = _PREAMBLE.size - _LENGTH.size + _ADD.size
_RESULT_FIXED = _PREAMBLE.size - _LENGTH.size + _ADD_RESULT.size


@dataclass(frozen=True, slots=True)
class AddFrame:
    request_id: int
    master_key: bytes
    entry: bytes
    recovery_add: bool = False


@dataclass(frozen=True, slots=True)
class AddResultFrame:
    request_id: int
    code: int
    ledger_id: int
    entry_id: int
    message: str = ""


Frame = AddFrame | AddResultFrame


def encode_add(request_id: int, master_key: bytes, entry: bytes, recovery_add: bool) -> bytes:
    if len(master_key) > 0xFFFF:
        raise BookieProtocolError(f"master key of {len(master_key)} bytes is too long")
    length = _ADD_FIXED + len(master_key) + len(entry)
    if length > MAX_FRAME_BYTES:
        raise BookieProtocolError(f"add of {len(entry)} bytes is larger than a frame")
    flags = FLAG_RECOVERY_ADD if recovery_add else 0
    head = _PREAMBLE.pack(length, VERSION, OP_ADD) + _ADD.pack(request_id, flags, len(master_key))
    return b"".join((head, master_key, entry))


def encode_add_result(
    request_id: int, code: int, ledger_id: int, entry_id: int, message: str = ""
) -> bytes:
    text = message.encode("utf-8", "replace")[:4096]
    head = _PREAMBLE.pack(_RESULT_FIXED + len(text), VERSION, OP_ADD_RESULT)
    return b"".join((head, _ADD_RESULT.pack(request_id, code, ledger_id, entry_id), text))


class FrameDecoder:
    """Bytes in, whole frames out. Raises ``BookieProtocolError`` on anything malformed;
    after that the connection is beyond repair and its owner closes it."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        start = 0
        with memoryview(buffer) as view:
            while len(buffer) - start >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(buffer, start)
                if length > self.max_frame_bytes:
                    raise BookieProtocolError(f"frame of {length} bytes is over the limit")
                end = start + _LENGTH.size + length
                if end > len(buffer):
                    break
                with view[start + _LENGTH.size : end] as body:
                    frames.append(_decode(body))
                start = end
        if start:
            del buffer[:start]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)


def _decode(body: memoryview) -> Frame:
    if len(body) < 2:
        raise BookieProtocolError(f"frame of {len(body)} bytes has no opcode")
    version, opcode = body[0], body[1]
    if version != VERSION:
        raise BookieProtocolError(f"protocol version {version} (this bookie speaks 1)")
    if opcode == OP_ADD:
        if len(body) < _ADD_FIXED:
            raise BookieProtocolError("ADD frame shorter than its fields")
        request_id, flags, key_length = _ADD.unpack_from(body, 2)
        key_end = _ADD_FIXED + key_length
        if len(body) < key_end:
            raise BookieProtocolError("ADD frame shorter than its master key")
        return AddFrame(
            request_id,
            bytes(body[_ADD_FIXED:key_end]),
            bytes(body[key_end:]),
            bool(flags & FLAG_RECOVERY_ADD),
        )
    if opcode == OP_ADD_RESULT:
        if len(body) < _RESULT_FIXED:
            raise BookieProtocolError("ADD_RESULT frame shorter than its fields")
        request_id, code, ledger_id, entry_id = _ADD_RESULT.unpack_from(body, 2)
        message = bytes(body[_RESULT_FIXED:]).decode("utf-8", "replace")
        return AddResultFrame(request_id, code, ledger_id, entry_id, message)
    raise BookieProtocolError(f"unknown opcode {opcode}")
