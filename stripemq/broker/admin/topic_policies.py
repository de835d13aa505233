"""Topic-level policies over Pulsar's paths: ``/admin/v2/persistent/{tenant}/{ns}/{topic}/
<policy>``, for a topic that exists (404 "Topic ... not found" otherwise; a partitioned
topic's apply to its partitions, and a partition's name is refused, 412).

Each policy has GET (its value, 204 while the topic sets none; with ``?applied=true`` what
the topic obeys: its own, else its namespace's, else the broker's), a change (POST, PUT
for ``schemaCompatibilityStrategy``; UNDEFINED unsets it) and DELETE:
``retention``, ``messageTTL`` (``POST ...?messageTTL=<seconds>``), ``backlogQuota``
(``?backlogQuotaType=``; ``backlogQuotaMap`` lists them), ``deduplicationEnabled`` (bare
bool), ``publishRate``, ``dispatchRate``, ``subscriptionDispatchRate``,
``schemaCompatibilityStrategy`` (a strategy name), ``schemaValidationEnforced`` (bare
bool; GET answers ``false`` while unset), ``compactionThreshold`` (bare bytes),
``persistence`` (``PersistencePolicies``, quorums within the broker's ``managedLedgerMax*``,
else 400), ``delayedDelivery`` (``DelayedDeliveryPolicies``), ``subscriptionTypesEnabled``
(a list of type names), ``inactiveTopicPolicies`` and the limits
(``maxProducers``..., bare counts).
``isGlobal`` is taken and ignored: there is one scope, the cluster's. A change is
validated before it is stored, by compare-and-set as namespace policies are, and the broker
serving the topic applies it at once (``TopicPolicyCache``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from stripemq.broker.admin.namespaces import compare_and_set, retention_fits_quota
from stripemq.broker.admin.rest import (
    AdminContext,
    flag,
    no_content,
    not_found,
    ok_json,
    precondition_failed,
    read_json,
    topic_of,
)
from stripemq.broker.config import BrokerConfig
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.namespaces import check_namespace, read_policies
from stripemq.broker.partitions import partition_count
from stripemq.broker.policies import (
    BacklogQuota,
    BacklogQuotaType,
    DelayedDeliveryPolicies,
    DispatchRate,
    InactiveTopicPolicies,
    InvalidPolicyError,
    PersistencePolicies,
    Policies,
    PublishRate,
    RetentionPolicies,
    parse_backlog_quota_type,
    parse_bool,
    parse_compaction_threshold,
    parse_int,
    parse_limit,
    parse_subscription_types,
    stored_persistence,
)
from stripemq.broker.topic_policies import (
    TopicLevelPolicies,
    read_topic_policies,
    topic_policies_key,
    topic_strategy,
    write_topic_policies,
)
from stripemq.managed_ledger.ledger_list import managed_ledger_path
from stripemq.proto.topic_name import TopicName
from stripemq.topic_limits import Limit

TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
Own = TopicLevelPolicies
Query = Mapping[str, str]


def _quota_type(query: Query) -> Any:
    return parse_backlog_quota_type(query.get("backlogQuotaType"))


def _json_of(value: Any) -> object:
    """A policy value as GET answers it (a record's JSON, a strategy's name)."""
    if isinstance(value, enum.Enum):
        return value.value
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
    topic's policies, what DELETE leaves (each raising ``InvalidPolicyError`` before
    anything is stored), and what ``?applied=true`` answers from the policies the topic
    obeys and the broker's settings."""

    path: str
    get: Callable[[Own, Query], object]
    set: Callable[[Own, object, Query], Own]
    remove: Callable[[Own, Query], Own]
    applied: Callable[[EffectivePolicies, BrokerConfig, Query], object]
    set_method: str = "POST"
    body_required: bool = True
    unset: object = None  # what GET answers while unset (None: 204)
    # What a change body must also satisfy against the broker's settings (before
    # anything is read or stored).
    check: Callable[[object, BrokerConfig], object] | None = None


def _applied_retention(policies: EffectivePolicies, config: BrokerConfig, query: Query) -> object:
    if policies.retention is not None:
        return policies.retention.to_json()
    return {  # the broker's defaults, which the managed ledgers obey
        "retentionTimeInMinutes": int(config.default_retention_time_in_minutes),
        "retentionSizeInMB": config.default_retention_size_in_mb,
    }


def _applied_persistence(policies: EffectivePolicies, config: BrokerConfig, query: Query) -> object:
    return (policies.persistence or config.default_persistence()).to_json()


def _persistence_endpoint() -> TopicPolicyEndpoint:
    """``persistence``: quorums within the broker's bounds (``check``, 400 otherwise)."""
    return _field(
        "persistence",
        "persistence",
        stored_persistence,
        _applied_persistence,
        check=lambda body, config: PersistencePolicies.parse(body, config.quorum_bounds()),
    )


def check_quotas_fit(own: Own, namespace: Policies, *, retention_changed: bool) -> None:
    """Pulsar's ``checkQuotas`` for a topic: each backlog quota it obeys (its own, else its
    namespace's), by size and by age, must stay below the retention it obeys (its own,
    else its namespace's). Raises ``InvalidPolicyError`` naming what the change moved."""
    retention = own.retention or namespace.retention
    quotas = own.backlog_quotas or namespace.backlog_quotas
    if all(retention_fits_quota(quota, retention) for quota in quotas.values()):
        return
    if retention_changed:
        raise InvalidPolicyError(
            "Retention Quota must exceed configured backlog quota for topic. Please increase "
            "retention quota and retry"
        )
    raise InvalidPolicyError(
        "Backlog Quota exceeds configured retention quota for topic. Please increase "
        "retention quota and retry"
    )


def _set_backlog_quota(own: Own, body: object, query: Query) -> Own:
    return own.with_(
        backlog_quotas={**own.backlog_quotas, _quota_type(query): BacklogQuota.parse(body)}
    )


def _remove_backlog_quota(own: Own, query: Query) -> Own:
    kind = _quota_type(query)  # a bad type is refused, whether or not quotas are set
    return own.with_(backlog_quotas={t: q for t, q in own.backlog_quotas.items() if t is not kind})


def _field(
    path: str,
    attr: str,
    parse: Callable[[object], object],
    applied: Callable[[EffectivePolicies, BrokerConfig, Query], object],
    **options: Any,
) -> TopicPolicyEndpoint:
    """The endpoint of a policy that is one field of ``TopicLevelPolicies``: GET answers
    its JSON, a change parses the body into it, DELETE unsets it."""
    return TopicPolicyEndpoint(
        path,
        lambda o, q: _json_of(getattr(o, attr)),
        lambda o, body, q: o.with_(**{attr: parse(body)}),
        lambda o, q: o.with_(**{attr: None}),
        applied,
        **options,
    )


def _limit_endpoint(limit: Limit) -> TopicPolicyEndpoint:
    """A count limit's endpoint (``maxProducers``...): a bare integer, 0 or more."""

    def set_limit(own: Own, body: object, query: Query) -> Own:
        return own.with_(limits={**own.limits, limit: parse_limit(body, limit.names.topic_value)})

    def remove_limit(own: Own, query: Query) -> Own:
        return own.with_(limits={k: v for k, v in own.limits.items() if k is not limit})

    return TopicPolicyEndpoint(
        limit.names.topic_path,
        lambda o, q: o.limits.get(limit),
        set_limit,
        remove_limit,
        lambda p, c, q: p.limit(limit),
    )


TOPIC_POLICY_ENDPOINTS = (
    *(_limit_endpoint(limit) for limit in Limit),
    _field("retention", "retention", RetentionPolicies.parse, _applied_retention),
    TopicPolicyEndpoint(
        "messageTTL",
        lambda o, q: o.message_ttl_in_seconds,
        lambda o, body, q: o.with_(message_ttl_in_seconds=_message_ttl(body, q)),
        lambda o, q: o.with_(message_ttl_in_seconds=None),
        lambda p, c, q: p.message_ttl_s,
        body_required=False,
    ),
    TopicPolicyEndpoint(
        "backlogQuota",
        lambda o, q: _json_of(o.backlog_quotas.get(_quota_type(q))),
        _set_backlog_quota,
        _remove_backlog_quota,
        lambda p, c, q: p.backlog_quota(_quota_type(q)).to_json(),
    ),
    _field(
        "deduplicationEnabled",
        "deduplication_enabled",
        lambda body: parse_bool(body, "deduplication"),
        lambda p, c, q: p.deduplication,
    ),
    _field(
        "publishRate", "publish_rate", PublishRate.parse, lambda p, c, q: p.publish_rate.to_json()
    ),
    _field(
        "dispatchRate",
        "dispatch_rate",
        DispatchRate.parse,
        lambda p, c, q: p.dispatch_rate.to_json(),
    ),
    _field(
        "subscriptionDispatchRate",
        "subscription_dispatch_rate",
        DispatchRate.parse,
        lambda p, c, q: p.subscription_dispatch_rate.to_json(),
    ),
    _field(
        "schemaCompatibilityStrategy",
        "schema_compatibility_strategy",
        topic_strategy,
        lambda p, c, q: p.schema_compatibility_strategy.value,
        set_method="PUT",
    ),
    _field(
        "schemaValidationEnforced",
        "schema_validation_enforced",
        lambda body: parse_bool(body, "schemaValidationEnforced"),
        lambda p, c, q: p.schema_validation_enforced,
        unset=False,  # a boolean in Pulsar's TopicPolicies
    ),
    _field(
        "compactionThreshold",
        "compaction_threshold",
        parse_compaction_threshold,
        lambda p, c, q: p.compaction_threshold_bytes,
    ),
    _persistence_endpoint(),
    _field(
        "inactiveTopicPolicies",
        "inactive_topic_policies",
        InactiveTopicPolicies.parse,
        lambda p, c, q: p.inactive_topic_policies.to_json(),
    ),
    _field(
        "subscriptionTypesEnabled",
        "subscription_types_enabled",
        parse_subscription_types,
        lambda p, c, q: list(p.subscription_types_enabled),
    ),
    _field(
        "delayedDelivery",
        "delayed_delivery",
        DelayedDeliveryPolicies.parse,
        lambda p, c, q: (p.delayed_delivery or c.delayed_delivery_config().as_policies()).to_json(),
    ),
)


class TopicPoliciesResource:
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

    async def own(self, topic: TopicName) -> Own:
        return (await read_topic_policies(self.ctx.store, topic_policies_key(topic)))[0]

    async def applied(self, topic: TopicName) -> EffectivePolicies:
        """What the topic obeys: its own policies, its namespace's, the broker's."""
        return await self.ctx.service.effective_policies(topic, watch=False)

    async def update(self, topic: TopicName, change: Callable[[Own], Own]) -> None:
        store, key = self.ctx.store, topic_policies_key(topic)
        await compare_and_set(
            lambda: read_topic_policies(store, key, repair=True),
            lambda policies, version: write_topic_policies(store, key, policies, version),
            change,
        )


def _add_policy_routes(
    router: web.UrlDispatcher, resource: TopicPoliciesResource, ep: TopicPolicyEndpoint
) -> None:
    path = f"{TOPIC}/{ep.path}"

    async def get(request: web.Request) -> web.Response:
        topic = await resource.topic(request)
        value = ep.get(await resource.own(topic), request.query)
        if value is None and flag(request, "applied"):
            applied = await resource.applied(topic)
            value = ep.applied(applied, resource.ctx.config, request.query)
        return ok_json(value if value is not None else ep.unset)

    async def change(request: web.Request) -> web.Response:
        topic = await resource.topic(request)
        body = await read_json(request, required=ep.body_required)
        if ep.check is not None:
            ep.check(body, resource.ctx.config)
        ep.set(TopicLevelPolicies(), body, request.query)  # refused before anything is read
        namespace, _ = await read_policies(resource.ctx.store, topic.namespace_name)

        def change(own: Own) -> Own:
            changed = ep.set(own, body, request.query)
            check_quotas_fit(changed, namespace, retention_changed=ep.path == "retention")
            return changed

        await resource.update(topic, change)
        return no_content()

    async def delete(request: web.Request) -> web.Response:
        topic = await resource.topic(request)
        ep.remove(TopicLevelPolicies(), request.query)  # a bad query is refused first
        await resource.update(topic, lambda own: ep.remove(own, request.query))
        return no_content()

    router.add_get(path, get)
    router.add_route(ep.set_method, path, change)
    router.add_delete(path, delete)


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    resource = TopicPoliciesResource(ctx)
    for ep in TOPIC_POLICY_ENDPOINTS:
        _add_policy_routes(router, resource, ep)

    async def backlog_quota_map(request: web.Request) -> web.Response:
        topic = await resource.topic(request)
        quotas = dict((await resource.own(topic)).backlog_quotas)
        if not quotas and flag(request, "applied"):
            applied = await resource.applied(topic)
            quotas = {kind: applied.backlog_quota(kind) for kind in BacklogQuotaType}
        return ok_json({kind.value: quota.to_json() for kind, quota in quotas.items()})

    router.add_get(f"{TOPIC}/backlogQuotaMap", backlog_quota_map)
