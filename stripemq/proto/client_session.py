"""The client's side of a Pulsar connection, sans-IO: the CONNECT handshake, request ids and
the responses that answer them, and the routing of the broker's commands to producers and
consumers.

States: ``IDLE`` → ``connect()`` queues CONNECT → ``HANDSHAKE`` → CONNECTED arrives →
``CONNECTED`` → ``close()`` → ``CLOSED``. In ``HANDSHAKE`` the broker may answer only
CONNECTED, ERROR (``HandshakeRefused``, which ends the session: an ``AuthenticationError``
code is a refused token) or AUTH_CHALLENGE; anything else raises ``HandshakeError``. A
closed session drops what still arrives.

Authentication: ``connect(auth_method_name, auth_data)`` puts the credentials in CONNECT
with ``FeatureFlags.supports_auth_refresh`` (without a method, CONNECT carries neither, as
before). AUTH_CHALLENGE, in ``HANDSHAKE`` or ``CONNECTED``, is ``AuthChallenged``
(``refresh`` when its data is ``REFRESH_AUTH_DATA``: the broker wants fresh credentials
before the ones it holds expire); the driver gets the credentials anew and hands them to
``answer_challenge``, which queues AUTH_RESPONSE under the method CONNECT named (``none``
without one). A challenge without its data breaks the handshake (``HandshakeError``) and is
an ``UnhandledCommand`` once connected; an answer to no challenge is a local error.

Requests: ``new_request_id`` allocates ids (0, 1, 2, ...); ``send_request`` queues a command
and marks its id outstanding. A response (SUCCESS, ERROR, PRODUCER_SUCCESS, LOOKUP_RESPONSE,
PARTITIONED_METADATA_RESPONSE, GET_LAST_MESSAGE_ID_RESPONSE, GET_TOPICS_OF_NAMESPACE_RESPONSE,
ACK_RESPONSE) answers the outstanding request with its id, once: ``ResponseReceived``, or
``RequestFailed`` carrying the protocol's ``ServerError`` code when it is a refusal (ERROR,
a lookup or partitioned-metadata lookup that ``Failed``, an ACK_RESPONSE with an error).
A response for no outstanding id is ``UnexpectedResponse``; a timed-out request is
``forget_request``-ed so that its late answer is one. A PRODUCER_SUCCESS that is not
``producer_ready`` (a WaitForExclusive producer queued) is ``ProducerQueued`` and leaves
its request outstanding for the one that is.

Routing: the driver registers what stands for each producer and consumer id (its listener)
in ``producers`` and ``consumers``. SEND_RECEIPT, SEND_ERROR and CLOSE_PRODUCER go to the
producer of their id, MESSAGE, ACTIVE_CONSUMER_CHANGE, REACHED_END_OF_TOPIC and
CLOSE_CONSUMER to the consumer; a CLOSE_* also unregisters it. A command for an id nobody
registered is ``Unrouted``; one the client does not handle is ``UnhandledCommand``. PING is
answered with PONG by the session itself.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from google.protobuf.message import Message

from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import DEFAULT_MAX_MESSAGE_SIZE, Frame, command_body
from stripemq.proto.session import (
    PROTOCOL_VERSION,
    REFRESH_AUTH_DATA,
    HandshakeError,
    LocalProtocolError,
    Session,
    SessionState,
    request_id_of,
)

P = TypeVar("P")  # what the driver registers for a producer id
C = TypeVar("C")  # ... and for a consumer id

Type = pb.BaseCommand.Type

RESPONSES = frozenset(
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

# The method an AUTH_RESPONSE names when CONNECT named none (Pulsar's AuthenticationDisabled).
NO_AUTH_METHOD = "none"


# ---------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Connected:
    """The broker accepted CONNECT: what it runs, the version both speak, its frame limit."""

    server_version: str
    protocol_version: int
    max_message_size: int


@dataclass(frozen=True)
class HandshakeRefused:
    """The broker answered CONNECT with ERROR (``command`` is that ERROR)."""

    error: pb.ServerError
    message: str
    command: pb.BaseCommand


@dataclass(frozen=True)
class AuthChallenged:
    """AUTH_CHALLENGE: answer with ``answer_challenge(credentials)``. ``refresh``: the
    broker asks for fresh credentials of the method CONNECT named (``challenge`` is
    ``REFRESH_AUTH_DATA``); otherwise ``challenge`` is a step of a multi-step method."""

    auth_method_name: str
    challenge: bytes
    refresh: bool


@dataclass(frozen=True)
class ResponseReceived:
    """The success answer to outstanding request ``request_id``."""

    request_id: int
    command: pb.BaseCommand


@dataclass(frozen=True)
class ProducerQueued:
    """PRODUCER_SUCCESS with ``producer_ready`` false: the broker queued the producer
    (WaitForExclusive); request ``request_id`` stays outstanding until it is admitted."""

    request_id: int


@dataclass(frozen=True)
class RequestFailed:
    """The broker refused outstanding request ``request_id``; ``error`` is the protocol's
    code (``None``: a failed lookup that named none)."""

    request_id: int
    command: pb.BaseCommand
    error: pb.ServerError | None
    message: str


@dataclass(frozen=True)
class UnexpectedResponse:
    """A response to no outstanding request: late (after a timeout) or never asked."""

    request_id: int | None
    command: pb.BaseCommand


@dataclass(frozen=True)
class SendReceipt(Generic[P]):
    """SEND_RECEIPT for a registered producer: a message is stored."""

    producer_id: int
    producer: P
    receipt: pb.CommandSendReceipt


@dataclass(frozen=True)
class SendFailed(Generic[P]):
    """SEND_ERROR for a registered producer: a message was refused or not stored."""

    producer_id: int
    producer: P
    error: pb.CommandSendError


@dataclass(frozen=True)
class ProducerClosed(Generic[P]):
    """CLOSE_PRODUCER: the broker closed the producer (now unregistered here)."""

    producer_id: int
    producer: P


@dataclass(frozen=True)
class MessageReceived(Generic[C]):
    """MESSAGE for a registered consumer; ``frame`` holds the entry."""

    consumer_id: int
    consumer: C
    command: pb.CommandMessage
    frame: Frame


@dataclass(frozen=True)
class ActiveConsumerChanged(Generic[C]):
    """ACTIVE_CONSUMER_CHANGE: whether the consumer is now its subscription's active one."""

    consumer_id: int
    consumer: C
    is_active: bool


@dataclass(frozen=True)
class EndOfTopic(Generic[C]):
    """REACHED_END_OF_TOPIC: the consumer's topic is terminated and fully read."""

    consumer_id: int
    consumer: C


@dataclass(frozen=True)
class ConsumerClosed(Generic[C]):
    """CLOSE_CONSUMER: the broker closed the consumer (now unregistered here)."""

    consumer_id: int
    consumer: C


@dataclass(frozen=True)
class Unrouted:
    """A command for a producer or consumer id that is not registered (closed already)."""

    kind: int
    handle_id: int
    command: pb.BaseCommand


@dataclass(frozen=True)
class UnhandledCommand:
    """A command the client does not handle (or one without its body)."""

    kind: int
    command: pb.BaseCommand


ClientEvent: TypeAlias = (
    Connected
    | HandshakeRefused
    | AuthChallenged
    | ResponseReceived
    | ProducerQueued
    | RequestFailed
    | UnexpectedResponse
    | SendReceipt[Any]
    | SendFailed[Any]
    | ProducerClosed[Any]
    | MessageReceived[Any]
    | ActiveConsumerChanged[Any]
    | EndOfTopic[Any]
    | ConsumerClosed[Any]
    | Unrouted
    | UnhandledCommand
)


def refusal_of(command: pb.BaseCommand) -> tuple[bool, pb.ServerError | None, str]:
    """``(failed, code, message)`` of a response: whether it refuses its request, with the
    protocol's code (``None`` if it names none) and message."""
    kind = command.type
    if kind == pb.BaseCommand.ERROR:
        return True, command.error.error, command.error.message
    if kind == pb.BaseCommand.LOOKUP_RESPONSE:
        lookup = command.lookupTopicResponse
        if lookup.response == pb.CommandLookupTopicResponse.Failed:
            return True, lookup.error if lookup.HasField("error") else None, lookup.message
    elif kind == pb.BaseCommand.PARTITIONED_METADATA_RESPONSE:
        metadata = command.partitionMetadataResponse
        if metadata.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            return True, metadata.error if metadata.HasField("error") else None, metadata.message
    elif kind == pb.BaseCommand.ACK_RESPONSE and command.ackResponse.HasField("error"):
        return True, command.ackResponse.error, command.ackResponse.message
    return False, None, ""


# ---------------------------------------------------------------------------- the session


class ClientSession(Session[ClientEvent], Generic[P, C]):
    """One client connection's protocol state; ``P`` and ``C`` are what the driver
    registers for producer and consumer ids."""

    def __init__(self, client_version: str, *, protocol_version: int = PROTOCOL_VERSION) -> None:
        super().__init__()
        self.client_version = client_version
        self.offered_version = protocol_version
        self.server_version = ""
        self.protocol_version = 0  # negotiated: known once CONNECTED
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.producers: dict[int, P] = {}
        self.consumers: dict[int, C] = {}
        self._request_ids = itertools.count()
        self._outstanding: set[int] = set()
        self.auth_method_name = ""  # what CONNECT named ("": no authentication)
        self._challenged = False  # an AUTH_CHALLENGE awaits its AUTH_RESPONSE

    # ------------------------------------------------------------------ sending

    def connect(self, auth_method_name: str = "", auth_data: bytes = b"") -> None:
        """Queue CONNECT, the first command of every connection; with ``auth_method_name``
        it carries the credentials ``auth_data`` and offers to refresh them."""
        if self.state is not SessionState.IDLE:
            raise LocalProtocolError(f"CONNECT in state {self.state.value}")
        connect = pb.CommandConnect(
            client_version=self.client_version, protocol_version=self.offered_version
        )
        if auth_method_name:
            connect.auth_method_name = auth_method_name
            connect.auth_data = auth_data
            connect.feature_flags.supports_auth_refresh = True
        self.auth_method_name = auth_method_name
        self._write(connect)
        self.state = SessionState.HANDSHAKE

    def answer_challenge(self, auth_data: bytes) -> None:
        """Queue AUTH_RESPONSE with ``auth_data``, the answer to the ``AuthChallenged``
        last reported."""
        if not self._challenged:
            raise LocalProtocolError(f"AUTH_RESPONSE without a challenge ({self.state.value})")
        self._challenged = False
        self._write(
            pb.CommandAuthResponse(
                client_version=self.client_version,
                protocol_version=self.offered_version,
                response=pb.AuthData(
                    auth_method_name=self.auth_method_name or NO_AUTH_METHOD,
                    auth_data=auth_data,
                ),
            )
        )

    def new_request_id(self) -> int:
        return next(self._request_ids)

    def send_request(self, command: Message, request_id: int) -> None:
        """Queue ``command`` (which carries ``request_id``) and await its response."""
        if self.state is not SessionState.CONNECTED:
            raise LocalProtocolError(f"a request in state {self.state.value}")
        if request_id in self._outstanding:
            raise LocalProtocolError(f"request id {request_id} is outstanding already")
        self._outstanding.add(request_id)
        self._write(command)

    def forget_request(self, request_id: int) -> None:
        """Stop waiting for ``request_id`` (timed out, abandoned): a late answer is
        ``UnexpectedResponse``."""
        self._outstanding.discard(request_id)

    @property
    def outstanding(self) -> frozenset[int]:
        """The request ids sent and not yet answered."""
        return frozenset(self._outstanding)

    def close(self) -> list[P | C]:
        """Close the session: no request is outstanding any more and every producer and
        consumer is unregistered; returns those (producers first) for the driver to tell."""
        self.state = SessionState.CLOSED
        self._outstanding.clear()
        self._challenged = False
        dropped: list[P | C] = [*self.producers.values(), *self.consumers.values()]
        self.producers.clear()
        self.consumers.clear()
        return dropped

    # ------------------------------------------------------------------ receiving

    def receive_frame(self, frame: Frame) -> ClientEvent | None:
        if self.state is SessionState.CLOSED:
            return None
        if self.state is SessionState.IDLE:
            name = Type.Name(frame.command.type)
            raise HandshakeError(f"{name} before the client sent CONNECT")
        if self.state is SessionState.HANDSHAKE:
            return self._handshake(frame.command)
        command = frame.command
        kind = command.type
        if kind in RESPONSES:
            return self._response(command)
        if kind == pb.BaseCommand.PING:
            self._write(pb.CommandPong())
            return None
        if kind == pb.BaseCommand.PONG:
            return None  # hearing anything is what keeps the connection alive
        if kind == pb.BaseCommand.AUTH_CHALLENGE:
            return self._challenge(command) or UnhandledCommand(kind, command)
        body = command_body(command)
        if body is None:
            return UnhandledCommand(kind, command)
        if kind == pb.BaseCommand.SEND_RECEIPT:
            receipt = command.send_receipt
            producer = self.producers.get(receipt.producer_id)
            if producer is None:
                return Unrouted(kind, receipt.producer_id, command)
            return SendReceipt(receipt.producer_id, producer, receipt)
        if kind == pb.BaseCommand.SEND_ERROR:
            error = command.send_error
            producer = self.producers.get(error.producer_id)
            if producer is None:
                return Unrouted(kind, error.producer_id, command)
            return SendFailed(error.producer_id, producer, error)
        if kind == pb.BaseCommand.CLOSE_PRODUCER:
            producer_id = command.close_producer.producer_id
            producer = self.producers.pop(producer_id, None)
            if producer is None:
                return Unrouted(kind, producer_id, command)
            return ProducerClosed(producer_id, producer)
        if kind == pb.BaseCommand.MESSAGE:
            consumer_id = command.message.consumer_id
            consumer = self.consumers.get(consumer_id)
            if consumer is None:
                return Unrouted(kind, consumer_id, command)
            return MessageReceived(consumer_id, consumer, command.message, frame)
        if kind == pb.BaseCommand.ACTIVE_CONSUMER_CHANGE:
            change = command.active_consumer_change
            consumer = self.consumers.get(change.consumer_id)
            if consumer is None:
                return Unrouted(kind, change.consumer_id, command)
            return ActiveConsumerChanged(change.consumer_id, consumer, change.is_active)
        if kind == pb.BaseCommand.REACHED_END_OF_TOPIC:
            consumer_id = command.reachedEndOfTopic.consumer_id
            consumer = self.consumers.get(consumer_id)
            if consumer is None:
                return Unrouted(kind, consumer_id, command)
            return EndOfTopic(consumer_id, consumer)
        if kind == pb.BaseCommand.CLOSE_CONSUMER:
            consumer_id = command.close_consumer.consumer_id
            consumer = self.consumers.pop(consumer_id, None)
            if consumer is None:
                return Unrouted(kind, consumer_id, command)
            return ConsumerClosed(consumer_id, consumer)
        return UnhandledCommand(kind, command)

    def _handshake(self, command: pb.BaseCommand) -> ClientEvent:
        if command.type == pb.BaseCommand.CONNECTED:
            connected = command.connected
            self.server_version = connected.server_version
            self.protocol_version = connected.protocol_version
            if connected.HasField("max_message_size"):
                self.max_message_size = connected.max_message_size
            self._set_max_message_size(self.max_message_size)
            self.state = SessionState.CONNECTED
            return Connected(self.server_version, self.protocol_version, self.max_message_size)
        if command.type == pb.BaseCommand.ERROR:
            self.state = SessionState.CLOSED  # refused: whatever follows is not for us
            return HandshakeRefused(command.error.error, command.error.message, command)
        if command.type == pb.BaseCommand.AUTH_CHALLENGE:
            challenged = self._challenge(command)
            if challenged is None:
                raise HandshakeError("AUTH_CHALLENGE without its challenge")
            return challenged
        raise HandshakeError(f"expected CONNECTED, got {Type.Name(command.type)}")

    def _challenge(self, command: pb.BaseCommand) -> AuthChallenged | None:
        """The challenge AUTH_CHALLENGE makes (``None`` if it holds none)."""
        body = command.authChallenge
        if not command.HasField("authChallenge") or not body.challenge.HasField("auth_data"):
            return None
        self._challenged = True
        data = body.challenge.auth_data
        method = body.challenge.auth_method_name or self.auth_method_name
        return AuthChallenged(method, data, data == REFRESH_AUTH_DATA)

    def _response(self, command: pb.BaseCommand) -> ClientEvent:
        request_id = request_id_of(command_body(command))
        if request_id is None or request_id not in self._outstanding:
            return UnexpectedResponse(request_id, command)
        if command.type == pb.BaseCommand.PRODUCER_SUCCESS and not (
            command.producer_success.producer_ready
        ):
            return ProducerQueued(request_id)
        self._outstanding.discard(request_id)
        failed, error, message = refusal_of(command)
        if failed:
            return RequestFailed(request_id, command, error, message)
        return ResponseReceived(request_id, command)
