"""Payload codecs, byte-compatible with the official clients: LZ4 as a raw block (the size
travels in ``MessageMetadata.uncompressed_size``), ZLIB with its header, ZSTD frames, and
SNAPPY as a raw block (its own length first, no framing)."""

from __future__ import annotations

import zlib

import cramjam
import lz4.block
import zstandard

from stripemq.errors import InvalidConfigurationError, InvalidMessageError
from stripemq.proto import pulsar_api_pb2 as pb

_ZSTD_LEVEL = 3  # the official clients' level
MAX_UNCOMPRESSED_SIZE = 128 * 1024 * 1024  # a payload claiming more is refused
_zstd_compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
_zstd_decompressor = zstandard.ZstdDecompressor()


def compress(kind: int, data: bytes) -> bytes:
    """``data`` compressed with protocol ``CompressionType`` ``kind``."""
    if kind == pb.NONE:
        return data
    if kind == pb.LZ4:
        return lz4.block.compress(data, store_size=False)
    if kind == pb.ZLIB:
        return zlib.compress(data)
    if kind == pb.ZSTD:
        return _zstd_compressor.compress(data)
    if kind == pb.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    name = pb.CompressionType.Name(kind) if kind in pb.CompressionType.values() else kind
    raise InvalidConfigurationError(f"compression {name} is not supported")


def decompress(kind: int, data: bytes, uncompressed_size: int) -> bytes:
    """The payload behind ``data``; ``InvalidMessageError`` if it does not decode to
    exactly ``uncompressed_size`` bytes (never more is produced, so a hostile message
    cannot make this allocate beyond what its metadata claims, and that is bounded)."""
    if kind != pb.NONE and not 0 <= uncompressed_size <= MAX_UNCOMPRESSED_SIZE:
        raise InvalidMessageError(f"uncompressed size {uncompressed_size} is out of bounds")
    try:
        if kind == pb.NONE:
            out = data
        elif kind == pb.LZ4:
            out = lz4.block.decompress(data, uncompressed_size=uncompressed_size)
        elif kind == pb.ZLIB:
            out = zlib.decompressobj().decompress(data, uncompressed_size + 1)
        elif kind == pb.ZSTD:
            declared = zstandard.frame_content_size(data)
            if declared > uncompressed_size:
                raise InvalidMessageError(f"zstd frame declares {declared} bytes")
            out = _zstd_decompressor.decompress(data, max_output_size=uncompressed_size)
        elif kind == pb.SNAPPY:
            length = snappy_length(data)
            if length != uncompressed_size:  # checked first: the block sizes its output
                raise InvalidMessageError(
                    f"snappy block declares {length} bytes, metadata says {uncompressed_size}"
                )
            out = bytes(cramjam.snappy.decompress_raw(data))
        else:
            raise InvalidMessageError(f"unsupported compression type {kind}")
    except (
        lz4.block.LZ4BlockError,
        zlib.error,
        zstandard.ZstdError,
        cramjam.DecompressionError,
    ) as exc:
        raise InvalidMessageError(f"payload does not decompress: {exc}") from None
    if kind != pb.NONE and len(out) != uncompressed_size:
        raise InvalidMessageError(
            f"payload decompressed to {len(out)} bytes, metadata says {uncompressed_size}"
        )
    return out


def snappy_length(block: bytes) -> int | None:
    """The uncompressed length a raw Snappy block starts with (a varint), if readable."""
    value = shift = 0
    for byte in block[:5]:
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    return None
