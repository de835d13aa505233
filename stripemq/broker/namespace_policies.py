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
from typing import Protocol

from stripemq.broker.namespaces import NamespaceNotFoundError, policies_path, read_policies
from stripemq.broker.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaType,
    DispatchRate,
    InvalidPolicyError,
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


OnChange = Callable[[str, Policies], Awaitable[None]]


class NamespacePolicyCache:
    """Each namespace's ``Policies`` as last read, refreshed on every change of its node.

    ``on_change(namespace, policies)`` runs (one at a time per namespace, in the order the
    changes were read) after a watched namespace's policies changed."""

    def __init__(self, store: MetadataStore, on_change: OnChange | None = None) -> None:
        self.store = store
        self.on_change = on_change
        self._policies: dict[str, Policies] = {}
        self._watches: dict[str, WatchHandle] = {}
        self._loading: dict[str, asyncio.Future[Policies]] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}
        self._stale: set[str] = set()  # changed again while being refreshed
        self._closed = False

    @property
    def watched(self) -> set[str]:
        return set(self._watches)

    def cached(self, namespace: str) -> Policies | None:
        """The policies as last read, without reading (``None``: not cached)."""
        return self._policies.get(namespace)

    async def get(self, namespace: str, *, watch: bool = True) -> Policies:
        """The namespace's policies; the first call reads them and starts the watch.
        Without ``watch``, a namespace not cached yet is read once and neither cached nor
        watched (nothing is kept for a namespace no topic of which is served here).

        Raises ``NamespaceNotFoundError`` when the namespace does not exist (nothing is
        cached or watched then)."""
        found = self._policies.get(namespace)
        if found is not None:
            return found
        if not watch and namespace not in self._loading:
            return await self._read(namespace)
        loading = self._loading.get(namespace)
        if loading is None:
            loading = asyncio.ensure_future(self._load(namespace))
            self._loading[namespace] = loading
            loading.add_done_callback(lambda _f: self._loading.pop(namespace, None))
        return await asyncio.shield(loading)

    async def _load(self, namespace: str) -> Policies:
        # Watch first: a change between the read and the watch is not missed.
        if namespace not in self._watches and not self._closed:
            self._watches[namespace] = self.store.watch(
                policies_path(namespace), lambda event: self._on_event(namespace, event)
            )
        try:
            policies = await self._read(namespace)
        except NamespaceNotFoundError:
            self.forget(namespace)
            raise
        if not self._closed and namespace in self._watches:
            # A change read meanwhile (the watch came first) is newer than this read.
            return self._policies.setdefault(namespace, policies)
        return policies

    async def _read(self, namespace: str) -> Policies:
        try:
            policies, _version = await read_policies(self.store, namespace)
        except InvalidPolicyError as exc:
            log.warning(
                "[%s] unreadable policies (%s): the broker's defaults apply", namespace, exc
            )
            return Policies()
        return policies

    def _on_event(self, namespace: str, event: WatchEvent) -> None:
        if self._closed or namespace not in self._watches:
            return
        if event.type is EventType.DELETED:
            self._policies.pop(namespace, None)  # read again by whoever asks next
            return
        if namespace in self._refreshing:
            self._stale.add(namespace)
            return
        task = asyncio.ensure_future(self._refresh(namespace))
        self._refreshing[namespace] = task

    async def _refresh(self, namespace: str) -> None:
        """Read the changed policies (again, while they keep changing, and with back-off
        while the store fails) and apply them."""
        backoff = Backoff(initial=REFRESH_RETRY_S, maximum=REFRESH_RETRY_MAX_S)
        try:
            while True:
                if self._closed or namespace not in self._watches:
                    return
                self._stale.discard(namespace)
                try:
                    policies = await self._read(namespace)
                except NamespaceNotFoundError:
                    self._policies.pop(namespace, None)
                    return
                except MetadataError as exc:
                    delay = backoff.next_delay()
                    log.warning(
                        "[%s] reading changed policies failed (%s): again in %.1fs",
                        namespace,
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                backoff.reset()
                if self._closed or namespace not in self._watches:
                    return
                self._policies[namespace] = policies
                log.info("[%s] namespace policies changed", namespace)
                if self.on_change is not None:
                    try:
                        await self.on_change(namespace, policies)
                    except Exception:
                        log.exception("[%s] applying changed policies failed", namespace)
                if namespace not in self._stale:
                    return
        finally:
            self._refreshing.pop(namespace, None)

    def forget(self, namespace: str) -> None:
        """Stop watching a namespace (no topic of it is served here any more)."""
        handle = self._watches.pop(namespace, None)
        if handle is not None:
            handle.cancel()
        self._policies.pop(namespace, None)

    def retain(self, namespaces: set[str]) -> None:
        """Forget every namespace not in ``namespaces``."""
        for namespace in list(self._watches):
            if namespace not in namespaces:
                self.forget(namespace)

    async def close(self) -> None:
        self._closed = True
        for namespace in list(self._watches):
            self.forget(namespace)
        tasks = list(self._refreshing.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
