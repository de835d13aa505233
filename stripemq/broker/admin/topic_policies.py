"""Topic-level policies over Pulsar's paths: ``/admin/v2/persistent/{tenant}/{ns}/{topic}/
<policy>``, for a topic that exists (404 "Topic not found" otherwise; a partitioned topic's
apply to its partitions, and a partition's name sets its partitioned topic's).

Each policy has GET (its value, 204 while the topic sets none; with ``?applied=true`` what
applies: the topic's, else the namespace's, else the broker's where the namespace's GET
answers that), a change (POST, PUT for ``schemaCompatibilityStrategy``) and DELETE:
``retention``, ``messageTTL`` (``POST ...?messageTTL=<seconds>``), ``backlogQuota``
(``?backlogQuotaType=``; ``backlogQuotaMap`` lists them), ``deduplicationEnabled`` (bare
bool), ``publishRate``, ``dispatchRate``, ``subscriptionDispatchRate``,
``schemaCompatibilityStrategy`` (a strategy name) and ``schemaValidationEnforced`` (bare
bool; GET answers ``false`` while unset). ``isGlobal`` is taken and ignored: there is
one scope, the cluster's. A change is validated before it is stored, by compare-and-set
as namespace policies are, and the broker serving the topic applies it at once
(``TopicPolicyCache``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from stripemq.broker.admin.namespaces import (
    POLICY_ENDPOINTS,
    PolicyEndpoint,
    PolicyScope,
    compare_and_set,
    policy_scope,
)
from stripemq.broker.admin.rest import (
    AdminContext,
    no_content,
    not_found,
    ok_json,
    precondition_failed,
    read_json,
    topic_of,
)
from stripemq.broker.namespaces import check_namespace, read_policies
from stripemq.broker.partitions import partition_count
from stripemq.broker.policies import (
    BacklogQuota,
    DispatchRate,
    InvalidPolicyError,
    PublishRate,
    RetentionPolicies,
    parse_backlog_quota_type,
    parse_bool,
    parse_int,
    parse_schema_strategy,
)
from stripemq.broker.topic_policies import (
    TopicLevelPolicies,
    read_topic_policies,
    topic_policies_key,
    write_topic_policies,
)
from stripemq.managed_ledger.ledger_list import managed_ledger_path
from stripemq.proto.topic_name import TopicName

Own = TopicLevelPolicies
Query = Mapping[str, str]


def _quota_type(query: Query) -> Any:
    return parse_backlog_quota_type(query.get("backlogQuotaType"))


def _json_of(value: Any) -> object:
    return value.to_json() if hasattr(value, "to_json") else value


def _message_ttl(body: object, query: Query) -> int:
    """Pulsar's topic-level TTL comes as ``?messageTTL=``; a bare body is taken too."""
    raw = query.get("messageTTL", body)
    try:
        value = int(raw) if isinstance(raw, str) else raw
    except ValueError:
        value = raw
    if isinstance(value, int) and value < 0:
        raise InvalidPolicyError("Invalid value for message TTL")
    return parse_int(value, "message TTL")


@dataclass(frozen=True)
class TopicPolicyEndpoint:
    """One topic-level policy: its value (None: unset), what a change body makes of the
    topic's policies, what DELETE leaves, and the namespace endpoint whose GET answers
    ``?applied=true`` on the merged policies."""

    path: str
    get: Callable[[Own, Query], object]
    set: Callable[[Own, object, Query], Own]
    remove: Callable[[Own, Query], Own]
    applied_as: str  # the namespace policy endpoint's path
    set_method: str = "POST"
    body_required: bool = True
    unset: object = None  # what GET answers while unset (None: 204)


TOPIC_POLICY_ENDPOINTS = (
    TopicPolicyEndpoint(
        "retention",
        lambda o, q: _json_of(o.retention),
        lambda o, body, q: o.with_(retention=RetentionPolicies.parse(body)),
        lambda o, q: o.with_(retention=None),
        "retention",
    ),
    TopicPolicyEndpoint(
        "messageTTL",
        lambda o, q: o.message_ttl_in_seconds,
        lambda o, body, q: o.with_(message_ttl_in_seconds=_message_ttl(body, q)),
        lambda o, q: o.with_(message_ttl_in_seconds=None),
        "messageTTL",
        body_required=False,
    ),
    TopicPolicyEndpoint(
        "backlogQuota",
        lambda o, q: _json_of(o.backlog_quotas.get(_quota_type(q))),
        lambda o, body, q: o.with_(
            backlog_quotas={**o.backlog_quotas, _quota_type(q): BacklogQuota.parse(body)}
        ),
        lambda o, q: o.with_(
            backlog_quotas={t: v for t, v in o.backlog_quotas.items() if t is not _quota_type(q)}
        ),
        "backlogQuota",
    ),
    TopicPolicyEndpoint(
        "deduplicationEnabled",
        lambda o, q: o.deduplication_enabled,
        lambda o, body, q: o.with_(deduplication_enabled=parse_bool(body, "deduplication")),
        lambda o, q: o.with_(deduplication_enabled=None),
        "deduplication",
    ),
    TopicPolicyEndpoint(
        "publishRate",
        lambda o, q: _json_of(o.publish_rate),
        lambda o, body, q: o.with_(publish_rate=PublishRate.parse(body)),
        lambda o, q: o.with_(publish_rate=None),
        "publishRate",
    ),
    TopicPolicyEndpoint(
        "dispatchRate",
        lambda o, q: _json_of(o.dispatch_rate),
        lambda o, body, q: o.with_(dispatch_rate=DispatchRate.parse(body)),
        lambda o, q: o.with_(dispatch_rate=None),
        "dispatchRate",
    ),
    TopicPolicyEndpoint(
        "subscriptionDispatchRate",
        lambda o, q: _json_of(o.subscription_dispatch_rate),
        lambda o, body, q: o.with_(subscription_dispatch_rate=DispatchRate.parse(body)),
        lambda o, q: o.with_(subscription_dispatch_rate=None),
        "subscriptionDispatchRate",
    ),
    TopicPolicyEndpoint(
        "schemaCompatibilityStrategy",
        lambda o, q: (
            o.schema_compatibility_strategy.value if o.schema_compatibility_strategy else None
        ),
        lambda o, body, q: o.with_(schema_compatibility_strategy=parse_schema_strategy(body)),
        lambda o, q: o.with_(schema_compatibility_strategy=None),
        "schemaCompatibilityStrategy",
        set_method="PUT",
    ),
    TopicPolicyEndpoint(
        "schemaValidationEnforced",
        lambda o, q: o.schema_validation_enforced,
        lambda o, body, q: o.with_(
            schema_validation_enforced=parse_bool(body, "schemaValidationEnforced")
        ),
        lambda o, q: o.with_(schema_validation_enforced=None),
        "schemaValidationEnforced",
        unset=False,  # a boolean in Pulsar's TopicPolicies
    ),
)


def _namespace_endpoint(path: str) -> PolicyEndpoint:
    return next(ep for ep in POLICY_ENDPOINTS if ep.path == path)


class TopicPolicies:
    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx

    async def topic(self, request: web.Request) -> TopicName:
        """The topic of the path: a partitioned topic or a non-partitioned one that
        exists; a partition is refused (its partitioned topic's policies are its own)."""
        topic = topic_of(request)
        store = self.ctx.store
        await check_namespace(store, topic.namespace_name)
        if topic.partition_index >= 0:
            raise precondition_failed("Not allowed to set/get topic policy for a partition")
        if await partition_count(store, topic) > 0:
            return topic
        if await store.exists(managed_ledger_path(topic.managed_ledger_name)) is None:
            raise not_found(f"Topic {topic} not found")
        return topic

    async def applied(
        self, topic: TopicName, own: Own, ep: TopicPolicyEndpoint, scope: PolicyScope
    ) -> object:
        namespace, _ = await read_policies(self.ctx.store, topic.namespace_name)
        merged = own.over(namespace, self.ctx.cluster)
        return _namespace_endpoint(ep.applied_as).get(merged, scope)

    async def update(self, topic: TopicName, change: Callable[[Own], Own]) -> None:
        store, key = self.ctx.store, topic_policies_key(topic)
        await compare_and_set(
            lambda: read_topic_policies(store, key),
            lambda policies, version: write_topic_policies(store, key, policies, version),
            change,
        )


def _add_policy_routes(
    router: web.UrlDispatcher, resource: TopicPolicies, ep: TopicPolicyEndpoint
) -> None:
    path = f"/admin/v2/persistent/{{tenant}}/{{namespace}}/{{topic}}/{ep.path}"

    async def get(request: web.Request) -> web.Response:
        topic = await resource.topic(request)
        own, _ = await read_topic_policies(resource.ctx.store, topic_policies_key(topic))
        value = ep.get(own, request.query)
        if value is None and request.query.get("applied", "").lower() == "true":
            value = await resource.applied(topic, own, ep, policy_scope(resource.ctx, request))
        return ok_json(value if value is not None else ep.unset)

    async def change(request: web.Request) -> web.Response:
        topic = await resource.topic(request)
        body = await read_json(request, required=ep.body_required)
        ep.set(TopicLevelPolicies(), body, request.query)  # refused before anything is read
        await resource.update(topic, lambda own: ep.set(own, body, request.query))
        return no_content()

    async def delete(request: web.Request) -> web.Response:
        topic = await resource.topic(request)
        await resource.update(topic, lambda own: ep.remove(own, request.query))
        return no_content()

    router.add_get(path, get)
    router.add_route(ep.set_method, path, change)
    router.add_delete(path, delete)


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    resource = TopicPolicies(ctx)
    for ep in TOPIC_POLICY_ENDPOINTS:
        _add_policy_routes(router, resource, ep)

    async def backlog_quota_map(request: web.Request) -> web.Response:
        topic = await resource.topic(request)
        own, _ = await read_topic_policies(ctx.store, topic_policies_key(topic))
        if request.query.get("applied", "").lower() == "true":
            namespace, _ = await read_policies(ctx.store, topic.namespace_name)
            quotas = own.over(namespace, ctx.cluster).backlog_quotas
        else:
            quotas = own.backlog_quotas
        return ok_json({t.value: q.to_json() for t, q in quotas.items()})

    router.add_get(
        "/admin/v2/persistent/{tenant}/{namespace}/{topic}/backlogQuotaMap", backlog_quota_map
    )
