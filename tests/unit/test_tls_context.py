"""``stripemq.security.tls``: the broker's server context (client certificates none,
optional or required), a client's context, the server side of a handshake on an accepted
connection (``accept_tls``), and the broker's TLS settings checked before it starts."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stripemq.broker.app import tls_server_context
from stripemq.broker.config import BrokerConfig
from stripemq.client.tls import client_ssl_context
from stripemq.errors import ConfigError, InvalidConfigurationError
from stripemq.security.tls import accept_tls, server_context
from stripemq.testing.polling import until
from stripemq.testing.tls import TlsFiles, make_test_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_test_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Certificates of another CA, which ``pki`` does not trust."""
    return make_test_pki(tmp_path_factory.mktemp("stranger"))


def test_client_certificates_none_optional_or_required(pki: TlsFiles) -> None:
    cert, key, ca = str(pki.server_cert), str(pki.server_key), str(pki.ca_cert)
    assert server_context(cert, key).verify_mode == ssl.CERT_NONE
    assert server_context(cert, key, ca).verify_mode == ssl.CERT_OPTIONAL
    required = server_context(cert, key, ca, require_client_cert=True)
    assert required.verify_mode == ssl.CERT_REQUIRED
    assert required.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(ConfigError, match="tls_trust_certs_file_path"):
        server_context(cert, key, require_client_cert=True)


def test_unusable_files_are_config_errors(
    pki: TlsFiles, stranger: TlsFiles, tmp_path: Path
) -> None:
    cert, key = str(pki.server_cert), str(pki.server_key)
    with pytest.raises(ConfigError, match="missing"):
        server_context(str(tmp_path / "missing.pem"), key)
    with pytest.raises(ConfigError, match="cannot load the TLS certificate"):
        server_context(cert, str(stranger.server_key))  # not this certificate's key
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ConfigError, match="trusted certificates"):
        server_context(cert, key, str(garbage))
    with pytest.raises(InvalidConfigurationError, match="needs its key"):
        client_ssl_context(str(pki.ca_cert), certificate_file=str(pki.client_cert))


def test_client_context_options(pki: TlsFiles) -> None:
    validating = client_ssl_context(str(pki.ca_cert), validate_hostname=True)
    assert validating.verify_mode == ssl.CERT_REQUIRED and validating.check_hostname
    assert not client_ssl_context(str(pki.ca_cert)).check_hostname  # the official default
    insecure = client_ssl_context(allow_insecure_connection=True)
    assert insecure.verify_mode == ssl.CERT_NONE and not insecure.check_hostname


@contextlib.asynccontextmanager
async def tls_port(
    context: ssl.SSLContext, outcomes: list[object], handshake_timeout_s: float = 5.0
) -> AsyncIterator[int]:
    """A port whose connections go through ``accept_tls``: each one's outcome (the
    client's certificate subject, or the handshake's exception) is appended to
    ``outcomes``, and a handshaken client gets b"hello"."""

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            reader, tls_writer = await accept_tls(
                writer, context, handshake_timeout_s=handshake_timeout_s
            )
        except OSError as exc:
            outcomes.append(exc)
            return
        outcomes.append(tls_writer.get_extra_info("peercert") or {})
        tls_writer.write(b"hello")
        await tls_writer.drain()
        assert await reader.read() == b""  # until the client leaves
        tls_writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def until_outcome(outcomes: list[object]) -> object:
    await until(lambda: bool(outcomes), "the handshake had an outcome", timeout=5)
    return outcomes[0]


async def test_accept_tls_serves_a_tls_stream_with_the_clients_certificate(
    pki: TlsFiles,
) -> None:
    context = server_context(
        str(pki.server_cert), str(pki.server_key), str(pki.ca_cert), require_client_cert=True
    )
    outcomes: list[object] = []
    async with tls_port(context, outcomes) as port:
        client = client_ssl_context(
            str(pki.ca_cert), certificate_file=str(pki.client_cert), key_file=str(pki.client_key)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        assert await reader.readexactly(5) == b"hello"
        writer.close()
        peercert = await until_outcome(outcomes)
        assert isinstance(peercert, dict)
        assert peercert["subject"] == ((("commonName", "client"),),)


@pytest.mark.parametrize(
    "client",
    ["plain-text", "no-certificate", "untrusted-certificate", "silent"],
)
async def test_failed_handshakes_raise_oserror(
    pki: TlsFiles, stranger: TlsFiles, client: str
) -> None:
    context = server_context(
        str(pki.server_cert), str(pki.server_key), str(pki.ca_cert), require_client_cert=True
    )
    outcomes: list[object] = []
    async with tls_port(context, outcomes, handshake_timeout_s=0.3) as port:
        if client in ("plain-text", "silent"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if client == "plain-text":
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 5)  # closed by the server
            assert answer == b"" or answer[0] == 21  # at most a TLS alert
            writer.close()
        else:
            cert = stranger if client == "untrusted-certificate" else None
            ctx = client_ssl_context(
                str(pki.ca_cert),
                certificate_file=str(cert.client_cert) if cert else None,
                key_file=str(cert.client_key) if cert else None,
            )
            # TLS 1.3: the client learns of its refusal on its first read, if not before.
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
                try:
                    await asyncio.wait_for(reader.readexactly(5), 5)
                finally:
                    writer.close()
        outcome = await until_outcome(outcomes)
    assert isinstance(outcome, OSError)
    if client == "silent":
        assert isinstance(outcome, ConnectionAbortedError)
    else:
        assert isinstance(outcome, ssl.SSLError)


def tls_config(**settings: object) -> BrokerConfig:
    return BrokerConfig(**settings)  # type: ignore[arg-type]


def test_broker_settings_are_checked(pki: TlsFiles) -> None:
    files = {
        "tls_certificate_file_path": str(pki.server_cert),
        "tls_key_file_path": str(pki.server_key),
    }
    tls_config().validate()  # no TLS port: no TLS file needed
    tls_config(tls_require_trusted_client_cert_on_connect=True).validate()
    tls_config(broker_service_port_tls=6651, web_service_port_tls=0, **files).validate()
    with pytest.raises(ConfigError, match="broker_service_port_tls is set: TLS needs"):
        tls_config(broker_service_port_tls=6651).validate()
    with pytest.raises(ConfigError, match="web_service_port_tls is set: TLS needs"):
        tls_config(web_service_port_tls=8443, tls_key_file_path=str(pki.server_key)).validate()
    with pytest.raises(ConfigError, match="broker_service_port_tls 70000 out of range"):
        tls_config(broker_service_port_tls=70000, **files).validate()
    with pytest.raises(ConfigError, match="web_service_port_tls -1 out of range"):
        tls_config(web_service_port_tls=-1, **files).validate()
    with pytest.raises(ConfigError, match="both 6650"):
        tls_config(broker_service_port_tls=6650, **files).validate()
    with pytest.raises(ConfigError, match="tls_trust_certs_file_path"):
        tls_config(
            broker_service_port_tls=6651, tls_require_trusted_client_cert_on_connect=True, **files
        ).validate()


def test_the_brokers_context_is_built_only_for_tls_listeners(pki: TlsFiles) -> None:
    assert tls_server_context(tls_config()) is None
    context = tls_server_context(
        tls_config(
            web_service_port_tls=0,
            tls_certificate_file_path=str(pki.server_cert),
            tls_key_file_path=str(pki.server_key),
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_require_trusted_client_cert_on_connect=True,
        )
    )
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ConfigError, match="missing"):
        tls_server_context(
            tls_config(
                broker_service_port_tls=0,
                tls_certificate_file_path="/nonexistent/missing.pem",
                tls_key_file_path=str(pki.server_key),
            )
        )
