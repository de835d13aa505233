"""What every admin resource shares: the context it works on, Pulsar-shaped errors, bodies.

Errors answer ``{"reason": "..."}`` with Pulsar's status codes: 400 for a body that is not
JSON, 404 for something unknown, 409 for something that exists already or is not empty,
412 for a bad name or a failed precondition, 307 (with ``Location``) to the broker that owns
a topic, 503 while the broker starts. A ``RestError`` says its status itself; the typed
errors of ``stripemq.errors`` and of the broker map to a status in ``status_of``; anything
else is a 500 that is logged, never a dropped connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stripemq.broker.namespaces import NamespaceNotFoundError
from stripemq.broker.policies import InvalidPolicyError
from stripemq.errors import (
    BadVersionError,
    BrokerError,
    CursorNotFoundError,
    ManagedLedgerNotFoundError,
    NodeExistsError,
    NotEmptyError,
    NotFoundError,
    StripeMQError,
    server_error_of,
)
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import InvalidTopicNameError

if TYPE_CHECKING:
    from stripemq.broker.config import BrokerConfig
    from stripemq.broker.service import BrokerService

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RestError(Exception):
    """An answer other than success, with Pulsar's status code and a reason."""

    def __init__(self, status: int, reason: str, *, location: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.location = location


def not_found(reason: str) -> RestError:
    return RestError(404, reason)


def conflict(reason: str) -> RestError:
    return RestError(409, reason)


def precondition_failed(reason: str) -> RestError:
    return RestError(412, reason)


def redirect(location: str) -> RestError:
    """307 to the same request on another broker (the client repeats method and body)."""
    return RestError(307, f"redirected to {location}", location=location)


# Server errors of the binary protocol, as the admin API reports them.
_STATUS_BY_SERVER_ERROR = {
    pb.TopicNotFound: 404,
    pb.SubscriptionNotFound: 404,
    pb.ConsumerNotFound: 404,
    pb.ServiceNotReady: 503,
    pb.ConsumerBusy: 412,
    pb.ProducerBusy: 412,
    pb.NotAllowedError: 412,
    pb.TopicTerminatedError: 412,
    pb.InvalidTopicName: 412,
}


def status_of(exc: BaseException) -> int:
    """The HTTP status a typed error answers with (500 for one nobody planned for)."""
    if isinstance(exc, RestError):
        return exc.status
    if isinstance(exc, (NamespaceNotFoundError, ManagedLedgerNotFoundError, CursorNotFoundError)):
        return 404
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, (NodeExistsError, NotEmptyError)):
        return 409
    if isinstance(exc, BadVersionError):
        return 409  # changed by someone else meanwhile: read again and retry
    if isinstance(exc, (InvalidPolicyError, InvalidTopicNameError)):
        return 412
    if isinstance(exc, (BrokerError, StripeMQError)):
        return _STATUS_BY_SERVER_ERROR.get(server_error_of(exc), 500)
    return 500


def error_response(status: int, reason: str, location: str | None = None) -> web.Response:
    headers = {"Location": location} if location else None
    return web.json_response({"reason": reason}, status=status, headers=headers)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes ``{"reason": ...}`` with its status; the broker goes on."""
    try:
        return await handler(request)
    except web.HTTPException as exc:  # aiohttp's own: unknown path, wrong method
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason)
    except RestError as exc:
        if exc.status >= 500:
            log.warning("%s %s: %s", request.method, request.path, exc.reason)
        return error_response(exc.status, exc.reason, exc.location)
    except (StripeMQError, ValueError) as exc:
        status = status_of(exc)
        if status >= 500:
            log.warning("%s %s failed: %s", request.method, request.path, exc)
        return error_response(status, str(exc))
    except Exception as exc:
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, f"internal error: {exc!r}")


async def read_json(request: web.Request, *, required: bool = True) -> Any:
    """The request's JSON body; 400 if it is not JSON, 412 if it is missing and needed."""
    raw = await request.read()
    if not raw.strip():
        if required:
            raise precondition_failed("a JSON body is required")
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise RestError(400, f"the body is not valid JSON: {exc}") from None


def ok_json(value: object, status: int = 200) -> web.Response:
    """A JSON answer (``None`` answers 204 with no body, as Pulsar does for unset values)."""
    if value is None:
        return web.Response(status=204)
    return web.json_response(value, status=status, dumps=_dumps)


def _dumps(value: object) -> str:
    return json.dumps(value, indent=None, separators=(",", ":"))


def no_content() -> web.Response:
    """What a successful write answers."""
    return web.Response(status=204)


def flag(request: web.Request, name: str, default: bool = False) -> bool:
    """A boolean query parameter (``?force=true``, ``?authoritative``)."""
    raw = request.query.get(name)
    if raw is None:
        return default
    return raw.lower() in ("", "true", "1", "yes")


@dataclass
class AdminContext:
    """What the admin resources work on. ``service`` is the broker's topic service while it
    serves (503 before it is ready, or while it starts over after losing its session)."""

    config: BrokerConfig
    web_url: str
    get_service: Callable[[], BrokerService | None]
    get_store: Callable[[], MetadataStore | None]

    @property
    def cluster(self) -> str:
        return self.config.cluster_name

    @property
    def service(self) -> BrokerService:
        service = self.get_service()
        if service is None:
            raise RestError(503, "the broker is not ready")
        return service

    @property
    def store(self) -> MetadataStore:
        store = self.get_store()
        if store is None:
            raise RestError(503, "the broker is not ready")
        return store
