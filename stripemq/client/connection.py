"""One TCP connection to a broker: the asyncio driver of a ``ClientSession``.

The session (``stripemq.proto.client_session``) holds the protocol: the CONNECT handshake,
request ids matched to their responses, and the routing of the broker's commands to the
producers and consumers whose traffic the connection carries. This class moves bytes
between the socket and the session, wakes the requests' waiters, calls the listeners, and
keeps the connection alive.

With an ``Authentication`` the credentials go in CONNECT and are asked for again to answer
each AUTH_CHALLENGE; with an ``ssl.SSLContext`` the socket is TLS (the host dialled is the
server name)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from google.protobuf.message import Message as ProtoMessage

from stripemq.client.auth import Authentication
from stripemq.errors import (
    AuthenticationError,
    ClientTimeoutError,
    ConnectError,
    InvalidConfigurationError,
    StripeMQError,
    TopicLookupError,
    error_for_server_error,
)
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.client_session import (
    ActiveConsumerChanged,
    AuthChallenged,
    ClientEvent,
    ClientSession,
    Connected,
    ConsumerClosed,
    EndOfTopic,
    HandshakeRefused,
    MessageReceived,
    ProducerClosed,
    ProducerQueued,
    RequestFailed,
    ResponseReceived,
    SendFailed,
    SendReceipt,
    UnexpectedResponse,
    UnhandledCommand,
)
from stripemq.proto.frames import Frame, ProtocolError, encode_command
from stripemq.proto.session import Keepalive, Liveness

log = logging.getLogger(__name__)


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port``, without an IPv6 host's brackets."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


CLIENT_VERSION = "stripemq-python"


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


def refusal_error(code: pb.ServerError | None, message: str) -> StripeMQError:
    """The typed error of a refused request: its code's class, or a lookup failure when the
    broker named no code."""
    if code is None:
        return TopicLookupError(message or "lookup failed")
    return error_for_server_error(code, message)


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
        authentication: Authentication | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.logical_address = logical_address
        self.physical_address = physical_address
        self.operation_timeout_s = operation_timeout_s
        self.authentication = authentication
        self.ssl_context = ssl_context
        self.session: ClientSession[ProducerListener, ConsumerListener] = ClientSession(
            CLIENT_VERSION
        )
        self.keepalive = Keepalive(keepalive_s, time.monotonic())
        # The waiters of the session's outstanding requests.
        self._pending: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        # Each waiting request's timeout, to lift for a producer the broker queued.
        self._deadlines: dict[int, asyncio.Timeout] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = asyncio.Event()
        self.close_reason: str = ""

    def __repr__(self) -> str:
        return f"ClientConnection({self.physical_address})"

    @property
    def max_message_size(self) -> int:
        """The broker's frame limit (its default until CONNECTED says otherwise)."""
        return self.session.max_message_size

    @property
    def server_version(self) -> str:
        return self.session.server_version

    @property
    def protocol_version(self) -> int:
        return self.session.protocol_version

    @property
    def producers(self) -> dict[int, ProducerListener]:
        """The producers on this connection, by id (the session's registry)."""
        return self.session.producers

    @property
    def consumers(self) -> dict[int, ConsumerListener]:
        """The consumers on this connection, by id (the session's registry)."""
        return self.session.consumers

    @property
    def is_closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    # ------------------------------------------------------------------ lifecycle

    async def connect(self, timeout_s: float) -> None:
        """Open the socket and do the handshake.

        Raises:
            ConnectError: the socket or the handshake failed.
            AuthenticationError: the credentials cannot be had, or the broker refused them
                (as any other refusal of CONNECT, raised as its typed error).
            InvalidConfigurationError: the broker's TLS certificate cannot be verified.
        """
        method = self.authentication.auth_method_name if self.authentication else ""
        credentials = self._credentials()
        try:
            host, port = split_address(self.physical_address)
            async with asyncio.timeout(timeout_s):
                if self.ssl_context is None:
                    self._reader, self._writer = await asyncio.open_connection(host, port)
                else:
                    self._reader, self._writer = await asyncio.open_connection(
                        host, port, ssl=self.ssl_context, server_hostname=host
                    )
                self.session.connect(method, credentials)
                self._flush()
                connected, rest = await self._read_connected()
        except ssl.SSLCertVerificationError as exc:
            self._abort(f"TLS certificate refused: {exc}")
            raise InvalidConfigurationError(
                f"TLS: cannot verify {self.physical_address}'s certificate: "
                f"{exc.verify_message or exc} (trust its CA with tls_trust_certs_file_path)"
            ) from None
        except (OSError, TimeoutError, ValueError, ProtocolError) as exc:
            self._abort(f"connect failed: {exc}")
            raise ConnectError(f"cannot connect to {self.physical_address}: {exc}") from None
        except StripeMQError:
            self._abort("handshake refused")
            raise
        self.keepalive.heard(time.monotonic())
        self._tasks = [
            asyncio.create_task(self._read_loop(), name=f"{self!r} reader"),
            asyncio.create_task(self._keepalive(), name=f"{self!r} keepalive"),
        ]
        for event in rest:  # what came right behind CONNECTED
            self._act(event)
        log.debug("connected to %s (%s)", self.physical_address, connected.server_version)

    async def _read_connected(self) -> tuple[Connected, list[ClientEvent]]:
        """CONNECTED, and the events of the frames that came with it; the broker's refusal
        raised as its typed error."""
        assert self._reader is not None
        while True:
            data = await self._reader.read(65536)
            if not data:
                raise ConnectError(f"{self.physical_address} closed during the handshake")
            events = self.session.receive_data(data)
            self._flush()
            for i, event in enumerate(events):
                if isinstance(event, HandshakeRefused):
                    raise refusal_error(event.error, event.message)
                if isinstance(event, AuthChallenged):  # a failure to answer ends the connect
                    self.session.answer_challenge(self._credentials())
                    self._flush()
                if isinstance(event, Connected):
                    return event, events[i + 1 :]

    def _credentials(self) -> bytes:
        """What the authentication gives now (nothing without one).

        Raises:
            AuthenticationError: it cannot give any.
        """
        if self.authentication is None:
            return b""
        try:
            return self.authentication.auth_data()
        except AuthenticationError:
            raise
        except Exception as exc:  # a user's supplier or plugin
            raise AuthenticationError(f"cannot get the authentication data: {exc}") from exc

    def _answer_challenge(self, event: AuthChallenged) -> None:
        """Send fresh credentials; if there are none, drop the connection (reconnecting
        then fails with the reason, or succeeds once they are back)."""
        try:
            credentials = self._credentials()
        except AuthenticationError as exc:
            log.error("%s: cannot answer the broker's authentication challenge: %s", self, exc)
            self._abort(f"no credentials for the broker's challenge: {exc}")
            return
        self.session.answer_challenge(credentials)
        self._flush()
        log.debug("%s: answered an authentication challenge (refresh=%s)", self, event.refresh)

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
        listeners = self.session.close()  # producers, then consumers
        error = ConnectError(f"connection to {self.physical_address} lost: {reason}")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        for listener in listeners:
            try:
                listener.on_connection_closed(self)
            except Exception:  # one listener's bug must not keep the others uninformed
                log.exception("connection-closed handler failed")

    # ------------------------------------------------------------------ sending

    def _write(self, command: ProtoMessage) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(encode_command(command))

    def _flush(self) -> None:
        """Write what the session queued (CONNECT, requests, PONG, PING)."""
        data = self.session.data_to_send()
        if data and self._writer is not None and not self._writer.is_closing():
            self._writer.write(data)

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
        return self.session.new_request_id()

    async def request(
        self, command: ProtoMessage, request_id: int, timeout_s: float | None = None
    ) -> pb.BaseCommand:
        """Send ``command`` (carrying ``request_id``) and wait for its response; the
        broker's refusal is raised as its typed error."""
        if self.is_closed:
            raise ConnectError(f"connection to {self.physical_address} is closed")
        future: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self.session.send_request(command, request_id)
        self._pending[request_id] = future
        self._flush()
        name = command.DESCRIPTOR.name
        try:
            async with asyncio.timeout(timeout_s or self.operation_timeout_s) as deadline:
                self._deadlines[request_id] = deadline
                response = await future
        except TimeoutError:
            raise ClientTimeoutError(f"{name} to {self.physical_address} timed out") from None
        finally:
            self._pending.pop(request_id, None)
            self._deadlines.pop(request_id, None)
            self.session.forget_request(request_id)  # a late answer is nobody's
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
        or a cancellation the broker is also asked to close what it may have made or may
        still make (``close_command(rid)``: a queued WaitForExclusive producer, say)."""
        registry[handle_id] = listener
        try:
            return await self.request(command, request_id)
        except (ClientTimeoutError, asyncio.CancelledError):
            registry.pop(handle_id, None)
            if not self.is_closed:
                with contextlib.suppress(StripeMQError):
                    self.send_command(close_command(self.new_request_id()))
            raise
        except BaseException:
            registry.pop(handle_id, None)
            raise

    # ------------------------------------------------------------------ receiving

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reason = "closed by the broker"
        try:
            while True:
                data = await self._reader.read(1 << 18)
                if not data:
                    break
                self.keepalive.heard(time.monotonic())
                for frame in self.session.feed(data):
                    try:
                        event = self.session.receive_frame(frame)
                        self._flush()
                        if event is not None:
                            self._act(event)
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

    def _act(self, event: ClientEvent) -> None:
        """Wake a request's waiter, or tell a producer or consumer what the broker said."""
        if isinstance(event, ResponseReceived):
            future = self._pending.get(event.request_id)
            if future is not None and not future.done():
                future.set_result(event.command)
        elif isinstance(event, ProducerQueued):  # admitted later: wait for it, however long
            deadline = self._deadlines.get(event.request_id)
            if deadline is not None and not deadline.expired():
                deadline.reschedule(None)
        elif isinstance(event, RequestFailed):  # request() raises it as its typed error
            future = self._pending.get(event.request_id)
            if future is not None and not future.done():
                future.set_exception(refusal_error(event.error, event.message))
        elif isinstance(event, MessageReceived):
            event.consumer.on_message(event.command, event.frame)
        elif isinstance(event, SendReceipt):
            event.producer.on_send_receipt(event.receipt)
        elif isinstance(event, SendFailed):
            event.producer.on_send_error(event.error)
        elif isinstance(event, ProducerClosed):
            event.producer.on_closed_by_broker()
        elif isinstance(event, ConsumerClosed):
            event.consumer.on_closed_by_broker()
        elif isinstance(event, ActiveConsumerChanged):
            event.consumer.on_active_change(event.is_active)
        elif isinstance(event, EndOfTopic):
            event.consumer.on_end_of_topic()
        elif isinstance(event, AuthChallenged):
            self._answer_challenge(event)
        elif isinstance(event, UnexpectedResponse):
            log.debug("%s: a response to no waiting request (%s)", self, event.request_id)
        elif isinstance(event, UnhandledCommand):
            log.debug("%s: ignoring %s", self, pb.BaseCommand.Type.Name(event.kind))
        # Unrouted: for a producer or consumer that is gone already.

    async def _keepalive(self) -> None:
        """PING when idle; a broker silent for two intervals is taken as gone."""
        while not self.is_closed:
            await asyncio.sleep(self.keepalive.interval_s)
            now = time.monotonic()
            liveness = self.keepalive.check(now)
            if liveness is Liveness.DEAD:
                log.warning("%s silent for %.0f s: closing", self, self.keepalive.quiet_for(now))
                self._abort("keep-alive timeout")
                return
            if liveness is Liveness.PING:
                self.session.ping()
                self._flush()
