"""Token authentication and namespace authorization, end to end with the official client
and with ``stripemq.client``.

One in-process standalone with authentication and authorization on (HS256 tokens, the
superuser ``admin``). The superuser makes the tenant ``acme`` with the admin role
``acme-admin``; that tenant admin makes ``acme/ns`` and grants ``producer`` the right to
produce and ``reader`` the right to consume. ``nobody`` holds a valid token and no right.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pulsar
import pytest

import stripemq.client.aio as aio
from stripemq.broker.app import BrokerApp
from stripemq.cli import admin
from stripemq.errors import AuthenticationError, AuthorizationError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import TopicName
from stripemq.security.tokens import create_secret_key, create_token
from stripemq.standalone import Standalone
from stripemq.testing.polling import until
from stripemq.testing.raw_connection import RawConnection
from stripemq.testing.standalone import in_process_standalone, second_broker

pytestmark = pytest.mark.integration

T = TypeVar("T")
SECRET = create_secret_key()
OTHER_SECRET = create_secret_key()
NS = "acme/ns"
REFRESH_CHECK_S = 0.3
SECURITY_SETTINGS = {
    "authentication_enabled": "true",
    "authorization_enabled": "true",
    "token_secret_key": "data:;base64," + base64.b64encode(SECRET).decode(),
    "super_user_roles": "admin",
    "authentication_refresh_check_seconds": str(REFRESH_CHECK_S),
}


def token(role: str, *, secret: bytes = SECRET, expires_in_s: int | None = None) -> str:
    return create_token(subject=role, secret_key=secret, expires_in_s=expires_in_s)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Standalone]:
    settings = {"stats_http_port": 0, **SECURITY_SETTINGS}
    async with in_process_standalone(tmp_path, settings) as standalone:
        async with Admin(standalone, "admin") as admin:
            await admin.expect(
                204,
                "PUT",
                "/admin/v2/tenants/acme",
                {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]},
            )
        async with Admin(standalone, "acme-admin") as tenant_admin:
            await tenant_admin.expect(204, "PUT", f"/admin/v2/namespaces/{NS}")
            await tenant_admin.expect(
                204, "POST", f"/admin/v2/namespaces/{NS}/permissions/producer", ["produce"]
            )
            await tenant_admin.expect(
                204, "POST", f"/admin/v2/namespaces/{NS}/permissions/reader", ["consume"]
            )
        yield standalone


class Admin:
    """HTTP calls to the standalone's admin API as one role (or none)."""

    def __init__(self, node: Standalone, role: str | None, bearer: str | None = None) -> None:
        self.base = f"http://127.0.0.1:{node.broker_config.web_service_port}"
        self.headers = {}
        if role is not None or bearer is not None:
            self.headers["Authorization"] = f"Bearer {bearer or token(role or '')}"
        self.session = aiohttp.ClientSession()

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(
            method, self.base + path, json=body, headers=self.headers
        ) as response:
            text = await response.text()
            try:
                return response.status, await response.json(content_type=None)
            except ValueError:
                return response.status, text

    async def expect(self, status: int, method: str, path: str, body: Any = None) -> Any:
        got, answer = await self.call(method, path, body)
        assert got == status, f"{method} {path}: {got} {answer}"
        return answer


def service_url(node: Standalone) -> str:
    return f"pulsar://127.0.0.1:{node.broker_config.broker_service_port}"


async def blocking(work: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, work, *args)


def official_client(
    node: Standalone, credentials: Any = None, timeout_s: int = 10
) -> pulsar.Client:
    auth = pulsar.AuthenticationToken(credentials) if credentials is not None else None
    return pulsar.Client(
        service_url(node), authentication=auth, operation_timeout_seconds=timeout_s
    )


def topic() -> str:
    return f"persistent://{NS}/t-{uuid.uuid4().hex[:8]}"


async def raw_connect(node: Standalone, credentials: str | None) -> RawConnection:
    """A raw connection that has sent CONNECT with ``credentials`` (none: method "none")."""
    conn = await RawConnection.open(node.broker_config.broker_service_port)
    conn.command(
        pb.CommandConnect(
            client_version="raw",
            protocol_version=21,
            auth_method_name="token" if credentials else "none",
            auth_data=(credentials or "").encode(),
        )
    )
    return conn


async def raw_connection(node: Standalone, credentials: str) -> RawConnection:
    """A raw connection the broker took with ``credentials``."""
    conn = await raw_connect(node, credentials)
    await conn.wait_for(pb.BaseCommand.CONNECTED)
    return conn


# ---------------------------------------------------------------- authentication


@pytest.mark.parametrize(
    "credentials",
    [
        None,
        token("producer", secret=OTHER_SECRET),
        create_token(
            subject="producer", secret_key=SECRET, expires_in_s=60, now=time.time() - 3600
        ),
        "not-a-jwt",
    ],
    ids=["no token", "other key", "expired", "garbage"],
)
async def test_a_client_without_valid_credentials_is_refused(
    node: Standalone, credentials: str | None
) -> None:
    # On the wire: ERROR AuthenticationError for CONNECT, then the connection closes.
    conn = await raw_connect(node, credentials)
    try:
        frame = await conn.wait_for(pb.BaseCommand.ERROR)
        assert frame.command.error.error == pb.AuthenticationError
        await until(lambda: conn.closed_by_peer, "the broker closed the connection")
    finally:
        await conn.close()

    # The official client closes a connection refused at CONNECT and tries again (as
    # against Pulsar) until its operation times out.
    def attempt() -> None:
        client = official_client(node, credentials, timeout_s=2)
        try:
            client.create_producer(topic())
        finally:
            client.close()

    with pytest.raises((pulsar.AuthenticationError, pulsar.Timeout)):
        await blocking(attempt)
    # The broker goes on serving the others.
    good = official_client(node, token("producer"))
    try:
        await blocking(lambda: good.create_producer(topic()).send(b"still served"))
    finally:
        await blocking(good.close)


async def test_http_calls_need_a_valid_bearer_token(node: Standalone) -> None:
    async with Admin(node, None) as anonymous:
        status, answer = await anonymous.call("GET", "/admin/v2/clusters")
        assert status == 401 and "Authentication required" in answer["reason"]
        # Probes and metrics stay open.
        assert (await anonymous.call("GET", "/admin/v2/brokers/ready"))[0] == 200
        assert (await anonymous.call("GET", "/metrics"))[0] == 200
    async with Admin(node, None, bearer=token("admin", secret=OTHER_SECRET)) as forged:
        status, answer = await forged.call("GET", "/admin/v2/clusters")
        assert status == 401 and "signature" in answer["reason"]
    async with Admin(node, "nobody") as nobody:
        await nobody.expect(200, "GET", "/admin/v2/clusters")  # any role may read clusters


# ---------------------------------------------------------------- authorization


async def test_namespace_permissions_decide_who_produces_and_consumes(node: Standalone) -> None:
    name = topic()
    producing = official_client(node, token("producer"))
    reading = official_client(node, token("reader"))
    stranger = official_client(node, token("nobody"))
    try:
        consumer = await blocking(lambda: reading.subscribe(name, "sub"))
        producer = await blocking(lambda: producing.create_producer(name))
        await blocking(producer.send, b"granted")
        message = await blocking(lambda: consumer.receive(timeout_millis=10_000))
        assert message.data() == b"granted"
        await blocking(consumer.acknowledge, message)

        with pytest.raises(pulsar.AuthorizationError):
            await blocking(lambda: producing.subscribe(name, "not-mine"))
        with pytest.raises(pulsar.AuthorizationError):
            await blocking(lambda: reading.create_producer(name))
        with pytest.raises(pulsar.AuthorizationError):
            await blocking(lambda: stranger.create_producer(name))
        with pytest.raises(pulsar.AuthorizationError):
            await blocking(lambda: stranger.subscribe(name, "sub"))
        # Refused requests leave the connection working.
        await blocking(producer.send, b"after the refusal")
    finally:
        for client in (producing, reading, stranger):
            await blocking(client.close)


async def test_a_revoked_permission_holds_for_the_next_producer(node: Standalone) -> None:
    name = topic()
    client = official_client(node, token("producer"))
    try:
        await blocking(lambda: client.create_producer(name).send(b"before"))
        async with Admin(node, "acme-admin") as tenant_admin:
            await tenant_admin.expect(
                204, "DELETE", f"/admin/v2/namespaces/{NS}/permissions/producer"
            )
            assert await tenant_admin.expect(
                200, "GET", f"/admin/v2/namespaces/{NS}/permissions"
            ) == {"reader": ["consume"]}
        with pytest.raises(pulsar.AuthorizationError):
            await blocking(lambda: client.create_producer(name))
    finally:
        await blocking(client.close)


async def test_superuser_tenant_admin_and_plain_role_on_the_admin_api(node: Standalone) -> None:
    name = topic()
    async with (
        Admin(node, "admin") as superuser,
        Admin(node, "acme-admin") as tenant_admin,
        Admin(node, "producer") as producer,
        Admin(node, "reader") as reader,
        Admin(node, "nobody") as nobody,
    ):
        # Tenants: the list and changes are the superuser's; a tenant is its admins' too.
        assert "acme" in await superuser.expect(200, "GET", "/admin/v2/tenants")
        await tenant_admin.expect(403, "GET", "/admin/v2/tenants")
        await tenant_admin.expect(200, "GET", "/admin/v2/tenants/acme")
        await nobody.expect(403, "GET", "/admin/v2/tenants/acme")
        await tenant_admin.expect(
            403, "PUT", "/admin/v2/tenants/other", {"allowedClusters": ["standalone"]}
        )
        await superuser.expect(
            204, "PUT", "/admin/v2/tenants/other", {"allowedClusters": ["standalone"]}
        )
        # Namespaces and their policies are the tenant admins'.
        await tenant_admin.expect(200, "GET", "/admin/v2/namespaces/acme")
        await producer.expect(403, "GET", f"/admin/v2/namespaces/{NS}")
        await producer.expect(
            403, "POST", f"/admin/v2/namespaces/{NS}/permissions/producer", ["consume"]
        )
        await tenant_admin.expect(403, "PUT", "/admin/v2/namespaces/other/ns")
        await tenant_admin.expect(204, "GET", f"/admin/v2/namespaces/{NS}/messageTTL")
        # Topics: created and deleted by admins, listed and looked up by who may use them.
        await producer.expect(403, "PUT", f"/admin/v2/persistent/{name[13:]}")
        await tenant_admin.expect(204, "PUT", f"/admin/v2/persistent/{name[13:]}")
        assert name in await producer.expect(200, "GET", f"/admin/v2/persistent/{NS}")
        await nobody.expect(403, "GET", f"/admin/v2/persistent/{NS}")
        await producer.expect(200, "GET", f"/lookup/v2/topic/persistent/{name[13:]}")
        await producer.expect(200, "GET", f"/admin/v2/persistent/{name[13:]}/stats")
        # Subscriptions are the consumers'.
        await producer.expect(403, "PUT", f"/admin/v2/persistent/{name[13:]}/subscription/s")
        await reader.expect(204, "PUT", f"/admin/v2/persistent/{name[13:]}/subscription/s")
        await reader.expect(200, "GET", f"/admin/v2/persistent/{name[13:]}/subscriptions")
        # Brokers and clusters: writes are the superuser's.
        await tenant_admin.expect(403, "GET", "/admin/v2/brokers/standalone")
        await superuser.expect(200, "GET", "/admin/v2/brokers/standalone")
        await tenant_admin.expect(403, "DELETE", "/admin/v2/clusters/standalone")
        # A trailing slash is the same resource, with the same rule.
        await tenant_admin.expect(403, "GET", "/admin/v2/tenants/")


# ---------------------------------------------------------------- expiry


def connections(node: Standalone) -> list[Any]:
    assert node.broker is not None and node.broker.server is not None
    return list(node.broker.server.connections)


def expiring_tokens(issued: list[str]) -> Callable[[], str]:
    """A token supplier: each call a fresh ``producer`` token valid for 2 s, kept in
    ``issued``."""

    def supplier() -> str:
        issued.append(token("producer", expires_in_s=2))
        return issued[-1]

    return supplier


async def refreshed_connection(node: Standalone) -> Any:
    """The one connection served, once the broker challenged it past its first token's
    expiry and took a fresh token from it: same connection, later expiry."""
    [served] = connections(node)
    first = served.principal
    assert first is not None and first.expires_at is not None
    await until(
        lambda: served.principal.expires_at > first.expires_at,
        "the connection's credentials were refreshed",
        timeout=15,
    )
    assert connections(node) == [served]
    return served


async def test_expiring_credentials_are_refreshed_on_the_same_connection(
    node: Standalone,
) -> None:
    issued: list[str] = []
    name = topic()
    client = official_client(node, expiring_tokens(issued))
    try:
        producer = await blocking(lambda: client.create_producer(name))
        served = await refreshed_connection(node)
        assert not served.writer.is_closing()
        await blocking(producer.send, b"after the refresh")
        assert len(issued) >= 2
    finally:
        await blocking(client.close)


async def test_a_connection_whose_credentials_expire_unrefreshed_is_closed(
    node: Standalone,
) -> None:
    conn = await raw_connection(node, token("producer", expires_in_s=1))
    try:
        # It cannot refresh (no feature flag): after expiry the broker closes it.
        await until(lambda: not connections(node), "the expired connection was closed", timeout=10)
    finally:
        await conn.close()


# ---------------------------------------------------------------- stripemq.client


def own_client(node: Standalone, credentials: Any = None) -> aio.Client:
    auth = aio.AuthenticationToken(credentials) if credentials is not None else None
    return aio.Client(service_url(node), authentication=auth, operation_timeout_seconds=10)


async def test_stripemq_client_produces_and_consumes_with_its_roles(node: Standalone) -> None:
    name = topic()
    async with (
        own_client(node, token("reader")) as reading,
        own_client(node, token("producer")) as producing,
    ):
        consumer = await reading.subscribe(name, "sub")
        producer = await producing.create_producer(name)
        await producer.send(b"granted")
        message = await consumer.receive(timeout_millis=10_000)
        assert message.data() == b"granted"
        await consumer.acknowledge(message)
        with pytest.raises(AuthorizationError):
            await producing.subscribe(name, "not-mine")
        with pytest.raises(AuthorizationError):
            await reading.create_producer(name)
        await producer.send(b"after the refusal")  # the connection carries on


@pytest.mark.parametrize(
    "credentials",
    [None, token("producer", secret=OTHER_SECRET), "not-a-jwt"],
    ids=["no token", "other key", "garbage"],
)
async def test_stripemq_client_is_refused_at_once_without_valid_credentials(
    node: Standalone, credentials: str | None
) -> None:
    loop = asyncio.get_running_loop()
    async with own_client(node, credentials) as client:
        started = loop.time()
        with pytest.raises(AuthenticationError):
            await client.create_producer(topic())
        # Refused, not retried until the operation timeout (10 s).
        assert loop.time() - started < 5


async def test_stripemq_client_refreshes_expiring_credentials(node: Standalone) -> None:
    issued: list[str] = []
    async with own_client(node, expiring_tokens(issued)) as client:
        producer = await client.create_producer(topic())
        await refreshed_connection(node)
        await producer.send(b"after the refresh")


# ---------------------------------------------------------------- on the wire


async def test_a_producer_may_not_make_a_subscription_with_initial_subscription_name(
    node: Standalone,
) -> None:
    conn = await raw_connection(node, token("producer"))
    try:
        conn.command(
            pb.CommandProducer(
                topic=topic(), producer_id=1, request_id=1, initial_subscription_name="sneaky"
            )
        )
        error = (await conn.expect(pb.BaseCommand.ERROR)).error
        assert error.error == pb.AuthorizationError and "consume" in error.message
    finally:
        await conn.close()


async def test_a_malformed_namespace_is_refused_before_any_lookup(node: Standalone) -> None:
    conn = await raw_connection(node, token("admin"))
    try:
        for request_id, namespace in enumerate(["", "acme/..", "a/b/c"], start=1):
            conn.command(pb.CommandGetTopicsOfNamespace(request_id=request_id, namespace=namespace))
            error = (await conn.expect(pb.BaseCommand.ERROR)).error
            assert error.error == pb.InvalidTopicName, namespace
    finally:
        await conn.close()
    async with Admin(node, "nobody") as nobody:
        status, answer = await nobody.call("GET", "/admin/v2/namespaces/bad%20tenant")
        assert status == 412 and "Invalid tenant name" in answer["reason"]
        status, answer = await nobody.call("GET", "/admin/v2/persistent/acme/ns%2F../t/stats")
        assert status == 412, answer  # never a 500 with the store's path in it


async def test_credentials_refreshed_unprompted_to_expiring_ones_are_watched(
    node: Standalone,
) -> None:
    conn = await raw_connection(node, token("producer"))  # never expires
    try:
        expiring = token("producer", expires_in_s=1).encode()
        conn.command(
            pb.CommandAuthResponse(
                client_version="raw",
                protocol_version=21,
                response=pb.AuthData(auth_method_name="token", auth_data=expiring),
            )
        )
        # The client said nothing of refreshing: once these expire it is disconnected.
        await until(lambda: conn.closed_by_peer, "the connection was closed", timeout=10)
    finally:
        await conn.close()


# ---------------------------------------------------------------- stripemq admin


async def test_the_admin_cli_grants_and_is_refused_per_role(
    node: Standalone, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{node.broker_config.web_service_port}"

    def admin_as(role: str, *command: str) -> int:
        argv = ["--admin-url", url, "--auth-params", f"token:{token(role)}", *command]
        return admin.main(argv)

    grant = ("namespaces", "grant-permission", NS, "--role", "auditor", "--actions", "consume")
    assert await blocking(admin_as, "acme-admin", *grant) == 0
    capsys.readouterr()
    assert await blocking(admin_as, "acme-admin", "namespaces", "permissions", NS) == 0
    assert json.loads(capsys.readouterr().out)["auditor"] == ["consume"]
    # A plain role is refused, in one line, with the broker's reason.
    assert await blocking(admin_as, "producer", "namespaces", "permissions", NS) == 1
    refused = capsys.readouterr().err
    assert "not authorized" in refused and "tenant admin needed" in refused
    assert await blocking(admin_as, "acme-admin", "tenants", "list") == 1  # superusers only


# ---------------------------------------------------------------- two brokers


@pytest.fixture
async def other_broker(node: Standalone) -> AsyncIterator[BrokerApp]:
    """A second broker with the same security settings."""
    async with second_broker(node, SECURITY_SETTINGS) as broker:
        yield broker


async def test_tokens_travel_with_lookups_and_forwarded_calls_to_the_owner(
    node: Standalone, other_broker: BrokerApp
) -> None:
    assert other_broker.server is not None and other_broker.server.service is not None
    async with Admin(node, "acme-admin") as tenant_admin:
        name = topic()
        await tenant_admin.expect(204, "PUT", f"/admin/v2/persistent/{name[13:]}/partitions", 1)
        # The second broker takes the only partition.
        partition = TopicName.parse(name).partition(0)
        owner = await other_broker.server.service.lookup_broker(partition, True)
        assert owner.service_url == other_broker.server.service_url
        # The official client asks the first broker and is sent, with its token, to the
        # second, which checks it again.
        client = official_client(node, token("producer"))
        try:
            await blocking(lambda: client.create_producer(name).send(b"to the owner"))
            served = other_broker.server.connections
            assert [c.principal.role for c in served if c.principal] == ["producer"]
        finally:
            await blocking(client.close)
        # An admin call the first broker forwards to the owner carries the caller's token.
        stats = await tenant_admin.expect(
            200, "GET", f"/admin/v2/persistent/{name[13:]}/partitioned-stats?perPartition=true"
        )
        assert stats["msgInCounter"] == 1
        async with Admin(node, "nobody") as nobody:
            await nobody.expect(403, "GET", f"/admin/v2/persistent/{name[13:]}/partitioned-stats")
