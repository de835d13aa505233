"""What the client's and the broker's connection sessions share: the protocol version, the
session's states, its errors, the byte handling around the frame codec, and keep-alive.

A session (``ClientSession``, ``ServerSession``) is the Pulsar connection protocol without
I/O, in the manner of h11's ``Connection`` and h2's ``H2Connection``: the driver hands it
the bytes it read (``receive_data``, or ``feed`` then ``receive_frame`` one frame at a
time), acts on the events it returns, and writes what ``data_to_send`` holds after every
call. The outbox holds only what the session answers or sends on its own (CONNECT,
CONNECTED, PONG, the protocol's refusals); the driver encodes its own commands.

No clock is read here: ``Keepalive`` is told the time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import Message

from stripemq.errors import Retry, StripeMQError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_PADDING,
    Frame,
    FrameDecoder,
    ProtocolError,
    encode_command,
)

# The Pulsar protocol version stripemq speaks, client and broker (``pb.ProtocolVersion``);
# a connection speaks the lower of the client's and the broker's.
PROTOCOL_VERSION = 20
# The AUTH_CHALLENGE data that asks a client for refreshed credentials (Pulsar's
# AuthData.REFRESH_AUTH_DATA).
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
# The auth method name of token authentication (CONNECT's auth_method_name).
AUTH_METHOD_TOKEN = "token"

E = TypeVar("E")


class SessionState(enum.Enum):
    """Where a connection is in its life."""

    IDLE = "idle"  # a client session that has not sent CONNECT yet
    HANDSHAKE = "handshake"  # CONNECT sent (client) or awaited (broker)
    CONNECTED = "connected"
    CLOSED = "closed"


class HandshakeError(ProtocolError):
    """The peer broke the handshake (a client whose first command was not CONNECT, a broker
    that spoke before CONNECT or answered it with neither CONNECTED nor ERROR): close the
    connection."""


class LocalProtocolError(StripeMQError):
    """This side used the session wrongly (a request before CONNECTED, after closing):
    a bug in the driver, not the peer's doing, so never retried."""

    retry = Retry.NEVER


def request_id_of(body: Message | None) -> int | None:
    """The request id a command carries, ``None`` if its type has none or leaves its
    optional one unset (an ACK without one must not be answered as request 0)."""
    field = body.DESCRIPTOR.fields_by_name.get("request_id") if body is not None else None
    if body is None or field is None or not body.HasField(field.name):
        return None
    return int(getattr(body, field.name))


def negotiate_version(client_version: int, server_version: int = PROTOCOL_VERSION) -> int:
    """The version a connection speaks: the lower of what each end offers."""
    return min(client_version, server_version)


class Session(Generic[E]):
    """The byte handling both sessions share: the frame decoder and the outbox."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING) -> None:
        self.state = SessionState.IDLE
        self._decoder = FrameDecoder(max_frame_size)
        self._outbox: list[bytes] = []

    @property
    def max_frame_size(self) -> int:
        return self._decoder.max_frame_size

    def _set_max_message_size(self, max_message_size: int) -> None:
        self._decoder.max_frame_size = max_message_size + FRAME_PADDING

    def feed(self, data: bytes) -> list[Frame]:
        """The frames ``data`` completes; ``ProtocolError`` for bytes no peer should send
        (none of the frames of that call is then handled: the connection closes)."""
        if self.state is SessionState.CLOSED:
            return []  # bytes that arrive after the close are dropped
        return self._decoder.feed(data)

    def receive_frame(self, frame: Frame) -> E | None:
        """Handle one frame; the event it makes for the driver, if any."""
        raise NotImplementedError

    def receive_data(self, data: bytes) -> list[E]:
        """``feed`` and ``receive_frame`` for all of ``data``: the events, in frame order."""
        events: list[E] = []
        for frame in self.feed(data):
            event = self.receive_frame(frame)
            if event is not None:
                events.append(event)
        return events

    def data_to_send(self) -> bytes:
        """What the session wrote since the last call; the driver sends it as it is."""
        if not self._outbox:  # the common case: a SEND or an ACK needs no answer of its own
            return b""
        data = b"".join(self._outbox)
        self._outbox.clear()
        return data

    def _write(self, command: Message) -> None:
        self._outbox.append(encode_command(command))

    def ping(self) -> None:
        """Queue a PING (keep-alive)."""
        self._write(pb.CommandPing())


class Liveness(enum.Enum):
    """What ``Keepalive.check`` advises."""

    FINE = "fine"  # heard from recently
    PING = "ping"  # quiet for an interval: ask
    DEAD = "dead"  # quiet for two intervals: close the connection


@dataclass
class Keepalive:
    """Pulsar's keep-alive rule, both ends: a peer quiet for one interval is PINGed, one
    quiet for two is given up. ``now`` comes from the driver's clock."""

    interval_s: float
    last_heard: float

    def heard(self, now: float) -> None:
        """Something (anything) arrived from the peer."""
        self.last_heard = now

    def quiet_for(self, now: float) -> float:
        return now - self.last_heard

    def check(self, now: float) -> Liveness:
        quiet = self.quiet_for(now)
        if quiet >= 2 * self.interval_s:
            return Liveness.DEAD
        if quiet >= self.interval_s:
            return Liveness.PING
        return Liveness.FINE
