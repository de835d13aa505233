"""The compression codecs (``proto.compression``): round trips, the official clients' wire
formats, and what bad input raises."""

from __future__ import annotations

import zlib

import lz4.block
import pyarrow as pa
import pytest
import zstandard
from client_helpers import COMPRESSIONS
from hypothesis import given, settings
from hypothesis import strategies as st

from stripemq.errors import ClientError, InvalidConfigurationError, InvalidMessageError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.compression import compress, decompress


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
    # SNAPPY: a raw block (its length first), not the framed stream format.
    snappy = pa.Codec("snappy")
    assert snappy.decompress(compress(pb.SNAPPY, data), len(data), asbytes=True) == data
    assert compress(pb.NONE, data) == data


def test_payloads_from_other_encoders_decompress() -> None:
    data = b"written elsewhere " * 30
    assert decompress(pb.LZ4, lz4.block.compress(data, store_size=False), len(data)) == data
    assert decompress(pb.ZLIB, zlib.compress(data, 9), len(data)) == data
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(pb.ZSTD, no_size, len(data)) == data
    raw_snappy = pa.Codec("snappy").compress(data, asbytes=True)
    assert decompress(pb.SNAPPY, raw_snappy, len(data)) == data


@pytest.mark.parametrize("kind", [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
@pytest.mark.parametrize(
    "garbage", [b"", b"\x00", b"this is not compressed at all", bytes(range(256))]
)
def test_decompressing_garbage_is_an_invalid_message(kind: int, garbage: bytes) -> None:
    with pytest.raises(InvalidMessageError):
        decompress(kind, garbage, 64)


@pytest.mark.parametrize("kind", [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
@pytest.mark.parametrize("delta", [-1, 1, 100])
def test_decompressing_to_the_wrong_size_is_an_invalid_message(kind: int, delta: int) -> None:
    data = b"sized payload " * 40
    with pytest.raises(InvalidMessageError):
        decompress(kind, compress(kind, data), len(data) + delta)


def test_a_snappy_block_claiming_more_than_its_metadata_is_refused_before_decoding() -> None:
    """The block's own length is checked against the metadata's first: a hostile block
    cannot make the codec allocate what it claims."""
    huge_claim = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"tiny"
    with pytest.raises(InvalidMessageError, match="declares"):
        decompress(pb.SNAPPY, huge_claim, 4)


def test_an_unknown_codec_is_refused_both_ways() -> None:
    with pytest.raises(InvalidConfigurationError):
        compress(99, b"data")
    with pytest.raises(InvalidMessageError):
        decompress(99, b"data", 4)


def test_invalid_message_error_is_a_client_error() -> None:
    with pytest.raises(ClientError):
        decompress(pb.ZLIB, b"junk", 4)
