"""The broker's side of a Pulsar connection, sans-IO: the CONNECT handshake, the producer and
consumer ids that exist on the connection, and the routing of commands to them.

States: ``HANDSHAKE`` (the first command must be CONNECT, anything else raises
``HandshakeError``: the driver closes the connection) → CONNECT answered with CONNECTED at
the lower of both protocol versions → ``CONNECTED`` → ``close()`` → ``CLOSED``.

With an ``authenticate`` function, CONNECT's credentials go through it first: a refusal
(``AuthenticationError``) is answered with ERROR ``AuthenticationError`` and ends the
session (``ClientRefused``; the driver closes the connection). Later, the driver may ask
for fresh credentials (``challenge``: AUTH_CHALLENGE); the client's AUTH_RESPONSE goes
through the same function (``CredentialsRefreshed``, or ``ClientRefused``).

What the session answers itself, in its outbox:

- PING with PONG (PONG is taken silently);
- a command the broker does not serve with ERROR ``NotAllowedError`` "<TYPE> is not
  supported" when it carries a request id (``UnsupportedCommand`` either way);
- a SEND for a producer id that is not on the connection with SEND_ERROR
  ``NotAllowedError`` "no such producer"; one whose entry is unusable (bad checksum,
  unreadable metadata) with SEND_ERROR ``ChecksumError`` or ``UnknownError``;
- GET_LAST_MESSAGE_ID for an unknown consumer with ERROR ``ConsumerNotFound``; FLOW and
  REDELIVER_UNACKNOWLEDGED_MESSAGES for one are dropped, as Pulsar drops them.

Everything else goes to the driver: ``SendReceived`` for a known producer,
``ConsumerCommand`` for FLOW, ACK, REDELIVER and GET_LAST_MESSAGE_ID of a known consumer
(an ACK's ``consumer`` may be ``None``: the broker checks an ACK's bounds before its
consumer, and answers it), ``Request`` for the rest, which the driver serves and may answer
with ``refuse``. PRODUCER, SUBSCRIBE, CLOSE_*, SEEK and UNSUBSCRIBE are requests: the
driver finds their producer or consumer in ``producers``/``consumers`` when it serves them,
and ``reserve``s an id while one is being created.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from google.protobuf.message import Message

from stripemq.errors import AuthenticationError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import DEFAULT_MAX_MESSAGE_SIZE, FRAME_PADDING, Frame, command_body
from stripemq.proto.session import (
    AUTH_METHOD_TOKEN,
    PROTOCOL_VERSION,
    REFRESH_AUTH_DATA,
    HandshakeError,
    Session,
    SessionState,
    negotiate_version,
    request_id_of,
)

P = TypeVar("P")  # what the driver registers for a producer id
C = TypeVar("C")  # ... and for a consumer id

Type = pb.BaseCommand.Type
HandleKind = Literal["producer", "consumer"]

# The requests the driver serves (ids, when they name one, are looked up when served).
REQUESTS = frozenset(
    {
        pb.BaseCommand.PARTITIONED_METADATA,
        pb.BaseCommand.LOOKUP,
        pb.BaseCommand.GET_TOPICS_OF_NAMESPACE,
        pb.BaseCommand.PRODUCER,
        pb.BaseCommand.CLOSE_PRODUCER,
        pb.BaseCommand.SUBSCRIBE,
        pb.BaseCommand.CLOSE_CONSUMER,
        pb.BaseCommand.UNSUBSCRIBE,
        pb.BaseCommand.SEEK,
        pb.BaseCommand.GET_SCHEMA,
        pb.BaseCommand.GET_OR_CREATE_SCHEMA,
    }
)
# Commands routed to a consumer of the connection as they arrive.
CONSUMER_COMMANDS = frozenset(
    {
        pb.BaseCommand.FLOW,
        pb.BaseCommand.ACK,
        pb.BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES,
        pb.BaseCommand.GET_LAST_MESSAGE_ID,
    }
)
# Everything a connected client may send; the rest is answered as not supported.
SERVED = (
    REQUESTS
    | CONSUMER_COMMANDS
    | {
        pb.BaseCommand.SEND,
        pb.BaseCommand.PING,
        pb.BaseCommand.PONG,
        pb.BaseCommand.AUTH_RESPONSE,
    }
)
# Checks a client's credentials (auth method name, auth data) and returns who it is, or
# raises ``AuthenticationError``.
Authenticate = Callable[[str, bytes], Any]
# The request id Pulsar answers a refused CONNECT with (-1 as Java writes it).
NO_REQUEST_ID = (1 << 64) - 1
# How the C++ client (and so the Python and Node clients) names itself in CONNECT:
# ``Pulsar-CPP-v4.2.0``.
CPP_CLIENT = "Pulsar-CPP"


# ---------------------------------------------------------------------------- events


@dataclass(frozen=True)
class ClientConnected:
    """CONNECT taken and answered: the client's name and the version both now speak."""

    client_version: str
    protocol_version: int
    principal: Any = None  # what ``authenticate`` returned (None: no authentication)
    supports_auth_refresh: bool = False


@dataclass(frozen=True)
class ClientRefused:
    """The client's credentials were refused (at CONNECT or on a refresh): answered with
    ERROR ``AuthenticationError``; the session is closed and the driver closes the socket."""

    reason: str


@dataclass(frozen=True)
class CredentialsRefreshed:
    """AUTH_RESPONSE with valid credentials: who the client is from now on."""

    principal: Any


@dataclass(frozen=True)
class Request:
    """A command the driver serves (``REQUESTS``)."""

    kind: int
    body: Message
    frame: Frame

    @property
    def request_id(self) -> int | None:
        return request_id_of(self.body)


@dataclass(frozen=True)
class SendReceived(Generic[P]):
    """A SEND with a usable entry for a producer of this connection."""

    producer_id: int
    producer: P
    command: pb.CommandSend
    frame: Frame

    @property
    def kind(self) -> int:
        return pb.BaseCommand.SEND

    @property
    def request_id(self) -> None:
        return None  # a SEND is answered by its sequence id


@dataclass(frozen=True)
class ConsumerCommand(Generic[C]):
    """FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES or GET_LAST_MESSAGE_ID for a consumer of
    this connection (``None`` only for an ACK: see the module docstring)."""

    kind: int
    consumer_id: int
    consumer: C | None
    body: Message

    @property
    def request_id(self) -> int | None:
        return request_id_of(self.body)


@dataclass(frozen=True)
class UnsupportedCommand:
    """A command the broker does not serve; answered already if it had a request id."""

    kind: int
    request_id: int | None


@dataclass(frozen=True)
class MalformedCommand:
    """A served type without its body: nothing to act on, no request id to answer."""

    kind: int


ServerEvent: TypeAlias = (
    ClientConnected
    | ClientRefused
    | CredentialsRefreshed
    | Request
    | SendReceived[Any]
    | ConsumerCommand[Any]
    | UnsupportedCommand
    | MalformedCommand
)


# ---------------------------------------------------------------------------- the session


class ServerSession(Session[ServerEvent], Generic[P, C]):
    """One client connection's protocol state on the broker; ``P`` and ``C`` are what the
    driver registers for producer and consumer ids."""

    def __init__(
        self,
        server_version: str,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        protocol_version: int = PROTOCOL_VERSION,
        authenticate: Authenticate | None = None,
    ) -> None:
        super().__init__(max_message_size + FRAME_PADDING)
        self.authenticate = authenticate
        self.state = SessionState.HANDSHAKE
        self.server_version = server_version
        self.max_message_size = max_message_size
        self.offered_version = protocol_version
        self.client_version = ""
        self.protocol_version = 0  # negotiated: known once connected
        self.producers: dict[int, P] = {}
        self.consumers: dict[int, C] = {}
        # Ids whose PRODUCER or SUBSCRIBE is being served (Pulsar's putIfAbsent of a future).
        self._reserved: set[tuple[HandleKind, int]] = set()

    @property
    def connected(self) -> bool:
        return self.state is SessionState.CONNECTED

    @property
    def understands_reached_end_of_topic(self) -> bool:
        """Whether the client may be sent REACHED_END_OF_TOPIC: from protocol v9 on, as
        Pulsar's brokers decide, but not the C++ client (which the Python and Node
        clients wrap): its connection takes the command for an invalid one and closes,
        dropping every producer and consumer on it."""
        return self.protocol_version >= 9 and not self.client_version.startswith(CPP_CLIENT)

    # ------------------------------------------------------------------ receiving

    def receive_frame(self, frame: Frame) -> ServerEvent | None:
        command = frame.command
        kind = command.type
        body = command_body(command)
        if self.state is SessionState.HANDSHAKE:
            if kind != pb.BaseCommand.CONNECT or body is None:
                raise HandshakeError("the first command must be CONNECT")
            assert isinstance(body, pb.CommandConnect)
            return self._connect(body)
        if self.state is SessionState.CLOSED:
            return None
        if kind == pb.BaseCommand.PING:
            self._write(pb.CommandPong())
            return None
        if kind == pb.BaseCommand.PONG:
            return None
        if kind == pb.BaseCommand.AUTH_RESPONSE and self.authenticate is not None:
            if not isinstance(body, pb.CommandAuthResponse):
                return MalformedCommand(kind)
            return self._auth_response(body)
        if kind not in SERVED or kind == pb.BaseCommand.AUTH_RESPONSE:
            request_id = request_id_of(body)
            if request_id is not None:
                self._write(
                    pb.CommandError(
                        request_id=request_id,
                        error=pb.NotAllowedError,
                        message=f"{Type.Name(kind)} is not supported",
                    )
                )
            return UnsupportedCommand(kind, request_id)
        if body is None:
            return MalformedCommand(kind)
        if kind == pb.BaseCommand.SEND:
            assert isinstance(body, pb.CommandSend)
            return self._send(body, frame)
        if kind in CONSUMER_COMMANDS:
            return self._to_consumer(kind, body)
        return Request(kind, body, frame)

    def _connect(self, connect: pb.CommandConnect) -> ClientConnected | ClientRefused:
        self.client_version = connect.client_version
        principal = None
        if self.authenticate is not None:
            try:
                principal = self.authenticate(connect.auth_method_name, connect.auth_data)
            except AuthenticationError as exc:
                return self._refuse_client(str(exc))
        self.protocol_version = negotiate_version(connect.protocol_version, self.offered_version)
        self._write(
            pb.CommandConnected(
                server_version=self.server_version,
                protocol_version=self.protocol_version,
                max_message_size=self.max_message_size,
            )
        )
        self.state = SessionState.CONNECTED
        return ClientConnected(
            self.client_version,
            self.protocol_version,
            principal,
            connect.feature_flags.supports_auth_refresh,
        )

    def _refuse_client(self, reason: str) -> ClientRefused:
        self._write(
            pb.CommandError(request_id=NO_REQUEST_ID, error=pb.AuthenticationError, message=reason)
        )
        self.state = SessionState.CLOSED
        return ClientRefused(reason)

    def challenge(self) -> None:
        """Ask the client for fresh credentials (AUTH_CHALLENGE, as Pulsar's token refresh);
        nothing unless connected with authentication."""
        if self.state is not SessionState.CONNECTED or self.authenticate is None:
            return
        self._write(
            pb.CommandAuthChallenge(
                server_version=self.server_version,
                protocol_version=self.protocol_version,
                challenge=pb.AuthData(
                    auth_method_name=AUTH_METHOD_TOKEN, auth_data=REFRESH_AUTH_DATA
                ),
            )
        )

    def _auth_response(
        self, response: pb.CommandAuthResponse
    ) -> CredentialsRefreshed | ClientRefused:
        assert self.authenticate is not None
        data = response.response
        try:
            principal = self.authenticate(data.auth_method_name, data.auth_data)
        except AuthenticationError as exc:
            return self._refuse_client(str(exc))
        return CredentialsRefreshed(principal)

    def _send(self, send: pb.CommandSend, frame: Frame) -> SendReceived[P] | None:
        producer = self.producers.get(send.producer_id)
        if producer is None:
            self.refuse_send(send, pb.NotAllowedError, "no such producer")
            return None
        if frame.problem is not None or frame.entry is None:
            code = pb.ChecksumError if not frame.checksum_ok else pb.UnknownError
            self.refuse_send(send, code, frame.problem or "no entry")
            return None
        return SendReceived(send.producer_id, producer, send, frame)

    def _to_consumer(self, kind: int, body: Message) -> ConsumerCommand[C] | None:
        consumer_id: int = body.consumer_id  # type: ignore[attr-defined]
        consumer = self.consumers.get(consumer_id)
        if consumer is None and kind != pb.BaseCommand.ACK:
            if kind == pb.BaseCommand.GET_LAST_MESSAGE_ID:
                self._write(
                    pb.CommandError(
                        request_id=request_id_of(body),
                        error=pb.ConsumerNotFound,
                        message="no such consumer",
                    )
                )
            return None
        return ConsumerCommand(kind, consumer_id, consumer, body)

    # ------------------------------------------------------------------ ids

    def reserve(self, kind: HandleKind, handle_id: int) -> bool:
        """Hold ``handle_id`` while its PRODUCER or SUBSCRIBE is served; ``False`` if a
        request for it holds it already (Pulsar answers that one ServiceNotReady)."""
        key = (kind, handle_id)
        if key in self._reserved:
            return False
        self._reserved.add(key)
        return True

    def release(self, kind: HandleKind, handle_id: int) -> None:
        self._reserved.discard((kind, handle_id))

    # ------------------------------------------------------------------ answering

    def refuse(self, kind: int, request_id: int, code: pb.ServerError, message: str) -> None:
        """Answer a refused request: lookups and schema requests with their own failed
        responses (clients wait for those), everything else with ERROR."""
        if kind == pb.BaseCommand.LOOKUP:
            self._write(
                pb.CommandLookupTopicResponse(
                    request_id=request_id,
                    response=pb.CommandLookupTopicResponse.Failed,
                    error=code,
                    message=message,
                )
            )
        elif kind == pb.BaseCommand.PARTITIONED_METADATA:
            self._write(
                pb.CommandPartitionedTopicMetadataResponse(
                    request_id=request_id,
                    response=pb.CommandPartitionedTopicMetadataResponse.Failed,
                    error=code,
                    message=message,
                )
            )
        elif kind == pb.BaseCommand.GET_SCHEMA:
            self._write(
                pb.CommandGetSchemaResponse(
                    request_id=request_id, error_code=code, error_message=message
                )
            )
        elif kind == pb.BaseCommand.GET_OR_CREATE_SCHEMA:
            self._write(
                pb.CommandGetOrCreateSchemaResponse(
                    request_id=request_id, error_code=code, error_message=message
                )
            )
        else:
            self._write(pb.CommandError(request_id=request_id, error=code, message=message))

    def refuse_send(self, send: pb.CommandSend, code: pb.ServerError, message: str) -> None:
        """SEND_ERROR for ``send``."""
        self._write(
            pb.CommandSendError(
                producer_id=send.producer_id,
                sequence_id=send.sequence_id,
                error=code,
                message=message,
            )
        )

    def answer_ack(self, ack: pb.CommandAck, code: pb.ServerError | None, message: str) -> None:
        """ACK_RESPONSE for an ACK that asked for one (it carries a request id)."""
        if not ack.HasField("request_id"):
            return
        response = pb.CommandAckResponse(consumer_id=ack.consumer_id, request_id=ack.request_id)
        if code is not None:
            response.error = code
            response.message = message
        self._write(response)

    # ------------------------------------------------------------------ broker's own

    def close_producer(self, producer_id: int) -> P | None:
        """The broker closes a producer (fenced out): it leaves the connection and the
        client is told with CLOSE_PRODUCER."""
        producer = self.producers.pop(producer_id, None)
        self._write(pb.CommandCloseProducer(producer_id=producer_id, request_id=0))
        return producer

    def close_consumer(self, consumer_id: int) -> C | None:
        """The broker closes a consumer: it leaves the connection and the client (which
        subscribes again) is told with CLOSE_CONSUMER."""
        consumer = self.consumers.pop(consumer_id, None)
        self._write(pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=0))
        return consumer

    def close(self) -> None:
        """No further command is handled; the driver removes producers and consumers."""
        self.state = SessionState.CLOSED
