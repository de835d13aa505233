"""The broker over TLS: ``pulsar+ssl://`` beside ``pulsar://``, ``https://`` beside
``http://``, with the official pulsar-client, client certificates, lookups that send TLS
clients to TLS URLs, and plain-text clients refused on the TLS ports without harm."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pulsar
import pytest

import stripemq.client.aio as aio
from stripemq.broker.ownership import registered_brokers
from stripemq.broker.server import BrokerServer
from stripemq.client.tls import client_ssl_context
from stripemq.errors import InvalidConfigurationError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_command
from stripemq.proto.topic_name import TopicName
from stripemq.standalone import Standalone
from stripemq.testing.polling import until
from stripemq.testing.raw_connection import RawConnection
from stripemq.testing.standalone import in_process_standalone, second_broker
from stripemq.testing.tls import TlsFiles, make_test_pki

pytestmark = pytest.mark.integration

TLS_PORTS = {"broker_service_port_tls": 0, "web_service_port_tls": 0}  # 0: free ports


@pytest.fixture
def pki(tmp_path: Path) -> TlsFiles:
    return make_test_pki(tmp_path / "pki")


@pytest.fixture
async def node(tmp_path: Path, pki: TlsFiles) -> AsyncIterator[Standalone]:
    """A standalone with TLS listeners beside its plain ones (client certificates optional)."""
    async with in_process_standalone(tmp_path, {**pki.broker_settings(), **TLS_PORTS}) as node:
        yield node


def server_of(node: Standalone) -> BrokerServer:
    assert node.broker is not None and node.broker.server is not None
    return node.broker.server


def tls_url(node: Standalone, host: str = "127.0.0.1") -> str:
    return f"pulsar+ssl://{host}:{server_of(node).tls_port}"


def round_trip(url: str, topic: str, count: int = 10, **client_options: object) -> list[str]:
    """Produce ``count`` messages to ``topic`` and consume them with the official client."""
    client = pulsar.Client(url, operation_timeout_seconds=10, **client_options)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        for i in range(count):
            producer.send(f"m{i}".encode())
        got = []
        for _ in range(count):
            message = consumer.receive(timeout_millis=10_000)
            got.append(message.data().decode())
            consumer.acknowledge(message)
        return got
    finally:
        client.close()


def refused(url: str, **client_options: object) -> bool:
    """Whether the official client fails to make a producer at ``url``."""
    client = pulsar.Client(
        url, operation_timeout_seconds=3, connection_timeout_ms=2000, **client_options
    )
    try:
        client.create_producer("refused")
    except pulsar.PulsarException:
        return True
    finally:
        client.close()
    return False


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_the_official_client_produces_and_consumes_over_tls(
    node: Standalone, pki: TlsFiles, host: str
) -> None:
    """The certificate names 127.0.0.1 (IP SAN) and localhost (DNS SAN): host names are
    validated either way. The client's lookup answers with the TLS URL, which it connects
    to next."""
    got = await asyncio.to_thread(
        round_trip,
        tls_url(node, host),
        "secure",
        tls_trust_certs_file_path=str(pki.ca_cert),
        tls_validate_hostname=True,
    )
    assert got == [f"m{i}" for i in range(10)]
    # The plain port serves as before, the same topics.
    plain = f"pulsar://127.0.0.1:{server_of(node).port}"
    assert await asyncio.to_thread(round_trip, plain, "secure", 3) == ["m0", "m1", "m2"]


async def test_stripemq_client_produces_and_consumes_over_tls(
    node: Standalone, pki: TlsFiles
) -> None:
    options = {"tls_trust_certs_file_path": str(pki.ca_cert), "tls_validate_hostname": True}
    async with aio.Client(tls_url(node), operation_timeout_seconds=10, **options) as client:
        consumer = await client.subscribe("tls-own-client", "sub")
        producer = await client.create_producer("tls-own-client")
        await producer.send(b"over tls")
        message = await consumer.receive(timeout_millis=10_000)
        assert message.data() == b"over tls"
        # Every connection it made is a TLS one (lookups named the TLS URL).
        served = server_of(node).connections
        assert served and all(c.writer.get_extra_info("ssl_object") for c in served)
    async with aio.Client(tls_url(node), operation_timeout_seconds=3) as untrusting:
        with pytest.raises(InvalidConfigurationError):
            await untrusting.create_producer("tls-own-client")


async def test_a_client_that_does_not_trust_the_ca_is_refused(
    node: Standalone, tmp_path: Path
) -> None:
    other = make_test_pki(tmp_path / "other")
    assert await asyncio.to_thread(
        refused, tls_url(node), tls_trust_certs_file_path=str(other.ca_cert)
    )


async def test_port_zero_advertises_the_ports_bound(node: Standalone, pki: TlsFiles) -> None:
    """Registration, the binary LOOKUP and the HTTP lookup carry the TLS URLs, with the
    ports the system picked; so does the cluster's record."""
    server = server_of(node)
    assert node.broker is not None
    web = node.broker.web
    assert server.tls_port not in (None, 0) and web.tls_port not in (None, 0)
    assert node.broker_config.broker_service_port_tls == server.tls_port
    assert node.broker_config.web_service_port_tls == web.tls_port
    broker_tls = f"pulsar+ssl://127.0.0.1:{server.tls_port}"
    web_tls = f"https://127.0.0.1:{web.tls_port}"

    assert node.store is not None
    [registration] = await registered_brokers(node.store)
    assert registration.info.service_url_tls == broker_tls
    assert registration.info.web_url_tls == web_tls

    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.tls_port, ssl=client_ssl_context(str(pki.ca_cert))
    )
    connection = RawConnection(reader, writer)
    try:
        connection.command(pb.CommandConnect(client_version="raw", protocol_version=20))
        await connection.expect(pb.BaseCommand.CONNECTED)
        connection.command(
            pb.CommandLookupTopic(topic="persistent://public/default/t", request_id=1)
        )
        answer = (await connection.expect(pb.BaseCommand.LOOKUP_RESPONSE)).lookupTopicResponse
        assert answer.response == pb.CommandLookupTopicResponse.Connect
        assert answer.brokerServiceUrl == f"pulsar://127.0.0.1:{server.port}"
        assert answer.brokerServiceUrlTls == broker_tls
    finally:
        await connection.close()

    expected = {
        "brokerUrl": f"pulsar://127.0.0.1:{server.port}",
        "brokerUrlTls": broker_tls,
        "httpUrl": f"http://127.0.0.1:{web.port}",
        "httpUrlTls": web_tls,
        "nativeUrl": f"pulsar://127.0.0.1:{server.port}",
    }
    path = "/lookup/v2/topic/persistent/public/default/t"
    https = client_ssl_context(str(pki.ca_cert))
    async with aiohttp.ClientSession() as session:
        for base, context in ((web.web_url, True), (web_tls, https)):
            async with session.get(base + path, ssl=context) as response:
                assert response.status == 200
                assert await response.json() == expected
        async with session.get(f"{web_tls}/admin/v2/clusters/standalone", ssl=https) as response:
            cluster = await response.json()
    assert cluster["brokerServiceUrlTls"] == broker_tls
    assert cluster["serviceUrlTls"] == web_tls


async def test_https_serves_the_admin_api(node: Standalone, pki: TlsFiles) -> None:
    assert node.broker is not None
    web = node.broker.web
    https = client_ssl_context(str(pki.ca_cert))
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{web.web_url_tls}/admin/v2/clusters", ssl=https) as response:
            assert response.status == 200
            assert await response.json() == ["standalone"]
        # Plain HTTP on the HTTPS port gets no HTTP answer; the port serves on.
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"http://127.0.0.1:{web.tls_port}/admin/v2/clusters") as r:
                await r.read()
        # A client that does not trust the broker's CA gives up at the handshake.
        with pytest.raises(aiohttp.ClientError):
            async with session.get(
                f"{web.web_url_tls}/admin/v2/clusters", ssl=ssl.create_default_context()
            ) as r:
                await r.read()
        async with session.get(f"{web.web_url_tls}/admin/v2/clusters", ssl=https) as response:
            assert response.status == 200


def handshakes_under_way() -> list[asyncio.Task[object]]:
    """The broker's tasks of connections on its TLS port (handshakes, then serving)."""
    return [t for t in asyncio.all_tasks() if "_accept_tls" in repr(t.get_coro())]


@pytest.mark.parametrize(
    "plain",
    [
        encode_command(pb.CommandConnect(client_version="plain", protocol_version=20)),
        b"GET /admin/v2/clusters HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    ],
    ids=["pulsar-connect", "http"],
)
async def test_plain_text_on_the_tls_port_is_refused_and_harms_nobody(
    node: Standalone, pki: TlsFiles, plain: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stripemq.broker.server")
    server = server_of(node)
    assert server.tls_port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.tls_port)
    writer.write(plain)
    answer = await asyncio.wait_for(reader.read(), 10)  # until the broker closes
    writer.close()
    # At most a TLS alert record (content type 21), never a Pulsar frame or HTTP.
    assert answer == b"" or answer[0] == 21
    failures = [r for r in caplog.records if "TLS handshake" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    await until(lambda: not handshakes_under_way(), "the failed handshake's task ends")
    assert not server.connections

    # Everyone else is served as before, on both ports.
    assert await asyncio.to_thread(
        round_trip, tls_url(node), "after", 3, tls_trust_certs_file_path=str(pki.ca_cert)
    ) == ["m0", "m1", "m2"]


async def test_a_client_leaving_mid_handshake_leaves_nothing_behind(node: Standalone) -> None:
    server = server_of(node)
    assert server.tls_port is not None
    for _ in range(20):
        _reader, writer = await asyncio.open_connection("127.0.0.1", server.tls_port)
        writer.write(b"\x16\x03\x01")  # the start of a ClientHello, and gone
        writer.close()
    await until(lambda: not handshakes_under_way(), "every handshake's task ends")
    assert not server.connections


@pytest.fixture
async def mtls_node(tmp_path: Path, pki: TlsFiles) -> AsyncIterator[Standalone]:
    """A standalone whose TLS clients must present a certificate the CA signed."""
    settings = {**pki.broker_settings(require_client_cert=True), **TLS_PORTS}
    async with in_process_standalone(tmp_path, settings) as node:
        yield node


async def test_a_trusted_client_certificate_is_required_when_configured(
    mtls_node: Standalone, pki: TlsFiles, tmp_path: Path
) -> None:
    url = tls_url(mtls_node)
    trust = {"tls_trust_certs_file_path": str(pki.ca_cert)}
    assert await asyncio.to_thread(refused, url, **trust)  # no certificate
    other = make_test_pki(tmp_path / "other")
    untrusted = {
        "tls_certificate_file_path": str(other.client_cert),
        "tls_private_key_file_path": str(other.client_key),
    }
    assert await asyncio.to_thread(refused, url, **trust, **untrusted)
    mine = {
        "tls_certificate_file_path": str(pki.client_cert),
        "tls_private_key_file_path": str(pki.client_key),
    }
    got = await asyncio.to_thread(round_trip, url, "mtls", 3, **trust, **mine)
    assert got == ["m0", "m1", "m2"]
    # Pulsar's TLS authentication plugin presents the same certificate.
    auth = pulsar.AuthenticationTLS(str(pki.client_cert), str(pki.client_key))
    got = await asyncio.to_thread(round_trip, url, "mtls-auth", 3, authentication=auth, **trust)
    assert got == ["m0", "m1", "m2"]

    # HTTPS asks for the certificate too.
    assert mtls_node.broker is not None
    clusters = f"{mtls_node.broker.web.web_url_tls}/admin/v2/clusters"
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(clusters, ssl=client_ssl_context(str(pki.ca_cert))) as r:
                await r.read()
        with_cert = client_ssl_context(
            str(pki.ca_cert), certificate_file=str(pki.client_cert), key_file=str(pki.client_key)
        )
        async with session.get(clusters, ssl=with_cert) as response:
            assert response.status == 200


async def test_a_lookup_redirects_tls_clients_to_the_owners_tls_url(
    node: Standalone, pki: TlsFiles
) -> None:
    """Two brokers: the topic is owned by the second; the official client asks the first
    over TLS, is redirected to the second's pulsar+ssl:// URL and is served there."""
    async with second_broker(node, {**pki.broker_settings(), **TLS_PORTS}) as second:
        assert second.server is not None and second.server.service is not None
        owned = "persistent://public/default/elsewhere"
        owner = await second.server.service.lookup_broker(TopicName.parse(owned), True)
        assert owner.service_url_tls == second.server.service_url_tls
        # The first broker's HTTP lookup names the owner's TLS URLs.
        assert node.broker is not None
        lookup = f"{node.broker.web.web_url_tls}/lookup/v2/topic/{owned.replace('://', '/')}"
        async with aiohttp.ClientSession() as session:
            async with session.get(lookup, ssl=client_ssl_context(str(pki.ca_cert))) as response:
                data = await response.json()
        assert data["brokerUrlTls"] == second.server.service_url_tls
        assert data["httpUrlTls"] == second.web.web_url_tls != ""

        loop = asyncio.get_running_loop()
        served_over_tls: list[int] = []

        async def tls_connections() -> int:
            assert second.server is not None
            return sum(
                c.writer.get_extra_info("ssl_object") is not None for c in second.server.connections
            )

        def produce_and_look() -> list[str]:
            client = pulsar.Client(
                tls_url(node),
                operation_timeout_seconds=10,
                tls_trust_certs_file_path=str(pki.ca_cert),
                tls_validate_hostname=True,
            )
            try:
                producer = client.create_producer(owned)
                producer.send(b"over there")
                future = asyncio.run_coroutine_threadsafe(tls_connections(), loop)
                served_over_tls.append(future.result(10))
                reader = client.create_reader(owned, pulsar.MessageId.earliest)
                return [reader.read_next(10_000).data().decode()]
            finally:
                client.close()

        assert await asyncio.to_thread(produce_and_look) == ["over there"]
        assert served_over_tls == [1]
