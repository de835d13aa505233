"""Namespace policies as a broker applies them: resolved against the broker's own settings,
cached, and kept fresh by a watch on each namespace's policies node.

``resolve`` (sans-IO) makes the ``EffectivePolicies`` of a namespace: each policy the
namespace sets wins, each it leaves unset falls back to the broker's setting (Pulsar's
order, without topic-level policies), and rates are taken for this broker's cluster.

``NamespacePolicyCache`` (I/O) reads a namespace's ``Policies`` once, the first time a topic
of it is opened here, and watches its node from then on (a namespace a client only asks
about is read, not watched); a change is read again, retried with back-off while the
store fails, and handed to ``on_change``, which applies it to the live topics (the broker
does not restart anything). A namespace whose document cannot be read (absent, or not a
policies document) gets the broker's defaults and a warning: bad metadata never stops a
topic from being served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from stripemq.broker.namespaces import NamespaceNotFoundError, policies_path, read_policies
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
    RetentionPolicies,
    TopicType,
)
from stripemq.broker.rate_limiter import Rate
from stripemq.broker.schema.types import CompatibilityStrategy
from stripemq.errors import MetadataError
from stripemq.metadata import EventType, MetadataStore, WatchEvent, WatchHandle
from stripemq.retry import Backoff
from stripemq.subscription_types import SUBSCRIPTION_TYPES
from stripemq.topic_limits import Limit, default_limits

log = logging.getLogger(__name__)

# Back-off of a changed namespace's policies that could not be read (the store failed).
REFRESH_RETRY_S = 0.5
REFRESH_RETRY_MAX_S = 30.0

UNLIMITED_QUOTA = BacklogQuota()


class BrokerDefaults(Protocol):
    """The broker's settings that a namespace policy overrides (``TopicPolicies``)."""

    @property
    def deduplication(self) -> bool: ...

    @property
    def auto_create(self) -> bool: ...

    @property
    def auto_create_partitioned(self) -> bool: ...

    @property
    def default_partitions(self) -> int: ...

    @property
    def message_ttl_s(self) -> int: ...

    @property
    def subscription_expiration_minutes(self) -> int: ...

    @property
    def backlog_quota(self) -> BacklogQuota: ...

    @property
    def publish_rate(self) -> PublishRate: ...

    @property
    def dispatch_rate(self) -> DispatchRate: ...

    @property
    def subscription_dispatch_rate(self) -> DispatchRate: ...

    @property
    def schema_compatibility_strategy(self) -> CompatibilityStrategy: ...

    @property
    def allow_auto_update_schema(self) -> bool: ...

    @property
    def schema_validation_enforced(self) -> bool: ...

    @property
    def compaction_threshold_bytes(self) -> int: ...

    @property
    def limits(self) -> Mapping[Limit, int]: ...

    @property
    def persistence(self) -> PersistencePolicies | None: ...

    @property
    def delayed_delivery_policies(self) -> DelayedDeliveryPolicies: ...

    @property
    def subscription_types_enabled(self) -> tuple[str, ...]: ...

    @property
    def max_topics_per_namespace(self) -> int: ...

    @property
    def inactive_topic_policies(self) -> InactiveTopicPolicies: ...


def _unlimited_quotas() -> dict[BacklogQuotaType, BacklogQuota]:
    return {kind: UNLIMITED_QUOTA for kind in BacklogQuotaType}


@dataclass(frozen=True)
class EffectivePolicies:
    """What a topic obeys: each namespace policy, else the broker's setting.

    ``retention`` is ``None`` when the namespace sets none (the managed ledger's configured
    retention applies); a TTL of 0 means none; a rate whose limits are all 0 or less
    means unlimited."""

    retention: RetentionPolicies | None = None
    message_ttl_s: int = 0
    subscription_expiration_minutes: int = 0  # 0: subscriptions never expire
    backlog_quotas: Mapping[BacklogQuotaType, BacklogQuota] = field(
        default_factory=_unlimited_quotas
    )
    deduplication: bool = False
    publish_rate: PublishRate = field(default_factory=PublishRate)
    dispatch_rate: DispatchRate = field(default_factory=DispatchRate)
    subscription_dispatch_rate: DispatchRate = field(default_factory=DispatchRate)
    auto_topic_creation: AutoTopicCreationOverride = field(
        default_factory=AutoTopicCreationOverride
    )
    schema_compatibility_strategy: CompatibilityStrategy = CompatibilityStrategy.FULL
    allow_auto_update_schema: bool = True
    schema_validation_enforced: bool = False
    compaction_threshold_bytes: int = 0  # 0: never compacted for its backlog's size
    limits: Mapping[Limit, int] = field(default_factory=default_limits)
    # The quorums and mark-delete rate of the topic's ledgers (None: the managed ledger's
    # configuration, where no broker settings are given).
    persistence: PersistencePolicies | None = None
    # Whether and how messages are delayed (None: as the topic was made, in unit tests).
    delayed_delivery: DelayedDeliveryPolicies | None = None
    subscription_types_enabled: tuple[str, ...] = SUBSCRIPTION_TYPES  # Pulsar's names
    encryption_required: bool = False
    max_topics_per_namespace: int = 0  # 0: no limit
    inactive_topic_policies: InactiveTopicPolicies = field(default_factory=InactiveTopicPolicies)

    def limit(self, limit: Limit) -> int:
        """The limit the topic obeys (0: none)."""
        return self.limits.get(limit, 0)

    def backlog_quota(self, kind: BacklogQuotaType) -> BacklogQuota:
        return self.backlog_quotas.get(kind, UNLIMITED_QUOTA)

    @property
    def auto_create(self) -> bool:
        return self.auto_topic_creation.allow_auto_topic_creation

    @property
    def auto_create_partitions(self) -> int:
        """Partitions of an auto-created topic (0: it is made non-partitioned)."""
        override = self.auto_topic_creation
        if override.topic_type is not TopicType.PARTITIONED:
            return 0
        return override.default_num_partitions or 1


def resolve(policies: Policies, defaults: BrokerDefaults, cluster: str) -> EffectivePolicies:
    """The policies a topic of a namespace with ``policies`` obeys on a broker of
    ``cluster`` whose own settings are ``defaults``."""
    ttl = policies.message_ttl_in_seconds
    dedup = policies.deduplication_enabled
    auto = policies.auto_topic_creation
    if auto is None:
        auto = AutoTopicCreationOverride(
            defaults.auto_create,
            TopicType.PARTITIONED
            if defaults.auto_create_partitioned
            else TopicType.NON_PARTITIONED,
            defaults.default_partitions if defaults.auto_create_partitioned else None,
        )
    return EffectivePolicies(
        retention=policies.retention,
        message_ttl_s=ttl if ttl is not None else defaults.message_ttl_s,
        subscription_expiration_minutes=(
            policies.subscription_expiration_time_minutes
            if policies.subscription_expiration_time_minutes is not None
            else defaults.subscription_expiration_minutes
        ),
        backlog_quotas={
            kind: policies.backlog_quotas.get(kind, defaults.backlog_quota)
            for kind in BacklogQuotaType
        },
        deduplication=dedup if dedup is not None else defaults.deduplication,
        publish_rate=policies.publish_rates.get(cluster, defaults.publish_rate),
        dispatch_rate=policies.dispatch_rates.get(cluster, defaults.dispatch_rate),
        subscription_dispatch_rate=policies.subscription_dispatch_rates.get(
            cluster, defaults.subscription_dispatch_rate
        ),
        auto_topic_creation=auto,
        schema_compatibility_strategy=(
            policies.schema_compatibility_strategy
            if policies.schema_compatibility_strategy is not CompatibilityStrategy.UNDEFINED
            else defaults.schema_compatibility_strategy
        ),
        allow_auto_update_schema=(
            policies.is_allow_auto_update_schema
            if policies.is_allow_auto_update_schema is not None
            else defaults.allow_auto_update_schema
        ),
        # Either refuses (Pulsar's isSchemaValidationEnforced: the broker's or the
        # namespace's).
        schema_validation_enforced=(
            policies.schema_validation_enforced or defaults.schema_validation_enforced
        ),
        compaction_threshold_bytes=(
            policies.compaction_threshold
            if policies.compaction_threshold is not None
            else defaults.compaction_threshold_bytes
        ),
        limits={limit: policies.limits.get(limit, defaults.limits[limit]) for limit in Limit},
        persistence=policies.persistence or defaults.persistence,
        delayed_delivery=policies.delayed_delivery or defaults.delayed_delivery_policies,
        subscription_types_enabled=(
            policies.subscription_types_enabled or defaults.subscription_types_enabled
        ),
        encryption_required=policies.encryption_required,
        max_topics_per_namespace=(
            policies.max_topics_per_namespace
            if policies.max_topics_per_namespace is not None
            else defaults.max_topics_per_namespace
        ),
        inactive_topic_policies=(
            policies.inactive_topic_policies or defaults.inactive_topic_policies
        ),
    )


def publish_rate(policy: PublishRate) -> Rate:
    """A publish rate in the rate limiter's terms (per second)."""
    return Rate(policy.publish_throttling_rate_in_msg, policy.publish_throttling_rate_in_byte)


def dispatch_rate(policy: DispatchRate) -> Rate:
    """A dispatch rate in the rate limiter's terms (per ``ratePeriodInSecond``)."""
    return Rate(
        policy.dispatch_throttling_rate_in_msg,
        policy.dispatch_throttling_rate_in_byte,
        float(max(1, policy.rate_period_in_second)),
    )


T = TypeVar("T")
OnChange = Callable[[str, T], Awaitable[None]]


class PolicyCache(Generic[T]):
    """Policy documents (a namespace's, a topic's) by key, as last read, refreshed on
    every change of their node.

    ``on_change(key, document)`` runs (one at a time per key, in the order the changes
    were read) after a watched key's document changed. A subclass says where a key's
    document lives (``path``), how it is read (``_read``), and what a deleted node means
    (``refresh_on_delete``: read again at once, or by whoever asks next)."""

    def __init__(self, store: MetadataStore, on_change: OnChange[T] | None = None) -> None:
        self.store = store
        self.on_change = on_change
        self._policies: dict[str, T] = {}
        self._watches: dict[str, WatchHandle] = {}
        self._loading: dict[str, asyncio.Future[T]] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}
        self._stale: set[str] = set()  # changed again while being refreshed
        self._closed = False

    def path(self, key: str) -> str:
        raise NotImplementedError

    async def _read(self, key: str) -> T:
        """The key's document now; ``NamespaceNotFoundError`` if its owner is gone."""
        raise NotImplementedError

    refresh_on_delete = False  # a deleted node: forget it (False) or read it again (True)

    @property
    def watched(self) -> set[str]:
        return set(self._watches)

    def cached(self, key: str) -> T | None:
        """The document as last read, without reading (``None``: not cached)."""
        return self._policies.get(key)

    async def get(self, key: str, *, watch: bool = True) -> T:
        """The key's document; the first call reads it and starts the watch. Without
        ``watch``, a key not cached yet is read once and neither cached nor watched
        (nothing is kept for a key no topic served here needs).

        Raises ``NamespaceNotFoundError`` when its namespace does not exist (nothing is
        cached or watched then)."""
        found = self._policies.get(key)
        if found is not None:
            return found
        if not watch and key not in self._loading:
            return await self._read(key)
        loading = self._loading.get(key)
        if loading is None:
            loading = asyncio.ensure_future(self._load(key))
            self._loading[key] = loading
            loading.add_done_callback(lambda _f: self._loading.pop(key, None))
        return await asyncio.shield(loading)

    async def _load(self, key: str) -> T:
        # Watch first: a change between the read and the watch is not missed.
        if key not in self._watches and not self._closed:
            self._watches[key] = self.store.watch(
                self.path(key), lambda event: self._on_event(key, event)
            )
        try:
            policies = await self._read(key)
        except NamespaceNotFoundError:
            self.forget(key)
            raise
        if not self._closed and key in self._watches:
            # A change read meanwhile (the watch came first) is newer than this read.
            return self._policies.setdefault(key, policies)
        return policies

    def _on_event(self, key: str, event: WatchEvent) -> None:
        if self._closed or key not in self._watches:
            return
        if event.type is EventType.DELETED and not self.refresh_on_delete:
            self._policies.pop(key, None)  # read again by whoever asks next
            return
        if key in self._refreshing:
            self._stale.add(key)
            return
        task = asyncio.ensure_future(self._refresh(key))
        self._refreshing[key] = task

    async def _refresh(self, key: str) -> None:
        """Read the changed document (again, while it keeps changing, and with back-off
        while the store fails) and apply it."""
        backoff = Backoff(initial=REFRESH_RETRY_S, maximum=REFRESH_RETRY_MAX_S)
        try:
            while True:
                if self._closed or key not in self._watches:
                    return
                self._stale.discard(key)
                try:
                    policies = await self._read(key)
                except NamespaceNotFoundError:
                    self._policies.pop(key, None)
                    return
                except MetadataError as exc:
                    delay = backoff.next_delay()
                    log.warning(
                        "[%s] reading changed policies failed (%s): again in %.1fs",
                        key,
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                backoff.reset()
                if self._closed or key not in self._watches:
                    return
                self._policies[key] = policies
                log.info("[%s] policies changed", key)
                if self.on_change is not None:
                    try:
                        await self.on_change(key, policies)
                    except Exception:
                        log.exception("[%s] applying changed policies failed", key)
                if key not in self._stale:
                    return
        finally:
            self._refreshing.pop(key, None)

    def forget(self, key: str) -> None:
        """Stop watching a key (no topic that needs it is served here any more)."""
        handle = self._watches.pop(key, None)
        if handle is not None:
            handle.cancel()
        self._policies.pop(key, None)

    def retain(self, keys: set[str]) -> None:
        """Forget every key not in ``keys``."""
        for key in list(self._watches):
            if key not in keys:
                self.forget(key)

    async def close(self) -> None:
        self._closed = True
        for key in list(self._watches):
            self.forget(key)
        tasks = list(self._refreshing.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


class NamespacePolicyCache(PolicyCache[Policies]):
    """Each namespace's ``Policies``, read the first time a topic of it is opened here and
    watched from then on; a document that cannot be read gives the broker's defaults (and
    a warning): bad metadata never stops a topic from being served."""

    def path(self, key: str) -> str:
        return policies_path(key)

    async def _read(self, key: str) -> Policies:
        try:
            policies, _version = await read_policies(self.store, key)
        except InvalidPolicyError as exc:
            log.warning("[%s] unreadable policies (%s): the broker's defaults apply", key, exc)
            return Policies()
        return policies
