"""Connections shared per broker, and the service URL's list of brokers to try.

A service URL is ``pulsar://`` (plain TCP, port 6650 by default) or ``pulsar+ssl://`` (TLS,
port 6651 by default); every connection of a client is of the kind its service URL is."""

from __future__ import annotations

import asyncio
import logging
import ssl
from urllib.parse import urlsplit

from stripemq.client.auth import Authentication
from stripemq.client.connection import ClientConnection
from stripemq.errors import ConnectError, InvalidConfigurationError

log = logging.getLogger(__name__)

DEFAULT_PORT = 6650
DEFAULT_TLS_PORT = 6651
SCHEMES = {"pulsar": DEFAULT_PORT, "pulsar+ssl": DEFAULT_TLS_PORT}


def is_tls_url(url: str) -> bool:
    """Whether ``url`` is a ``pulsar+ssl://`` URL."""
    return urlsplit(url).scheme == "pulsar+ssl"


def parse_service_url(url: str) -> list[str]:
    """``pulsar[+ssl]://host[:port][,host[:port]...]`` as ``host:port`` addresses."""
    parts = urlsplit(url)
    default_port = SCHEMES.get(parts.scheme)
    if default_port is None:
        raise InvalidConfigurationError(
            f"service URL {url!r} is not pulsar://host:port or pulsar+ssl://host:port"
        )
    addresses = []
    for host in parts.netloc.split(","):
        name, sep, port = host.rpartition(":")
        if not sep or host.endswith("]"):  # no port (an IPv6 host is bracketed)
            name, port = host, str(default_port)
        if not name or not port.isdigit():
            raise InvalidConfigurationError(f"service URL {url!r}: bad address {host!r}")
        addresses.append(f"{name}:{port}")
    return addresses


def address_of(broker_url: str) -> str:
    """``host:port`` of a ``pulsar[+ssl]://host:port`` URL a broker gave in a lookup."""
    addresses = parse_service_url(broker_url)
    return addresses[0]


class ServiceAddresses:
    """The service URL's brokers; after a failure the next one is tried."""

    def __init__(self, url: str, *, use_tls: bool = False) -> None:
        self.url = url
        self.addresses = parse_service_url(url)
        self.tls = use_tls or is_tls_url(url)  # use_tls: the official client's old switch
        self._index = 0

    def current(self) -> str:
        return self.addresses[self._index % len(self.addresses)]

    def failed(self, address: str) -> None:
        if self.current() == address:
            self._index += 1


class ConnectionPool:
    """One live connection per broker address, opened on first use: with
    ``authentication``'s credentials, and over TLS with ``ssl_context``."""

    def __init__(
        self,
        *,
        connection_timeout_s: float = 10.0,
        operation_timeout_s: float = 30.0,
        keepalive_s: float = 30.0,
        authentication: Authentication | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connection_timeout_s = connection_timeout_s
        self.operation_timeout_s = operation_timeout_s
        self.keepalive_s = keepalive_s
        self.authentication = authentication
        self.ssl_context = ssl_context
        self._connections: dict[tuple[str, str], ClientConnection] = {}
        self._opening: dict[tuple[str, str], asyncio.Future[ClientConnection]] = {}

    async def get(self, logical: str, physical: str | None = None) -> ClientConnection:
        """The connection for broker ``logical`` (reached at ``physical`` when it is
        behind a proxy).

        Raises:
            ConnectError: it cannot be opened.
            AuthenticationError: the broker refused the credentials, or there are none.
            InvalidConfigurationError: the broker's TLS certificate is not trusted.
        """
        key = (logical, physical or logical)
        existing = self._connections.get(key)
        if existing is not None and not existing.is_closed:
            return existing
        opening = self._opening.get(key)
        if opening is not None:
            return await asyncio.shield(opening)
        future: asyncio.Future[ClientConnection] = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            connection = ClientConnection(
                logical,
                key[1],
                operation_timeout_s=self.operation_timeout_s,
                keepalive_s=self.keepalive_s,
                authentication=self.authentication,
                ssl_context=self.ssl_context,
            )
            await connection.connect(self.connection_timeout_s)
        except BaseException as exc:
            # Waiters get a ConnectError, never the opener's own cancellation.
            shared = exc if isinstance(exc, Exception) else ConnectError("connect abandoned")
            future.set_exception(shared)
            future.exception()  # retrieved: waiters re-raise it themselves
            raise
        finally:
            self._opening.pop(key, None)
        self._connections[key] = connection
        future.set_result(connection)
        return connection

    async def close(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
