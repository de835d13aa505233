"""Namespace policies: the records, their JSON (Pulsar's ``Policies`` names) and validation.

A namespace's policies are one JSON document at ``/stripemq/policies/<tenant>/<namespace>``,
written by the admin API and watched by every broker. The document uses Pulsar's field
names (``retention_policies``, ``message_ttl_in_seconds``, ``backlog_quota_map``,
``deduplicationEnabled``, ``publishMaxMessageRate``, ``clusterDispatchRate``,
``subscriptionDispatchRate``, ``autoTopicCreationOverride``, ``bundles``,
``schema_compatibility_strategy``, ``is_allow_auto_update_schema``,
``schema_validation_enforced``, ``persistence``, ``delayed_delivery_policies``,
``subscription_types_enabled``, ``encryption_required``, ``inactive_topic_policies``,
the ``max_*`` limits), so what
``GET /admin/v2/namespaces/{tenant}/{ns}`` answers is the stored document. Rates are kept
per cluster, as Pulsar keeps them; a broker applies its own cluster's.

Everything here is sans-IO: parsing a request body (``*.parse``) checks types and bounds
and raises ``InvalidPolicyError`` naming the field, before anything is stored. A field a
body leaves out takes the default of Pulsar's DTO (-1, "no limit", for rates and quotas;
0 for retention; ``false`` for ``allowAutoTopicCreation``), as Jackson leaves it. A policy
left unset (``None``) means the broker's default applies.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from stripemq.broker.ownership import DEFAULT_BUNDLES, FULL_RANGE
from stripemq.broker.partitions import MAX_PARTITIONS
from stripemq.broker.schema.types import CompatibilityStrategy
from stripemq.errors import StripeMQError
from stripemq.managed_ledger.config import LedgerPersistence
from stripemq.subscription_types import SUBSCRIPTION_TYPES, subscription_type_named
from stripemq.topic_limits import Limit

MAX_BUNDLES = 1024
# Bounds that keep a mistyped figure from meaning "for ever" by overflow.
MAX_INT = (1 << 31) - 1  # a Java int (Pulsar's minutes, seconds and message rates)
MAX_LONG = (1 << 63) - 1  # a Java long (Pulsar's byte counts)


class InvalidPolicyError(StripeMQError, ValueError):
    """A policy body of the wrong shape or out of bounds; the admin API answers 412 (400
    for a body that is not JSON at all) and stores nothing."""


def _int(
    body: Mapping[str, Any], key: str, default: int, *, low: int = -1, high: int = MAX_INT
) -> int:
    """``body[key]``, ``default`` when it is left out (or null, as Jackson reads it)."""
    value = body.get(key)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPolicyError(f"{key} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise InvalidPolicyError(f"{key} must be in {low}..{high}, not {value}")
    return value


M = TypeVar("M", bound=enum.Enum)


def _member(kind: type[M], raw: object, what: str) -> M:
    """The member of ``kind`` whose value ``raw`` is; ``InvalidPolicyError`` naming the
    choices otherwise."""
    try:
        return kind(raw)
    except ValueError:
        choices = ", ".join(str(member.value) for member in kind)
        raise InvalidPolicyError(f"{what} must be one of {choices}, not {_shown(raw)}") from None


def _object(body: object, what: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise InvalidPolicyError(f"{what} must be a JSON object, not {type(body).__name__}")
    return body


def parse_int(body: object, what: str, *, low: int = 0, high: int = MAX_INT) -> int:
    """A bare integer body (``messageTTL``, a partition count)."""
    if isinstance(body, bool) or not isinstance(body, int):
        raise InvalidPolicyError(f"{what} must be an integer, not {_shown(body)}")
    if not low <= body <= high:
        raise InvalidPolicyError(f"Invalid value for {what}: {body} (must be in {low}..{high})")
    return body


def parse_compaction_threshold(body: object) -> int:
    """A compaction threshold in bytes: 0 (never compact by size) or more."""
    if isinstance(body, int) and not isinstance(body, bool) and body < 0:
        raise InvalidPolicyError("compactionThreshold must be 0 or more")
    return parse_int(body, "compactionThreshold", high=MAX_LONG)


def parse_limit(body: object, what: str) -> int:
    """A limit as an admin call sets it: a bare integer, 0 (no limit) or more."""
    if isinstance(body, int) and not isinstance(body, bool) and body < 0:
        raise InvalidPolicyError(f"{what} must be 0 or more")
    return parse_int(body, what, high=MAX_INT)


def limits_from_json(doc: Mapping[str, Any], field_of: str) -> dict[Limit, int]:
    """The limits a stored policies document sets (``field_of``: ``"namespace_field"`` or
    ``"topic_field"``). A negative value (what Pulsar once stored for "unset") is unset."""
    limits = {}
    for limit in Limit:
        value = doc.get(getattr(limit.names, field_of))
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            continue
        if value is not None:
            limits[limit] = parse_limit(value, getattr(limit.names, field_of))
    return limits


def limits_to_json(limits: Mapping[Limit, int], field_of: str) -> dict[str, int | None]:
    """Each limit under its field name (``None``: unset)."""
    return {getattr(limit.names, field_of): limits.get(limit) for limit in Limit}


def parse_bool(body: object, what: str) -> bool:
    if not isinstance(body, bool):
        raise InvalidPolicyError(f"{what} must be true or false, not {_shown(body)}")
    return body


def _shown(value: object) -> str:
    """A body's value as the JSON it came as (``true``, ``null``), not as Python writes it."""
    try:
        return json.dumps(value)[:200]
    except RecursionError:  # nested deeper than the encoder goes
        return "a value nested too deeply"
    except (TypeError, ValueError):
        return repr(value)[:200]


@dataclass(frozen=True)
class RetentionPolicies:
    """Keep consumed data this long or this big (-1: no limit; 0: keep nothing)."""

    retention_time_in_minutes: int = 0
    retention_size_in_mb: int = 0

    @classmethod
    def parse(cls, body: object) -> RetentionPolicies:
        obj = _object(body, "retention")
        policies = cls(
            _int(obj, "retentionTimeInMinutes", 0),
            _int(obj, "retentionSizeInMB", 0, high=MAX_LONG),
        )
        time, size = policies.retention_time_in_minutes, policies.retention_size_in_mb
        if (time == 0) != (size == 0):
            # Pulsar's rule: one limit of zero and one not keeps nothing, surely a mistake.
            raise InvalidPolicyError(
                "Invalid retention policy: retentionTimeInMinutes and retentionSizeInMB "
                "must both be zero or both be non-zero"
            )
        return policies

    def to_json(self) -> dict[str, int]:
        return {
            "retentionTimeInMinutes": self.retention_time_in_minutes,
            "retentionSizeInMB": self.retention_size_in_mb,
        }

    @property
    def time_s(self) -> float:
        """In the managed ledger's terms: seconds, -1 for ever."""
        return -1.0 if self.retention_time_in_minutes < 0 else self.retention_time_in_minutes * 60.0

    @property
    def size_bytes(self) -> int:
        return -1 if self.retention_size_in_mb < 0 else self.retention_size_in_mb * 1024 * 1024


class PolicyArgumentError(InvalidPolicyError):
    """A policy Pulsar refuses with 400 Bad Request (its ``checkArgument``) rather than
    412: persistence policies out of the broker's bounds."""


@dataclass(frozen=True)
class QuorumBounds:
    """The largest quorums a namespace or topic may ask for (the broker's
    ``managedLedgerMax*`` settings)."""

    ensemble: int = 5
    write_quorum: int = 5
    ack_quorum: int = 5


@dataclass(frozen=True)
class PersistencePolicies:
    """How a topic's ledgers are replicated (Pulsar's ``PersistencePolicies``): striped
    over ``bookkeeper_ensemble`` bookies, each entry written to
    ``bookkeeper_write_quorum`` and acknowledged by ``bookkeeper_ack_quorum`` of them;
    cursors persist their position at most ``managed_ledger_max_mark_delete_rate``
    times a second (0: whenever it moves)."""

    bookkeeper_ensemble: int
    bookkeeper_write_quorum: int
    bookkeeper_ack_quorum: int
    managed_ledger_max_mark_delete_rate: float = 0.0

    @classmethod
    def parse(cls, body: object, bounds: QuorumBounds) -> PersistencePolicies:
        """A ``PersistencePolicies`` body, checked as Pulsar's
        ``validatePersistencePolicies`` does (a field left out is 0, as Jackson leaves it,
        and refused)."""
        if not isinstance(body, Mapping):
            raise PolicyArgumentError(
                f"persistence must be a JSON object, not {type(body).__name__}"
            )
        ensemble = _int(body, "bookkeeperEnsemble", 0, low=-MAX_INT - 1)
        write = _int(body, "bookkeeperWriteQuorum", 0, low=-MAX_INT - 1)
        ack = _int(body, "bookkeeperAckQuorum", 0, low=-MAX_INT - 1)
        rate = body.get("managedLedgerMaxMarkDeleteRate")
        if rate is None:
            rate = 0.0
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate != rate:
            raise PolicyArgumentError(
                f"managedLedgerMaxMarkDeleteRate must be a number, not {_shown(rate)}"
            )
        for name, value, most in (
            ("Ensemble", ensemble, bounds.ensemble),
            ("WriteQuorum", write, bounds.write_quorum),
            ("AckQuorum", ack, bounds.ack_quorum),
        ):
            if not 0 < value <= most:
                raise PolicyArgumentError(f"Bookkeeper-{name} must be <= {most} and > 0.")
        if not ensemble >= write >= ack:
            raise PolicyArgumentError(
                f"Bookkeeper Ensemble ({ensemble}) >= WriteQuorum ({write}) >= AckQuorum ({ack})"
            )
        if rate < 0 or rate == float("inf"):
            raise PolicyArgumentError("managedLedgerMaxMarkDeleteRate must be 0 or more")
        return cls(ensemble, write, ack, float(rate))

    def to_json(self) -> dict[str, Any]:
        return {
            "bookkeeperEnsemble": self.bookkeeper_ensemble,
            "bookkeeperWriteQuorum": self.bookkeeper_write_quorum,
            "bookkeeperAckQuorum": self.bookkeeper_ack_quorum,
            "managedLedgerMaxMarkDeleteRate": self.managed_ledger_max_mark_delete_rate,
        }

    def for_ledgers(self) -> LedgerPersistence:
        """In the managed ledger's terms: the mark-delete rate as the interval between
        cursor snapshots (0 ms: no throttle)."""
        rate = self.managed_ledger_max_mark_delete_rate
        # A rate too small to mean anything is one snapshot every MAX_INT ms (24 days).
        interval_ms = int(min(1000 / rate, MAX_INT)) if rate > 0 else 0
        return LedgerPersistence(
            self.bookkeeper_ensemble,
            self.bookkeeper_write_quorum,
            self.bookkeeper_ack_quorum,
            interval_ms,
        )


# Any quorums some broker's bounds could have let an admin call store.
UNBOUNDED_QUORUMS = QuorumBounds(MAX_INT, MAX_INT, MAX_INT)


def stored_persistence(body: object) -> PersistencePolicies:
    """Persistence policies as a stored document holds them."""
    return PersistencePolicies.parse(body, UNBOUNDED_QUORUMS)


@dataclass(frozen=True)
class DelayedDeliveryPolicies:
    """Whether Shared and Key_Shared subscriptions hold messages back until their delivery
    time (Pulsar's ``DelayedDeliveryPolicies``), how often due ones are released
    (``tick_time``, ms), and the longest delay a producer may ask for
    (``max_delivery_delay_in_millis``; 0: any)."""

    tick_time: int = 1000
    active: bool = True
    max_delivery_delay_in_millis: int = 0

    @classmethod
    def parse(cls, body: object) -> DelayedDeliveryPolicies:
        """A body as pulsar-admin sends it (a field left out: Jackson's 0 or false)."""
        obj = _object(body, "delayed delivery policies")
        active = obj.get("active")
        return cls(
            _int(obj, "tickTime", 0, low=0, high=MAX_LONG),
            parse_bool(active if active is not None else False, "active"),
            _int(obj, "maxDeliveryDelayInMillis", 0, low=0, high=MAX_LONG),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tickTime": self.tick_time,
            "active": self.active,
            "maxDeliveryDelayInMillis": self.max_delivery_delay_in_millis,
        }


class InactiveTopicDeleteMode(enum.Enum):
    """When an inactive topic may go (Pulsar's ``InactiveTopicDeleteMode``)."""

    DELETE_WHEN_NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
    DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP = "delete_when_subscriptions_caught_up"


def parse_delete_mode(raw: object) -> InactiveTopicDeleteMode:
    return _member(InactiveTopicDeleteMode, raw, "inactiveTopicDeleteMode")


@dataclass(frozen=True)
class InactiveTopicPolicies:
    """Whether a topic with no producers and consumers (and, by ``mode``, no
    subscriptions or no backlog) is deleted once inactive for
    ``max_inactive_duration_seconds`` (Pulsar's ``InactiveTopicPolicies``)."""

    delete_while_inactive: bool = False
    max_inactive_duration_seconds: int = 60
    mode: InactiveTopicDeleteMode = InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS

    @classmethod
    def parse(cls, body: object) -> InactiveTopicPolicies:
        obj = _object(body, "inactive topic policies")
        delete = obj.get("deleteWhileInactive")
        mode = obj.get("inactiveTopicDeleteMode")
        return cls(
            parse_bool(delete if delete is not None else False, "deleteWhileInactive"),
            _int(obj, "maxInactiveDurationSeconds", 0, low=0),
            parse_delete_mode(
                mode
                if mode is not None
                else InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS.value
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "inactiveTopicDeleteMode": self.mode.value,
            "maxInactiveDurationSeconds": self.max_inactive_duration_seconds,
            "deleteWhileInactive": self.delete_while_inactive,
        }


def parse_subscription_types(
    body: object, what: str = "subscriptionTypesEnabled"
) -> tuple[str, ...]:
    """A list of subscription type names (any case), in Pulsar's spelling, each once."""
    if not isinstance(body, list) or not all(isinstance(name, str) for name in body):
        raise InvalidPolicyError(f"{what} must be a list of subscription types, not {_shown(body)}")
    chosen: list[str] = []
    for name in body:
        proper = subscription_type_named(name)
        if proper is None:
            raise InvalidPolicyError(
                f"Invalid subscription type {name!r}: one of {', '.join(SUBSCRIPTION_TYPES)}"
            )
        if proper not in chosen:
            chosen.append(proper)
    return tuple(chosen)


class BacklogQuotaType(enum.Enum):
    """What a backlog quota limits: the backlog's bytes, or its oldest message's age."""

    DESTINATION_STORAGE = "destination_storage"
    MESSAGE_AGE = "message_age"


class BacklogQuotaPolicy(enum.Enum):
    """What happens past the quota (Pulsar's ``RetentionPolicy`` of a backlog quota)."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"


@dataclass(frozen=True)
class BacklogQuota:
    """A backlog limit: ``limit_size`` bytes or ``limit_time`` seconds (-1: none)."""

    limit_size: int = -1
    limit_time: int = -1
    policy: BacklogQuotaPolicy = BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD

    @classmethod
    def parse(cls, body: object) -> BacklogQuota:
        obj = _object(body, "backlog quota")
        size = obj.get("limitSize", obj.get("limit"))
        limit_size = _int({"limitSize": size}, "limitSize", -1, high=MAX_LONG)
        limit_time = _int(obj, "limitTime", -1)
        policy = _member(BacklogQuotaPolicy, obj.get("policy"), "policy")
        return cls(limit_size, limit_time, policy)

    def to_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit_size,  # Pulsar still writes the deprecated name
            "limitSize": self.limit_size,
            "limitTime": self.limit_time,
            "policy": self.policy.value,
        }


def parse_backlog_quota_type(raw: str | None) -> BacklogQuotaType:
    """The ``backlogQuotaType`` query parameter (``destination_storage`` if absent)."""
    if raw is None or raw == "":
        return BacklogQuotaType.DESTINATION_STORAGE
    return _member(BacklogQuotaType, raw, "backlogQuotaType")


@dataclass(frozen=True)
class PublishRate:
    """Messages and bytes a topic accepts per second (-1 or 0: unlimited)."""

    publish_throttling_rate_in_msg: int = -1
    publish_throttling_rate_in_byte: int = -1

    @classmethod
    def parse(cls, body: object) -> PublishRate:
        obj = _object(body, "publish rate")
        return cls(
            _int(obj, "publishThrottlingRateInMsg", -1),
            _int(obj, "publishThrottlingRateInByte", -1, high=MAX_LONG),
        )

    def to_json(self) -> dict[str, int]:
        return {
            "publishThrottlingRateInMsg": self.publish_throttling_rate_in_msg,
            "publishThrottlingRateInByte": self.publish_throttling_rate_in_byte,
        }

    @property
    def limited(self) -> bool:
        return self.publish_throttling_rate_in_msg > 0 or self.publish_throttling_rate_in_byte > 0


@dataclass(frozen=True)
class DispatchRate:
    """Messages and bytes dispatched per ``rate_period_in_second`` (-1 or 0: unlimited)."""

    dispatch_throttling_rate_in_msg: int = -1
    dispatch_throttling_rate_in_byte: int = -1
    rate_period_in_second: int = 1
    relative_to_publish_rate: bool = False

    @classmethod
    def parse(cls, body: object) -> DispatchRate:
        obj = _object(body, "dispatch rate")
        relative = obj.get("relativeToPublishRate")
        return cls(
            _int(obj, "dispatchThrottlingRateInMsg", -1),
            _int(obj, "dispatchThrottlingRateInByte", -1, high=MAX_LONG),
            _int(obj, "ratePeriodInSecond", 1, low=1, high=86_400),
            parse_bool(relative if relative is not None else False, "relativeToPublishRate"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "dispatchThrottlingRateInMsg": self.dispatch_throttling_rate_in_msg,
            "dispatchThrottlingRateInByte": self.dispatch_throttling_rate_in_byte,
            "relativeToPublishRate": self.relative_to_publish_rate,
            "ratePeriodInSecond": self.rate_period_in_second,
        }

    @property
    def limited(self) -> bool:
        return self.dispatch_throttling_rate_in_msg > 0 or self.dispatch_throttling_rate_in_byte > 0


class TopicType(enum.Enum):
    PARTITIONED = "partitioned"
    NON_PARTITIONED = "non-partitioned"


@dataclass(frozen=True)
class AutoTopicCreationOverride:
    """The namespace's word on creating topics on first use, over the broker's setting."""

    allow_auto_topic_creation: bool = True
    topic_type: TopicType = TopicType.NON_PARTITIONED
    default_num_partitions: int | None = None

    @classmethod
    def parse(cls, body: object) -> AutoTopicCreationOverride:
        obj = _object(body, "auto topic creation")
        raw_allow = obj.get("allowAutoTopicCreation")
        allow = parse_bool(raw_allow if raw_allow is not None else False, "allowAutoTopicCreation")
        raw_type = obj.get("topicType", TopicType.NON_PARTITIONED.value)
        try:
            topic_type = TopicType(raw_type)
        except ValueError:
            raise InvalidPolicyError(
                f"topicType must be partitioned or non-partitioned, not {raw_type!r}"
            ) from None
        partitions = obj.get("defaultNumPartitions")
        if partitions is not None or (topic_type is TopicType.PARTITIONED and allow):
            if partitions is None:
                raise InvalidPolicyError(
                    "[defaultNumPartitions] cannot be null when the type is partitioned."
                )
            partitions = _int(obj, "defaultNumPartitions", 1, low=1, high=MAX_PARTITIONS)
        return cls(allow, topic_type, partitions)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "allowAutoTopicCreation": self.allow_auto_topic_creation,
            "topicType": self.topic_type.value,
        }
        if self.default_num_partitions is not None:
            doc["defaultNumPartitions"] = self.default_num_partitions
        return doc


def bundle_boundaries(count: int) -> list[str]:
    """Pulsar's ``bundles.boundaries``: ``count + 1`` hex boundaries of the hash space."""
    width = FULL_RANGE // count
    points = [i * width for i in range(count)] + [FULL_RANGE - 1]
    return [f"0x{point:08x}" for point in points]


@dataclass(frozen=True)
class Policies:
    """A namespace's policies (unset ones: ``None`` or empty, the broker's default)."""

    bundles: int = DEFAULT_BUNDLES
    replication_clusters: tuple[str, ...] = ()
    retention: RetentionPolicies | None = None
    message_ttl_in_seconds: int | None = None
    subscription_expiration_time_minutes: int | None = None
    backlog_quotas: Mapping[BacklogQuotaType, BacklogQuota] = field(default_factory=dict)
    deduplication_enabled: bool | None = None
    publish_rates: Mapping[str, PublishRate] = field(default_factory=dict)  # by cluster
    dispatch_rates: Mapping[str, DispatchRate] = field(default_factory=dict)  # by cluster
    subscription_dispatch_rates: Mapping[str, DispatchRate] = field(default_factory=dict)
    auto_topic_creation: AutoTopicCreationOverride | None = None
    # Schemas: how a new one must agree with the earlier ones (UNDEFINED: the broker's
    # strategy), whether producers may register new ones (None: the broker's setting), and
    # whether producers without a schema are refused on topics that have one.
    schema_compatibility_strategy: CompatibilityStrategy = CompatibilityStrategy.UNDEFINED
    is_allow_auto_update_schema: bool | None = None
    schema_validation_enforced: bool = False
    # Backlog bytes past which a topic is compacted (0: never; None: the broker's setting).
    compaction_threshold: int | None = None
    # Producers, consumers, subscriptions, unacknowledged messages (``topic_limits``);
    # a limit missing here is the broker's.
    limits: Mapping[Limit, int] = field(default_factory=dict)
    persistence: PersistencePolicies | None = None  # None: the broker's managedLedger*
    delayed_delivery: DelayedDeliveryPolicies | None = None  # None: the broker's settings
    subscription_types_enabled: tuple[str, ...] = ()  # (): the broker's setting
    encryption_required: bool = False  # producers must encrypt what they send
    max_topics_per_namespace: int | None = None  # 0: no limit; None: the broker's
    inactive_topic_policies: InactiveTopicPolicies | None = None  # None: the broker's
    # Pulsar's auth_policies.namespace_auth: the actions (produce, consume...) granted to
    # each role on the namespace.
    namespace_auth: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def with_(self, **changes: Any) -> Policies:
        """A copy with ``changes`` (the admin API changes one policy at a time)."""
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """Pulsar's ``Policies`` JSON: what is stored and what GET answers."""
        return {
            "bundles": {"boundaries": bundle_boundaries(self.bundles), "numBundles": self.bundles},
            "replication_clusters": list(self.replication_clusters),
            "backlog_quota_map": {t.value: q.to_json() for t, q in self.backlog_quotas.items()},
            "clusterDispatchRate": {c: r.to_json() for c, r in self.dispatch_rates.items()},
            "topicDispatchRate": {c: r.to_json() for c, r in self.dispatch_rates.items()},
            "subscriptionDispatchRate": {
                c: r.to_json() for c, r in self.subscription_dispatch_rates.items()
            },
            "publishMaxMessageRate": {c: r.to_json() for c, r in self.publish_rates.items()},
            "deduplicationEnabled": self.deduplication_enabled,
            "autoTopicCreationOverride": (
                self.auto_topic_creation.to_json() if self.auto_topic_creation else None
            ),
            "message_ttl_in_seconds": self.message_ttl_in_seconds,
            "subscription_expiration_time_minutes": self.subscription_expiration_time_minutes,
            "retention_policies": self.retention.to_json() if self.retention else None,
            "auth_policies": {
                "namespace_auth": {r: list(a) for r, a in sorted(self.namespace_auth.items())},
                "destination_auth": {},
                "subscription_auth_roles": {},
            },
            "schema_compatibility_strategy": self.schema_compatibility_strategy.value,
            "is_allow_auto_update_schema": self.is_allow_auto_update_schema,
            "schema_validation_enforced": self.schema_validation_enforced,
            "compaction_threshold": self.compaction_threshold,
            "persistence": self.persistence.to_json() if self.persistence else None,
            "subscription_types_enabled": list(self.subscription_types_enabled),
            "encryption_required": self.encryption_required,
            "max_topics_per_namespace": self.max_topics_per_namespace,
            "inactive_topic_policies": (
                self.inactive_topic_policies.to_json() if self.inactive_topic_policies else None
            ),
            "delayed_delivery_policies": (
                self.delayed_delivery.to_json() if self.delayed_delivery else None
            ),
            **limits_to_json(self.limits, "namespace_field"),
            "deleted": False,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Policies:
        """Read a stored document (also the first format, ``{"bundles": N}``).

        Raises ``InvalidPolicyError`` for a document no admin call could have written (a
        field of the wrong type included: a map that is not an object, clusters that are
        not a list of names)."""
        raw_bundles = doc.get("bundles", DEFAULT_BUNDLES)
        if isinstance(raw_bundles, Mapping):
            raw_bundles = raw_bundles.get("numBundles", DEFAULT_BUNDLES)
        bundles = parse_int(raw_bundles, "bundles", low=1, high=MAX_BUNDLES)
        retention = doc.get("retention_policies")
        ttl = doc.get("message_ttl_in_seconds")
        expiration = doc.get("subscription_expiration_time_minutes")
        dedup = doc.get("deduplicationEnabled")
        auto = doc.get("autoTopicCreationOverride")
        auth = _map(_map(doc, "auth_policies"), "namespace_auth")
        strategy = doc.get("schema_compatibility_strategy")
        auto_update = doc.get("is_allow_auto_update_schema")
        enforced = doc.get("schema_validation_enforced")
        threshold = doc.get("compaction_threshold")
        persistence = doc.get("persistence")
        delayed = doc.get("delayed_delivery_policies")
        types = doc.get("subscription_types_enabled")
        encryption = doc.get("encryption_required")
        max_topics = doc.get("max_topics_per_namespace")
        inactive = doc.get("inactive_topic_policies")
        return cls(
            inactive_topic_policies=(
                InactiveTopicPolicies.parse(inactive) if inactive is not None else None
            ),
            max_topics_per_namespace=(
                parse_limit(max_topics, "maxTopicsPerNamespace")
                if isinstance(max_topics, int) and max_topics >= 0
                else None  # negative: what Pulsar once stored for "unset"
            ),
            encryption_required=(
                parse_bool(encryption, "encryptionRequired") if encryption is not None else False
            ),
            subscription_types_enabled=parse_subscription_types(types) if types else (),
            persistence=stored_persistence(persistence) if persistence is not None else None,
            delayed_delivery=(
                DelayedDeliveryPolicies.parse(delayed) if delayed is not None else None
            ),
            compaction_threshold=(
                parse_compaction_threshold(threshold) if threshold is not None else None
            ),
            schema_compatibility_strategy=(
                parse_schema_strategy(strategy)
                if strategy is not None
                else CompatibilityStrategy.UNDEFINED
            ),
            is_allow_auto_update_schema=(
                parse_bool(auto_update, "isAllowAutoUpdateSchema")
                if auto_update is not None
                else None
            ),
            schema_validation_enforced=(
                parse_bool(enforced, "schemaValidationEnforced") if enforced is not None else False
            ),
            bundles=bundles,
            replication_clusters=_names(doc.get("replication_clusters"), "replication_clusters"),
            retention=RetentionPolicies.parse(retention) if retention is not None else None,
            message_ttl_in_seconds=parse_int(ttl, "messageTTL") if ttl is not None else None,
            subscription_expiration_time_minutes=(
                parse_int(expiration, "subscriptionExpirationTime", low=0)
                if expiration is not None
                else None
            ),
            backlog_quotas={
                parse_backlog_quota_type(t): BacklogQuota.parse(q)
                for t, q in _map(doc, "backlog_quota_map").items()
            },
            deduplication_enabled=(
                parse_bool(dedup, "deduplicationEnabled") if dedup is not None else None
            ),
            publish_rates={
                c: PublishRate.parse(r) for c, r in _map(doc, "publishMaxMessageRate").items()
            },
            dispatch_rates={
                c: DispatchRate.parse(r) for c, r in _map(doc, "clusterDispatchRate").items()
            },
            subscription_dispatch_rates={
                c: DispatchRate.parse(r) for c, r in _map(doc, "subscriptionDispatchRate").items()
            },
            auto_topic_creation=(
                AutoTopicCreationOverride.parse(auto) if auto is not None else None
            ),
            namespace_auth={
                role: _names(actions, f"namespace_auth.{role}") for role, actions in auth.items()
            },
            limits=limits_from_json(doc, "namespace_field"),
        )


def parse_schema_strategy(body: object) -> CompatibilityStrategy:
    """A ``SchemaCompatibilityStrategy`` name (any case), as pulsar-admin sends it."""
    try:
        return CompatibilityStrategy.parse(body)
    except ValueError as exc:
        raise InvalidPolicyError(str(exc)) from None


def _map(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A map field of a policies document (left out or null: empty)."""
    value = doc.get(key)
    return _object(value, key) if value is not None else {}


def _names(value: object, key: str) -> tuple[str, ...]:
    """A list of names (left out or null: none)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidPolicyError(f"{key} must be a list of names, not {value!r}")
    return tuple(value)
