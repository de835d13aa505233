"""The HTTP side of ``stripemq admin``: one request at a time to a broker's ``/admin/v2``
API, with the standard library only (``http.client``), so a command starts in a few tens
of milliseconds.

A 307 or 308 (a broker that does not own the topic names the one that does) is followed by
hand for every method, re-sending the same body: ``urllib`` drops the body of a redirected
PUT, POST or DELETE. An answer of 400 or more raises ``AdminHttpError`` with the server's
reason (Pulsar's ``{"reason": ...}``, else the body's text, else the status phrase) and the
method and URL of the request that got it (401 and 403 said to be an authentication or a
permission failure); a broker that cannot be reached raises ``AdminConnectionError``.
Nothing here prints.

With a token supplier every request, the re-sent one after a redirect too, carries
``Authorization: Bearer <token>`` (the supplier is asked each time: a token file is read
again). An ``https`` URL uses the ``ssl.SSLContext`` given (default: the standard
library's).
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

MAX_REDIRECTS = 5
REDIRECTS = (307, 308)  # same method and body again (301-303 may turn into a GET)
AUTH_FAILURES = {401: "authentication failed", 403: "not authorized"}


class AdminError(Exception):
    """A request that did not succeed; ``str()`` says why and where."""


class AdminHttpError(AdminError):
    """The broker answered with an error status."""

    def __init__(self, status: int, reason: str, method: str, url: str) -> None:
        what = f"{AUTH_FAILURES[status]}: {reason}" if status in AUTH_FAILURES else reason
        super().__init__(f"{what} (HTTP {status}, {method} {url})")
        self.status = status
        self.reason = reason
        self.method = method
        self.url = url


class AdminConnectionError(AdminError):
    """No answer: the broker is not reachable at that URL, or the connection broke."""

    def __init__(self, method: str, url: str, cause: BaseException) -> None:
        super().__init__(f"cannot reach the broker: {cause} ({method} {url})")
        self.method = method
        self.url = url


class Response:
    """A successful answer (after redirects): status, headers in order, raw body."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes, url: str) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.url = url

    def header(self, name: str) -> str | None:
        lower = name.lower()
        return next((v for k, v in self.headers if k.lower() == lower), None)

    def json(self) -> Any:
        """The body as JSON; ``None`` for no body (Pulsar answers 204 for an unset value),
        the body's text when it is not JSON (``/brokers/version``, ``/brokers/health``)."""
        if self.status == 204 or not self.body.strip():
            return None
        text = self.body.decode("utf-8", errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text.strip()


class AdminClient:
    """Requests against one admin URL (``http://host:8080``, optionally with a path), with
    ``token()`` as bearer token and ``ssl_context`` for ``https``."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 60.0,
        *,
        token: Callable[[], str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.token = token
        self.ssl_context = ssl_context

    def url(self, path: str, query: dict[str, object] | None = None) -> str:
        params = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        suffix = f"?{urlencode(params)}" if params else ""
        return f"{self.base_url}{path}{suffix}"

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, object] | None = None,
        body: object = None,
        raw_body: bytes | None = None,
    ) -> Response:
        """Send ``method`` to ``path`` with ``body`` as JSON (``raw_body`` as it is).

        Raises:
            AdminHttpError: the broker answered 400 or more.
            AdminConnectionError: the broker could not be reached.
            AdminError: the token supplier failed.
        """
        data = raw_body
        if data is None and body is not None:
            data = json.dumps(body).encode()
        url = self.url(path, query)
        for _ in range(MAX_REDIRECTS + 1):
            status, headers, content = self._send(method, url, data)
            location = _header(headers, "location")
            if status in REDIRECTS and location:
                url = urljoin(url, location)
                continue
            if status >= 400:
                reason = _reason(status, content)
                if status == 401 and self.token is None:
                    reason += " (no token was sent)"
                raise AdminHttpError(status, reason, method, url)
            return Response(status, headers, content, url)
        raise AdminHttpError(310, f"more than {MAX_REDIRECTS} redirects", method, url)

    def get(self, path: str, **kw: Any) -> Response:
        return self.request("GET", path, **kw)

    def put(self, path: str, **kw: Any) -> Response:
        return self.request("PUT", path, **kw)

    def post(self, path: str, **kw: Any) -> Response:
        return self.request("POST", path, **kw)

    def delete(self, path: str, **kw: Any) -> Response:
        return self.request("DELETE", path, **kw)

    def _send(
        self, method: str, url: str, data: bytes | None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AdminConnectionError(method, url, ValueError("not an http(s) URL"))
        target = parts.path or "/"
        if parts.query:
            target += f"?{parts.query}"
        headers = {"Accept": "application/json", "User-Agent": "stripemq-admin"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self._token()}"
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=self.timeout, context=self.ssl_context
            )
        else:
            connection = http.client.HTTPConnection(
                parts.hostname, parts.port, timeout=self.timeout
            )
        try:
            connection.request(method, target, body=data, headers=headers)
            answer = connection.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        except (OSError, http.client.HTTPException) as exc:
            raise AdminConnectionError(method, url, exc) from None
        finally:
            connection.close()

    def _token(self) -> str:
        assert self.token is not None
        try:
            return self.token()
        except Exception as exc:  # a token file gone, a supplier's bug
            raise AdminError(f"cannot get the token: {exc}") from None


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in headers if k.lower() == name), None)


def _query_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _reason(status: int, content: bytes) -> str:
    """The server's reason for an error answer."""
    text = content.decode("utf-8", errors="replace").strip()
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        for key in ("reason", "message", "error"):
            if isinstance(doc.get(key), str) and doc[key]:
                return str(doc[key])
    if text and len(text) < 1000 and not text.lstrip().startswith("<"):
        return text
    try:
        phrase = http.client.responses[status]
    except KeyError:
        phrase = "error"
    return phrase
