"""The bookie's listener for the binary add protocol (``stripemq.proto.bookie_binary``).

Adds that arrive in one read go to storage as one batch (one journal append); their results
go back in one socket write per event-loop turn. A connection that sends bytes that are not
frames is closed, and only that connection: the bookie and its other clients carry on.
"""

from __future__ import annotations

import asyncio
import logging
import time

from stripemq.bookie.handler import BookieRequestHandler
from stripemq.bookie.storage.engine import AddOp
from stripemq.errors import BookieProtocolError
from stripemq.proto.bookie_binary import AddFrame, FrameDecoder, encode_add_result
from stripemq.proto.entry import EntryHeader

log = logging.getLogger(__name__)

# Adds one connection may have in storage before the bookie stops reading from it; reading
# resumes once half of them are answered.
MAX_INFLIGHT_ADDS = 4096


class BinaryAddServer:
    """Serves adds over the binary protocol through the bookie's request handler."""

    def __init__(self, handler: BookieRequestHandler) -> None:
        self.handler = handler
        self.port: int | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[_AddConnection] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: a free port); returns the port bound."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _AddConnection(self.handler, self._connections), host, port
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self, grace: float = 5.0) -> None:
        """Stop accepting and reading; answer the adds already in storage (for up to
        ``grace`` seconds), then close the connections."""
        if self._server is None:
            return
        self._server.close()
        connections = list(self._connections)
        for connection in connections:
            connection.stop_reading()
        in_storage = [task for connection in connections for task in connection.tasks]
        if in_storage:
            await asyncio.wait(in_storage, timeout=grace)
        for connection in connections:
            connection.close()
        await self._server.wait_closed()


class _AddConnection(asyncio.Protocol):
    def __init__(self, handler: BookieRequestHandler, registry: set[_AddConnection]) -> None:
        self.handler = handler
        self.registry = registry
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.inflight = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self._out: list[bytes] = []
        self._reading_paused = False
        self._writing_paused = False
        self._stopping = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.registry.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.registry.discard(self)
        self.transport = None
        self._out.clear()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """Close once the answers written so far are on their way."""
        if self.transport is not None:
            self._flush()
            self.transport.close()

    def stop_reading(self) -> None:
        """For good: the bookie is stopping."""
        self._stopping = True
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        frames: list[AddFrame] = []
        try:
            for frame in self.decoder.feed(data):
                if not isinstance(frame, AddFrame):
                    raise BookieProtocolError(f"a client sent {type(frame).__name__}")
                frames.append(frame)
        except BookieProtocolError as exc:
            log.warning("closing binary add connection from %s: %s", self.peer, exc)
            self.abort()
            return
        if not frames:
            return
        arrived = time.perf_counter()
        self.inflight += len(frames)
        task = asyncio.get_running_loop().create_task(self._add(frames, arrived))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        self._update_reading()

    async def _add(self, frames: list[AddFrame], arrived: float) -> None:
        try:
            ops = [AddOp(f.entry, f.master_key, f.recovery_add) for f in frames]
            results = await self.handler.add(ops)
            self.handler.answered(
                (isinstance(r, EntryHeader) for r in results), time.perf_counter() - arrived
            )
            answers = []
            for frame, result in zip(frames, results, strict=True):
                if isinstance(result, EntryHeader):
                    answer = encode_add_result(
                        frame.request_id, 0, result.ledger_id, result.entry_id
                    )
                else:
                    answer = encode_add_result(frame.request_id, result.bk_code, 0, 0, str(result))
                answers.append(answer)
            self._send(answers)
        finally:
            self.inflight -= len(frames)
            self._update_reading()

    def _send(self, answers: list[bytes]) -> None:
        """Queue answers for this loop turn's one write."""
        if self.transport is None:
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.extend(answers)

    def _flush(self) -> None:
        if self.transport is not None and self._out:
            self.transport.write(b"".join(self._out))
        self._out.clear()

    # A client that stops reading its answers soon stops being read from.
    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def _update_reading(self) -> None:
        if self.transport is None:
            return
        if self._stopping or self._writing_paused or self.inflight >= MAX_INFLIGHT_ADDS:
            if not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()
        elif self._reading_paused and self.inflight <= MAX_INFLIGHT_ADDS // 2:
            self._reading_paused = False
            self.transport.resume_reading()
