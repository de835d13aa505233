"""Who may call which HTTP resource, with authentication and authorization on.

Every request but the public ones (``/metrics`` unless ``authenticate_metrics_endpoint``,
and the probes' ``brokers/ready`` and ``brokers/health``) needs ``Authorization: Bearer
<token>``: 401 without valid credentials. What the role then needs follows Pulsar's
``PulsarAuthorizationProvider`` (403 when it lacks it):

- clusters and broker versions: any role to read; superusers for everything else on
  clusters and brokers, and for the tenant list and creating, changing, deleting tenants;
- a tenant, its namespaces and their policies and permissions, creating, deleting,
  unloading and terminating topics: the tenant's admins;
- lookups, topic lists, partitions and stats, reading schemas: produce or consume on the
  namespace (uploading, deleting and testing schemas: the tenant's admins);
- subscriptions (create, delete, skip, expire, reset, peek, clear backlog): consume.

Superusers pass every check; tenant admins every check inside their tenant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from stripemq.broker.admin.rest import (
    FORWARDED_AUTHORIZATION,
    Handler,
    precondition_failed,
    without_trailing_slash,
)
from stripemq.broker.security import BrokerSecurity
from stripemq.proto.topic_name import is_valid_name
from stripemq.security.authorization import Need

log = logging.getLogger(__name__)

_READS = frozenset({"GET", "HEAD"})
_PUBLIC = frozenset({"/admin/v2/brokers/ready", "/admin/v2/brokers/health"})
_TOPIC_READS = {"partitions", "stats", "internalStats", "partitioned-stats"}
_TOPIC_READS |= {"partitioned-internalStats"}


@dataclass(frozen=True)
class Rule:
    """What a resource needs (None: public) and whether it is checked on its namespace
    (``tenant/namespace``), its tenant, or nothing."""

    need: Need | None
    scope: str = "none"  # "none", "tenant" or "namespace"


PUBLIC = Rule(None)


def rule_for(method: str, resource: str | None, *, metrics_public: bool = True) -> Rule:
    """The rule of a route, by its pattern (``/admin/v2/tenants/{tenant}``...)."""
    if resource is None:
        return Rule(Need.AUTHENTICATED)  # no such route: 404 for anyone authenticated
    if resource.startswith("/metrics"):
        return PUBLIC if metrics_public else Rule(Need.AUTHENTICATED)
    if resource in _PUBLIC:
        return PUBLIC
    read = method in _READS
    if resource.startswith("/admin/v2/clusters"):
        return Rule(Need.AUTHENTICATED if read else Need.SUPERUSER)
    if resource.startswith("/admin/v2/brokers"):
        if resource in ("/admin/v2/brokers/version", "/admin/v2/brokers/leaderBroker"):
            return Rule(Need.AUTHENTICATED)
        return Rule(Need.SUPERUSER)
    if resource == "/admin/v2/tenants":
        return Rule(Need.SUPERUSER)
    if resource.startswith("/admin/v2/tenants/"):
        return Rule(Need.TENANT_ADMIN, "tenant") if read else Rule(Need.SUPERUSER)
    if resource.startswith("/lookup/v2/"):
        return Rule(Need.LOOKUP, "namespace")
    if resource == "/admin/v2/namespaces/{tenant}":
        return Rule(Need.TENANT_ADMIN, "tenant")
    if resource.startswith("/admin/v2/namespaces/{tenant}/{namespace}"):
        return _namespace_rule(method, resource.removeprefix("/admin/v2/namespaces/{tenant}/"))
    if resource.startswith("/admin/v2/persistent/{tenant}/{namespace}"):
        rest = resource.removeprefix("/admin/v2/persistent/{tenant}/{namespace}")
        return _topic_rule(method, rest.lstrip("/"))
    if resource.startswith("/admin/v2/schemas/{tenant}/{namespace}"):
        if read or resource.endswith("/version"):
            return Rule(Need.LOOKUP, "namespace")  # Pulsar's GET_METADATA on the topic
        return Rule(Need.TENANT_ADMIN, "namespace")  # upload, delete, compatibility
    return Rule(Need.SUPERUSER)  # a resource nobody classified: superusers only


def _namespace_rule(method: str, rest: str) -> Rule:
    """``rest`` starts at ``{namespace}``."""
    tail = rest.removeprefix("{namespace}").lstrip("/")
    if tail == "topics" and method in _READS:
        return Rule(Need.LOOKUP, "namespace")
    if "clearBacklog" in tail or "unsubscribe/" in tail:
        return Rule(Need.CONSUME, "namespace")
    return Rule(Need.TENANT_ADMIN, "namespace")


def _topic_rule(method: str, rest: str) -> Rule:
    """``rest`` is what follows ``/persistent/{tenant}/{namespace}``."""
    if rest in ("", "partitioned"):
        return Rule(Need.LOOKUP, "namespace")  # the namespace's topics
    tail = rest.removeprefix("{topic}").lstrip("/")
    if tail.startswith(("subscription/", "subscriptions", "all_subscription/")):
        return Rule(Need.CONSUME, "namespace")
    if tail == "lastMessageId":
        return Rule(Need.CONSUME, "namespace")
    if method in _READS and (tail == "examinemessage" or tail.startswith("ledger/")):
        return Rule(Need.CONSUME, "namespace")  # Pulsar's PEEK_MESSAGES, as peek's
    if method in _READS and tail in _TOPIC_READS:
        return Rule(Need.LOOKUP, "namespace")
    return Rule(Need.TENANT_ADMIN, "namespace")  # create, delete, unload, terminate...


async def _resource_of(request: web.Request) -> tuple[str | None, dict[str, str]]:
    """The route pattern the request is served by, and its path's names; a path with a
    trailing slash is served as the one without (``trailing_slash_middleware``)."""
    found = await without_trailing_slash(request)
    match = found[1] if found is not None else request.match_info
    if match.http_exception is not None:
        return None, {}
    route = match.route
    resource = route.resource.canonical if route.resource is not None else None
    return resource, dict(match)


def access_middleware(security: BrokerSecurity) -> Middleware:
    """The middleware that authenticates and authorizes every request."""

    @web.middleware
    async def check_access(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not security.authenticating:
            return await handler(request)
        resource, names = await _resource_of(request)
        rule = rule_for(request.method, resource, metrics_public=not security.authenticate_metrics)
        if rule.need is None:
            return await handler(request)
        header = request.headers.get("Authorization")
        role = security.authenticate_http(header)  # AuthenticationError: 401
        for name in ("tenant", "namespace"):
            if name in names and not is_valid_name(names[name]):
                raise precondition_failed(f"Invalid {name} name: {names[name]!r}")
        scope = None
        if rule.scope == "tenant":
            scope = names.get("tenant")
        elif rule.scope == "namespace":
            scope = f"{names.get('tenant')}/{names.get('namespace')}"
        await security.check(rule.need, role, scope)  # AuthorizationError: 403
        token = FORWARDED_AUTHORIZATION.set(header)
        try:
            return await handler(request)
        finally:
            FORWARDED_AUTHORIZATION.reset(token)

    return check_access
