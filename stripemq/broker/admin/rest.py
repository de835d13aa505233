"""What every admin resource shares: the context it works on, Pulsar-shaped errors, bodies.

Errors answer ``{"reason": "..."}`` with Pulsar's status codes: 400 for a body that is not
JSON, 404 for something unknown, 409 for something that exists already or is not empty,
412 for a bad name or a failed precondition, 307 (with ``Location``) to the broker that owns
a topic, 503 while the broker starts. A ``RestError`` says its status itself; the typed
errors of ``stripemq.errors`` and of the broker map to a status in ``status_of``; anything
else is a 500 logged with its traceback (a bug), never a dropped connection.

Also what the resources share to find and reach the broker serving a topic: the names in
a path (``namespace_of``, ``topic_of``), the broker that serves (or is to serve) a topic's
bundle (``serving_broker``, deciding as a lookup does), a 307 to it (``redirect_to``), and
calls to other brokers' admin APIs (``Forwarder``).
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode, urljoin

import aiohttp
from aiohttp import web

from stripemq.broker.namespaces import NamespaceNotFoundError
from stripemq.broker.ownership import BrokerInfo, find_broker
from stripemq.broker.policies import InvalidPolicyError, PolicyArgumentError
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
from stripemq.proto.topic_name import InvalidTopicNameError, TopicName, is_valid_name

if TYPE_CHECKING:
    from stripemq.broker.config import BrokerConfig
    from stripemq.broker.security import BrokerSecurity
    from stripemq.broker.server import BrokerServer
    from stripemq.broker.service import BrokerService

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")
# How long a call to another broker's admin API may take, and how many redirects it follows.
FORWARD_TIMEOUT_S = 60.0
MAX_FORWARD_REDIRECTS = 5
REDIRECTS = frozenset({307, 308})  # the ones that repeat method and body
# The Authorization header of the request being served (set by ``access_middleware``):
# calls it makes to other brokers' admin APIs carry it, so the role is checked there too.
FORWARDED_AUTHORIZATION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "forwarded_authorization", default=None
)


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
    pb.AuthenticationError: 401,
    pb.AuthorizationError: 403,
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
    if isinstance(exc, PolicyArgumentError):
        return 400
    if isinstance(exc, (InvalidPolicyError, InvalidTopicNameError)):
        return 412
    if isinstance(exc, (BrokerError, StripeMQError)):
        return _STATUS_BY_SERVER_ERROR.get(server_error_of(exc), 500)
    return 500


async def without_trailing_slash(
    request: web.Request,
) -> tuple[web.Request, web.UrlMappingMatchInfo] | None:
    """For a path no route matches that ends with ``/``: the request for the path without
    it and that path's route match, when one matches (Jersey serves both alike)."""
    path = request.rel_url.raw_path
    if request.match_info.http_exception is None or len(path) < 2 or not path.endswith("/"):
        return None
    stripped = request.clone(rel_url=request.rel_url.with_path(path.rstrip("/"), encoded=True))
    match = await request.app.router.resolve(stripped)
    if match.http_exception is not None:
        return None
    assert isinstance(match, web.UrlMappingMatchInfo)
    return stripped, match


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
    except StripeMQError as exc:
        status = status_of(exc)
        if status >= 500:
            log.exception("%s %s failed", request.method, request.path)
        return error_response(status, str(exc))
    except Exception as exc:  # a bug: a 500 with its traceback in the log
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
    except RecursionError:  # the decoder's own limit: a body nested thousands deep
        raise RestError(400, "the body is not valid JSON: nested too deeply") from None


def ok_json(value: object) -> web.Response:
    """A JSON answer (``None`` answers 204 with no body, as Pulsar does for unset values)."""
    if value is None:
        return web.Response(status=204)
    return web.json_response(value, dumps=_dumps)


def _dumps(value: object) -> str:
    return json.dumps(value, indent=None, separators=(",", ":"))


def no_content() -> web.Response:
    """What a successful write answers."""
    return web.Response(status=204)


def flag(request: web.Request, name: str, default: bool = False) -> bool:
    """A boolean query parameter (``?force=true``), read as Jersey reads a ``boolean``:
    true only for ``true`` (any case); an empty ``?force`` is false."""
    raw = request.query.get(name)
    if raw is None:
        return default
    return raw.lower() == "true"


# --------------------------------------------------------------------------- names in paths


def name_in_path(request: web.Request, key: str) -> str:
    """The ``{key}`` (``tenant``, ``cluster``) of the path; 412 "Tenant name is not valid"
    (or "Cluster ...") unless it is a valid name."""
    name = request.match_info[key]
    if not is_valid_name(name):
        raise precondition_failed(f"{key.capitalize()} name is not valid")
    return name


def namespace_of(request: web.Request) -> str:
    """``tenant/namespace`` of the path; 412 unless both parts are valid names."""
    tenant, namespace = request.match_info["tenant"], request.match_info["namespace"]
    if not is_valid_name(tenant) or not is_valid_name(namespace):
        raise precondition_failed("Namespace name is not valid")
    return f"{tenant}/{namespace}"


def topic_of(request: web.Request) -> TopicName:
    """The persistent topic of the path (``{tenant}/{namespace}/{topic}``); 412 if it is
    not a valid name."""
    info = request.match_info
    try:
        return TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")
    except InvalidTopicNameError as exc:
        raise precondition_failed(f"invalid topic name: {exc}") from None


def topic_url(web_url: str, topic: TopicName, suffix: str = "") -> str:
    """The admin API's URL of ``topic`` on the broker at ``web_url`` (``suffix``: a
    sub-resource such as ``/stats``)."""
    return f"{web_url.rstrip('/')}/admin/v2/{topic.rest_path}{suffix}"


# --------------------------------------------------------------------------- other brokers


def redirect_to(web_url: str, request: web.Request, *, authoritative: bool = False) -> RestError:
    """307 to the same path and query on the broker at ``web_url``; with ``authoritative``
    the query says ``authoritative=true`` (that broker is to take the bundle, as a lookup
    tells it)."""
    query = dict(request.query)
    if authoritative:
        query["authoritative"] = "true"
    location = f"{web_url.rstrip('/')}{request.rel_url.raw_path}"
    if query:
        location += "?" + urlencode(query, quote_via=quote)
    return redirect(location)


def redirect_to_broker(
    owner: BrokerInfo, request: web.Request, *, authoritative: bool = False
) -> RestError:
    """307 to the same request on ``owner``: its HTTPS URL for a request that came over
    HTTPS (a token never moves to a plain connection), its plain URL otherwise."""
    secure = request.secure and owner.web_url_tls
    return redirect_to(
        owner.web_url_tls if secure else owner.web_url, request, authoritative=authoritative
    )


async def serving_broker(
    ctx: AdminContext, request: web.Request, topic: TopicName
) -> tuple[BrokerInfo, bool]:
    """The broker serving ``topic``'s bundle, and whether it was picked just now.

    A bundle nobody owns is assigned as the binary protocol's lookup assigns it: taken here
    when ``?authoritative`` or when this broker is the least loaded; otherwise the
    least-loaded broker is picked (``True``), and takes the bundle when it is asked with
    ``authoritative=true``. Raises ``NamespaceNotFoundError`` having written nothing."""
    service = ctx.service
    me = BrokerInfo(service.me.broker_id, service.service_url, ctx.web_url)
    bundle = await service.bundle_of(topic)
    if bundle in service.ownership.owned:
        return me, False
    owner = await service.ownership.owner_info(bundle)
    if owner is None:
        url = await service.lookup(topic, flag(request, "authoritative"))
        if url == service.service_url:
            return me, False
        owner = await service.ownership.owner_info(bundle)  # taken meanwhile?
        if owner is None:
            return (await find_broker(service.store, url)) or BrokerInfo(url, url), True
    return (me if owner.service_url == service.service_url else owner), False


class Forwarder:
    """Calls to the admin APIs of other brokers (or of this one, to go through a topic's
    own resource wherever it is served), on one HTTP session opened on first use;
    redirects are followed with their method and body."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Forwarder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def call(
        self,
        method: str,
        url: str,
        *,
        body: object = None,
        query: dict[str, str] | None = None,
    ) -> Any:
        """The answer (JSON decoded; its text when it is not JSON; ``None`` if empty).

        Raises ``RestError`` with the remote status and reason, 502 when the broker cannot
        be reached."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)
            )
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        authorization = FORWARDED_AUTHORIZATION.get()
        if authorization:
            headers["Authorization"] = authorization
        # Redirects are followed here, not by aiohttp, which drops the Authorization
        # header when one leads to another broker.
        for _ in range(MAX_FORWARD_REDIRECTS + 1):
            try:
                async with self._session.request(
                    method, url, params=query, data=data, headers=headers, allow_redirects=False
                ) as response:
                    raw = await response.read()
                    status = response.status
                    location = response.headers.get("Location")
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise RestError(502, f"{method} {url} failed: {exc!r}") from None
            if status not in REDIRECTS or not location:
                break
            url, query = urljoin(url, location), None  # the location holds the query
        else:
            raise RestError(502, f"{method} {url}: more than {MAX_FORWARD_REDIRECTS} redirects")
        if status >= 400:
            raise RestError(status, reason_of(raw) or f"{method} {url}: HTTP {status}")
        text = raw.decode(errors="replace")
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:
            return text


def reason_of(raw: bytes) -> str:
    """The reason of another broker's error answer (``{"reason": ...}``, else its text)."""
    text = raw.decode(errors="replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(doc, dict) and isinstance(doc.get("reason"), str):
        return str(doc["reason"])
    return text[:500]


@dataclass
class AdminContext:
    """What the admin resources work on. ``service`` is the broker's topic service while it
    serves (503 before it is ready, or while it starts over after losing its session)."""

    config: BrokerConfig
    web_url: str
    get_service: Callable[[], BrokerService | None]
    get_store: Callable[[], MetadataStore | None]
    # The protocol server (its client connections, for /metrics); None while it starts.
    get_server: Callable[[], BrokerServer | None] = lambda: None
    # Authentication and authorization (None: neither, as in tests that build a context).
    security: BrokerSecurity | None = None

    @property
    def cluster(self) -> str:
        return self.config.cluster_name

    @property
    def service(self) -> BrokerService:
        return _ready(self.get_service())

    @property
    def store(self) -> MetadataStore:
        return _ready(self.get_store())


def _ready(part: T | None) -> T:
    """A part of the broker that is there once it serves (503 until then)."""
    if part is None:
        raise RestError(503, "the broker is not ready")
    return part
