"""A real bookie process taking adds over its binary add protocol, and refusing bad bytes."""

from __future__ import annotations

import asyncio
import struct

import pytest

from stripemq.bookie.bookie_client import BookieClient, _BinaryAddChannel, _GrpcAddChannel
from stripemq.errors import BookieUnavailableError, EntryTooLargeError, LedgerFencedError
from stripemq.proto.bookie_binary import (
    MAX_FRAME_BYTES,
    AddResultFrame,
    FrameDecoder,
    encode_add,
    encode_add_result,
)
from stripemq.proto.entry import encode_entry
from stripemq.testing.fixtures import BookieFactory

pytestmark = pytest.mark.integration

KEY = b"writer-key"


async def connected(address: str, *, binary: bool = True) -> BookieClient:
    client = BookieClient(address, timeout=10.0, add_timeout=10.0, use_binary_adds=binary)
    await client.connect()
    return client


def entry(ledger: int, entry_id: int) -> bytes:
    return encode_entry(ledger, entry_id, entry_id - 1, f"{ledger}:{entry_id}".encode() * 10)


async def raw_connection(
    address: str, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(address.rpartition(":")[0], port)


async def test_a_hand_made_add_frame_is_stored_and_answered(make_bookie: BookieFactory) -> None:
    bookie = make_bookie()
    await bookie.start()
    client = await connected(bookie.address)
    try:
        port = (await client.get_info()).binary_add_port
        assert port > 0
        reader, writer = await raw_connection(bookie.address, port)
        writer.write(encode_add(41, KEY, entry(1, 0), False) + encode_add(42, b"thief", b"", False))
        decoder = FrameDecoder()
        answers: list[object] = []
        while len(answers) < 2:
            answers += decoder.feed(await asyncio.wait_for(reader.read(4096), 10))
        writer.close()
        by_id = {a.request_id: a for a in answers if isinstance(a, AddResultFrame)}
        assert by_id[41] == AddResultFrame(41, 0, 1, 0, "")
        assert by_id[42].code != 0 and by_id[42].message  # not an entry: a typed refusal
        assert (await client.read_entry(1, 0)).entry == entry(1, 0)
    finally:
        await client.close()


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # length 1.2 GB: over the frame limit
        struct.pack(">I", 6) + b"\x07\x01zzzz",  # a version this bookie does not speak
        encode_add_result(1, 0, 0, 0),  # a result, which only a bookie sends
    ],
)
async def test_bytes_that_are_not_add_frames_close_that_connection_only(
    make_bookie: BookieFactory, garbage: bytes
) -> None:
    bookie = make_bookie()
    await bookie.start()
    client = await connected(bookie.address)
    try:
        await client.add_entry(KEY, entry(2, 0))  # opens the client's binary connection
        port = (await client.get_info()).binary_add_port
        reader, writer = await raw_connection(bookie.address, port)
        writer.write(garbage)
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing answered
        writer.close()
        assert await client.add_entry(KEY, entry(2, 1)) == (2, 1)
        assert bookie.proc is not None and bookie.proc.poll() is None
    finally:
        await client.close()


async def test_a_restarted_bookie_is_found_on_its_new_port(make_bookie: BookieFactory) -> None:
    bookie = make_bookie()
    await bookie.start()
    client = await connected(bookie.address)
    try:
        assert await client.add_entry(KEY, entry(3, 0)) == (3, 0)
        old_port = (await client.get_info()).binary_add_port
        bookie.kill()
        with pytest.raises(BookieUnavailableError):
            await client.add_entry(KEY, entry(3, 1))
        # Something else takes the old port: a client that kept it would wait forever there.
        squatter = await asyncio.start_server(
            lambda r, w: None, bookie.address.rpartition(":")[0], old_port
        )
        try:
            await bookie.start()
            assert (await client.get_info()).binary_add_port not in (0, old_port)
            assert await client.add_entry(KEY, entry(3, 1)) == (3, 1)
            assert (await client.read_entry(3, 1)).entry == entry(3, 1)
        finally:
            squatter.close()
    finally:
        await client.close()


async def test_with_the_binary_port_off_adds_take_the_grpc_stream(
    make_bookie: BookieFactory,
) -> None:
    bookie = make_bookie(binary_add_port=-1)
    await bookie.start()
    client = await connected(bookie.address)
    try:
        assert (await client.get_info()).binary_add_port == 0
        results = await asyncio.gather(*(client.add_entry(KEY, entry(4, i)) for i in range(50)))
        assert results == [(4, i) for i in range(50)]
        await client.read_entry(4, 0, fence=True, master_key=KEY)
        with pytest.raises(LedgerFencedError):
            await client.add_entry(KEY, entry(4, 50))
    finally:
        await client.close()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "grpc"])
async def test_fencing_refuses_adds_on_either_path(
    make_bookie: BookieFactory, binary: bool
) -> None:
    bookie = make_bookie()
    await bookie.start()
    client = await connected(bookie.address, binary=binary)
    try:
        results = await asyncio.gather(*(client.add_entry(KEY, entry(5, i)) for i in range(200)))
        assert results == [(5, i) for i in range(200)]
        await client.read_entry(5, -1, fence=True, master_key=KEY)
        with pytest.raises(LedgerFencedError):
            await client.add_entry(KEY, entry(5, 200))
        # A recovery add re-replicates onto the fenced ledger.
        assert await client.add_entry(KEY, entry(5, 200), recovery_add=True) == (5, 200)
    finally:
        await client.close()


async def test_an_unreachable_binary_port_falls_back_to_grpc(
    make_bookie: BookieFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A network that lets only the gRPC port through (a firewall, a missing Service port)
    slows adds down, it does not stop them."""

    async def refused(*args: object, **kwargs: object) -> None:
        raise ConnectionRefusedError("port filtered")

    bookie = make_bookie()
    await bookie.start()
    monkeypatch.setattr(_BinaryAddChannel, "open", refused)
    client = await connected(bookie.address)
    try:
        results = await asyncio.gather(*(client.add_entry(KEY, entry(6, i)) for i in range(20)))
        assert results == [(6, i) for i in range(20)]
        assert isinstance(client._add_channel, _GrpcAddChannel)
    finally:
        await client.close()


async def test_an_add_too_large_for_any_frame_fails_alone(make_bookie: BookieFactory) -> None:
    bookie = make_bookie()
    await bookie.start()
    client = await connected(bookie.address)
    try:
        fine = client.add_entry(KEY, entry(7, 0))
        huge = client.add_entry(KEY, b"x" * (MAX_FRAME_BYTES + 1))
        with pytest.raises(EntryTooLargeError):
            await huge
        assert await fine == (7, 0)
    finally:
        await client.close()
