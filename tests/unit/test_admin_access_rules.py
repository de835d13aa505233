"""Who may call which HTTP resource (``broker.admin.access.rule_for``), over the routes the
broker's web app really serves."""

from __future__ import annotations

from unittest import mock

import pytest

from stripemq.broker.admin.access import PUBLIC, Rule, rule_for
from stripemq.broker.web import build_app
from stripemq.security.authorization import Need

TENANT = "/admin/v2/tenants/{tenant}"
NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
SUB = TOPIC + "/subscription/{subscription}"
LOOKUP_TOPIC = "/lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}"


def app_routes() -> set[tuple[str, str]]:
    app = build_app(mock.MagicMock(security=None))
    return {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None
    }


ROUTES = sorted(app_routes())
ROUTE_IDS = [f"{method} {resource}" for method, resource in ROUTES]


def test_the_app_serves_the_routes_spot_checked_here() -> None:
    routes = set(ROUTES)
    for route in [
        ("GET", "/admin/v2/tenants"),
        ("GET", TENANT),
        ("PUT", TENANT),
        ("GET", NS + "/permissions"),
        ("POST", NS + "/permissions/{role}"),
        ("DELETE", NS + "/permissions/{role}"),
        ("GET", NS + "/topics"),
        ("GET", TOPIC + "/stats"),
        ("PUT", TOPIC),
        ("DELETE", TOPIC),
        ("POST", SUB + "/skip_all"),
        ("GET", LOOKUP_TOPIC),
        ("GET", "/metrics"),
        ("GET", "/admin/v2/brokers/ready"),
        ("GET", "/admin/v2/brokers/health"),
        ("GET", "/admin/v2/clusters"),
        ("PUT", "/admin/v2/clusters/{cluster}"),
        ("GET", "/admin/v2/brokers"),
    ]:
        assert route in routes, route


# ---------------------------------------------------------------------------- properties


@pytest.mark.parametrize("method, resource", ROUTES, ids=ROUTE_IDS)
def test_every_route_has_a_well_formed_rule(method: str, resource: str) -> None:
    rule = rule_for(method, resource)
    assert isinstance(rule, Rule)
    assert rule.need is None or isinstance(rule.need, Need)
    assert rule.scope in ("none", "tenant", "namespace")
    if rule.need in (Need.LOOKUP, Need.PRODUCE, Need.CONSUME):
        assert rule.scope == "namespace"
    if rule.need is Need.TENANT_ADMIN:
        assert rule.scope in ("tenant", "namespace")
    if rule.need in (None, Need.AUTHENTICATED, Need.SUPERUSER):
        assert rule.scope == "none"
    if method == "HEAD":
        assert rule == rule_for("GET", resource)


@pytest.mark.parametrize("method, resource", ROUTES, ids=ROUTE_IDS)
def test_tenant_resources_are_checked_on_their_tenant(method: str, resource: str) -> None:
    """A rule below a tenant names the scope it is checked on (superuser-only excepted),
    and that scope is in the path: the middleware reads it from the path's names."""
    rule = rule_for(method, resource)
    if "{tenant}" in resource and rule.need is not None and rule.need is not Need.SUPERUSER:
        assert rule.scope in ("tenant", "namespace")
    if rule.scope == "tenant":
        assert "{tenant}" in resource
    if rule.scope == "namespace":
        assert "{tenant}" in resource and "{namespace}" in resource


def test_only_metrics_and_probes_are_public() -> None:
    public = {resource for method, resource in ROUTES if rule_for(method, resource) == PUBLIC}
    assert public == {
        "/metrics",
        "/metrics/",
        "/admin/v2/brokers/ready",
        "/admin/v2/brokers/health",
    }


# ---------------------------------------------------------------------------- spot checks


@pytest.mark.parametrize(
    "method, resource, rule",
    [
        # tenants
        ("GET", "/admin/v2/tenants", Rule(Need.SUPERUSER)),
        ("GET", TENANT, Rule(Need.TENANT_ADMIN, "tenant")),
        ("PUT", TENANT, Rule(Need.SUPERUSER)),
        ("POST", TENANT, Rule(Need.SUPERUSER)),
        ("DELETE", TENANT, Rule(Need.SUPERUSER)),
        # namespaces and their policies
        ("GET", "/admin/v2/namespaces/{tenant}", Rule(Need.TENANT_ADMIN, "tenant")),
        ("PUT", NS, Rule(Need.TENANT_ADMIN, "namespace")),
        ("GET", NS, Rule(Need.TENANT_ADMIN, "namespace")),
        ("DELETE", NS, Rule(Need.TENANT_ADMIN, "namespace")),
        ("GET", NS + "/retention", Rule(Need.TENANT_ADMIN, "namespace")),
        ("POST", NS + "/retention", Rule(Need.TENANT_ADMIN, "namespace")),
        ("POST", NS + "/messageTTL", Rule(Need.TENANT_ADMIN, "namespace")),
        ("DELETE", NS + "/backlogQuota", Rule(Need.TENANT_ADMIN, "namespace")),
        ("PUT", NS + "/unload", Rule(Need.TENANT_ADMIN, "namespace")),
        # permissions
        ("GET", NS + "/permissions", Rule(Need.TENANT_ADMIN, "namespace")),
        ("POST", NS + "/permissions/{role}", Rule(Need.TENANT_ADMIN, "namespace")),
        ("DELETE", NS + "/permissions/{role}", Rule(Need.TENANT_ADMIN, "namespace")),
        # namespace-wide subscription operations
        ("POST", NS + "/clearBacklog", Rule(Need.CONSUME, "namespace")),
        ("POST", NS + "/unsubscribe/{subscription}", Rule(Need.CONSUME, "namespace")),
        ("POST", NS + "/{bundle}/clearBacklog/{subscription}", Rule(Need.CONSUME, "namespace")),
        # topic lists and lookups
        ("GET", NS + "/topics", Rule(Need.LOOKUP, "namespace")),
        ("GET", "/admin/v2/persistent/{tenant}/{namespace}", Rule(Need.LOOKUP, "namespace")),
        (
            "GET",
            "/admin/v2/persistent/{tenant}/{namespace}/partitioned",
            Rule(Need.LOOKUP, "namespace"),
        ),
        ("GET", LOOKUP_TOPIC, Rule(Need.LOOKUP, "namespace")),
        ("GET", LOOKUP_TOPIC + "/bundle", Rule(Need.LOOKUP, "namespace")),
        # topic reads
        ("GET", TOPIC + "/stats", Rule(Need.LOOKUP, "namespace")),
        ("GET", TOPIC + "/internalStats", Rule(Need.LOOKUP, "namespace")),
        ("GET", TOPIC + "/partitioned-stats", Rule(Need.LOOKUP, "namespace")),
        ("GET", TOPIC + "/partitions", Rule(Need.LOOKUP, "namespace")),
        # topic administration
        ("PUT", TOPIC, Rule(Need.TENANT_ADMIN, "namespace")),
        ("DELETE", TOPIC, Rule(Need.TENANT_ADMIN, "namespace")),
        ("PUT", TOPIC + "/partitions", Rule(Need.TENANT_ADMIN, "namespace")),
        ("POST", TOPIC + "/partitions", Rule(Need.TENANT_ADMIN, "namespace")),
        ("DELETE", TOPIC + "/partitions", Rule(Need.TENANT_ADMIN, "namespace")),
        ("PUT", TOPIC + "/unload", Rule(Need.TENANT_ADMIN, "namespace")),
        ("POST", TOPIC + "/terminate", Rule(Need.TENANT_ADMIN, "namespace")),
        # subscriptions
        ("GET", TOPIC + "/subscriptions", Rule(Need.CONSUME, "namespace")),
        ("PUT", SUB, Rule(Need.CONSUME, "namespace")),
        ("DELETE", SUB, Rule(Need.CONSUME, "namespace")),
        ("POST", SUB + "/skip/{count}", Rule(Need.CONSUME, "namespace")),
        ("POST", SUB + "/skip_all", Rule(Need.CONSUME, "namespace")),
        ("POST", SUB + "/expireMessages/{seconds}", Rule(Need.CONSUME, "namespace")),
        ("POST", SUB + "/resetcursor/{timestamp}", Rule(Need.CONSUME, "namespace")),
        ("GET", SUB + "/position/{position}", Rule(Need.CONSUME, "namespace")),
        (
            "POST",
            TOPIC + "/all_subscription/expireMessages/{seconds}",
            Rule(Need.CONSUME, "namespace"),
        ),
        ("GET", TOPIC + "/lastMessageId", Rule(Need.CONSUME, "namespace")),
        ("GET", TOPIC + "/examinemessage", Rule(Need.CONSUME, "namespace")),
        ("GET", TOPIC + "/ledger/{ledger}/entry/{entry}", Rule(Need.CONSUME, "namespace")),
        # schemas: read with produce or consume, changed by the tenant's admins
        ("GET", SCHEMA + "/schema", Rule(Need.LOOKUP, "namespace")),
        ("GET", SCHEMA + "/schema/{version}", Rule(Need.LOOKUP, "namespace")),
        ("GET", SCHEMA + "/schemas", Rule(Need.LOOKUP, "namespace")),
        ("POST", SCHEMA + "/version", Rule(Need.LOOKUP, "namespace")),
        ("POST", SCHEMA + "/schema", Rule(Need.TENANT_ADMIN, "namespace")),
        ("DELETE", SCHEMA + "/schema", Rule(Need.TENANT_ADMIN, "namespace")),
        ("POST", SCHEMA + "/compatibility", Rule(Need.TENANT_ADMIN, "namespace")),
        ("PUT", NS + "/schemaCompatibilityStrategy", Rule(Need.TENANT_ADMIN, "namespace")),
        # clusters and brokers
        ("GET", "/admin/v2/clusters", Rule(Need.AUTHENTICATED)),
        ("GET", "/admin/v2/clusters/{cluster}", Rule(Need.AUTHENTICATED)),
        ("PUT", "/admin/v2/clusters/{cluster}", Rule(Need.SUPERUSER)),
        ("POST", "/admin/v2/clusters/{cluster}", Rule(Need.SUPERUSER)),
        ("DELETE", "/admin/v2/clusters/{cluster}", Rule(Need.SUPERUSER)),
        ("GET", "/admin/v2/brokers", Rule(Need.SUPERUSER)),
        ("GET", "/admin/v2/brokers/{cluster}", Rule(Need.SUPERUSER)),
        ("GET", "/admin/v2/brokers/configuration/runtime", Rule(Need.SUPERUSER)),
        ("GET", "/admin/v2/brokers/version", Rule(Need.AUTHENTICATED)),
        ("GET", "/admin/v2/brokers/leaderBroker", Rule(Need.AUTHENTICATED)),
        # public
        ("GET", "/admin/v2/brokers/ready", PUBLIC),
        ("GET", "/admin/v2/brokers/health", PUBLIC),
        ("GET", "/metrics", PUBLIC),
        ("GET", "/metrics/", PUBLIC),
    ],
)
def test_rules(method: str, resource: str, rule: Rule) -> None:
    assert (method, resource) in set(ROUTES), "not a route of the app"
    assert rule_for(method, resource) == rule


def test_metrics_need_authentication_unless_public() -> None:
    for resource in ("/metrics", "/metrics/"):
        assert rule_for("GET", resource, metrics_public=False) == Rule(Need.AUTHENTICATED)
        assert rule_for("GET", resource, metrics_public=True) == PUBLIC


def test_probes_stay_public_when_metrics_are_not() -> None:
    for resource in ("/admin/v2/brokers/ready", "/admin/v2/brokers/health"):
        assert rule_for("GET", resource, metrics_public=False) == PUBLIC


def test_metrics_public_changes_no_other_rule() -> None:
    for method, resource in ROUTES:
        if not resource.startswith("/metrics"):
            assert rule_for(method, resource, metrics_public=False) == rule_for(method, resource)


def test_no_route_is_for_anyone_authenticated() -> None:
    """A request no route serves: 404, but only after authentication."""
    for method in ("GET", "PUT", "DELETE"):
        assert rule_for(method, None) == Rule(Need.AUTHENTICATED)
        assert rule_for(method, None, metrics_public=False) == Rule(Need.AUTHENTICATED)


def test_a_resource_nobody_classified_is_for_superusers() -> None:
    assert rule_for("GET", "/admin/v2/bookies/all") == Rule(Need.SUPERUSER)
    assert rule_for("GET", "/admin/v2/non-persistent/{tenant}/{namespace}") == Rule(Need.SUPERUSER)
