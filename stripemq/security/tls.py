"""TLS as Pulsar's brokers serve it: the SSL contexts of the TLS listeners, and the
server side of a TLS handshake on an accepted connection.

The broker's TLS listeners (``broker_service_port_tls``: the binary protocol as
``pulsar+ssl://``; ``web_service_port_tls``: the HTTP service as ``https://``) share one
server context, built once from ``tls_certificate_file_path`` (the chain the broker
presents) and ``tls_key_file_path``. Client certificates follow Pulsar's
``tlsRequireTrustedClientCertOnConnect``:

- no ``tls_trust_certs_file_path``: no client certificate is asked for;
- a trust file: a client may present a certificate, and one that does not chain to the
  trust file fails the handshake; a client without one is accepted;
- a trust file and ``tls_require_trusted_client_cert_on_connect``: a client without a
  certificate signed by the trust file fails the handshake.

A connection's verified client certificate is ``writer.get_extra_info("peercert")``
(authentication providers read the role from it). TLS 1.2 is the oldest version accepted.

``accept_tls`` does the handshake on a connection the broker's plain server accepted, so a
failed one (a plain-text client on the TLS port, an untrusted certificate, a client that
says nothing) is an exception the broker logs and survives, rather than something asyncio
drops silently.
"""

from __future__ import annotations

import asyncio
import ssl

from stripemq.errors import ConfigError

# Seconds a client has to finish its TLS handshake (Netty's SslHandler default, as in
# Pulsar's brokers); a connection that takes longer is dropped.
HANDSHAKE_TIMEOUT_S = 10.0
MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2


def server_context(
    certificate_file: str,
    key_file: str,
    trust_certs_file: str | None = None,
    *,
    require_client_cert: bool = False,
) -> ssl.SSLContext:
    """The server context of the TLS listeners (see the module's docstring).

    Raises:
        ConfigError: a file is missing or unreadable, the key does not match the
            certificate, or ``require_client_cert`` without ``trust_certs_file``.
    """
    if require_client_cert and not trust_certs_file:
        raise ConfigError(
            "tls_require_trusted_client_cert_on_connect needs tls_trust_certs_file_path "
            "(the CA certificates client certificates are checked against)"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MINIMUM_VERSION
    try:
        context.load_cert_chain(certificate_file, key_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise ConfigError(
            f"cannot load the TLS certificate {certificate_file} with the key {key_file}: {exc}"
        ) from exc
    if trust_certs_file:
        _load_trust(context, trust_certs_file)
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return context


def _load_trust(context: ssl.SSLContext, trust_certs_file: str) -> None:
    try:
        context.load_verify_locations(cafile=trust_certs_file)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot load the trusted certificates {trust_certs_file}: {exc}"
        ) from exc


async def accept_tls(
    writer: asyncio.StreamWriter,
    context: ssl.SSLContext,
    *,
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The server side of a TLS handshake on a connection ``asyncio.start_server`` accepted
    (its ``writer``): the reader and writer of the TLS stream once the handshake is done.

    Call it first thing in the connection's callback: nothing is read from the plain
    stream before the handshake takes the socket over. The plain reader is not to be used
    again.

    Raises:
        OSError: the handshake failed (``ssl.SSLError``: not TLS, an untrusted or missing
            client certificate...; ``ConnectionAbortedError``: it took longer than
            ``handshake_timeout_s``; ``ConnectionResetError``: the client left). The
            connection is closed.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader)
    transport = await loop.start_tls(
        writer.transport,
        protocol,
        context,
        server_side=True,
        ssl_handshake_timeout=handshake_timeout_s,
    )
    if transport is None:  # the connection closed during the handshake
        raise ConnectionResetError("the connection closed during the TLS handshake")
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)
