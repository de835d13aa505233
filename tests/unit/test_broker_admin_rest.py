"""``stripemq.broker.admin.rest``: the error middleware (every failure a ``{"reason"}`` with
its status; a bug a logged 500 with its traceback), query flags as Jersey reads them, JSON
bodies, names in paths, redirects, and the ``Forwarder`` that calls other brokers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from stripemq.broker.admin.rest import (
    FORWARDED_AUTHORIZATION,
    Forwarder,
    RestError,
    error_middleware,
    flag,
    namespace_of,
    ok_json,
    read_json,
    redirect_to,
    redirect_to_broker,
    topic_of,
    topic_url,
)
from stripemq.broker.namespaces import NamespaceNotFoundError
from stripemq.broker.ownership import BrokerInfo
from stripemq.broker.policies import InvalidPolicyError
from stripemq.errors import NodeExistsError
from stripemq.proto.topic_name import TopicName
from stripemq.testing.ports import free_port

Raiser = Callable[[web.Request], Awaitable[web.StreamResponse]]


def raising(exc: BaseException) -> Raiser:
    async def handle(request: web.Request) -> web.StreamResponse:
        raise exc

    return handle


async def echo(request: web.Request) -> web.Response:
    """What the helpers make of the request."""
    answer: dict[str, object] = {
        "force": flag(request, "force"),
        "perPartition": flag(request, "perPartition", default=True),
    }
    if "tenant" in request.match_info:
        answer["namespace"] = namespace_of(request)
    if "topic" in request.match_info:
        answer["topic"] = str(topic_of(request))
    if request.method == "POST":
        answer["body"] = await read_json(request, required=False)
    return ok_json(answer)


async def moved(request: web.Request) -> web.Response:
    raise redirect_to("http://other:8080/", request, authoritative=True)


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/bug", raising(ValueError("a bug")))
    app.router.add_get("/crash", raising(KeyError("x")))
    app.router.add_get("/policy", raising(InvalidPolicyError("bad policy")))
    app.router.add_get("/missing", raising(NamespaceNotFoundError("Namespace does not exist")))
    app.router.add_get("/exists", raising(NodeExistsError("there already")))
    app.router.add_get("/rest", raising(RestError(406, "not acceptable")))
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/ns/{tenant}/{namespace}", echo)
    app.router.add_get("/t/{tenant}/{namespace}/{topic}", echo)
    app.router.add_get("/t/{tenant}/{namespace}/{topic}/moved", moved)
    app.router.add_get("/none", unset)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def unset(request: web.Request) -> web.Response:
    return ok_json(None)


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        ("/policy", 412, "bad policy"),
        ("/missing", 404, "Namespace does not exist"),
        ("/exists", 409, "there already"),
        ("/rest", 406, "not acceptable"),
        ("/nosuchpath", 404, "Not Found"),
    ],
)
async def test_typed_errors_answer_their_status(
    client: TestClient, path: str, status: int, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    response = await client.get(path)
    assert response.status == status
    assert await response.json() == {"reason": reason}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("path", ["/bug", "/crash"])
async def test_a_bug_is_a_500_logged_with_its_traceback(
    client: TestClient, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    response = await client.get(path)
    assert response.status == 500
    assert (await response.json())["reason"].startswith("internal error")
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.exc_info is not None  # the traceback, not just a line


@pytest.mark.parametrize(
    ("query", "force"),
    [
        ("", False),
        ("?force", False),
        ("?force=", False),
        ("?force=true", True),
        ("?force=TRUE", True),
        ("?force=1", False),
        ("?force=false", False),
    ],
)
async def test_flags_are_read_as_jersey_reads_a_boolean(
    client: TestClient, query: str, force: bool
) -> None:
    answer = await (await client.get(f"/echo{query}")).json()
    assert answer["force"] is force
    assert answer["perPartition"] is True  # its default when absent


async def test_json_bodies(client: TestClient) -> None:
    assert (await (await client.post("/echo", data=b'{"a": 1}')).json())["body"] == {"a": 1}
    assert (await (await client.post("/echo", data=b"")).json())["body"] is None
    response = await client.post("/echo", data=b"{nope")
    assert response.status == 400 and "not valid JSON" in (await response.json())["reason"]
    assert (await client.get("/none")).status == 204
    response = await client.post("/echo", data=b"[" * 100_000 + b"]" * 100_000)
    assert response.status == 400 and "nested too deeply" in (await response.json())["reason"]


async def test_names_in_paths(client: TestClient) -> None:
    assert (await (await client.get("/ns/acme/billing")).json())["namespace"] == "acme/billing"
    response = await client.get("/ns/acme/caf%C3%A9")
    assert response.status == 412
    assert (await response.json())["reason"] == "Namespace name is not valid"
    answer = await (await client.get("/t/acme/billing/my%20topic")).json()
    assert answer["topic"] == "persistent://acme/billing/my topic"
    assert (await client.get("/t/ac%20me/billing/t")).status == 412


async def test_redirects_keep_the_path_and_query(client: TestClient) -> None:
    response = await client.get("/t/a/b/c%2Fd/moved?x=a%20b", allow_redirects=False)
    assert response.status == 307
    assert response.headers["Location"] == (
        "http://other:8080/t/a/b/c%2Fd/moved?x=a%20b&authoritative=true"
    )
    topic = TopicName.parse("persistent://a/b/c/d")
    assert (
        topic_url("http://h:1/", topic, "/stats")
        == "http://h:1/admin/v2/persistent/a/b/c%2Fd/stats"
    )


async def test_the_forwarder_answers_json_text_or_the_remote_error(client: TestClient) -> None:
    base = str(client.make_url("")).rstrip("/")
    async with Forwarder() as forwarder:
        answer = await forwarder.call(
            "POST", f"{base}/echo", body={"k": "v"}, query={"force": "true"}
        )
        assert answer["body"] == {"k": "v"} and answer["force"] is True
        assert await forwarder.call("GET", f"{base}/none") is None
        with pytest.raises(RestError) as failed:
            await forwarder.call("GET", f"{base}/missing")
        assert (failed.value.status, failed.value.reason) == (404, "Namespace does not exist")
        with pytest.raises(RestError) as unreachable:
            await forwarder.call("GET", f"http://127.0.0.1:{free_port()}/x")
        assert unreachable.value.status == 502


async def test_the_forwarder_carries_the_callers_token_across_redirects() -> None:
    """aiohttp drops Authorization on a redirect to another host or port; the forwarder
    follows redirects itself, so the broker at the end checks the same role."""
    seen: list[str | None] = []

    async def owner(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"body": await request.json(), "query": dict(request.query)})

    owner_app = web.Application()
    owner_app.router.add_post("/x", owner)
    async with TestClient(TestServer(owner_app)) as owner_client:
        target = str(owner_client.make_url("/x"))

        async def moved(request: web.Request) -> web.Response:
            seen.append(request.headers.get("Authorization"))
            raise web.HTTPTemporaryRedirect(f"{target}?authoritative=true")

        first_app = web.Application()
        first_app.router.add_post("/x", moved)
        async with TestClient(TestServer(first_app)) as first_client:
            token = FORWARDED_AUTHORIZATION.set("Bearer role-token")
            try:
                async with Forwarder() as forwarder:
                    answer = await forwarder.call(
                        "POST", str(first_client.make_url("/x")), body={"k": 1}
                    )
            finally:
                FORWARDED_AUTHORIZATION.reset(token)
    assert seen == ["Bearer role-token", "Bearer role-token"]
    assert answer == {"body": {"k": 1}, "query": {"authoritative": "true"}}


def test_a_redirect_to_another_broker_keeps_https_for_https_requests() -> None:
    owner = BrokerInfo("b:6650", "pulsar://b:6650", "http://b:8080", web_url_tls="https://b:8443")
    for secure, expected in ((True, "https://b:8443/p"), (False, "http://b:8080/p")):
        request = make_mocked_request("GET", "/p")
        with mock.patch.object(type(request), "secure", new=secure):
            assert redirect_to_broker(owner, request).location == expected
