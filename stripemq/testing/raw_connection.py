"""A bare Pulsar-protocol connection for tests: frames out as given, every frame in kept."""

from __future__ import annotations

import asyncio
from collections import Counter

from google.protobuf.message import Message

from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import Frame, FrameDecoder, encode_command


class RawConnection:
    """A Pulsar protocol connection that keeps every frame the broker sends, in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.frames: list[Frame] = []
        self.closed_by_peer = False
        self._taken: Counter[int] = Counter()
        self._arrived = asyncio.Condition()
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, port: int, *, handshake: bool = False) -> RawConnection:
        """Connect to a broker on 127.0.0.1; with ``handshake``, CONNECT and wait for it."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        connection = cls(reader, writer)
        if handshake:
            connection.command(pb.CommandConnect(client_version="raw", protocol_version=20))
            await connection.expect(pb.BaseCommand.CONNECTED)
        return connection

    async def _read(self) -> None:
        decoder = FrameDecoder()
        while data := await self._reader.read(65536):
            async with self._arrived:
                self.frames.extend(decoder.feed(data))
                self._arrived.notify_all()
        async with self._arrived:
            self.closed_by_peer = True
            self._arrived.notify_all()

    def pause_reading(self) -> None:
        """Take nothing more from the socket (the broker's writes pile up), until resumed."""
        transport = self._writer.transport
        assert isinstance(transport, asyncio.ReadTransport)
        transport.pause_reading()

    def resume_reading(self) -> None:
        transport = self._writer.transport
        assert isinstance(transport, asyncio.ReadTransport)
        transport.resume_reading()

    def send(self, raw: bytes) -> None:
        """Write bytes as they are (frames, parts of frames or garbage)."""
        self._writer.write(raw)

    def command(self, body: Message) -> None:
        """Write one command (a ``Command*`` message or a ``BaseCommand``)."""
        self.send(encode_command(body))

    def types(self) -> list[int]:
        return [frame.command.type for frame in self.frames]

    async def wait_for(self, kind: int, count: int = 1, timeout: float = 15.0) -> Frame:
        """The ``count``-th frame of type ``kind``, once it has arrived."""

        def arrived() -> bool:
            return self.types().count(kind) >= count or self.closed_by_peer

        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(arrived), timeout)
        found = [frame for frame in self.frames if frame.command.type == kind]
        if len(found) < count:
            raise ConnectionError("the broker closed the connection")
        return found[count - 1]

    async def expect(self, kind: int, timeout: float = 15.0) -> pb.BaseCommand:
        """The next command of type ``kind`` not yet taken by an earlier ``expect``."""
        self._taken[kind] += 1
        return (await self.wait_for(kind, self._taken[kind], timeout)).command

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._writer.close()
