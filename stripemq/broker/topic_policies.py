"""Topic-level policies: what one topic sets over its namespace's policies.

A topic's policies are one JSON document at ``/stripemq/topic-policies/<tenant>/<ns>/<topic>``
(the partitioned topic's for a partition, so every partition obeys them), with the field
names of Pulsar's ``TopicPolicies`` (``retentionPolicies``, ``messageTTLInSeconds``,
``backLogQuotaMap``, ``deduplicationEnabled``, ``publishRate``, ``dispatchRate``,
``subscriptionDispatchRate``, ``schemaCompatibilityStrategy``, ``schemaValidationEnforced``,
``compactionThreshold``, ``persistence``, ``delayedDelivery*``,
``subscriptionTypesEnabled``, ``inactiveTopicPolicies``, the limits).
A policy the topic leaves unset is the namespace's, else the broker's (``over``). Pulsar
keeps these in a system topic of the namespace (``__change_events``); here they are a node
of the metadata store, watched by the broker serving the topic as namespace policies are.

``TopicLevelPolicies`` and its JSON are sans-IO; reading and writing the node (with a
compare-and-set, as namespace policies are written) are at the bottom.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from stripemq.broker.namespace_policies import PolicyCache
from stripemq.broker.namespaces import TOPIC_POLICIES, encode_doc, read_doc
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
    limits_from_json,
    limits_to_json,
    parse_backlog_quota_type,
    parse_bool,
    parse_compaction_threshold,
    parse_int,
    parse_schema_strategy,
    parse_subscription_types,
    stored_persistence,
)
from stripemq.broker.schema.types import CompatibilityStrategy
from stripemq.errors import BadVersionError, NodeExistsError, NotFoundError
from stripemq.metadata import MetadataStore
from stripemq.metadata.api import ANY_VERSION
from stripemq.proto.topic_name import TopicName
from stripemq.topic_limits import Limit

log = logging.getLogger(__name__)

ROOT = TOPIC_POLICIES


@dataclass(frozen=True)
class TopicLevelPolicies:
    """A topic's own policies (``None`` or empty: the namespace's apply)."""

    retention: RetentionPolicies | None = None
    message_ttl_in_seconds: int | None = None
    backlog_quotas: Mapping[BacklogQuotaType, BacklogQuota] = field(default_factory=dict)
    deduplication_enabled: bool | None = None
    publish_rate: PublishRate | None = None
    dispatch_rate: DispatchRate | None = None
    subscription_dispatch_rate: DispatchRate | None = None
    schema_compatibility_strategy: CompatibilityStrategy | None = None
    schema_validation_enforced: bool | None = None
    compaction_threshold: int | None = None
    limits: Mapping[Limit, int] = field(default_factory=dict)  # set ones only
    persistence: PersistencePolicies | None = None
    delayed_delivery: DelayedDeliveryPolicies | None = None
    subscription_types_enabled: tuple[str, ...] | None = None
    inactive_topic_policies: InactiveTopicPolicies | None = None

    def with_(self, **changes: Any) -> TopicLevelPolicies:
        return dataclasses.replace(self, **changes)

    def over(self, namespace: Policies, cluster: str) -> Policies:
        """The namespace's policies with this topic's set over them (rates for
        ``cluster``, as the namespace keeps them per cluster)."""
        changes: dict[str, Any] = {
            "backlog_quotas": {**namespace.backlog_quotas, **self.backlog_quotas},
            "limits": {**namespace.limits, **self.limits},
        }
        if self.retention is not None:
            changes["retention"] = self.retention
        if self.message_ttl_in_seconds is not None:
            changes["message_ttl_in_seconds"] = self.message_ttl_in_seconds
        if self.deduplication_enabled is not None:
            changes["deduplication_enabled"] = self.deduplication_enabled
        for name, rates in (
            ("publish_rate", "publish_rates"),
            ("dispatch_rate", "dispatch_rates"),
            ("subscription_dispatch_rate", "subscription_dispatch_rates"),
        ):
            rate = getattr(self, name)
            if rate is not None:
                changes[rates] = {**getattr(namespace, rates), cluster: rate}
        if self.schema_compatibility_strategy is not None:
            changes["schema_compatibility_strategy"] = self.schema_compatibility_strategy
        if self.schema_validation_enforced is not None:
            changes["schema_validation_enforced"] = self.schema_validation_enforced
        if self.compaction_threshold is not None:
            changes["compaction_threshold"] = self.compaction_threshold
        if self.persistence is not None:
            changes["persistence"] = self.persistence
        if self.delayed_delivery is not None:
            changes["delayed_delivery"] = self.delayed_delivery
        if self.subscription_types_enabled:
            changes["subscription_types_enabled"] = self.subscription_types_enabled
        if self.inactive_topic_policies is not None:
            changes["inactive_topic_policies"] = self.inactive_topic_policies
        return namespace.with_(**changes)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.retention is not None:
            doc["retentionPolicies"] = self.retention.to_json()
        if self.message_ttl_in_seconds is not None:
            doc["messageTTLInSeconds"] = self.message_ttl_in_seconds
        if self.backlog_quotas:
            doc["backLogQuotaMap"] = {t.value: q.to_json() for t, q in self.backlog_quotas.items()}
        if self.deduplication_enabled is not None:
            doc["deduplicationEnabled"] = self.deduplication_enabled
        for key, rate in (
            ("publishRate", self.publish_rate),
            ("dispatchRate", self.dispatch_rate),
            ("subscriptionDispatchRate", self.subscription_dispatch_rate),
        ):
            if rate is not None:
                doc[key] = rate.to_json()
        if self.schema_compatibility_strategy is not None:
            doc["schemaCompatibilityStrategy"] = self.schema_compatibility_strategy.value
        if self.schema_validation_enforced is not None:
            doc["schemaValidationEnforced"] = self.schema_validation_enforced
        if self.compaction_threshold is not None:
            doc["compactionThreshold"] = self.compaction_threshold
        if self.persistence is not None:
            doc["persistence"] = self.persistence.to_json()
        if self.subscription_types_enabled is not None:
            doc["subscriptionTypesEnabled"] = list(self.subscription_types_enabled)
        if self.inactive_topic_policies is not None:
            doc["inactiveTopicPolicies"] = self.inactive_topic_policies.to_json()
        if self.delayed_delivery is not None:  # three fields, as Pulsar's TopicPolicies
            doc["delayedDeliveryEnabled"] = self.delayed_delivery.active
            doc["delayedDeliveryTickTimeMillis"] = self.delayed_delivery.tick_time
            doc["delayedDeliveryMaxDelayInMillis"] = (
                self.delayed_delivery.max_delivery_delay_in_millis
            )
        doc.update(
            (field, value)
            for field, value in limits_to_json(self.limits, "topic_field").items()
            if value is not None
        )
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TopicLevelPolicies:
        """Raises ``InvalidPolicyError`` for a document no admin call could have written."""

        def optional(key: str, parse: Any) -> Any:
            value = doc.get(key)
            return parse(value) if value is not None else None

        quotas = doc.get("backLogQuotaMap") or {}
        if not isinstance(quotas, Mapping):
            raise InvalidPolicyError("backLogQuotaMap must be an object")
        return cls(
            retention=optional("retentionPolicies", RetentionPolicies.parse),
            message_ttl_in_seconds=optional(
                "messageTTLInSeconds", lambda v: parse_int(v, "messageTTL")
            ),
            backlog_quotas={
                parse_backlog_quota_type(t): BacklogQuota.parse(q) for t, q in quotas.items()
            },
            deduplication_enabled=optional(
                "deduplicationEnabled", lambda v: parse_bool(v, "deduplicationEnabled")
            ),
            publish_rate=optional("publishRate", PublishRate.parse),
            dispatch_rate=optional("dispatchRate", DispatchRate.parse),
            subscription_dispatch_rate=optional("subscriptionDispatchRate", DispatchRate.parse),
            schema_compatibility_strategy=optional("schemaCompatibilityStrategy", topic_strategy),
            schema_validation_enforced=optional(
                "schemaValidationEnforced", lambda v: parse_bool(v, "schemaValidationEnforced")
            ),
            compaction_threshold=optional("compactionThreshold", parse_compaction_threshold),
            limits=limits_from_json(doc, "topic_field"),
            persistence=optional("persistence", stored_persistence),
            delayed_delivery=_delayed_delivery_from(doc),
            subscription_types_enabled=optional(
                "subscriptionTypesEnabled", parse_subscription_types
            ),
            inactive_topic_policies=optional("inactiveTopicPolicies", InactiveTopicPolicies.parse),
        )


def _delayed_delivery_from(doc: Mapping[str, Any]) -> DelayedDeliveryPolicies | None:
    """A topic's delayed delivery from its three TopicPolicies fields (none set: None)."""
    fields = {
        "active": doc.get("delayedDeliveryEnabled"),
        "tickTime": doc.get("delayedDeliveryTickTimeMillis"),
        "maxDeliveryDelayInMillis": doc.get("delayedDeliveryMaxDelayInMillis"),
    }
    if all(value is None for value in fields.values()):
        return None
    default = DelayedDeliveryPolicies().to_json()  # a field left out is not "off"
    return DelayedDeliveryPolicies.parse(
        {key: default[key] if value is None else value for key, value in fields.items()}
    )


def topic_strategy(body: object) -> CompatibilityStrategy | None:
    """A topic's schema compatibility strategy; UNDEFINED is none (the namespace's
    applies), as Pulsar takes it."""
    strategy = parse_schema_strategy(body)
    return None if strategy is CompatibilityStrategy.UNDEFINED else strategy


def topic_policies_key(topic: TopicName) -> str:
    """The key a topic's policies are kept under: its partitioned topic's."""
    base = topic.partitioned_topic
    return f"{base.tenant}/{base.namespace}/{quote(base.local_name, safe='')}"


def topic_policies_path(key: str) -> str:
    return f"{ROOT}/{key}"


async def delete_topic_policies(store: MetadataStore, topic: TopicName) -> None:
    """Forget a deleted topic's policies (nothing if it set none)."""
    await store.delete_recursive(topic_policies_path(topic_policies_key(topic)))


async def read_topic_policies(
    store: MetadataStore, key: str, *, repair: bool = False
) -> tuple[TopicLevelPolicies, int]:
    """A topic's policies and their node's version (``ANY_VERSION``: no node yet, none set).

    Raises ``InvalidPolicyError`` for a document that is not one; with ``repair`` (a
    change that is to be written over it) such a document reads as none set, logged."""
    found = await read_doc(store, topic_policies_path(key))
    if found is None:
        return TopicLevelPolicies(), ANY_VERSION
    doc, version = found
    try:
        if doc is None:
            raise InvalidPolicyError(f"policies of {key} are not a JSON object")
        return TopicLevelPolicies.from_json(doc), version
    except InvalidPolicyError as exc:
        if not repair:
            raise
        log.warning("[%s] unreadable topic policies (%s): written over", key, exc)
        return TopicLevelPolicies(), version


async def write_topic_policies(
    store: MetadataStore, key: str, policies: TopicLevelPolicies, expected_version: int
) -> None:
    """Store a topic's policies if nobody changed them since ``expected_version``
    (``ANY_VERSION``: there was no node). Raises ``BadVersionError`` otherwise."""
    path, data = topic_policies_path(key), encode_doc(policies.to_json())
    if expected_version != ANY_VERSION:
        try:
            await store.put(path, data, expected_version)
        except NotFoundError:  # deleted since it was read (its topic was): read again
            raise BadVersionError(f"{path} was deleted meanwhile") from None
        return
    try:
        await store.create(path, data)
    except NodeExistsError:
        raise BadVersionError(f"{path} was made meanwhile") from None


class TopicPolicyCache(PolicyCache[TopicLevelPolicies]):
    """Each served topic's own policies (by ``topic_policies_key``), watched while it is
    served here; a removed node means none are set, applied at once. A document that
    cannot be read sets nothing (and is logged): the namespace's policies apply."""

    refresh_on_delete = True

    def path(self, key: str) -> str:
        return topic_policies_path(key)

    async def _read(self, key: str) -> TopicLevelPolicies:
        try:
            policies, _version = await read_topic_policies(self.store, key)
        except InvalidPolicyError as exc:
            log.warning("[%s] unreadable topic policies (%s): none apply", key, exc)
            return TopicLevelPolicies()
        return policies
