"""The topics this broker serves, opened on demand on one metadata store and ledger client,
and only while this broker owns their bundle.

A topic of a namespace that does not exist, or a ``non-persistent://`` one, is refused by
lookup, partitioned metadata and topic use alike, before anything is written to the
metadata store: the checks read, and only then is a bundle acquired or a topic created.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from stripemq.bookie.client import BookKeeper
from stripemq.broker.cluster_metadata import initialize_cluster_metadata
from stripemq.broker.config import DelayedDeliveryConfig
from stripemq.broker.leader import LeaderBroker, LeaderElection, lookup_id
from stripemq.broker.names import check_topic_supported
from stripemq.broker.namespace_policies import EffectivePolicies, NamespacePolicyCache, resolve
from stripemq.broker.namespaces import check_namespace, count_topics
from stripemq.broker.ownership import BrokerInfo, Bundle, Ownership, bundle_of
from stripemq.broker.partitions import (
    PartitionedTopicExistsError,
    create_partitioned_topic,
    partition_count,
    partitions_path,
)
from stripemq.broker.policies import (
    BacklogQuota,
    DelayedDeliveryPolicies,
    DispatchRate,
    InactiveTopicPolicies,
    PersistencePolicies,
    Policies,
    PublishRate,
)
from stripemq.broker.policy_tasks import PolicyChecks
from stripemq.broker.schema import CompatibilityStrategy, SchemaRegistry, schema_id
from stripemq.broker.topic import PersistentTopic, TopicLifecycle
from stripemq.broker.topic_policies import (
    TopicLevelPolicies,
    TopicPolicyCache,
    delete_topic_policies,
    topic_policies_key,
)
from stripemq.clock import now_ms
from stripemq.errors import BrokerError, NotFoundError, StripeMQError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.ledger_list import LedgerList, managed_ledger_path
from stripemq.managed_ledger.managed_ledger import ManagedLedgerFactory
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import TopicName
from stripemq.subscription_types import SUBSCRIPTION_TYPES
from stripemq.topic_limits import Limit, default_limits

log = logging.getLogger(__name__)

# How long a request that arrives while the broker starts waits for the default tenant and
# namespace to be made before it is answered ``ServiceNotReady`` (clients retry that).
STARTUP_WAIT_S = 30.0


@dataclass(frozen=True)
class TopicPolicies:
    """How this broker treats topics (the broker-wide parts of Pulsar's policies)."""

    deduplication: bool = False
    auto_create: bool = True
    auto_create_partitioned: bool = False
    default_partitions: int = 1
    delayed_delivery: DelayedDeliveryConfig = field(default_factory=DelayedDeliveryConfig)
    # What a namespace policy overrides (``namespace_policies.resolve``): TTL (0: none),
    # backlog quota, and the rates (unlimited by default).
    message_ttl_s: int = 0
    subscription_expiration_minutes: int = 0  # 0: never
    backlog_quota: BacklogQuota = field(default_factory=BacklogQuota)
    publish_rate: PublishRate = field(default_factory=PublishRate)
    dispatch_rate: DispatchRate = field(default_factory=DispatchRate)
    subscription_dispatch_rate: DispatchRate = field(default_factory=DispatchRate)
    schema_compatibility_strategy: CompatibilityStrategy = CompatibilityStrategy.FULL
    allow_auto_update_schema: bool = True
    schema_validation_enforced: bool = False
    compaction_retain_null_key: bool = False  # compaction keeps messages without a key
    compaction_threshold_bytes: int = 0  # backlog bytes that start a compaction (0: never)
    limits: Mapping[Limit, int] = field(default_factory=default_limits)  # 0: none
    persistence: PersistencePolicies | None = None  # None: the managed ledgers' config
    subscription_types_enabled: tuple[str, ...] = SUBSCRIPTION_TYPES
    max_topics_per_namespace: int = 0  # 0: no limit
    inactive_topic_policies: InactiveTopicPolicies = field(default_factory=InactiveTopicPolicies)
    inactive_topic_check_interval_s: float = 60.0
    delete_inactive_partitioned_metadata: bool = False  # once every partition is gone

    @property
    def delayed_delivery_policies(self) -> DelayedDeliveryPolicies:
        """The broker's delayed delivery, as a namespace's policies would set it."""
        return self.delayed_delivery.as_policies()

    # How often the TTL, backlog-quota and subscription-expiry checks run (0: never).
    message_expiry_check_interval_s: float = 300.0
    backlog_quota_check_interval_s: float = 60.0
    subscription_expiry_check_interval_s: float = 300.0
    compaction_check_interval_s: float = 60.0


class BrokerService:
    """Opens each topic once (its managed ledger), however many clients ask at once."""

    def __init__(
        self,
        store: MetadataStore,
        bk: BookKeeper,
        me: BrokerInfo,
        ml_config: ManagedLedgerConfig | None = None,
        policies: TopicPolicies | None = None,
        *,
        cluster: str = "standalone",
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.me = me
        self.bk = bk
        self.service_url = me.service_url
        self.ownership = Ownership(store, me)
        self.policies = policies or TopicPolicies()
        self.factory = ManagedLedgerFactory(store, bk, ml_config)
        self.schemas = SchemaRegistry(store)
        self.topics: dict[str, PersistentTopic] = {}
        self._opening: dict[str, asyncio.Future[PersistentTopic]] = {}
        self._unloading: set[Bundle] = set()
        self._started = asyncio.Event()
        self.leader_election = LeaderElection(
            store,
            LeaderBroker(me.web_url or me.service_url, lookup_id(me.web_url, me.broker_id)),
        )
        # Namespace policies, watched while topics of theirs are served here.
        self.namespace_policies = NamespacePolicyCache(store, self._namespace_policies_changed)
        self.topic_policies = TopicPolicyCache(store, self._topic_policies_changed)
        self.policy_checks = PolicyChecks(
            lambda: list(self.topics.values()),
            message_expiry_interval_s=self.policies.message_expiry_check_interval_s,
            backlog_quota_interval_s=self.policies.backlog_quota_check_interval_s,
            subscription_expiry_interval_s=self.policies.subscription_expiry_check_interval_s,
            compaction_interval_s=self.policies.compaction_check_interval_s,
            inactive_topic_interval_s=self.policies.inactive_topic_check_interval_s,
            delete_topic=self._delete_inactive_topic,
        )

    async def start(self) -> None:
        """Make the default tenant and namespace if need be, register this broker and join
        the leader election."""
        await initialize_cluster_metadata(self.store, self.cluster, self.me)
        await self.ownership.register()
        self.leader_election.start()
        self.policy_checks.start()
        self._started.set()

    async def _check_namespace(self, topic_name: TopicName) -> None:
        """``NamespaceNotFoundError`` unless the topic's namespace exists; a request that
        came in while the broker starts waits for the defaults to be made first."""
        if not self._started.is_set():
            try:
                await asyncio.wait_for(self._started.wait(), STARTUP_WAIT_S)
            except TimeoutError:
                raise BrokerError(pb.ServiceNotReady, "the broker is starting") from None
        await check_namespace(self.store, topic_name.namespace_name)

    async def effective_policies(
        self, topic_name: TopicName, *, watch: bool = True
    ) -> EffectivePolicies:
        """The policies a topic obeys here: its namespace's, else this broker's settings.
        ``watch``: keep them fresh from now on (for a topic served here); without it a
        namespace not watched yet is read once, and not watched.

        Raises ``NamespaceNotFoundError`` if the namespace does not exist."""
        policies = await self.namespace_policies.get(topic_name.namespace_name, watch=watch)
        own = await self.topic_policies.get(topic_policies_key(topic_name), watch=watch)
        return self._resolve(policies, own)

    def _resolve(self, namespace: Policies, own: TopicLevelPolicies) -> EffectivePolicies:
        """A topic's own policies, else its namespace's, else this broker's settings."""
        return resolve(own.over(namespace, self.cluster), self.policies, self.cluster)

    async def _namespace_policies_changed(self, namespace: str, policies: Policies) -> None:
        """Apply a namespace's changed policies to its topics served here, live (each
        with its own policies as cached now)."""
        await self._reapply(
            lambda name: name.namespace_name == namespace,
            lambda name: self._resolve(policies, self._own_policies(name)),
        )

    async def _topic_policies_changed(self, key: str, own: TopicLevelPolicies) -> None:
        """Apply a topic's changed policies to it (each of its partitions served here),
        over its namespace's as cached now (a namespace no longer cached serves nothing
        here: nothing to apply)."""

        def effective(name: TopicName) -> EffectivePolicies | None:
            namespace = self.namespace_policies.cached(name.namespace_name)
            return None if namespace is None else self._resolve(namespace, own)

        await self._reapply(lambda name: topic_policies_key(name) == key, effective)

    def _own_policies(self, name: TopicName) -> TopicLevelPolicies:
        return self.topic_policies.cached(topic_policies_key(name)) or TopicLevelPolicies()

    async def _reapply(
        self,
        which: Callable[[TopicName], bool],
        effective: Callable[[TopicName], EffectivePolicies | None],
    ) -> None:
        """Apply changed policies to the topics served here that ``which`` picks: each
        on its own (one that fails is logged and the others still change), topics that
        are closing or being deleted left out."""
        for topic in list(self.topics.values()):
            if not which(topic.topic_name) or not topic.serving:
                continue
            policies = effective(topic.topic_name)
            if policies is None:
                continue
            try:
                await topic.apply_policies(policies)
            except StripeMQError as exc:
                log.warning("[%s] changed policies not applied: %s", topic.name, exc)
            except Exception:
                log.exception("[%s] changed policies not applied", topic.name)

    def _retain_policy_watches(self) -> None:
        """Watch only the namespaces and topics served here, or being opened."""
        names = [t.topic_name for t in self.topics.values()]
        names += [TopicName.parse(name) for name in self._opening]
        self.namespace_policies.retain({name.namespace_name for name in names})
        self.topic_policies.retain({topic_policies_key(name) for name in names})

    async def topics_of_namespace(self, namespace: str) -> list[str]:
        """Every persistent topic of a namespace that has been created (partitions by name)."""
        tenant, _, local_namespace = namespace.partition("/")
        if not tenant or not local_namespace or "/" in local_namespace:
            raise BrokerError(pb.MetadataError, f"invalid namespace {namespace!r}")
        names = await self.factory.names_under(f"{namespace}/persistent")
        return sorted(str(TopicName.from_managed_ledger_name(name)) for name in names)

    async def partitions(self, topic_name: TopicName) -> int:
        """Partitions of a topic, making it partitioned first if policy says so.

        Raises ``UnsupportedTopicError`` (non-persistent) or ``NamespaceNotFoundError``."""
        check_topic_supported(topic_name)
        if topic_name.partition_index >= 0:
            await self._check_namespace(topic_name)
            return 0  # a partition is a topic of its own, not partitioned (as in Pulsar)
        count = await partition_count(self.store, topic_name)
        if count:
            return count
        await self._check_namespace(topic_name)
        # Read, not watched: a client may ask about any namespace, served here or not.
        policies = await self.effective_policies(topic_name, watch=False)
        if not policies.auto_create or not policies.auto_create_partitions:
            return 0
        if await self.factory.exists(topic_name.managed_ledger_name):
            return 0  # a topic that already exists unpartitioned
        await self.check_room_for_topics(topic_name, policies.auto_create_partitions)
        with contextlib.suppress(PartitionedTopicExistsError):
            await create_partitioned_topic(self.store, topic_name, policies.auto_create_partitions)
        return await partition_count(self.store, topic_name)

    async def _check_may_open(self, topic_name: TopicName) -> None:
        """Auto-creation policy and the namespace's topic limit; the namespace was checked
        before its bundle was taken."""
        index = topic_name.partition_index
        if 0 <= index < await partition_count(self.store, topic_name):
            return  # a partition of a declared partitioned topic (counted with it)
        if await self.factory.exists(topic_name.managed_ledger_name):
            return
        if not (await self.effective_policies(topic_name)).auto_create:
            raise BrokerError(pb.TopicNotFound, f"topic {topic_name} does not exist")
        await self.check_room_for_topics(topic_name, 1)

    async def check_room_for_topics(self, topic_name: TopicName, adding: int) -> None:
        """Raises ``BrokerError(NotAllowedError)`` (412 over REST) when ``adding`` more
        topics (partitions) would take the topic's namespace past maxTopicsPerNamespace."""
        policies = await self.effective_policies(topic_name, watch=False)
        limit = policies.max_topics_per_namespace
        if limit <= 0:
            return
        held = await count_topics(self.store, topic_name.namespace_name)
        if held + adding > limit:
            log.warning(
                "creating %s refused: namespace %s holds %d topics of at most %d",
                topic_name,
                topic_name.namespace_name,
                held,
                limit,
            )
            raise BrokerError(pb.NotAllowedError, "Exceed maximum number of topics in namespace.")

    async def bundle_of(self, topic_name: TopicName) -> Bundle:
        """The topic's bundle, by its namespace's bundle count (``Policies.bundles``, fixed
        when the namespace is made): from the policy cache, else read (not watched).

        Raises ``NamespaceNotFoundError``, having written nothing."""
        policies = self.namespace_policies.cached(topic_name.namespace_name)
        if policies is None:
            await self._check_namespace(topic_name)
            policies = await self.namespace_policies.get(topic_name.namespace_name, watch=False)
        return bundle_of(topic_name, policies.bundles)

    async def lookup(self, topic_name: TopicName, authoritative: bool) -> str:
        """The service URL of the broker that serves (or is to serve) the topic.

        Raises ``UnsupportedTopicError`` (non-persistent) or ``NamespaceNotFoundError``,
        having written nothing."""
        return (await self.lookup_broker(topic_name, authoritative)).service_url

    async def lookup_broker(self, topic_name: TopicName, authoritative: bool) -> BrokerInfo:
        """The broker that serves (or is to serve) the topic, with all its URLs.

        Raises ``UnsupportedTopicError`` (non-persistent) or ``NamespaceNotFoundError``,
        having written nothing."""
        check_topic_supported(topic_name)
        bundle = await self.bundle_of(topic_name)
        owner = await self.ownership.owner_info(bundle)
        if owner is not None:
            return owner
        await self._check_namespace(topic_name)
        if not authoritative:
            target = await self.ownership.least_loaded()
            if target.service_url != self.service_url:
                return target  # that broker takes it when the client asks it (authoritative)
        return await self.ownership.acquire(bundle)

    async def get_topic(self, topic_name: TopicName) -> PersistentTopic:
        """The topic, opened here; ``ServiceNotReady`` if another broker owns its bundle.

        Raises ``UnsupportedTopicError`` (non-persistent) or ``NamespaceNotFoundError``
        before its bundle is taken (a bundle owned here is of a namespace that exists)."""
        check_topic_supported(topic_name)
        bundle = await self.bundle_of(topic_name)
        if bundle in self._unloading:
            raise BrokerError(pb.ServiceNotReady, f"{topic_name} is being unloaded")
        if bundle not in self.ownership.owned:
            await self._check_namespace(topic_name)
        owner = await self.ownership.try_acquire(bundle)
        if owner != self.service_url:
            raise BrokerError(
                pb.ServiceNotReady, f"{topic_name} is served by {owner}, not by this broker"
            )
        name = str(topic_name)
        topic = self.topics.get(name)
        if topic is not None and topic.lifecycle is not TopicLifecycle.OPEN:
            # Closing or being deleted: never a second instance beside it; clients retry.
            raise BrokerError(pb.ServiceNotReady, f"{topic_name} is {topic.lifecycle.value}")
        if topic is not None and topic.serving:
            topic.last_active_ms = now_ms()  # a client is on its way: not inactive
            return topic
        opening = self._opening.get(name)
        if opening is None:
            opening = asyncio.ensure_future(self._open(topic_name))
            self._opening[name] = opening
            opening.add_done_callback(functools.partial(self._opened, name))
        return await asyncio.shield(opening)

    def _opened(self, name: str, opening: asyncio.Future[PersistentTopic]) -> None:
        self._opening.pop(name, None)
        if opening.cancelled() or opening.exception() is not None:
            self._retain_policy_watches()  # the watches it started serve nothing now

    async def _open(self, topic_name: TopicName) -> PersistentTopic:
        await self._check_may_open(topic_name)
        # Its namespace's and its own policies (retention, rates, deduplication...), kept
        # up to date by the caches' watches from now on; read first, as the ledger the
        # managed ledger opens with is written with their persistence.
        namespace, key = topic_name.namespace_name, topic_policies_key(topic_name)
        policies = await self.namespace_policies.get(namespace)
        own = await self.topic_policies.get(key)
        effective = self._resolve(policies, own)
        ml = await self.factory.open(
            topic_name.managed_ledger_name,
            persistence=effective.persistence.for_ledgers() if effective.persistence else None,
        )
        topic = PersistentTopic(
            topic_name,
            ml,
            self.policies.delayed_delivery,
            schemas=self.schemas,
            compaction_retain_null_key=self.policies.compaction_retain_null_key,
        )
        try:
            await topic.apply_policies(effective)
            await topic.wait_for_deduplication()
        except BaseException:
            with contextlib.suppress(StripeMQError):
                await topic.close()  # opened for nothing: the next request opens it again
            raise
        self.topics[str(topic_name)] = topic
        # A change applied to the namespace's topics while this one was opening missed it:
        # from here on the watch reaches it, and what changed before is applied now.
        latest = self.namespace_policies.cached(namespace) or policies
        latest_own = self.topic_policies.cached(key) or own
        if latest is not policies or latest_own is not own:
            await topic.apply_policies(self._resolve(latest, latest_own))
        log.info("serving topic %s", topic_name)
        return topic

    # ------------------------------------------------------------------ admin operations

    async def create_topic(self, topic_name: TopicName) -> None:
        """Create a non-partitioned topic: its managed ledger's node (the topic opens on
        first use, on whichever broker serves it then).

        Raises ``NodeExistsError`` if it exists, ``NamespaceNotFoundError``."""
        check_topic_supported(topic_name)
        await self._check_namespace(topic_name)
        await self.check_room_for_topics(topic_name, 1)
        path = managed_ledger_path(topic_name.managed_ledger_name)
        await self.store.create(path, LedgerList().encode())
        log.info("created topic %s", topic_name)

    async def open_existing(self, topic_name: TopicName) -> PersistentTopic:
        """The topic, loaded here (its bundle taken as ``get_topic`` does) if it exists:
        created, or a partition of a partitioned topic. Raises ``TopicNotFound`` otherwise;
        nothing is created for a topic that does not exist."""
        topic = self.topics.get(str(topic_name))
        if topic is None or not topic.serving:
            exists = await self.factory.exists(topic_name.managed_ledger_name)
            index = topic_name.partition_index
            if not exists and not 0 <= index < await partition_count(self.store, topic_name):
                raise BrokerError(pb.TopicNotFound, f"Topic {topic_name} not found")
        return await self.get_topic(topic_name)

    async def delete_topic(self, topic_name: TopicName, *, force: bool = False) -> None:
        """Delete a topic served here (its managed ledger, cursors and ledgers); see
        ``PersistentTopic.delete`` for ``force``. Raises ``TopicNotFound``."""
        topic = await self.open_existing(topic_name)
        await topic.delete(force=force)
        if self.topics.get(str(topic_name)) is topic:
            del self.topics[str(topic_name)]
        self._retain_policy_watches()
        if topic_name.partition_index < 0:  # a partition's are its partitioned topic's
            await delete_topic_policies(self.store, topic_name)

    async def _delete_inactive_topic(self, topic: PersistentTopic) -> None:
        """The inactive-topic check's deletion of ``topic``; a partitioned topic whose
        partitions are all gone then goes too, if the broker says so (Pulsar's
        brokerDeleteInactivePartitionedTopicMetadataEnabled)."""
        name = topic.topic_name
        await self.delete_topic(name)
        if name.partition_index < 0 or not self.policies.delete_inactive_partitioned_metadata:
            return
        base = name.partitioned_topic
        for index in range(await partition_count(self.store, base)):
            if await self.factory.exists(base.partition(index).managed_ledger_name):
                return  # a partition still there (active, or not deleted yet)
        await self.schemas.delete_all(schema_id(base))
        with contextlib.suppress(NotFoundError):
            await self.store.delete(partitions_path(base))
        await delete_topic_policies(self.store, base)
        log.info("deleted partitioned topic %s: every partition was inactive", base)

    async def unload_topic(self, topic_name: TopicName) -> None:
        """Close one topic (Pulsar's topic unload): its clients are disconnected and
        reconnect, which loads it again. Raises ``TopicNotFound`` for no such topic."""
        topic = self.topics.get(str(topic_name))
        if topic is None:
            if not await self.factory.exists(topic_name.managed_ledger_name):
                raise BrokerError(pb.TopicNotFound, f"Topic {topic_name} not found")
            return  # not loaded: nothing to unload
        await topic.close(disconnect=True)  # refuses new clients before telling these
        if self.topics.get(str(topic_name)) is topic:
            del self.topics[str(topic_name)]
        self._retain_policy_watches()
        log.info("unloaded topic %s", topic_name)

    async def unload(self, bundle: Bundle) -> list[str]:
        """Stop serving a bundle: its clients are disconnected (they look it up again), its
        topics closed cleanly, and its ownership given up. Returns the topics closed."""
        self._unloading.add(bundle)
        try:
            closed = []
            for name, topic in list(self.topics.items()):
                if not bundle.contains(topic.topic_name):
                    continue
                try:
                    await topic.close(disconnect=True)
                except Exception:  # the others still close, and the bundle is released
                    log.exception("closing topic %s failed", name)
                if self.topics.get(name) is topic:
                    del self.topics[name]
                closed.append(name)
            await self.ownership.release(bundle)
            self._retain_policy_watches()
            log.info(
                "unloaded bundle %s/%s (%d topics)", bundle.namespace, bundle.name, len(closed)
            )
            return closed
        finally:
            self._unloading.discard(bundle)

    async def abandon(self) -> None:
        """The metadata session is lost: drop every topic without writing anything."""
        await self.leader_election.stop(release=False)
        await self.policy_checks.stop()
        await self.namespace_policies.close()
        await self.topic_policies.close()
        for topic in list(self.topics.values()):
            await topic.abandon()
        self.topics.clear()
        self.factory.abandon()

    async def close(self) -> None:
        """Close every topic (persisting cursors), then give the bundles up."""
        try:
            await self.leader_election.stop()
        except StripeMQError as exc:  # the session may be gone: the node goes with it
            log.warning("could not leave the leader election: %s", exc)
        await self.policy_checks.stop()
        await self.namespace_policies.close()
        await self.topic_policies.close()
        for topic in list(self.topics.values()):
            try:
                await topic.close()
            except Exception:  # the others still close, and the bundles are released
                log.exception("closing topic %s failed", topic.name)
        self.topics.clear()
        await self.factory.close()
        try:
            await self.ownership.release_all()
        except StripeMQError as exc:  # the session may be gone: the nodes go with it
            log.warning("could not release bundle ownership: %s", exc)
