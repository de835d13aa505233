"""``/admin/v2/namespaces``: Pulsar's namespaces resource and its policies.

Namespaces (``{tenant}/{namespace}``; a bad name answers 412, an unknown one 404):

- ``GET /admin/v2/namespaces/{tenant}``: the tenant's namespaces as ``tenant/ns``.
- ``PUT .../{tenant}/{ns}`` creates one, with an optional ``Policies`` body (``{"bundles":
  {"numBundles": 8}}``, or the whole document pulsar-admin sends); 404 for an unknown
  tenant, 409 if it exists, 403 when its replication cluster is not allowed to the tenant.
  ``GET`` answers its ``Policies``; ``DELETE`` removes it, 409 "Cannot delete non empty
  namespace" while it has topics, unless ``?force=true``: then its topics are deleted
  first through the topics resource (``DELETE /admin/v2/persistent/...?force=true``).
- ``GET .../topics``: its persistent topics, partitions by name (as Pulsar lists them).
- ``PUT .../unload``: every owned bundle is unloaded, here or by its owner's
  ``PUT .../{bundle}/unload`` (which redirects, 307, when asked of another broker).
- ``POST .../clearBacklog[/{subscription}]`` (per bundle: ``.../{bundle}/clearBacklog...``):
  every (or that) subscription of every topic skips all its messages;
  ``POST .../unsubscribe/{subscription}`` (per bundle: ``.../{bundle}/unsubscribe/...``)
  deletes that subscription from every topic (412 while it has consumers). As in Pulsar,
  both act on the bundles a broker serves, each owner on its own (asked through its bundle
  resource); a bundle nobody serves is left alone.
- ``GET .../permissions``: the roles granted actions on the namespace (``{"role":
  ["produce", "consume"]}``); ``POST .../permissions/{role}`` with a list of Pulsar
  ``AuthAction`` names (``["produce"]``) sets that role's grant, ``DELETE`` removes it.
- A bundle is named ``0x<start>_0x<end>``, from the namespace's own bundle count
  (``bundles.numBundles`` of its policies): 412 for a range that is not one of its bundles.

Policies, each with GET (204 while unset, as Pulsar answers null), POST (the body below) and
DELETE: ``retention``, ``messageTTL`` (bare seconds), ``subscriptionExpirationTime`` (bare
minutes; 0: never), ``backlogQuota``
(``?backlogQuotaType=destination_storage|message_age``; ``backlogQuotaMap`` lists them),
``deduplication`` (bare bool), ``publishRate``, ``dispatchRate``,
``subscriptionDispatchRate`` (rates are this broker's cluster's), ``autoTopicCreation``,
``compactionThreshold`` (PUT bare bytes; 0: never compacted by size), ``persistence``
(``PersistencePolicies``: quorums within the broker's ``managedLedgerMax*``, else 400),
``delayedDelivery`` (``DelayedDeliveryPolicies``: ``tickTime``, ``active``,
``maxDeliveryDelayInMillis``), ``subscriptionTypesEnabled`` (a list of type names; GET
answers ``[]`` while unset), ``encryptionRequired`` (bare bool, POST only),
``maxTopicsPerNamespace`` (a bare count, partitions counting; 0: no limit),
``inactiveTopicPolicies`` (``InactiveTopicPolicies``),
the limits (``maxProducersPerTopic``..., bare counts);
for schemas ``schemaCompatibilityStrategy`` (PUT a strategy name; GET answers "UNDEFINED"
while unset), ``isAllowAutoUpdateSchema`` (bare bool; GET answers the broker's while unset)
and ``schemaValidationEnforced`` (bare bool; ``?applied=true`` counts the broker's too).
A change is validated whole before anything is written (``PolicyEndpoint``, sans-IO) and
stored by compare-and-set, read again and retried if another writer got there first. As in
Pulsar, a destination-storage backlog quota must stay below the retention limits (412 either
way round).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from aiohttp import web

from stripemq.broker.admin.rest import (
    AdminContext,
    Forwarder,
    Handler,
    RestError,
    conflict,
    flag,
    name_in_path,
    namespace_of,
    no_content,
    not_found,
    ok_json,
    precondition_failed,
    read_json,
    redirect_to_broker,
    topic_url,
)
from stripemq.broker.cluster_metadata import cluster_exists
from stripemq.broker.namespaces import (
    NamespaceNotEmptyError,
    create_namespace,
    delete_namespace,
    list_namespaces,
    read_policies,
    read_tenant,
    stored_topics,
    write_policies,
)
from stripemq.broker.ownership import FULL_RANGE, OWNERSHIP_ROOT, BrokerInfo, Bundle
from stripemq.broker.partitions import partition_count
from stripemq.broker.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaType,
    DelayedDeliveryPolicies,
    DispatchRate,
    InactiveTopicPolicies,
    InvalidPolicyError,
    PersistencePolicies,
    Policies,
    PublishRate,
    QuorumBounds,
    RetentionPolicies,
    TopicType,
    bundle_boundaries,
    parse_backlog_quota_type,
    parse_bool,
    parse_compaction_threshold,
    parse_int,
    parse_limit,
    parse_schema_strategy,
    parse_subscription_types,
)
from stripemq.broker.schema import CompatibilityStrategy
from stripemq.broker.topic import PersistentTopic
from stripemq.errors import BadVersionError, NodeExistsError, NotFoundError
from stripemq.proto.topic_name import TopicName
from stripemq.retry import Backoff
from stripemq.security.authorization import parse_actions
from stripemq.topic_limits import Limit

log = logging.getLogger(__name__)

P = TypeVar("P")  # a policy document (a namespace's, a topic's)
BASE = "/admin/v2/namespaces"
NS = f"{BASE}/{{tenant}}/{{namespace}}"
# How long one policy change retries its compare-and-set against other writers before
# answering 409, and its back-off between attempts (Pulsar's metadata cache retries alike:
# from 5 ms, for up to 30 s).
POLICY_WRITE_DEADLINE_S = 30.0
POLICY_WRITE_BACKOFF_S = (0.005, 0.5)


# --------------------------------------------------------------------------- names, bundles


def parse_bundle(namespace: str, name: str) -> Bundle:
    """The bundle named ``0x<start>_0x<end>`` (as ``Bundle.name`` writes it); 412 if the
    name is not a hash range."""
    low, sep, high = name.partition("_")
    try:
        if not sep or not low.lower().startswith("0x") or not high.lower().startswith("0x"):
            raise ValueError(name)
        start, end = int(low, 16), int(high, 16)
    except ValueError:
        raise precondition_failed(f"Invalid bundle range: {name}") from None
    if end == FULL_RANGE - 1:
        end = FULL_RANGE  # the last bundle's end is written inclusive
    if not 0 <= start < end <= FULL_RANGE:
        raise precondition_failed(f"Invalid bundle range: {name}")
    return Bundle(namespace, start, end)


def policy_bundles(namespace: str, policies: Policies) -> list[Bundle]:
    """The bundles the namespace's policies split it into."""
    points = [int(p, 16) for p in bundle_boundaries(policies.bundles)]
    points[-1] = FULL_RANGE
    return [Bundle(namespace, points[i], points[i + 1]) for i in range(len(points) - 1)]


async def owned_bundles(ctx: AdminContext, namespace: str) -> list[Bundle]:
    """The namespace's bundles some broker owns now (their ownership nodes)."""
    names = await ctx.store.children(f"{OWNERSHIP_ROOT}/{namespace}")
    bundles = []
    for name in names:
        try:
            bundles.append(parse_bundle(namespace, name))
        except RestError:
            log.warning("ignoring the ownership node %s/%s: not a bundle", namespace, name)
    return bundles


# --------------------------------------------------------------------------- policies (sans-IO)


@dataclass(frozen=True)
class PolicyScope:
    """What a policy change applies to beyond the namespace: this broker's cluster (rates
    are kept per cluster), the query (``backlogQuotaType``, ``applied``) and the broker's
    own defaults (what some GETs answer for an unset policy)."""

    cluster: str
    query: Mapping[str, str]
    allow_auto_update_schema: bool = True
    schema_validation_enforced: bool = False
    quorum_bounds: QuorumBounds = field(default_factory=QuorumBounds)


def retention_fits_quota(quota: BacklogQuota | None, retention: RetentionPolicies | None) -> bool:
    """Pulsar's ``checkBacklogQuota``: a retention limit must exceed the backlog quota's
    (what is kept beyond the backlog would otherwise never be reached)."""
    if retention is None or quota is None:
        return True
    size_mb, minutes = retention.retention_size_in_mb, retention.retention_time_in_minutes
    if size_mb <= 0 and minutes <= 0:
        return True
    if size_mb > 0 and quota.limit_size >= size_mb * 1024 * 1024:
        return False
    return not (minutes > 0 and quota.limit_time >= minutes * 60)


def _set_retention(policies: Policies, body: object, scope: PolicyScope) -> Policies:
    retention = RetentionPolicies.parse(body)
    quota = policies.backlog_quotas.get(BacklogQuotaType.DESTINATION_STORAGE)
    if not retention_fits_quota(quota, retention):
        raise InvalidPolicyError(
            "Retention Quota must exceed configured backlog quota for namespace."
        )
    return policies.with_(retention=retention)


def _set_backlog_quota(policies: Policies, body: object, scope: PolicyScope) -> Policies:
    quota_type = parse_backlog_quota_type(scope.query.get("backlogQuotaType"))
    quota = BacklogQuota.parse(body)
    if quota_type is BacklogQuotaType.DESTINATION_STORAGE and not retention_fits_quota(
        quota, policies.retention
    ):
        raise InvalidPolicyError(
            "Backlog Quota exceeds configured retention quota for namespace. "
            "Please increase retention quota and retry"
        )
    return policies.with_(backlog_quotas={**policies.backlog_quotas, quota_type: quota})


def _remove_backlog_quota(policies: Policies, scope: PolicyScope) -> Policies:
    quota_type = parse_backlog_quota_type(scope.query.get("backlogQuotaType"))
    quotas = {t: q for t, q in policies.backlog_quotas.items() if t is not quota_type}
    return policies.with_(backlog_quotas=quotas)


def _get_backlog_quota(policies: Policies, scope: PolicyScope) -> object:
    quota_type = parse_backlog_quota_type(scope.query.get("backlogQuotaType"))
    quota = policies.backlog_quotas.get(quota_type)
    return quota.to_json() if quota is not None else None


def _parse_auto_topic_creation(body: object) -> AutoTopicCreationOverride:
    """Pulsar's ``validateOverride`` beyond the record's own parsing: a non-partitioned
    override names no partition count."""
    override = AutoTopicCreationOverride.parse(body)
    if (
        override.allow_auto_topic_creation
        and override.topic_type is TopicType.NON_PARTITIONED
        and override.default_num_partitions is not None
    ):
        raise InvalidPolicyError(
            "Invalid configuration for autoTopicCreationOverride: [defaultNumPartitions] is "
            "not allowed to be set when the type is non-partition."
        )
    return override


def _get_schema_validation_enforced(policies: Policies, scope: PolicyScope) -> bool:
    """The namespace's flag; with ``?applied=true`` what applies (the broker's too)."""
    applied = scope.query.get("applied", "").lower() == "true"
    return policies.schema_validation_enforced or (applied and scope.schema_validation_enforced)


def _per_cluster_get(attr: str) -> Callable[[Policies, PolicyScope], object]:
    def get(policies: Policies, scope: PolicyScope) -> object:
        rate = getattr(policies, attr).get(scope.cluster)
        return rate.to_json() if rate is not None else None

    return get


def _per_cluster_set(
    attr: str, parse: Callable[[object], PublishRate | DispatchRate]
) -> Callable[[Policies, object, PolicyScope], Policies]:
    def set_(policies: Policies, body: object, scope: PolicyScope) -> Policies:
        rates = {**getattr(policies, attr), scope.cluster: parse(body)}
        return policies.with_(**{attr: rates})

    return set_


def _per_cluster_remove(attr: str) -> Callable[[Policies, PolicyScope], Policies]:
    def remove(policies: Policies, scope: PolicyScope) -> Policies:
        rates = {c: r for c, r in getattr(policies, attr).items() if c != scope.cluster}
        return policies.with_(**{attr: rates})

    return remove


@dataclass(frozen=True)
class PolicyEndpoint:
    """One policy of a namespace: what GET answers (None: unset, 204), what a POST body
    makes of the policies (raising ``InvalidPolicyError`` or ``RestError`` before anything
    is stored), what DELETE leaves."""

    path: str
    get: Callable[[Policies, PolicyScope], object]
    set: Callable[[Policies, object, PolicyScope], Policies] | None = None
    remove: Callable[[Policies, PolicyScope], Policies] | None = None
    set_method: str = "POST"  # Pulsar's method for the change (PUT for a few)


def _limit_endpoint(limit: Limit) -> PolicyEndpoint:
    """A count limit's endpoint (``maxProducersPerTopic``...): a bare integer, 0 or more."""
    what = limit.names.namespace_path

    def set_limit(policies: Policies, body: object, scope: PolicyScope) -> Policies:
        return policies.with_(limits={**policies.limits, limit: parse_limit(body, what)})

    def remove_limit(policies: Policies, scope: PolicyScope) -> Policies:
        return policies.with_(limits={k: v for k, v in policies.limits.items() if k is not limit})

    return PolicyEndpoint(what, lambda p, s: p.limits.get(limit), set_limit, remove_limit)


def _record_endpoint(
    path: str, attr: str, parse: Callable[[object, PolicyScope], Any]
) -> PolicyEndpoint:
    """The endpoint of a policy that is one record of ``Policies`` (None while unset): GET
    answers its JSON, POST parses the body into it, DELETE unsets it."""

    def get(policies: Policies, scope: PolicyScope) -> object:
        record = getattr(policies, attr)
        return record.to_json() if record is not None else None

    return PolicyEndpoint(
        path,
        get,
        lambda p, body, s: p.with_(**{attr: parse(body, s)}),
        lambda p, s: p.with_(**{attr: None}),
    )


POLICY_ENDPOINTS = (
    *(_limit_endpoint(limit) for limit in Limit),
    PolicyEndpoint(
        "retention",
        lambda p, s: p.retention.to_json() if p.retention else None,
        _set_retention,
        lambda p, s: p.with_(retention=None),
    ),
    PolicyEndpoint(
        "messageTTL",
        lambda p, s: p.message_ttl_in_seconds,
        lambda p, body, s: p.with_(message_ttl_in_seconds=parse_int(body, "message TTL")),
        lambda p, s: p.with_(message_ttl_in_seconds=None),
    ),
    PolicyEndpoint(
        "subscriptionExpirationTime",
        lambda p, s: p.subscription_expiration_time_minutes,
        lambda p, body, s: p.with_(
            subscription_expiration_time_minutes=parse_int(
                body, "subscription expiration time", low=0
            )
        ),
        lambda p, s: p.with_(subscription_expiration_time_minutes=None),
    ),
    PolicyEndpoint("backlogQuota", _get_backlog_quota, _set_backlog_quota, _remove_backlog_quota),
    PolicyEndpoint(
        "backlogQuotaMap",
        lambda p, s: {t.value: q.to_json() for t, q in p.backlog_quotas.items()},
    ),
    PolicyEndpoint(
        "deduplication",
        lambda p, s: p.deduplication_enabled,
        lambda p, body, s: p.with_(deduplication_enabled=parse_bool(body, "deduplication")),
        lambda p, s: p.with_(deduplication_enabled=None),
    ),
    PolicyEndpoint(
        "publishRate",
        _per_cluster_get("publish_rates"),
        _per_cluster_set("publish_rates", PublishRate.parse),
        _per_cluster_remove("publish_rates"),
    ),
    PolicyEndpoint(
        "dispatchRate",
        _per_cluster_get("dispatch_rates"),
        _per_cluster_set("dispatch_rates", DispatchRate.parse),
        _per_cluster_remove("dispatch_rates"),
    ),
    PolicyEndpoint(
        "subscriptionDispatchRate",
        _per_cluster_get("subscription_dispatch_rates"),
        _per_cluster_set("subscription_dispatch_rates", DispatchRate.parse),
        _per_cluster_remove("subscription_dispatch_rates"),
    ),
    PolicyEndpoint(
        "schemaCompatibilityStrategy",
        lambda p, s: p.schema_compatibility_strategy.value,  # "UNDEFINED" while unset
        lambda p, body, s: p.with_(schema_compatibility_strategy=parse_schema_strategy(body)),
        lambda p, s: p.with_(schema_compatibility_strategy=CompatibilityStrategy.UNDEFINED),
        set_method="PUT",
    ),
    PolicyEndpoint(
        "isAllowAutoUpdateSchema",
        lambda p, s: (
            p.is_allow_auto_update_schema
            if p.is_allow_auto_update_schema is not None
            else s.allow_auto_update_schema
        ),
        lambda p, body, s: p.with_(
            is_allow_auto_update_schema=parse_bool(body, "isAllowAutoUpdateSchema")
        ),
        lambda p, s: p.with_(is_allow_auto_update_schema=None),
    ),
    PolicyEndpoint(
        "schemaValidationEnforced",
        _get_schema_validation_enforced,
        lambda p, body, s: p.with_(
            schema_validation_enforced=parse_bool(body, "schemaValidationEnforced")
        ),
        lambda p, s: p.with_(schema_validation_enforced=False),
    ),
    PolicyEndpoint(
        "compactionThreshold",
        lambda p, s: p.compaction_threshold,
        lambda p, body, s: p.with_(compaction_threshold=parse_compaction_threshold(body)),
        lambda p, s: p.with_(compaction_threshold=None),
        set_method="PUT",
    ),
    _record_endpoint(
        "persistence",
        "persistence",
        lambda body, s: PersistencePolicies.parse(body, s.quorum_bounds),
    ),
    _record_endpoint(
        "delayedDelivery", "delayed_delivery", lambda body, s: DelayedDeliveryPolicies.parse(body)
    ),
    PolicyEndpoint(
        "subscriptionTypesEnabled",
        lambda p, s: list(p.subscription_types_enabled),  # [] while unset, as Pulsar
        lambda p, body, s: p.with_(subscription_types_enabled=parse_subscription_types(body)),
        lambda p, s: p.with_(subscription_types_enabled=()),
    ),
    _record_endpoint(
        "inactiveTopicPolicies",
        "inactive_topic_policies",
        lambda body, s: InactiveTopicPolicies.parse(body),
    ),
    PolicyEndpoint(
        "maxTopicsPerNamespace",
        lambda p, s: p.max_topics_per_namespace,
        lambda p, body, s: p.with_(
            max_topics_per_namespace=parse_limit(body, "maxTopicsPerNamespace")
        ),
        lambda p, s: p.with_(max_topics_per_namespace=None),
    ),
    PolicyEndpoint(  # no DELETE in Pulsar: set it false
        "encryptionRequired",
        lambda p, s: p.encryption_required,
        lambda p, body, s: p.with_(encryption_required=parse_bool(body, "encryptionRequired")),
    ),
    _record_endpoint(
        "autoTopicCreation",
        "auto_topic_creation",
        lambda body, s: _parse_auto_topic_creation(body),
    ),
)


def policies_for_new_namespace(body: object, cluster: str) -> Policies:
    """The policies of a namespace made with ``body`` (None: the defaults), replicated to
    ``cluster`` unless the body names clusters. Java's ``Policies`` writes ``"bundles":
    null`` or ``numBundles: 0`` for "the default", and may give only the boundaries."""
    if body is None:
        return Policies(replication_clusters=(cluster,))
    if not isinstance(body, Mapping):
        raise RestError(400, "the namespace policies must be a JSON object")
    doc: dict[str, Any] = dict(body)
    bundles = doc.get("bundles")
    if isinstance(bundles, Mapping):
        count = bundles.get("numBundles")
        boundaries = bundles.get("boundaries")
        if not count and isinstance(boundaries, list) and len(boundaries) >= 2:
            count = len(boundaries) - 1
        bundles = count
    if bundles is None or bundles == 0:
        doc.pop("bundles", None)
    else:
        doc["bundles"] = bundles
    policies = Policies.from_json(doc)
    if not policies.replication_clusters:
        policies = policies.with_(replication_clusters=(cluster,))
    return policies


# --------------------------------------------------------------------------- I/O helpers


async def update_policies(
    ctx: AdminContext, namespace: str, change: Callable[[Policies], Policies]
) -> None:
    """Apply ``change`` to the namespace's policies by compare-and-set (``compare_and_set``)."""
    try:
        await compare_and_set(
            lambda: read_policies(ctx.store, namespace),
            lambda policies, version: write_policies(ctx.store, namespace, policies, version),
            change,
        )
    except NotFoundError:
        raise not_found("Namespace does not exist") from None
    log.info("policies of %s changed", namespace)


async def compare_and_set(
    read: Callable[[], Awaitable[tuple[P, int]]],
    write: Callable[[P, int], Awaitable[None]],
    change: Callable[[P], P],
) -> None:
    """Apply ``change`` to a policy document by compare-and-set: read again and retried
    when another writer got there first (``BadVersionError``), with jittered back-off up
    to ``POLICY_WRITE_DEADLINE_S``, then 409. An error ``change`` raises leaves it as it
    was; an unchanged document is not written."""
    initial, maximum = POLICY_WRITE_BACKOFF_S
    backoff = Backoff(initial, maximum, deadline=POLICY_WRITE_DEADLINE_S, jitter=True)
    while not backoff.expired:
        document, version = await read()
        changed = change(document)
        if changed == document:
            return
        try:
            await write(changed, version)
        except BadVersionError:
            await backoff.sleep()
            continue
        return
    raise conflict("Concurrent modification")


async def unload_bundle(ctx: AdminContext, bundle: Bundle, forwarder: Forwarder) -> None:
    """Unload ``bundle`` wherever it is served (nothing if nobody owns it)."""
    service = ctx.service
    owner = await service.ownership.owner_info(bundle)
    if owner is None:
        return
    if owner.service_url == service.service_url:
        await service.unload(bundle)
        return
    await forwarder.call("PUT", f"{_web_url_of(owner, bundle)}{BASE}/{bundle_path(bundle)}/unload")


def _web_url_of(owner: BrokerInfo, bundle: Bundle) -> str:
    if not owner.web_url:
        raise RestError(500, f"the owner of {bundle.namespace}/{bundle.name} has no web URL")
    return owner.web_url.rstrip("/")


def bundle_path(bundle: Bundle) -> str:
    """``tenant/ns/<range>``: the bundle in the namespaces resource's paths."""
    return f"{bundle.namespace}/{bundle.name}"


async def unload_namespace(ctx: AdminContext, namespace: str) -> None:
    """Unload every bundle of the namespace that some broker owns."""
    bundles = await owned_bundles(ctx, namespace)
    if not bundles:
        return
    async with Forwarder() as forwarder:
        for bundle in bundles:
            await unload_bundle(ctx, bundle, forwarder)


async def delete_topics(ctx: AdminContext, namespace: str) -> None:
    """Delete every topic of the namespace through the topics resource of this broker
    (which redirects to the owners), partitioned topics first."""
    tenant, _, local_ns = namespace.partition("/")
    topics, partitioned = await stored_topics(ctx.store, namespace)
    async with Forwarder() as forwarder:
        for local in partitioned:
            topic = TopicName("persistent", tenant, local_ns, local)
            await _delete_quietly(forwarder, topic_url(ctx.web_url, topic, "/partitions"))
        for local in topics:
            topic = TopicName("persistent", tenant, local_ns, local)
            if topic.partition_index >= 0 and topic.partitioned_topic.local_name in partitioned:
                continue  # went with its partitioned topic
            await _delete_quietly(forwarder, topic_url(ctx.web_url, topic))
        # Partitions left behind by a partitioned topic whose deletion skipped them.
        leftover, _ = await stored_topics(ctx.store, namespace)
        for local in leftover:
            topic = TopicName("persistent", tenant, local_ns, local)
            await _delete_quietly(forwarder, topic_url(ctx.web_url, topic))


async def _delete_quietly(forwarder: Forwarder, url: str) -> None:
    try:
        await forwarder.call("DELETE", url, query={"force": "true"})
    except RestError as exc:
        if exc.status != 404:  # gone meanwhile
            raise


async def delete_namespace_fully(ctx: AdminContext, namespace: str, *, force: bool) -> None:
    """Delete a namespace: refused (409) while it has topics unless ``force``, which
    deletes them first; its bundles are unloaded before its policies go."""
    await read_policies(ctx.store, namespace)  # 404 first
    if force:
        await delete_topics(ctx, namespace)
    topics, partitioned = await stored_topics(ctx.store, namespace)
    if topics or partitioned:
        raise NamespaceNotEmptyError("Cannot delete non empty namespace")
    await unload_namespace(ctx, namespace)
    await delete_namespace(ctx.store, namespace)


async def namespace_topics(ctx: AdminContext, namespace: str) -> list[str]:
    """The namespace's persistent topics as Pulsar lists them: every topic made, and every
    partition of its partitioned topics (made or not yet)."""
    tenant, _, local_ns = namespace.partition("/")
    topics, partitioned = await stored_topics(ctx.store, namespace)
    names = {str(TopicName("persistent", tenant, local_ns, local)) for local in topics}
    for local in partitioned:
        topic = TopicName("persistent", tenant, local_ns, local)
        count = await partition_count(ctx.store, topic)
        names.update(str(topic.partition(i)) for i in range(count))
    return sorted(names)


# ------------------------------------------------------------- per-bundle subscription work
# Clear-backlog and unsubscribe act, as in Pulsar, on the bundles some broker serves: each
# owner on its own bundles' topics (``.../{bundle}/clearBacklog``, ``.../{bundle}/unsubscribe``
# asked of it); a bundle nobody owns has no topic loaded, and is left alone.


async def clear_backlog_of(topic: PersistentTopic, subscription: str | None) -> None:
    """Every (or that) subscription of a topic served here skips all its messages."""
    names = [subscription] if subscription is not None else topic.subscription_names()
    cleared = []
    for name in names:
        found = await topic.subscription(name)
        if found is not None:
            await found.clear_backlog()
            cleared.append(name)
    if cleared:
        log.info("[%s] cleared the backlog of %s", topic.name, ", ".join(cleared))


async def unsubscribe_from(topic: PersistentTopic, subscription: str | None) -> None:
    """Delete the subscription from a topic served here, if it has it (412 while it has
    consumers, as Pulsar's namespace unsubscribe refuses them)."""
    if subscription is not None and await topic.subscription(subscription) is not None:
        await topic.remove_subscription(subscription)
        log.info("[%s] unsubscribed %s", topic.name, subscription)


@dataclass(frozen=True)
class BundleWork:
    """What a namespace's ``path`` (``clearBacklog``, ``unsubscribe``) does to each topic."""

    path: str
    apply: Callable[[PersistentTopic, str | None], Awaitable[None]]


CLEAR_BACKLOG = BundleWork("clearBacklog", clear_backlog_of)
UNSUBSCRIBE = BundleWork("unsubscribe", unsubscribe_from)


async def work_on_bundle_here(
    ctx: AdminContext, bundle: Bundle, work: BundleWork, subscription: str | None
) -> None:
    """``work`` on each topic of ``bundle``, which this broker serves."""
    tenant, _, local_ns = bundle.namespace.partition("/")
    topics, _ = await stored_topics(ctx.store, bundle.namespace)
    for local in topics:
        topic = TopicName("persistent", tenant, local_ns, local)
        if bundle.contains(topic):
            await work.apply(await ctx.service.get_topic(topic), subscription)


async def work_on_namespace(
    ctx: AdminContext, namespace: str, work: BundleWork, subscription: str | None
) -> None:
    """``work`` on every bundle of the namespace that a broker serves: here, or asked of
    its owner through its bundle resource."""
    service = ctx.service
    suffix = f"/{quote(subscription, safe='')}" if subscription is not None else ""
    async with Forwarder() as forwarder:
        for bundle in await owned_bundles(ctx, namespace):
            owner = await service.ownership.owner_info(bundle)
            if owner is None:
                continue  # released meanwhile: nothing of it is loaded
            if owner.service_url == service.service_url:
                await work_on_bundle_here(ctx, bundle, work, subscription)
            else:
                url = f"{_web_url_of(owner, bundle)}{BASE}/{bundle_path(bundle)}/{work.path}"
                await forwarder.call("POST", url + suffix)


# --------------------------------------------------------------------------- routes


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    """Add the namespaces resource's routes to ``router``."""

    async def get_namespaces(request: web.Request) -> web.Response:
        return ok_json(await list_namespaces(ctx.store, name_in_path(request, "tenant")))

    async def create(request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        policies = policies_for_new_namespace(await read_json(request, required=False), ctx.cluster)
        tenant = namespace.partition("/")[0]
        info, _ = await read_tenant(ctx.store, tenant)  # 404 "Tenant does not exist"
        for cluster in policies.replication_clusters:
            if info.allowed_clusters and cluster not in info.allowed_clusters:
                raise RestError(
                    403,
                    f"Cluster [{cluster}] is not in the list of allowed clusters list "
                    f"for tenant [{tenant}]",
                )
            if not await cluster_exists(ctx.store, cluster):
                raise precondition_failed(f"Cluster {cluster} does not exist.")
        try:
            await create_namespace(ctx.store, namespace, policies=policies)
        except NodeExistsError:
            raise conflict("Namespace already exists") from None
        return no_content()

    async def get_policies(request: web.Request) -> web.Response:
        policies, _ = await read_policies(ctx.store, namespace_of(request))
        return ok_json(policies.to_json())

    async def delete(request: web.Request) -> web.Response:
        await delete_namespace_fully(ctx, namespace_of(request), force=flag(request, "force"))
        return no_content()

    async def get_topics(request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        await read_policies(ctx.store, namespace)
        return ok_json(await namespace_topics(ctx, namespace))

    async def get_permissions(request: web.Request) -> web.Response:
        policies, _ = await read_policies(ctx.store, namespace_of(request))
        return ok_json({role: list(actions) for role, actions in policies.namespace_auth.items()})

    async def grant_permission(request: web.Request) -> web.Response:
        role = request.match_info["role"]
        try:
            actions = parse_actions(await read_json(request))
        except ValueError as exc:
            raise precondition_failed(str(exc)) from None
        await update_policies(
            ctx,
            namespace_of(request),
            lambda p: p.with_(namespace_auth={**p.namespace_auth, role: actions}),
        )
        log.info("granted %s on %s to role %s", actions, namespace_of(request), role)
        return no_content()

    async def revoke_permission(request: web.Request) -> web.Response:
        role = request.match_info["role"]
        await update_policies(
            ctx,
            namespace_of(request),
            lambda p: p.with_(
                namespace_auth={r: a for r, a in p.namespace_auth.items() if r != role}
            ),
        )
        log.info("revoked the permissions of role %s on %s", role, namespace_of(request))
        return no_content()

    async def unload(request: web.Request) -> web.Response:
        namespace = namespace_of(request)
        await read_policies(ctx.store, namespace)
        await unload_namespace(ctx, namespace)
        return no_content()

    async def known_bundle(request: web.Request) -> Bundle:
        """The path's bundle, 412 unless it is one of the namespace's."""
        namespace = namespace_of(request)
        policies, _ = await read_policies(ctx.store, namespace)
        bundle = parse_bundle(namespace, request.match_info["bundle"])
        known = set(policy_bundles(namespace, policies)) | set(await owned_bundles(ctx, namespace))
        if bundle not in known:
            raise precondition_failed(
                f"Bundle {request.match_info['bundle']} is not a bundle of {namespace}"
            )
        return bundle

    async def served_here(request: web.Request, bundle: Bundle) -> bool:
        """Whether this broker serves ``bundle`` (307 to the owner if another does; False
        if nobody owns it)."""
        service = ctx.service
        owner = await service.ownership.owner_info(bundle)
        if owner is None:
            return False
        if owner.service_url != service.service_url:
            _web_url_of(owner, bundle)  # 500 when it has none
            raise redirect_to_broker(owner, request)
        return True

    async def unload_one(request: web.Request) -> web.Response:
        bundle = await known_bundle(request)
        if await served_here(request, bundle):
            await ctx.service.unload(bundle)
        return no_content()

    def on_namespace(work: BundleWork) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            namespace = namespace_of(request)
            await read_policies(ctx.store, namespace)
            subscription = request.match_info.get("subscription")
            await work_on_namespace(ctx, namespace, work, subscription)
            return no_content()

        return handle

    def on_bundle(work: BundleWork) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            bundle = await known_bundle(request)
            if await served_here(request, bundle):
                subscription = request.match_info.get("subscription")
                await work_on_bundle_here(ctx, bundle, work, subscription)
            return no_content()

        return handle

    router.add_get(f"{BASE}/{{tenant}}", get_namespaces)
    router.add_put(NS, create)
    router.add_get(NS, get_policies)
    router.add_delete(NS, delete)
    router.add_get(f"{NS}/topics", get_topics)
    router.add_put(f"{NS}/unload", unload)
    router.add_post(f"{NS}/clearBacklog", on_namespace(CLEAR_BACKLOG))
    router.add_post(f"{NS}/clearBacklog/{{subscription}}", on_namespace(CLEAR_BACKLOG))
    router.add_post(f"{NS}/unsubscribe/{{subscription}}", on_namespace(UNSUBSCRIBE))
    router.add_get(f"{NS}/permissions", get_permissions)
    router.add_post(f"{NS}/permissions/{{role}}", grant_permission)
    router.add_delete(f"{NS}/permissions/{{role}}", revoke_permission)
    for endpoint in POLICY_ENDPOINTS:
        _add_policy_routes(router, ctx, endpoint)
    router.add_put(f"{NS}/{{bundle}}/unload", unload_one)
    router.add_post(f"{NS}/{{bundle}}/clearBacklog", on_bundle(CLEAR_BACKLOG))
    router.add_post(f"{NS}/{{bundle}}/clearBacklog/{{subscription}}", on_bundle(CLEAR_BACKLOG))
    router.add_post(f"{NS}/{{bundle}}/unsubscribe/{{subscription}}", on_bundle(UNSUBSCRIBE))


def policy_scope(ctx: AdminContext, request: web.Request) -> PolicyScope:
    """What a policy request applies to: this broker's cluster and defaults, its query."""
    config = ctx.config
    return PolicyScope(
        ctx.cluster,
        request.query,
        allow_auto_update_schema=config.is_allow_auto_update_schema_enabled,
        schema_validation_enforced=config.is_schema_validation_enforced,
        quorum_bounds=config.quorum_bounds(),
    )


def _add_policy_routes(router: web.UrlDispatcher, ctx: AdminContext, ep: PolicyEndpoint) -> None:
    path = f"{NS}/{ep.path}"

    def scope(request: web.Request) -> PolicyScope:
        return policy_scope(ctx, request)

    async def get(request: web.Request) -> web.Response:
        policies, _ = await read_policies(ctx.store, namespace_of(request))
        return ok_json(ep.get(policies, scope(request)))

    router.add_get(path, get)
    setter, remover = ep.set, ep.remove
    if setter is not None:

        async def post(request: web.Request) -> web.Response:
            namespace = namespace_of(request)
            body = await read_json(request)
            where = scope(request)
            await update_policies(ctx, namespace, lambda p: setter(p, body, where))
            return no_content()

        router.add_route(ep.set_method, path, post)
    if remover is not None:

        async def delete(request: web.Request) -> web.Response:
            namespace = namespace_of(request)
            where = scope(request)
            await update_policies(ctx, namespace, lambda p: remover(p, where))
            return no_content()

        router.add_delete(path, delete)
