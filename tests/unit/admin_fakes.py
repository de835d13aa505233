"""A fake broker web service for the ``stripemq admin`` tests (``http.server`` on a free
port, in a thread): it records every request and answers as told."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Answer:
    status: int = 204
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def answer_json(value: Any, status: int = 200) -> Answer:
    return Answer(status, json.dumps(value).encode(), {"Content-Type": "application/json"})


class FakeBroker:
    """Records every request; answers from ``routes`` ((method, path) -> Answer or a list
    of Answers taken in turn), else 204."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.routes: dict[tuple[str, str], Answer | list[Answer]] = {}
        broker = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                broker.seen.append(
                    Seen(
                        self.command,
                        parts.path,
                        dict(parse_qsl(parts.query, keep_blank_values=True)),
                        body,
                        {k.lower(): v for k, v in self.headers.items()},
                    )
                )
                found = broker.routes.get((self.command, parts.path), Answer())
                reply = found.pop(0) if isinstance(found, list) else found
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_PUT = do_POST = do_DELETE = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def on(self, method: str, path: str, *answers: Answer) -> None:
        self.routes[(method, path)] = answers[0] if len(answers) == 1 else list(answers)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
