"""``BookieClient``: one client of one bookie, with pipelined, batched adds.

Adds travel over the bookie's binary add protocol (``stripemq.proto.bookie_binary``) when it
offers one, else over the gRPC add stream; reads and every other call are gRPC. Adds queued
while a batch is being sent travel together in the next one, so a busy writer sends few large
writes and an idle one sends each add at once. Results come back in any order and resolve
the matching futures. The ledger client (replication, striping) is built on this.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import grpc

from stripemq.errors import (
    BookieError,
    BookieProtocolError,
    BookieTimeoutError,
    BookieUnavailableError,
    EntryTooLargeError,
    error_for_bk_code,
)
from stripemq.proto import bookie_pb2 as pb
from stripemq.proto import bookie_pb2_grpc as pb_grpc
from stripemq.proto.bookie_binary import (
    MAX_FRAME_BYTES,
    AddResultFrame,
    FrameDecoder,
    encode_add,
)
from stripemq.proto.entry import verify_entry

log = logging.getLogger(__name__)

CLIENT_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # Notice a bookie that vanished without closing its connections (host down, SIGSTOP).
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]


# What one add may weigh: a binary frame's limit less its header (the gRPC limit is higher).
MAX_ADD_BYTES = MAX_FRAME_BYTES - 64


@dataclass(frozen=True)
class LacInfo:
    lac: int
    last_entry_id: int
    fenced: bool


@dataclass(frozen=True)
class ReadResult:
    entry: bytes  # verified wire/disk form
    lac: int
    fenced: bool


class BookieCalls(Protocol):
    """What a ledger client asks of one bookie: ``BookieClient`` over gRPC, or
    ``LocalBookieClient`` for the bookie in the same process."""

    address: str

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    def add_entry(
        self, master_key: bytes, entry: bytes, *, recovery_add: bool = False
    ) -> asyncio.Future[tuple[int, int]]: ...

    async def read_entry(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes = b"",
        long_poll_timeout_ms: int = 0,
    ) -> ReadResult: ...

    async def read_entries(
        self, ledger_id: int, entry_ids: list[int], max_bytes: int = 0
    ) -> tuple[list[bytes], int]: ...

    async def read_lac(self, ledger_id: int) -> LacInfo: ...

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None: ...

    async def get_info(self) -> pb.GetInfoResponse: ...


def _error_from_rpc(exc: grpc.aio.AioRpcError, address: str) -> BookieError:
    """Rebuild the typed error from a failed unary call."""
    for key, value in exc.trailing_metadata() or ():
        if key == "bk-code":
            return error_for_bk_code(int(value), exc.details() or "")
    return BookieUnavailableError(f"bookie {address}: {exc.code().name}: {exc.details()}")


@dataclass(frozen=True, slots=True)
class _QueuedAdd:
    request_id: int
    master_key: bytes
    entry: bytes
    recovery_add: bool


@dataclass(eq=False)
class _PendingAdd:
    future: asyncio.Future[tuple[int, int]]
    deadline: float
    channel: _AddChannel | None = None  # set once sent


ResultCallback = Callable[[int, "tuple[int, int] | BookieError"], None]
LostCallback = Callable[["_AddChannel", BookieError], None]


class _AddChannel:
    """Carries adds to the bookie and their results back: the gRPC add stream or a
    connection speaking the binary add protocol."""

    def usable(self) -> bool:
        raise NotImplementedError

    async def send(self, batch: list[_QueuedAdd]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _GrpcAddChannel(_AddChannel):
    def __init__(
        self,
        stub: pb_grpc.BookieStub,
        address: str,
        on_result: ResultCallback,
        on_lost: LostCallback,
    ) -> None:
        self.address = address
        self.stream: grpc.aio.StreamStreamCall[pb.AddRequest, pb.AddResponse] = stub.AddEntry()
        self._on_result = on_result
        self._on_lost = on_lost
        self._receiver = asyncio.create_task(self._receive_loop())

    def usable(self) -> bool:
        return not self.stream.done()

    async def send(self, batch: list[_QueuedAdd]) -> None:
        ops = [
            pb.AddEntryOp(
                request_id=add.request_id,
                master_key=add.master_key,
                entry=add.entry,
                recovery_add=add.recovery_add,
            )
            for add in batch
        ]
        await self.stream.write(pb.AddRequest(ops=ops))

    def close(self) -> None:
        self.stream.cancel()
        self._receiver.cancel()

    async def _receive_loop(self) -> None:
        try:
            while True:
                response = await self.stream.read()
                if not isinstance(response, pb.AddResponse):  # grpc.aio.EOF: the stream ended
                    break
                for result in response.results:
                    if result.code == 0:
                        self._on_result(result.request_id, (result.ledger_id, result.entry_id))
                    else:
                        error = error_for_bk_code(result.code, result.message)
                        self._on_result(result.request_id, error)
            error = BookieUnavailableError(f"bookie {self.address} closed the add stream")
        except grpc.aio.AioRpcError as exc:
            error = BookieUnavailableError(f"bookie {self.address}: {exc.code().name}")
        except asyncio.CancelledError:
            return
        self._on_lost(self, error)


class _BinaryAddChannel(_AddChannel, asyncio.Protocol):
    """A TCP connection speaking ``stripemq.proto.bookie_binary``."""

    def __init__(
        self, address: str, timeout: float, on_result: ResultCallback, on_lost: LostCallback
    ) -> None:
        self.address = address
        self.timeout = timeout
        self._on_result = on_result
        self._on_lost = on_lost
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._writable = asyncio.Event()
        self._writable.set()

    @classmethod
    async def open(
        cls,
        address: str,
        port: int,
        timeout: float,  # noqa: ASYNC109 - also the channel's write and TCP timeouts
        on_result: ResultCallback,
        on_lost: LostCallback,
    ) -> _BinaryAddChannel:
        """Connect to ``port`` on the host of ``address``; ``timeout`` bounds the connect,
        a write the bookie does not take, and (as TCP_USER_TIMEOUT) unacknowledged data."""
        host = address.rpartition(":")[0].strip("[]")
        loop = asyncio.get_running_loop()
        transport, channel = await asyncio.wait_for(
            loop.create_connection(lambda: cls(address, timeout, on_result, on_lost), host, port),
            timeout,
        )
        _keep_alive(transport.get_extra_info("socket"), timeout)
        return channel

    def usable(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def send(self, batch: list[_QueuedAdd]) -> None:
        if self._transport is None or self._transport.is_closing():
            raise BookieUnavailableError(f"binary add connection to {self.address} is closed")
        self._transport.write(
            b"".join(
                encode_add(add.request_id, add.master_key, add.entry, add.recovery_add)
                for add in batch
            )
        )
        if not self._writable.is_set():  # the bookie reads slower than we write: wait for it
            try:
                await asyncio.wait_for(self._writable.wait(), self.timeout)
            except TimeoutError:
                raise BookieTimeoutError(
                    f"bookie {self.address} took no add bytes for {self.timeout}s"
                ) from None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except BookieProtocolError as exc:
            log.warning("bookie %s sent bytes that are not frames: %s", self.address, exc)
            self.close()
            return
        for frame in frames:
            if not isinstance(frame, AddResultFrame):
                continue
            if frame.code == 0:
                self._on_result(frame.request_id, (frame.ledger_id, frame.entry_id))
            else:
                self._on_result(frame.request_id, error_for_bk_code(frame.code, frame.message))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._writable.set()
        reason = f": {exc}" if exc else ""
        self._on_lost(
            self, BookieUnavailableError(f"bookie {self.address} closed the add connection{reason}")
        )


def _keep_alive(sock: socket.socket | None, timeout: float) -> None:
    """Notice a bookie that vanished without closing the connection (host down, SIGSTOP),
    as the gRPC channel's keepalive does."""
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        ("TCP_KEEPIDLE", 10),
        ("TCP_KEEPINTVL", 5),
        ("TCP_KEEPCNT", 2),
        ("TCP_USER_TIMEOUT", int(timeout * 1000)),
    ):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class BookieClient:
    """Async client of one bookie. Create, ``await connect()``, use, ``await close()``.

    Adds go over the bookie's binary add protocol when ``use_binary_adds`` is set and the
    bookie offers it (its port comes from ``GetInfo``), else over the gRPC add stream; every
    other call is gRPC. Every add ends: with its result, with the bookie's typed error, with
    ``BookieUnavailableError`` when the connection it was sent on breaks, or with
    ``BookieTimeoutError`` after ``add_timeout`` seconds without an answer.
    """

    def __init__(
        self,
        address: str,
        *,
        max_batch_bytes: int = 1024 * 1024,
        max_batch_entries: int = 1000,
        timeout: float = 30.0,
        add_timeout: float = 30.0,
        use_binary_adds: bool = True,
    ) -> None:
        self.address = address
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_entries = max_batch_entries
        self.timeout = timeout
        self.add_timeout = add_timeout
        self.use_binary_adds = use_binary_adds
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.BookieStub | None = None
        self._ids = itertools.count(1)
        self._queue: deque[_QueuedAdd] = deque()
        self._pending: dict[int, _PendingAdd] = {}
        self._wakeup = asyncio.Event()
        self._add_channel: _AddChannel | None = None
        self._sender: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False

    async def connect(self) -> None:
        self._channel = grpc.aio.insecure_channel(self.address, options=CLIENT_OPTIONS)
        self._stub = pb_grpc.BookieStub(self._channel)

    async def close(self) -> None:
        self._closed = True
        self._queue.clear()
        self._fail(list(self._pending), BookieUnavailableError(f"client of {self.address} closed"))
        tasks = [task for task in (self._sender, self._sweeper) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._add_channel is not None:
            self._add_channel.close()
        if self._channel is not None:
            await self._channel.close()

    # ------------------------------------------------------------------ adds

    def add_entry(
        self, master_key: bytes, entry: bytes, *, recovery_add: bool = False
    ) -> asyncio.Future[tuple[int, int]]:
        """Queue an add; the future gives ``(ledger_id, entry_id)`` once durable there."""
        if self._closed or self._stub is None:
            raise BookieUnavailableError(f"client of {self.address} is not connected")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, int]] = loop.create_future()
        if len(entry) + len(master_key) > MAX_ADD_BYTES:  # no channel carries it: only it fails
            future.set_exception(
                EntryTooLargeError(f"an add of {len(entry)} bytes is over {MAX_ADD_BYTES}")
            )
            return future
        request_id = next(self._ids)
        self._pending[request_id] = _PendingAdd(future, loop.time() + self.add_timeout)
        self._queue.append(_QueuedAdd(request_id, master_key, entry, recovery_add))
        self._wakeup.set()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_loop())
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep_timeouts())
        return future

    def _next_batch(self) -> list[_QueuedAdd]:
        batch: list[_QueuedAdd] = []
        size = 0
        while self._queue and len(batch) < self.max_batch_entries:
            add = self._queue[0]
            if batch and size + len(add.entry) > self.max_batch_bytes:
                break
            self._queue.popleft()
            if add.request_id in self._pending:  # skip adds that already timed out
                batch.append(add)
                size += len(add.entry)
        return batch

    async def _send_loop(self) -> None:
        while not self._closed:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = self._next_batch()
            if not batch:
                continue
            try:
                channel = self._add_channel
                if channel is None or not channel.usable():
                    channel = await self._open_add_channel()
                for add in batch:
                    pending = self._pending.get(add.request_id)
                    if pending is not None:
                        pending.channel = channel
                await channel.send(batch)
            except Exception as exc:  # a broken channel, or anything else: fail this batch
                error = (
                    exc
                    if isinstance(exc, BookieUnavailableError)
                    else BookieUnavailableError(f"bookie {self.address}: adds failed: {exc}")
                )
                self._drop_add_channel(error)
                self._fail([add.request_id for add in batch], error)

    async def _open_add_channel(self) -> _AddChannel:
        """The binary connection if the bookie offers one, else a gRPC add stream."""
        assert self._stub is not None
        self._drop_add_channel(BookieUnavailableError(f"bookie {self.address}: adds broke"))
        port = (await self.get_info()).binary_add_port if self.use_binary_adds else 0
        channel: _AddChannel | None = None
        if port:
            try:
                channel = await _BinaryAddChannel.open(
                    self.address, port, self.timeout, self._resolve, self._channel_lost
                )
            except (OSError, TimeoutError) as exc:
                # Its gRPC port answered: a network that lets only that through still works.
                log.warning(
                    "bookie %s: binary add port %d unreachable (%s); adding over gRPC",
                    self.address,
                    port,
                    exc or type(exc).__name__,
                )
        if channel is None:
            channel = _GrpcAddChannel(self._stub, self.address, self._resolve, self._channel_lost)
        if self._closed:  # closed while connecting: nothing may be sent, nothing may leak
            channel.close()
            raise BookieUnavailableError(f"client of {self.address} closed")
        self._add_channel = channel
        return channel

    def _drop_add_channel(self, error: BookieError) -> None:
        """Close the add channel; adds it carried that are still unanswered fail."""
        channel, self._add_channel = self._add_channel, None
        if channel is not None:
            channel.close()
            self._channel_lost(channel, error)

    def _channel_lost(self, channel: _AddChannel, error: BookieError) -> None:
        if self._add_channel is channel:
            self._add_channel = None
        # Adds sent on this channel will never be answered now; queued ones go on a new one.
        self._fail([r for r, p in self._pending.items() if p.channel is channel], error)

    async def _sweep_timeouts(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending and not self._closed:
            await asyncio.sleep(min(1.0, self.add_timeout / 4))
            now = loop.time()
            expired = [r for r, p in self._pending.items() if p.deadline <= now]
            if expired:
                error = BookieTimeoutError(
                    f"bookie {self.address} did not answer an add within {self.add_timeout}s"
                )
                stale = {self._pending[r].channel for r in expired}
                self._fail(expired, error)
                # A connection that left an add unanswered this long is not trusted again.
                if self._add_channel is not None and self._add_channel in stale:
                    self._drop_add_channel(error)

    def _resolve(self, request_id: int, outcome: tuple[int, int] | BookieError) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is None or pending.future.done():
            return
        if isinstance(outcome, BookieError):
            pending.future.set_exception(outcome)
        else:
            pending.future.set_result(outcome)

    def _fail(self, request_ids: list[int], error: BookieError) -> None:
        for request_id in request_ids:
            self._resolve(request_id, error)

    # ------------------------------------------------------------------ unary calls

    async def _call(self, method, request, call_timeout: float | None = None):
        if self._stub is None:
            raise BookieUnavailableError(f"client of {self.address} is not connected")
        try:
            return await method(request, timeout=call_timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise _error_from_rpc(exc, self.address) from None

    async def read_entry(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes = b"",
        long_poll_timeout_ms: int = 0,
    ) -> ReadResult:
        """Read one entry (``-1``: the last one held); its digest is verified here too."""
        assert self._stub is not None
        request = pb.ReadRequest(
            ledger_id=ledger_id,
            entry_id=entry_id,
            fence=fence,
            master_key=master_key,
            long_poll_timeout_ms=long_poll_timeout_ms,
        )
        # A long poll may legitimately take longer than an ordinary call.
        call_timeout = max(self.timeout, long_poll_timeout_ms / 1000 + 5)
        response = await self._call(self._stub.ReadEntry, request, call_timeout)
        verify_entry(response.entry)
        return ReadResult(response.entry, response.lac, response.fenced)

    async def read_entries(
        self, ledger_id: int, entry_ids: list[int], max_bytes: int = 0
    ) -> tuple[list[bytes], int]:
        """Several entries in one call (a batch read): the first of ``entry_ids`` that fit
        in ``max_bytes`` (at least one), each verified, and the bookie's LAC."""
        assert self._stub is not None
        request = pb.ReadEntriesRequest(
            ledger_id=ledger_id, entry_ids=entry_ids, max_bytes=max_bytes
        )
        response = await self._call(self._stub.ReadEntries, request, self.timeout)
        entries = list(response.entries)
        for entry in entries:
            verify_entry(entry)
        return entries, response.lac

    async def read_lac(self, ledger_id: int) -> LacInfo:
        assert self._stub is not None
        response = await self._call(self._stub.ReadLac, pb.ReadLacRequest(ledger_id=ledger_id))
        return LacInfo(response.lac, response.last_entry_id, response.fenced)

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        assert self._stub is not None
        request = pb.WriteLacRequest(ledger_id=ledger_id, master_key=master_key, lac=lac)
        await self._call(self._stub.WriteLac, request)

    async def get_info(self) -> pb.GetInfoResponse:
        assert self._stub is not None
        return await self._call(self._stub.GetInfo, pb.GetInfoRequest())
