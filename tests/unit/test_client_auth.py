"""Token authentication and TLS in the client: the session's handshake with credentials and
its answers to AUTH_CHALLENGE (driven with frames), ``AuthenticationToken`` and the
``--auth-params`` parser, the client's ``ssl.SSLContext``, and the asyncio client against a
fake broker on 127.0.0.1 (plain and TLS) that accepts, challenges or refuses a token."""

from __future__ import annotations

import argparse
import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from google.protobuf.message import Message

from stripemq.client import AuthenticationError, AuthenticationToken, Client, Result, aio
from stripemq.client.auth import (
    TOKEN_PLUGINS,
    authentication_from_params,
    token_from_params,
)
from stripemq.client.pool import DEFAULT_TLS_PORT, ServiceAddresses, parse_service_url
from stripemq.client.producer import result_of
from stripemq.client.tls import client_ssl_context
from stripemq.errors import AuthorizationError, InvalidConfigurationError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.client_session import (
    AuthChallenged,
    ClientEvent,
    ClientSession,
    Connected,
    HandshakeRefused,
    UnhandledCommand,
)
from stripemq.proto.frames import FrameDecoder, base_command, encode_command
from stripemq.proto.session import (
    REFRESH_AUTH_DATA,
    HandshakeError,
    LocalProtocolError,
    SessionState,
)
from stripemq.testing.tls import TlsFiles, make_test_pki

Session = ClientSession[str, str]
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"


def written(session: Session) -> list[pb.BaseCommand]:
    return [frame.command for frame in FrameDecoder().feed(session.data_to_send())]


def receive(session: Session, *bodies: Message) -> list[ClientEvent]:
    return session.receive_data(b"".join(encode_command(body) for body in bodies))


def challenge(data: bytes = REFRESH_AUTH_DATA, method: str = "token") -> pb.CommandAuthChallenge:
    return pb.CommandAuthChallenge(
        server_version="broker",
        protocol_version=20,
        challenge=pb.AuthData(auth_method_name=method, auth_data=data),
    )


# ---------------------------------------------------------------------------- the session


def test_connect_with_a_token_carries_it_and_offers_refresh() -> None:
    session: Session = ClientSession("test-client")
    session.connect("token", TOKEN.encode())
    (connect,) = written(session)
    expected = pb.CommandConnect(
        client_version="test-client",
        protocol_version=20,
        auth_method_name="token",
        auth_data=TOKEN.encode(),
        feature_flags=pb.FeatureFlags(supports_auth_refresh=True),
    )
    assert connect == base_command(expected)
    assert session.auth_method_name == "token"


def test_connect_without_a_method_carries_no_credentials() -> None:
    session: Session = ClientSession("test-client")
    session.connect()
    (connect,) = written(session)
    assert not connect.connect.HasField("auth_method_name")
    assert not connect.connect.HasField("auth_data")
    assert not connect.connect.HasField("feature_flags")


def test_an_authentication_error_refuses_the_handshake() -> None:
    session: Session = ClientSession("test-client")
    session.connect("token", b"expired")
    session.data_to_send()
    message = "Failed to authenticate: token expired"
    refusal = pb.CommandError(request_id=0, error=pb.AuthenticationError, message=message)
    (event,) = receive(session, refusal)
    assert isinstance(event, HandshakeRefused)
    assert (event.error, event.message) == (pb.AuthenticationError, refusal.message)
    assert session.state is SessionState.CLOSED


def test_a_refresh_challenge_is_answered_with_the_credentials_given() -> None:
    session: Session = ClientSession("test-client")
    session.connect("token", b"first")
    session.data_to_send()
    receive(session, pb.CommandConnected(server_version="b", protocol_version=20))
    assert receive(session, challenge()) == [AuthChallenged("token", REFRESH_AUTH_DATA, True)]
    assert REFRESH_AUTH_DATA == b"PulsarAuthRefresh"  # Pulsar's AuthData.REFRESH_AUTH_DATA
    assert written(session) == []  # the driver answers, with fresh credentials
    session.answer_challenge(b"second")
    assert written(session) == [
        base_command(
            pb.CommandAuthResponse(
                client_version="test-client",
                protocol_version=20,
                response=pb.AuthData(auth_method_name="token", auth_data=b"second"),
            )
        )
    ]
    with pytest.raises(LocalProtocolError, match="without a challenge"):
        session.answer_challenge(b"third")  # one answer per challenge
    assert session.state is SessionState.CONNECTED


def test_a_challenge_during_the_handshake_is_answered_before_connected() -> None:
    session: Session = ClientSession("test-client")
    session.connect("token", b"first")
    session.data_to_send()
    events = receive(session, challenge(b"step-1", method=""))
    assert events == [AuthChallenged("token", b"step-1", False)]  # the method CONNECT named
    assert session.state is SessionState.HANDSHAKE
    session.answer_challenge(b"answer")
    (response,) = written(session)
    assert response.authResponse.response.auth_data == b"answer"
    assert receive(session, pb.CommandConnected(server_version="b")) == [
        Connected("b", 0, session.max_message_size)
    ]


def test_a_challenge_to_a_client_without_credentials_is_answered_as_none() -> None:
    session: Session = ClientSession("test-client")
    session.connect()
    session.data_to_send()
    receive(session, pb.CommandConnected(server_version="b"))
    (event,) = receive(session, challenge())
    assert isinstance(event, AuthChallenged) and event.refresh
    session.answer_challenge(b"")
    (response,) = written(session)
    assert response.authResponse.response == pb.AuthData(auth_method_name="none", auth_data=b"")


def test_a_challenge_without_its_data() -> None:
    empty = pb.CommandAuthChallenge(server_version="b")
    session: Session = ClientSession("test-client")
    session.connect("token", b"t")
    with pytest.raises(HandshakeError, match="AUTH_CHALLENGE without its challenge"):
        receive(session, empty)
    session = ClientSession("test-client")
    session.connect("token", b"t")
    receive(session, pb.CommandConnected(server_version="b"))
    assert receive(session, empty) == [
        UnhandledCommand(pb.BaseCommand.AUTH_CHALLENGE, base_command(empty))
    ]
    with pytest.raises(LocalProtocolError):
        session.answer_challenge(b"t")


def test_close_forgets_an_unanswered_challenge() -> None:
    session: Session = ClientSession("test-client")
    session.connect("token", b"t")
    receive(session, pb.CommandConnected(server_version="b"), challenge())
    session.close()
    with pytest.raises(LocalProtocolError):
        session.answer_challenge(b"t")


# ---------------------------------------------------------------------------- tokens


def test_a_token_is_sent_as_its_bytes() -> None:
    auth = AuthenticationToken(TOKEN)
    assert auth.auth_method_name == "token"
    assert auth.auth_data() == TOKEN.encode()
    assert TOKEN not in repr(auth)


def test_a_supplier_is_asked_every_time() -> None:
    tokens = iter(["one", "two"])
    auth = AuthenticationToken(lambda: next(tokens))
    assert (auth.token(), auth.token()) == ("one", "two")
    with pytest.raises(AuthenticationError, match="cannot get the token"):
        auth.token()  # StopIteration: the supplier failed
    with pytest.raises(AuthenticationError, match="gave no token"):
        AuthenticationToken(lambda: "").token()


def test_a_token_is_a_str_or_a_supplier() -> None:
    with pytest.raises(ValueError, match="token"):
        AuthenticationToken(42)  # type: ignore[arg-type]


def test_params_token_and_bare() -> None:
    assert token_from_params(f"token:{TOKEN}") == TOKEN
    assert token_from_params(TOKEN) == TOKEN
    assert token_from_params(f'{{"token": "{TOKEN}"}}') == TOKEN


def test_params_file_is_read_again_on_every_call(tmp_path: Path) -> None:
    path = tmp_path / "token.jwt"
    path.write_text("first\n")
    supplier = token_from_params(f"file://{path}")
    assert callable(supplier)
    assert supplier() == "first"
    path.write_text("second")
    assert supplier() == "second"
    assert token_from_params(f"file:{path}") is not None  # file:/abs too
    path.unlink()
    with pytest.raises(AuthenticationError, match="cannot read the token file"):
        supplier()


def test_params_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIPEMQ_TEST_TOKEN", "from-env")
    supplier = token_from_params("env:STRIPEMQ_TEST_TOKEN")
    assert callable(supplier) and supplier() == "from-env"
    monkeypatch.delenv("STRIPEMQ_TEST_TOKEN")
    with pytest.raises(InvalidConfigurationError, match="STRIPEMQ_TEST_TOKEN is not set"):
        token_from_params("env:STRIPEMQ_TEST_TOKEN")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("", r"auth params \(empty\) are none of token:<jwt>"),
        ("token:", "hold no token"),
        ("tokn:abc", r"auth params tokn:\.\.\. are none of token:<jwt>, file:///"),
        ("secret with spaces", "auth params with spaces"),
        ("file:///no/such/token", "cannot read the token file /no/such/token"),
        ("file://tmp/token", "name host 'tmp': a token file is file:///absolute/path"),
        ('{"jwt": "x"}', r'JSON need \{"token": "<jwt>"\}'),
    ],
)
def test_bad_params_are_clear_configuration_errors(params: str, message: str) -> None:
    with pytest.raises(InvalidConfigurationError, match=message) as refused:
        token_from_params(params)
    assert "abc" not in str(refused.value) and "secret" not in str(refused.value)


def test_plugins() -> None:
    assert authentication_from_params(None, None) is None
    assert authentication_from_params("", "") is None
    for plugin in [*sorted(TOKEN_PLUGINS), None]:
        auth = authentication_from_params(plugin, f"token:{TOKEN}")
        assert isinstance(auth, AuthenticationToken) and auth.token() == TOKEN
    assert "org.apache.pulsar.client.impl.auth.AuthenticationToken" in TOKEN_PLUGINS
    with pytest.raises(InvalidConfigurationError, match="'tls' is not supported: only token"):
        authentication_from_params("tls", "tlsCertFile:/a")
    with pytest.raises(InvalidConfigurationError, match="--auth-plugin token needs --auth-params"):
        authentication_from_params("token", None)


def test_auth_failures_have_their_send_results() -> None:
    assert result_of(AuthenticationError("x")) is Result.AuthenticationError
    assert result_of(AuthorizationError("x")) is Result.AuthorizationError


# ---------------------------------------------------------------------------- TLS settings


def server_context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.server_cert, files.server_key)
    return context


def test_ssl_context_settings(tmp_path: Path) -> None:
    ca_pem = make_test_pki(tmp_path).ca_cert
    trusted = client_ssl_context(str(ca_pem))
    assert trusted.verify_mode is ssl.CERT_REQUIRED and not trusted.check_hostname
    assert trusted.cert_store_stats()["x509_ca"] == 1
    assert trusted.minimum_version is ssl.TLSVersion.TLSv1_2
    assert client_ssl_context(str(ca_pem), validate_hostname=True).check_hostname
    insecure = client_ssl_context(str(ca_pem), allow_insecure_connection=True)
    assert insecure.verify_mode is ssl.CERT_NONE and not insecure.check_hostname
    system = client_ssl_context()
    assert system.verify_mode is ssl.CERT_REQUIRED


def test_an_unreadable_trust_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigurationError, match=r"TLS trust certificates /no/ca\.pem"):
        client_ssl_context("/no/ca.pem")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(InvalidConfigurationError, match="TLS trust certificates"):
        client_ssl_context(str(junk))


def test_tls_service_urls() -> None:
    assert DEFAULT_TLS_PORT == 6651
    assert parse_service_url("pulsar+ssl://a,b:7000") == ["a:6651", "b:7000"]
    assert ServiceAddresses("pulsar+ssl://a").tls
    assert not ServiceAddresses("pulsar://a").tls
    assert ServiceAddresses("pulsar://a", use_tls=True).tls


# ---------------------------------------------------------------------------- a fake broker


Reply = Callable[["FakeBroker", pb.BaseCommand], list[Message]]


def accept_all(broker: FakeBroker, command: pb.BaseCommand) -> list[Message]:
    """CONNECTED to CONNECT; a non-partitioned topic served by this broker; PRODUCER and
    CLOSE_PRODUCER ok."""
    if command.type == pb.BaseCommand.CONNECT:
        return [pb.CommandConnected(server_version="fake", protocol_version=20)]
    if command.type == pb.BaseCommand.PARTITIONED_METADATA:
        rid = command.partitionMetadata.request_id
        return [pb.CommandPartitionedTopicMetadataResponse(request_id=rid, partitions=0)]
    if command.type == pb.BaseCommand.LOOKUP:
        return [
            pb.CommandLookupTopicResponse(
                request_id=command.lookupTopic.request_id,
                response=pb.CommandLookupTopicResponse.Connect,
                brokerServiceUrl=broker.plain_url,
                brokerServiceUrlTls=broker.tls_url,
                authoritative=True,
            )
        ]
    if command.type == pb.BaseCommand.PRODUCER:
        producer = command.producer
        return [
            pb.CommandProducerSuccess(
                request_id=producer.request_id, producer_name="p", last_sequence_id=-1
            )
        ]
    if command.type == pb.BaseCommand.CLOSE_PRODUCER:
        return [pb.CommandSuccess(request_id=command.close_producer.request_id)]
    return []


class FakeBroker:
    """A broker on ``host`` (TLS with ``ssl_context``) that keeps every command it gets
    and answers as ``reply`` says."""

    def __init__(
        self,
        reply: Reply = accept_all,
        ssl_context: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.reply = reply
        self.ssl_context = ssl_context
        self.host = host
        self.commands: list[pb.BaseCommand] = []
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._arrived = asyncio.Condition()

    @property
    def url(self) -> str:
        scheme = "pulsar+ssl" if self.ssl_context else "pulsar"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def plain_url(self) -> str:
        return "pulsar://127.0.0.1:1" if self.ssl_context else self.url  # port 1: nobody

    @property
    def tls_url(self) -> str:
        return self.url if self.ssl_context else ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for writer in self.writers:
            writer.close()
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    async with self._arrived:
                        self.commands.append(frame.command)
                        self._arrived.notify_all()
                    for answer in self.reply(self, frame.command):
                        writer.write(encode_command(answer))
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    def send(self, body: Message) -> None:
        """Send ``body`` on the newest connection."""
        self.writers[-1].write(encode_command(body))

    def of_type(self, kind: int) -> list[pb.BaseCommand]:
        return [c for c in self.commands if c.type == kind]

    async def wait_for(self, kind: int, count: int = 1) -> list[pb.BaseCommand]:
        async with asyncio.timeout(5), self._arrived:
            await self._arrived.wait_for(lambda: len(self.of_type(kind)) >= count)
        return self.of_type(kind)


@pytest.fixture
async def broker() -> AsyncIterator[FakeBroker]:
    server = FakeBroker()
    await server.start()
    yield server
    await server.stop()


# ---------------------------------------------------------------------------- the client


async def test_the_token_goes_in_connect_and_a_refresh_asks_the_supplier(
    broker: FakeBroker,
) -> None:
    tokens = iter(["token-1", "token-2", "token-3"])
    async with aio.Client(
        broker.url, authentication=AuthenticationToken(lambda: next(tokens))
    ) as c:
        producer = await c.create_producer("persistent://public/default/t")
        (connect,) = broker.of_type(pb.BaseCommand.CONNECT)  # one connection: lookup and all
        assert connect.connect.auth_method_name == "token"
        assert connect.connect.auth_data == b"token-1"
        assert connect.connect.feature_flags.supports_auth_refresh
        broker.send(challenge())
        (answer,) = await broker.wait_for(pb.BaseCommand.AUTH_RESPONSE)
        assert answer.authResponse.response == pb.AuthData(
            auth_method_name="token", auth_data=b"token-2"
        )
        assert answer.authResponse.client_version
        assert producer.is_connected()


async def test_a_refused_token_fails_the_call_at_once(broker: FakeBroker) -> None:
    def refuse(_: FakeBroker, command: pb.BaseCommand) -> list[Message]:
        if command.type != pb.BaseCommand.CONNECT:
            return []
        return [pb.CommandError(request_id=0, error=pb.AuthenticationError, message="expired")]

    broker.reply = refuse
    async with aio.Client(broker.url, authentication=AuthenticationToken("old")) as client:
        started = time.monotonic()
        with pytest.raises(AuthenticationError, match="expired"):
            await client.create_producer("persistent://public/default/t")
        with pytest.raises(AuthenticationError):
            await client.subscribe("persistent://public/default/t", "s")
        assert time.monotonic() - started < 5  # not retried until the operation timeout
    assert broker.connections == 2  # one attempt per call


async def test_a_failing_supplier_fails_before_connecting(broker: FakeBroker) -> None:
    def broken() -> str:
        raise OSError("vault unreachable")

    async with aio.Client(broker.url, authentication=AuthenticationToken(broken)) as client:
        with pytest.raises(AuthenticationError, match="vault unreachable"):
            await client.create_producer("persistent://public/default/t")
    assert broker.connections == 0


async def test_a_challenge_in_the_handshake_is_answered(broker: FakeBroker) -> None:
    def challenging(broker: FakeBroker, command: pb.BaseCommand) -> list[Message]:
        if command.type == pb.BaseCommand.CONNECT:
            return [challenge(b"prove-it")]
        if command.type == pb.BaseCommand.AUTH_RESPONSE:
            return [pb.CommandConnected(server_version="fake", protocol_version=20)]
        return accept_all(broker, command)

    broker.reply = challenging
    async with aio.Client(broker.url, authentication=AuthenticationToken("t")) as client:
        await client.create_producer("persistent://public/default/t")
    (answer,) = broker.of_type(pb.BaseCommand.AUTH_RESPONSE)
    assert answer.authResponse.response.auth_data == b"t"


async def test_no_credentials_for_a_refresh_drop_the_connection(broker: FakeBroker) -> None:
    tokens = iter(["token-1"])
    async with aio.Client(
        broker.url, authentication=AuthenticationToken(lambda: next(tokens))
    ) as c:
        await c.create_producer("persistent://public/default/t")
        connection = next(iter(c.pool._connections.values()))
        broker.send(challenge())
        async with asyncio.timeout(5):
            await connection.wait_closed()
        assert "no credentials for the broker's challenge" in connection.close_reason
        assert broker.of_type(pb.BaseCommand.AUTH_RESPONSE) == []


async def test_a_client_without_authentication_sends_none(broker: FakeBroker) -> None:
    async with aio.Client(broker.url) as client:
        await client.create_producer("persistent://public/default/t")
    (connect,) = broker.of_type(pb.BaseCommand.CONNECT)
    assert not connect.connect.HasField("auth_method_name")


async def test_the_blocking_client_takes_it_too(broker: FakeBroker) -> None:
    def produce() -> None:
        with Client(broker.url, AuthenticationToken("sync-token")) as client:  # positional
            client.create_producer("persistent://public/default/t").close()

    await asyncio.to_thread(produce)
    (connect,) = broker.of_type(pb.BaseCommand.CONNECT)
    assert connect.connect.auth_data == b"sync-token"


def test_other_authentications_are_refused() -> None:
    with pytest.raises(InvalidConfigurationError, match="AuthenticationToken"):
        aio.Client("pulsar://127.0.0.1:1", authentication="token:abc")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- over TLS


@pytest.fixture
async def tls_broker(tmp_path: Path) -> AsyncIterator[tuple[FakeBroker, Path]]:
    files = make_test_pki(tmp_path)
    server = FakeBroker(ssl_context=server_context(files))
    await server.start()
    yield server, files.ca_cert
    await server.stop()


async def test_tls_connections_follow_the_tls_url_of_a_lookup(
    tls_broker: tuple[FakeBroker, Path],
) -> None:
    broker, ca_pem = tls_broker
    auth = AuthenticationToken("t")
    trust = str(ca_pem)
    async with aio.Client(
        broker.url, auth, tls_trust_certs_file_path=trust, tls_validate_hostname=True
    ) as c:
        producer = await c.create_producer("persistent://public/default/t")
        assert producer.is_connected()  # at brokerServiceUrlTls (brokerServiceUrl is port 1)
    assert broker.connections == 1
    (connect,) = broker.of_type(pb.BaseCommand.CONNECT)
    assert connect.connect.auth_data == b"t"


async def test_an_untrusted_certificate_fails_at_once(
    tls_broker: tuple[FakeBroker, Path],
) -> None:
    broker, _ = tls_broker
    async with aio.Client(broker.url) as client:  # the system's CAs: not the test CA
        with pytest.raises(InvalidConfigurationError, match=r"cannot verify 127\.0\.0\.1:"):
            await client.create_producer("persistent://public/default/t")
    async with aio.Client(broker.url, tls_allow_insecure_connection=True) as client:
        await client.create_producer("persistent://public/default/t")


# A loopback address the test certificate does not name (Linux routes all of 127/8 to lo).
LOOPBACK_ALIAS = "127.0.0.2"


async def test_hostname_verification_is_off_unless_asked(tmp_path: Path) -> None:
    files = make_test_pki(tmp_path)  # names 127.0.0.1 and localhost
    broker = FakeBroker(ssl_context=server_context(files), host=LOOPBACK_ALIAS)
    await broker.start()
    try:
        trust = str(files.ca_cert)
        async with aio.Client(broker.url, tls_trust_certs_file_path=trust) as client:
            await client.create_producer("persistent://public/default/t")  # unnamed: fine
        async with aio.Client(
            broker.url, tls_trust_certs_file_path=trust, tls_validate_hostname=True
        ) as client:
            with pytest.raises(InvalidConfigurationError, match="cannot verify"):
                await client.create_producer("persistent://public/default/t")
    finally:
        await broker.stop()


async def test_a_tls_client_needs_a_tls_url_in_the_lookup(
    tls_broker: tuple[FakeBroker, Path],
) -> None:
    broker, ca_pem = tls_broker

    def plain_only(broker: FakeBroker, command: pb.BaseCommand) -> list[Message]:
        answers = accept_all(broker, command)
        for answer in answers:
            if isinstance(answer, pb.CommandLookupTopicResponse):
                answer.ClearField("brokerServiceUrlTls")
        return answers

    broker.reply = plain_only
    async with aio.Client(broker.url, tls_trust_certs_file_path=str(ca_pem)) as client:
        with pytest.raises(InvalidConfigurationError, match="has no TLS URL"):
            await client.create_producer("persistent://public/default/t")


# ---------------------------------------------------------------------------- the CLI


def cli_args(*argv: str) -> argparse.Namespace:
    from stripemq.cli.client import add_client_parser

    parser = argparse.ArgumentParser()
    add_client_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["client", *argv])


def test_the_client_cli_takes_pulsar_s_security_options(tmp_path: Path) -> None:
    from stripemq.cli.client import client_options

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = cli_args(
        "--url",
        "pulsar+ssl://b:6651",
        "--auth-plugin",
        "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "--auth-params",
        f"file://{token_file}",
        "--tls-trust-certs-file-path",
        "/ca.pem",
        "--tls-allow-insecure",
        "produce",
        "t",
        "-m",
        "x",
    )
    options = client_options(args)
    assert options["authentication"].token() == TOKEN
    assert options["tls_trust_certs_file_path"] == "/ca.pem"
    assert options["tls_allow_insecure_connection"] is True
    assert options["tls_validate_hostname"] is False
    assert client_options(cli_args("produce", "t", "-m", "x"))["authentication"] is None


def test_the_client_cli_reports_bad_params_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from stripemq.cli.client import run_client

    args = cli_args("--auth-params", "tokn:abc", "produce", "t", "-m", "x")
    assert run_client(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: auth params tokn:... are none of token:<jwt>")
    assert err.count("\n") == 1


async def test_the_client_cli_reports_a_refused_token(
    broker: FakeBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    from stripemq.cli.client import run_client

    def refuse(_: FakeBroker, command: pb.BaseCommand) -> list[Message]:
        if command.type != pb.BaseCommand.CONNECT:
            return []
        message = "Failed to authenticate: token expired"
        return [pb.CommandError(request_id=0, error=pb.AuthenticationError, message=message)]

    broker.reply = refuse
    args = cli_args("--url", broker.url, "--auth-params", "token:x", "produce", "t", "-m", "x")
    assert await asyncio.to_thread(run_client, args) == 2
    assert capsys.readouterr().err == (
        "error: authentication failed: Failed to authenticate: token expired\n"
    )
