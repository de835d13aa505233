"""ServerSession with an ``authenticate`` function: CONNECT's credentials, AUTH_CHALLENGE and
AUTH_RESPONSE, driven with frames (no sockets)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from google.protobuf.message import Message

from stripemq.errors import AuthenticationError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import FrameDecoder, base_command, encode_command
from stripemq.proto.server_session import (
    NO_REQUEST_ID,
    ClientConnected,
    ClientRefused,
    CredentialsRefreshed,
    MalformedCommand,
    Request,
    ServerEvent,
    ServerSession,
    UnsupportedCommand,
)
from stripemq.proto.session import PROTOCOL_VERSION, REFRESH_AUTH_DATA, HandshakeError, SessionState

Session = ServerSession[str, str]


@dataclass(frozen=True)
class Principal:
    method: str
    data: bytes


class FakeAuthenticator:
    """Accepts auth data ``b"good"`` (and ``b"good-2"``), refuses anything else."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def __call__(self, method: str, data: bytes) -> Principal:
        self.calls.append((method, data))
        if data not in (b"good", b"good-2"):
            raise AuthenticationError(f"Failed to authenticate: bad {method} data")
        return Principal(method, data)


def written(session: Session) -> list[pb.BaseCommand]:
    """The commands in the session's outbox (which it empties)."""
    return [frame.command for frame in FrameDecoder().feed(session.data_to_send())]


def receive(session: Session, *bodies: Message) -> list[ServerEvent]:
    return session.receive_data(b"".join(encode_command(body) for body in bodies))


def connect(data: bytes | None = b"good", *, refresh: bool = False) -> pb.CommandConnect:
    command = pb.CommandConnect(client_version="c-1", protocol_version=PROTOCOL_VERSION)
    if data is not None:
        command.auth_method_name = "token"
        command.auth_data = data
    if refresh:
        command.feature_flags.supports_auth_refresh = True
    return command


def auth_response(data: bytes, method: str = "token") -> pb.CommandAuthResponse:
    return pb.CommandAuthResponse(
        client_version="c-1",
        protocol_version=PROTOCOL_VERSION,
        response=pb.AuthData(auth_method_name=method, auth_data=data),
    )


def authenticating() -> tuple[Session, FakeAuthenticator]:
    auth = FakeAuthenticator()
    session: Session = ServerSession("test-broker", authenticate=auth)
    return session, auth


def connected(*, refresh: bool = True) -> tuple[Session, FakeAuthenticator]:
    session, auth = authenticating()
    receive(session, connect(refresh=refresh))
    session.data_to_send()
    auth.calls.clear()
    return session, auth


def assert_refused(session: Session, reason: str) -> None:
    """One ERROR AuthenticationError for no request, and a closed session."""
    (error,) = written(session)
    assert error == base_command(
        pb.CommandError(request_id=NO_REQUEST_ID, error=pb.AuthenticationError, message=reason)
    )
    assert session.state is SessionState.CLOSED and not session.connected


# ---------------------------------------------------------------------------- CONNECT


@pytest.mark.parametrize("refresh", [False, True])
def test_good_credentials_connect_with_their_principal(refresh: bool) -> None:
    session, auth = authenticating()
    events = receive(session, connect(refresh=refresh))
    assert events == [
        ClientConnected("c-1", PROTOCOL_VERSION, Principal("token", b"good"), refresh)
    ]
    assert auth.calls == [("token", b"good")]
    assert written(session) == [
        base_command(
            pb.CommandConnected(
                server_version="test-broker",
                protocol_version=PROTOCOL_VERSION,
                max_message_size=session.max_message_size,
            )
        )
    ]
    assert session.connected


def test_connect_without_credentials_goes_through_authenticate_too() -> None:
    session, auth = authenticating()
    events = receive(session, connect(None))
    assert auth.calls == [("", b"")]
    assert events == [ClientRefused("Failed to authenticate: bad  data")]


@pytest.mark.parametrize("data", [b"bad", b"", b"good "])
def test_bad_credentials_are_refused_and_end_the_session(data: bytes) -> None:
    session, _ = authenticating()
    events = receive(session, connect(data))
    reason = "Failed to authenticate: bad token data"
    assert events == [ClientRefused(reason)]
    assert_refused(session, reason)
    assert session.protocol_version == 0  # nothing was negotiated


def test_a_refused_session_ignores_what_follows() -> None:
    session, auth = authenticating()
    receive(session, connect(b"bad"))
    session.data_to_send()
    later = [
        pb.CommandPing(),
        pb.CommandLookupTopic(topic="persistent://t/n/x", request_id=1),
        pb.CommandProducer(topic="persistent://t/n/x", producer_id=1, request_id=2),
        auth_response(b"good"),
        connect(b"good"),
    ]
    assert receive(session, *later) == []
    assert written(session) == []
    assert auth.calls == [("token", b"bad")]  # nothing more was authenticated
    assert session.state is SessionState.CLOSED


def test_frames_after_the_refusal_in_the_same_read_are_dropped() -> None:
    session, auth = authenticating()
    events = receive(session, connect(b"bad"), pb.CommandPing(), auth_response(b"good"))
    assert events == [ClientRefused("Failed to authenticate: bad token data")]
    assert_refused(session, "Failed to authenticate: bad token data")
    assert len(auth.calls) == 1


def test_other_errors_of_authenticate_are_not_refusals() -> None:
    """Only AuthenticationError is a refusal; anything else is the driver's to handle."""

    def broken(method: str, data: bytes) -> object:
        raise RuntimeError("metadata store down")

    session: Session = ServerSession("test-broker", authenticate=broken)
    with pytest.raises(RuntimeError, match="metadata store down"):
        receive(session, connect())
    assert written(session) == []


def test_without_authenticate_credentials_are_not_checked() -> None:
    session: Session = ServerSession("test-broker")
    assert receive(session, connect(b"anything", refresh=True)) == [
        ClientConnected("c-1", PROTOCOL_VERSION, None, True)
    ]
    assert [command.type for command in written(session)] == [pb.BaseCommand.CONNECTED]
    assert session.connected


def test_auth_response_before_connect_is_a_handshake_error() -> None:
    session, auth = authenticating()
    with pytest.raises(HandshakeError):
        receive(session, auth_response(b"good"))
    assert auth.calls == []


# ---------------------------------------------------------------------------- refresh


def test_challenge_asks_for_fresh_token_credentials() -> None:
    session, _ = connected()
    session.challenge()
    (challenge,) = written(session)
    assert challenge.type == pb.BaseCommand.AUTH_CHALLENGE
    body = challenge.authChallenge
    assert body.challenge.auth_method_name == "token"
    assert body.challenge.auth_data == REFRESH_AUTH_DATA  # what the client takes as a refresh
    assert body.server_version == "test-broker"
    assert body.protocol_version == PROTOCOL_VERSION
    assert session.connected


def test_challenge_speaks_the_negotiated_version() -> None:
    session, _ = authenticating()
    old = connect()
    old.protocol_version = 14
    receive(session, old)
    session.data_to_send()
    session.challenge()
    (challenge,) = written(session)
    assert challenge.authChallenge.protocol_version == 14


def test_good_fresh_credentials_are_a_refresh() -> None:
    session, auth = connected()
    session.challenge()
    session.data_to_send()
    events = receive(session, auth_response(b"good-2"))
    assert events == [CredentialsRefreshed(Principal("token", b"good-2"))]
    assert auth.calls == [("token", b"good-2")]
    assert written(session) == []  # nothing to answer
    assert session.connected


def test_refreshes_may_repeat_and_need_no_challenge() -> None:
    session, _ = connected()
    assert receive(session, auth_response(b"good"), auth_response(b"good-2")) == [
        CredentialsRefreshed(Principal("token", b"good")),
        CredentialsRefreshed(Principal("token", b"good-2")),
    ]
    assert session.connected


def test_bad_fresh_credentials_are_refused_and_end_the_session() -> None:
    session, auth = connected()
    session.challenge()
    session.data_to_send()
    events = receive(session, auth_response(b"expired"))
    assert events == [ClientRefused("Failed to authenticate: bad token data")]
    assert_refused(session, "Failed to authenticate: bad token data")
    lookup = pb.CommandLookupTopic(topic="persistent://t/n/x", request_id=5)
    assert receive(session, lookup, auth_response(b"good")) == []
    assert written(session) == []
    assert auth.calls == [("token", b"expired")]


def test_an_auth_response_names_its_own_method() -> None:
    session, auth = connected()
    assert receive(session, auth_response(b"good", method="other")) == [
        CredentialsRefreshed(Principal("other", b"good"))
    ]
    assert auth.calls == [("other", b"good")]


def test_an_auth_response_without_credentials_goes_through_authenticate() -> None:
    session, auth = connected()
    empty = pb.CommandAuthResponse(client_version="c-1", protocol_version=PROTOCOL_VERSION)
    assert receive(session, empty) == [ClientRefused("Failed to authenticate: bad  data")]
    assert auth.calls == [("", b"")]


def test_an_auth_response_without_its_body_is_malformed() -> None:
    session, auth = connected()
    events = receive(session, pb.BaseCommand(type=pb.BaseCommand.AUTH_RESPONSE))
    assert events == [MalformedCommand(pb.BaseCommand.AUTH_RESPONSE)]
    assert not auth.calls


def test_requests_still_flow_after_a_refresh() -> None:
    session, _ = connected()
    receive(session, auth_response(b"good-2"))
    lookup = pb.CommandLookupTopic(topic="persistent://t/n/x", request_id=9)
    (event,) = receive(session, lookup)
    assert isinstance(event, Request) and event.request_id == 9


# ---------------------------------------------------------------------------- no authentication


def test_auth_response_without_authenticate_is_not_supported() -> None:
    session: Session = ServerSession("test-broker")
    receive(session, connect())
    session.data_to_send()
    events = receive(session, auth_response(b"good"))
    # AUTH_RESPONSE carries no request id: nothing is answered, the session goes on.
    assert events == [UnsupportedCommand(pb.BaseCommand.AUTH_RESPONSE, None)]
    assert written(session) == []
    assert session.connected
    receive(session, pb.CommandPing())
    assert [command.type for command in written(session)] == [pb.BaseCommand.PONG]


def test_a_body_less_auth_response_without_authenticate_is_not_supported() -> None:
    session: Session = ServerSession("test-broker")
    receive(session, connect())
    session.data_to_send()
    assert receive(session, pb.BaseCommand(type=pb.BaseCommand.AUTH_RESPONSE)) == [
        UnsupportedCommand(pb.BaseCommand.AUTH_RESPONSE, None)
    ]
    assert session.connected
