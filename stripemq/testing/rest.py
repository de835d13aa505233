"""A blocking admin REST call for tests that drive a broker's web service from outside."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def rest(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``(status, decoded JSON body or None)`` of ``method path`` on ``base``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None
