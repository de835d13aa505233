"""One TCP connection to a broker: the CONNECT handshake, requests matched to responses by
request id, keep-alive, and the producers and consumers whose traffic it carries."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from google.protobuf.message import Message as ProtoMessage

from stripemq.errors import (
    ClientTimeoutError,
    ConnectError,
    StripeMQError,
    TopicLookupError,
    client_error_from_server,
)
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_PADDING,
    Frame,
    FrameDecoder,
    ProtocolError,
    command_body,
    encode_command,
)

log = logging.getLogger(__name__)


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port``, without an IPv6 host's brackets."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


PROTOCOL_VERSION = 20
CLIENT_VERSION = "stripemq-python"

_RESPONSES = frozenset(
    {
        pb.BaseCommand.SUCCESS,
        pb.BaseCommand.ERROR,
        pb.BaseCommand.PRODUCER_SUCCESS,
        pb.BaseCommand.LOOKUP_RESPONSE,
        pb.BaseCommand.PARTITIONED_METADATA_RESPONSE,
        pb.BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE,
        pb.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        pb.BaseCommand.ACK_RESPONSE,
    }
)


class ProducerListener(Protocol):
    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None: ...
    def on_send_error(self, error: pb.CommandSendError) -> None: ...
    def on_closed_by_broker(self) -> None: ...
    def on_connection_closed(self, connection: ClientConnection) -> None: ...


class ConsumerListener(Protocol):
    def on_message(self, command: pb.CommandMessage, frame: Frame) -> None: ...
    def on_active_change(self, active: bool) -> None: ...
    def on_end_of_topic(self) -> None: ...
    def on_closed_by_broker(self) -> None: ...
    def on_connection_closed(self, connection: ClientConnection) -> None: ...


_Listener = TypeVar("_Listener", ProducerListener, ConsumerListener)


def _error_of_response(command: pb.BaseCommand) -> StripeMQError | None:
    """The failure a response carries, if any."""
    if command.type == pb.BaseCommand.ERROR:
        return client_error_from_server(
            pb.ServerError.Name(command.error.error), command.error.message
        )
    if command.type == pb.BaseCommand.LOOKUP_RESPONSE:
        body = command.lookupTopicResponse
        if body.response == pb.CommandLookupTopicResponse.Failed:
            if body.HasField("error"):
                return client_error_from_server(pb.ServerError.Name(body.error), body.message)
            return TopicLookupError(body.message or "lookup failed")
    if command.type == pb.BaseCommand.PARTITIONED_METADATA_RESPONSE:
        body = command.partitionMetadataResponse
        if body.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            if body.HasField("error"):
                return client_error_from_server(pb.ServerError.Name(body.error), body.message)
            return TopicLookupError(body.message or "partitioned metadata lookup failed")
    if command.type == pb.BaseCommand.ACK_RESPONSE and command.ackResponse.HasField("error"):
        body = command.ackResponse
        return client_error_from_server(pb.ServerError.Name(body.error), body.message)
    return None


class ClientConnection:
    """A connection to ``physical_address`` (``host:port``), shared by every producer and
    consumer of this client whose topic that broker serves."""

    def __init__(
        self,
        logical_address: str,
        physical_address: str,
        *,
        operation_timeout_s: float = 30.0,
        keepalive_s: float = 30.0,
    ) -> None:
        self.logical_address = logical_address
        self.physical_address = physical_address
        self.operation_timeout_s = operation_timeout_s
        self.keepalive_s = keepalive_s
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.server_version = ""
        self.protocol_version = 0
        self.producers: dict[int, ProducerListener] = {}
        self.consumers: dict[int, ConsumerListener] = {}
        self._request_ids = itertools.count()
        self._pending: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = asyncio.Event()
        self._last_heard = time.monotonic()
        self.close_reason: str = ""

    def __repr__(self) -> str:
        return f"ClientConnection({self.physical_address})"

    @property
    def is_closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    # ------------------------------------------------------------------ lifecycle

    async def connect(self, timeout_s: float) -> None:
        """Open the socket and do the handshake; ``ConnectError`` if either fails."""
        try:
            host, port = split_address(self.physical_address)
            async with asyncio.timeout(timeout_s):
                self._reader, self._writer = await asyncio.open_connection(host, port)
                self._write(
                    pb.CommandConnect(
                        client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION
                    )
                )
                decoder = FrameDecoder()
                connected = await self._read_connected(decoder)
        except (OSError, TimeoutError, ValueError, ProtocolError) as exc:
            self._abort(f"connect failed: {exc}")
            raise ConnectError(f"cannot connect to {self.physical_address}: {exc}") from None
        except StripeMQError:
            self._abort("handshake refused")
            raise
        self.server_version = connected.server_version
        self.protocol_version = connected.protocol_version
        if connected.HasField("max_message_size"):
            self.max_message_size = connected.max_message_size
        decoder.max_frame_size = self.max_message_size + FRAME_PADDING
        self._last_heard = time.monotonic()
        self._tasks = [
            asyncio.create_task(self._read_loop(decoder), name=f"{self!r} reader"),
            asyncio.create_task(self._keepalive(), name=f"{self!r} keepalive"),
        ]
        log.debug("connected to %s (%s)", self.physical_address, self.server_version)

    async def _read_connected(self, decoder: FrameDecoder) -> pb.CommandConnected:
        assert self._reader is not None
        while True:
            data = await self._reader.read(65536)
            if not data:
                raise ConnectError(f"{self.physical_address} closed during the handshake")
            for frame in decoder.feed(data):
                if frame.command.type == pb.BaseCommand.CONNECTED:
                    return frame.command.connected
                if frame.command.type == pb.BaseCommand.ERROR:
                    error = _error_of_response(frame.command)
                    assert error is not None
                    raise error
                raise ProtocolError(
                    f"expected CONNECTED, got {pb.BaseCommand.Type.Name(frame.command.type)}"
                )

    async def close(self) -> None:
        """Close the socket; every producer and consumer on it is told."""
        self._abort("closed by the client")
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        for task in self._tasks:
            if task is not asyncio.current_task():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _abort(self, reason: str) -> None:
        if self._closed.is_set():
            return
        self.close_reason = reason
        self._closed.set()
        if self._writer is not None:
            self._writer.close()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()  # the keep-alive (and the reader, if it is not us)
        error = ConnectError(f"connection to {self.physical_address} lost: {reason}")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        listeners: list[ProducerListener | ConsumerListener] = [
            *self.producers.values(),
            *self.consumers.values(),
        ]
        self.producers.clear()
        self.consumers.clear()
        for listener in listeners:
            try:
                listener.on_connection_closed(self)
            except Exception:  # one listener's bug must not keep the others uninformed
                log.exception("connection-closed handler failed")

    # ------------------------------------------------------------------ sending

    def _write(self, command: ProtoMessage) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(encode_command(command))

    def send_command(self, command: ProtoMessage) -> None:
        """Send a command that has no response (FLOW, ACK without request id, ...)."""
        if self.is_closed:
            raise ConnectError(f"connection to {self.physical_address} is closed")
        self._write(command)

    def send_raw(self, frame: bytes) -> None:
        """Send an encoded frame (a SEND)."""
        if self.is_closed or self._writer is None:
            raise ConnectError(f"connection to {self.physical_address} is closed")
        self._writer.write(frame)

    async def drain(self) -> None:
        if self._writer is not None and not self.is_closed:
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()

    def new_request_id(self) -> int:
        return next(self._request_ids)

    async def request(
        self, command: ProtoMessage, request_id: int, timeout_s: float | None = None
    ) -> pb.BaseCommand:
        """Send ``command`` (carrying ``request_id``) and wait for its response; the
        broker's refusal is raised as its typed error."""
        if self.is_closed:
            raise ConnectError(f"connection to {self.physical_address} is closed")
        future: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._write(command)
        name = command.DESCRIPTOR.name
        try:
            async with asyncio.timeout(timeout_s or self.operation_timeout_s):
                response = await future
        except TimeoutError:
            raise ClientTimeoutError(f"{name} to {self.physical_address} timed out") from None
        finally:
            self._pending.pop(request_id, None)
        error = _error_of_response(response)
        if error is not None:
            raise error
        return response

    async def register(
        self,
        registry: dict[int, _Listener],
        handle_id: int,
        listener: _Listener,
        command: ProtoMessage,
        request_id: int,
        close_command: Callable[[int], ProtoMessage],
    ) -> pb.BaseCommand:
        """Send a PRODUCER or SUBSCRIBE with ``listener`` registered first (the broker may
        send to it right after answering). On failure it is unregistered; after a timeout
        the broker is also asked to close what it may have made (``close_command(rid)``)."""
        registry[handle_id] = listener
        try:
            return await self.request(command, request_id)
        except ClientTimeoutError:
            registry.pop(handle_id, None)
            with contextlib.suppress(StripeMQError):
                self.send_command(close_command(self.new_request_id()))
            raise
        except BaseException:
            registry.pop(handle_id, None)
            raise

    # ------------------------------------------------------------------ receiving

    async def _read_loop(self, decoder: FrameDecoder) -> None:
        assert self._reader is not None
        reason = "closed by the broker"
        try:
            while True:
                data = await self._reader.read(1 << 18)
                if not data:
                    break
                self._last_heard = time.monotonic()
                for frame in decoder.feed(data):
                    try:
                        self._handle(frame)
                    except Exception:  # a handler's bug must not stop this connection
                        log.exception("%s: handling %s failed", self, frame.command.type)
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.warning("%s: %s", self, reason)
        except (OSError, asyncio.IncompleteReadError) as exc:
            reason = f"socket error: {exc}"
        except asyncio.CancelledError:
            reason = "closed by the client"
        except Exception as exc:  # a bug: still tell everyone the connection is gone
            log.exception("%s: reader failed", self)
            reason = f"reader failed: {exc!r}"
        self._abort(reason)

    def _handle(self, frame: Frame) -> None:
        command = frame.command
        kind = command.type
        body = command_body(command)
        if kind in _RESPONSES:
            request_id = getattr(body, "request_id", None)
            future = self._pending.get(request_id) if request_id is not None else None
            if future is not None and not future.done():
                future.set_result(command)
            return
        if kind == pb.BaseCommand.MESSAGE:
            consumer = self.consumers.get(command.message.consumer_id)
            if consumer is not None:
                consumer.on_message(command.message, frame)
        elif kind == pb.BaseCommand.SEND_RECEIPT:
            producer = self.producers.get(command.send_receipt.producer_id)
            if producer is not None:
                producer.on_send_receipt(command.send_receipt)
        elif kind == pb.BaseCommand.SEND_ERROR:
            producer = self.producers.get(command.send_error.producer_id)
            if producer is not None:
                producer.on_send_error(command.send_error)
        elif kind == pb.BaseCommand.PING:
            self._write(pb.CommandPong())
        elif kind == pb.BaseCommand.PONG:
            pass  # _last_heard is enough
        elif kind == pb.BaseCommand.CLOSE_PRODUCER:
            producer = self.producers.pop(command.close_producer.producer_id, None)
            if producer is not None:
                producer.on_closed_by_broker()
        elif kind == pb.BaseCommand.CLOSE_CONSUMER:
            consumer = self.consumers.pop(command.close_consumer.consumer_id, None)
            if consumer is not None:
                consumer.on_closed_by_broker()
        elif kind == pb.BaseCommand.ACTIVE_CONSUMER_CHANGE:
            consumer = self.consumers.get(command.active_consumer_change.consumer_id)
            if consumer is not None:
                consumer.on_active_change(command.active_consumer_change.is_active)
        elif kind == pb.BaseCommand.REACHED_END_OF_TOPIC:
            consumer = self.consumers.get(command.reachedEndOfTopic.consumer_id)
            if consumer is not None:
                consumer.on_end_of_topic()
        else:
            log.debug("%s: ignoring %s", self, pb.BaseCommand.Type.Name(kind))

    async def _keepalive(self) -> None:
        """PING when idle; a broker silent for two intervals is taken as gone."""
        while not self.is_closed:
            await asyncio.sleep(self.keepalive_s)
            silent = time.monotonic() - self._last_heard
            if silent >= 2 * self.keepalive_s:
                log.warning("%s silent for %.0f s: closing", self, silent)
                self._abort("keep-alive timeout")
                return
            if silent >= self.keepalive_s:
                self._write(pb.CommandPing())
