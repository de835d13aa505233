"""``stripemq.cli.admin_http``: one request at a time with the standard library, redirects
followed by hand with method and body, errors typed with the server's reason and the URL,
against a fake broker (``admin_fakes``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from admin_fakes import Answer, FakeBroker, answer_json

from stripemq.cli.admin_http import AdminClient, AdminConnectionError, AdminHttpError
from stripemq.testing.ports import free_port


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    server = FakeBroker()
    yield server
    server.close()


def test_client_errors_are_typed() -> None:
    client = AdminClient("http://127.0.0.1:1", timeout=5)
    with pytest.raises(AdminConnectionError) as refused:
        client.get("/admin/v2/tenants")
    assert refused.value.url == "http://127.0.0.1:1/admin/v2/tenants"
    error = AdminHttpError(404, "Tenant does not exist", "GET", "http://h/x")
    assert str(error) == "Tenant does not exist (HTTP 404, GET http://h/x)"


def test_answers_are_json_text_or_nothing(broker: FakeBroker) -> None:
    client = AdminClient(broker.url)
    broker.on("GET", "/a", answer_json({"x": 1}))
    broker.on("GET", "/b", Answer(200, b"4.0.0"))
    broker.on("GET", "/c", Answer(204))
    assert client.get("/a").json() == {"x": 1}
    assert client.get("/b").json() == "4.0.0"
    assert client.get("/c").json() is None
    assert client.url("/x", {"force": True, "n": 3, "none": None}) == (
        f"{broker.url}/x?force=true&n=3"
    )


def test_error_reasons_come_from_the_body_or_the_status(broker: FakeBroker) -> None:
    client = AdminClient(broker.url)
    broker.on("GET", "/json", Answer(409, b'{"reason":"Tenant already exists"}'))
    broker.on("GET", "/text", Answer(500, b"broker exploded"))
    broker.on("GET", "/html", Answer(404, b"<html>not here</html>"))
    broker.on("GET", "/empty", Answer(412, b""))
    reasons = {}
    for path in ("/json", "/text", "/html", "/empty"):
        with pytest.raises(AdminHttpError) as failed:
            client.get(path)
        assert failed.value.url == f"{broker.url}{path}" and failed.value.method == "GET"
        reasons[path] = (failed.value.status, failed.value.reason)
    assert reasons == {
        "/json": (409, "Tenant already exists"),
        "/text": (500, "broker exploded"),
        "/html": (404, "Not Found"),
        "/empty": (412, "Precondition Failed"),
    }


def test_redirects_are_followed_with_method_and_body(broker: FakeBroker) -> None:
    other = FakeBroker()
    try:
        broker.on("POST", "/r", Answer(307, b"", {"Location": f"{other.url}/moved?x=1"}))
        answer = AdminClient(broker.url).post("/r", body={"a": 1})
        assert answer.url == f"{other.url}/moved?x=1"
        (moved,) = other.seen
        assert (moved.method, moved.path, moved.query) == ("POST", "/moved", {"x": "1"})
        assert moved.json() == {"a": 1}
        # A relative Location, on a DELETE.
        broker.on("DELETE", "/d", Answer(308, b"", {"Location": "/d2?force=true"}))
        AdminClient(broker.url).delete("/d")
        assert (broker.seen[-1].method, broker.seen[-1].path) == ("DELETE", "/d2")
    finally:
        other.close()


def test_endless_redirects_end_in_an_error(broker: FakeBroker) -> None:
    broker.on("GET", "/loop", Answer(307, b"", {"Location": "/loop"}))
    with pytest.raises(AdminHttpError, match="redirects"):
        AdminClient(broker.url).get("/loop")


def test_an_unreachable_broker_is_a_connection_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(AdminConnectionError) as failed:
        AdminClient(url, timeout=5).get("/admin/v2/tenants")
    assert f"GET {url}/admin/v2/tenants" in str(failed.value)
    with pytest.raises(AdminConnectionError, match="not an http"):
        AdminClient("ftp://h").get("/x")
