"""``stripemq admin`` with authentication and TLS: the bearer token on every request
(redirects too), 401 and 403 reported in one line, pulsar-admin's global options, and
``https`` admin URLs checked against a trust file (fake brokers on 127.0.0.1)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from admin_fakes import Answer, FakeBroker, answer_json

from stripemq.cli import admin
from stripemq.cli.admin_http import AdminClient, AdminConnectionError, AdminError, AdminHttpError
from stripemq.testing.tls import TlsFiles, make_test_pki

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJl"


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    server = FakeBroker()
    yield server
    server.close()


def bearer(broker: FakeBroker) -> list[str | None]:
    return [seen.headers.get("authorization") for seen in broker.seen]


def test_every_request_carries_the_token(broker: FakeBroker) -> None:
    client = AdminClient(broker.url, token=lambda: TOKEN)
    client.get("/admin/v2/tenants")
    client.put("/admin/v2/tenants/t", body={"allowedClusters": []})
    assert bearer(broker) == [f"Bearer {TOKEN}"] * 2
    AdminClient(broker.url).get("/admin/v2/tenants")
    assert bearer(broker)[-1] is None  # no token, no header


def test_the_token_goes_to_the_broker_a_redirect_names(broker: FakeBroker) -> None:
    other = FakeBroker()
    try:
        moved = Answer(307, b"", {"Location": f"{other.url}/admin/v2/x"})
        broker.on("POST", "/admin/v2/x", moved)
        AdminClient(broker.url, token=lambda: TOKEN).post("/admin/v2/x", body={"a": 1})
        assert bearer(broker) == bearer(other) == [f"Bearer {TOKEN}"]
        assert other.seen[0].json() == {"a": 1}
    finally:
        other.close()


def test_the_supplier_is_asked_for_every_request(broker: FakeBroker, tmp_path: Path) -> None:
    from stripemq.client.auth import authentication_from_params

    path = tmp_path / "token"
    path.write_text("first\n")
    auth = authentication_from_params(None, f"file://{path}")
    assert auth is not None
    client = AdminClient(broker.url, token=auth.token)
    client.get("/a")
    path.write_text("second")
    client.get("/a")
    assert bearer(broker) == ["Bearer first", "Bearer second"]
    path.unlink()
    with pytest.raises(AdminError, match="cannot get the token: cannot read the token file"):
        client.get("/a")
    assert len(broker.seen) == 2  # nothing sent without the token


def test_401_and_403_say_what_failed(broker: FakeBroker) -> None:
    broker.on("GET", "/401", Answer(401, b'{"reason":"Authentication required"}'))
    broker.on("GET", "/403", Answer(403, b'{"reason":"Unauthorized to access tenant t"}'))
    with pytest.raises(AdminHttpError) as unauthenticated:
        AdminClient(broker.url, token=lambda: TOKEN).get("/401")
    assert str(unauthenticated.value) == (
        f"authentication failed: Authentication required (HTTP 401, GET {broker.url}/401)"
    )
    with pytest.raises(AdminHttpError, match=r"Authentication required \(no token was sent\)"):
        AdminClient(broker.url).get("/401")
    with pytest.raises(AdminHttpError) as forbidden:
        AdminClient(broker.url, token=lambda: TOKEN).get("/403")
    assert forbidden.value.status == 403
    assert str(forbidden.value).startswith("not authorized: Unauthorized to access tenant t")


def test_the_admin_cli_sends_the_token_of_auth_params(broker: FakeBroker) -> None:
    broker.on("GET", "/admin/v2/tenants", answer_json(["public"]))
    argv = ["--admin-url", broker.url, "--auth-params", f"token:{TOKEN}", "tenants", "list"]
    assert admin.main(argv) == 0
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    after = ["tenants", "list", "--auth-plugin", plugin, "--auth-params", f"token:{TOKEN}"]
    assert admin.main(["--admin-url", broker.url, *after]) == 0  # after the command too
    assert bearer(broker) == [f"Bearer {TOKEN}"] * 2


def test_the_admin_cli_takes_its_token_from_the_environment(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.on("GET", "/admin/v2/tenants", answer_json(["public"]))
    monkeypatch.setenv("STRIPEMQ_AUTH_PARAMS", f"token:{TOKEN}")
    assert admin.main(["--admin-url", broker.url, "tenants", "list"]) == 0
    assert (
        admin.main(["--admin-url", broker.url, "--auth-params", "token:other", "tenants", "list"])
        == 0
    )
    assert bearer(broker) == [f"Bearer {TOKEN}", "Bearer other"]  # the option wins


def test_the_admin_cli_reports_refusals_in_one_line(
    broker: FakeBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.on("GET", "/admin/v2/tenants", Answer(403, b'{"reason":"Unauthorized"}'))
    argv = ["--admin-url", broker.url, "--auth-params", "token:x", "tenants", "list"]
    assert admin.main(argv) == 1
    assert capsys.readouterr().err == (
        "stripemq admin: not authorized: Unauthorized "
        f"(HTTP 403, GET {broker.url}/admin/v2/tenants)\n"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--auth-params", "tokn:abc"], "auth params tokn:... are none of token:<jwt>"),
        (["--auth-plugin", "basic", "--auth-params", "x"], "'basic' is not supported"),
        (["--auth-plugin", "token"], "--auth-plugin token needs --auth-params"),
        (["--tls-trust-cert-path", "/no/ca.pem"], "TLS trust certificates /no/ca.pem"),
    ],
)
def test_bad_security_options_are_usage_errors(
    broker: FakeBroker, capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    assert admin.main(["--admin-url", broker.url, *options, "tenants", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stripemq admin: error: ") and message in err
    assert err.count("\n") == 1
    assert broker.seen == []


# ---------------------------------------------------------------------------- https


class HttpsBroker:
    """An https server on 127.0.0.1 answering ``[]`` to every GET, keeping each request's
    Authorization header."""

    def __init__(self, files: TlsFiles) -> None:
        self.authorization: list[str | None] = []
        seen = self.authorization

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.headers.get("Authorization"))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"[]")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(files.server_cert, files.server_key)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def https_broker(tmp_path: Path) -> Iterator[tuple[HttpsBroker, TlsFiles]]:
    files = make_test_pki(tmp_path)
    server = HttpsBroker(files)
    yield server, files
    server.close()


def test_https_with_a_trust_file(https_broker: tuple[HttpsBroker, TlsFiles]) -> None:
    server, files = https_broker
    trust = ["--tls-trust-cert-path", str(files.ca_cert)]
    auth = ["--auth-params", f"token:{TOKEN}"]
    assert admin.main(["--admin-url", server.url, *trust, *auth, "tenants", "list"]) == 0
    alias = [
        "--tls-trust-certs-file-path",
        str(files.ca_cert),
        "--tls-enable-hostname-verification",
    ]
    assert admin.main(["--admin-url", server.url, *alias, "tenants", "list"]) == 0
    assert server.authorization == [f"Bearer {TOKEN}", None]


def test_https_refuses_an_untrusted_broker_unless_insecure(
    https_broker: tuple[HttpsBroker, TlsFiles], capsys: pytest.CaptureFixture[str]
) -> None:
    server, _ = https_broker
    assert admin.main(["--admin-url", server.url, "tenants", "list"]) == 1
    err = capsys.readouterr().err
    assert "CERTIFICATE_VERIFY_FAILED" in err and err.count("\n") == 1
    assert admin.main(["--admin-url", server.url, "--tls-allow-insecure", "tenants", "list"]) == 0


def test_https_admin_client_errors_are_connection_errors(
    https_broker: tuple[HttpsBroker, TlsFiles],
) -> None:
    server, _ = https_broker
    with pytest.raises(AdminConnectionError, match="cannot reach the broker"):
        AdminClient(server.url, ssl_context=ssl.create_default_context()).get("/x")
