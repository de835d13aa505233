"""The topics this broker serves, opened on demand on one metadata store and ledger client,
and only while this broker owns their bundle.

A topic of a namespace that does not exist, or a ``non-persistent://`` one, is refused by
lookup, partitioned metadata and topic use alike, before anything is written to the
metadata store: the checks read, and only then is a bundle acquired or a topic created.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from stripemq.bookie.client import BookKeeper
from stripemq.broker.cluster_metadata import initialize_cluster_metadata
from stripemq.broker.config import DelayedDeliveryConfig
from stripemq.broker.dedup import Deduplication
from stripemq.broker.names import check_topic_supported
from stripemq.broker.namespaces import check_namespace
from stripemq.broker.ownership import BrokerInfo, Bundle, Ownership, bundle_of
from stripemq.broker.partitions import (
    PartitionedTopicExistsError,
    create_partitioned_topic,
    partition_count,
)
from stripemq.broker.topic import PersistentTopic
from stripemq.errors import BrokerError, StripeMQError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.managed_ledger import ManagedLedgerFactory
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import TopicName

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
        self.topics: dict[str, PersistentTopic] = {}
        self._opening: dict[str, asyncio.Future[PersistentTopic]] = {}
        self._unloading: set[Bundle] = set()
        self._started = asyncio.Event()

    async def start(self) -> None:
        """Make the default tenant and namespace if need be, and register this broker."""
        await initialize_cluster_metadata(self.store, self.cluster, self.me)
        await self.ownership.register()
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
        if not self.policies.auto_create or not self.policies.auto_create_partitioned:
            return 0
        if await self.factory.exists(topic_name.managed_ledger_name):
            return 0  # a topic that already exists unpartitioned
        with contextlib.suppress(PartitionedTopicExistsError):
            await create_partitioned_topic(self.store, topic_name, self.policies.default_partitions)
        return await partition_count(self.store, topic_name)

    async def _check_may_open(self, topic_name: TopicName) -> None:
        """Auto-creation policy; the namespace was checked before its bundle was taken."""
        if self.policies.auto_create:
            return
        if topic_name.partition_index >= 0 and await partition_count(self.store, topic_name):
            return  # a partition of a declared partitioned topic
        if not await self.factory.exists(topic_name.managed_ledger_name):
            raise BrokerError(pb.TopicNotFound, f"topic {topic_name} does not exist")

    async def lookup(self, topic_name: TopicName, authoritative: bool) -> str:
        """The service URL of the broker that serves (or is to serve) the topic.

        Raises ``UnsupportedTopicError`` (non-persistent) or ``NamespaceNotFoundError``,
        having written nothing."""
        check_topic_supported(topic_name)
        bundle = bundle_of(topic_name)
        owner = await self.ownership.owner_of(bundle)
        if owner is not None:
            return owner
        await self._check_namespace(topic_name)
        if not authoritative:
            target = await self.ownership.least_loaded_broker()
            if target != self.service_url:
                return target  # that broker takes it when the client asks it (authoritative)
        return await self.ownership.try_acquire(bundle)

    async def get_topic(self, topic_name: TopicName) -> PersistentTopic:
        """The topic, opened here; ``ServiceNotReady`` if another broker owns its bundle.

        Raises ``UnsupportedTopicError`` (non-persistent) or ``NamespaceNotFoundError``
        before its bundle is taken (a bundle owned here is of a namespace that exists)."""
        check_topic_supported(topic_name)
        bundle = bundle_of(topic_name)
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
        if topic is not None and not topic.ml.closed and not topic.ml.fenced:
            return topic
        opening = self._opening.get(name)
        if opening is None:
            opening = asyncio.ensure_future(self._open(topic_name))
            self._opening[name] = opening
            opening.add_done_callback(lambda _f: self._opening.pop(name, None))
        return await asyncio.shield(opening)

    async def _open(self, topic_name: TopicName) -> PersistentTopic:
        await self._check_may_open(topic_name)
        ml = await self.factory.open(topic_name.managed_ledger_name)
        topic = PersistentTopic(topic_name, ml, self.policies.delayed_delivery)
        if self.policies.deduplication:
            topic.dedup = Deduplication(ml)
            await topic.dedup.start()
        self.topics[str(topic_name)] = topic
        log.info("serving topic %s", topic_name)
        return topic

    async def unload(self, bundle: Bundle) -> list[str]:
        """Stop serving a bundle: its clients are disconnected (they look it up again), its
        topics closed cleanly, and its ownership given up. Returns the topics closed."""
        self._unloading.add(bundle)
        try:
            closed = []
            for name, topic in list(self.topics.items()):
                if bundle_of(topic.topic_name) != bundle:
                    continue
                topic.disconnect_clients()
                await topic.close()
                self.topics.pop(name, None)
                closed.append(name)
            await self.ownership.release(bundle)
            log.info(
                "unloaded bundle %s/%s (%d topics)", bundle.namespace, bundle.name, len(closed)
            )
            return closed
        finally:
            self._unloading.discard(bundle)

    async def abandon(self) -> None:
        """The metadata session is lost: drop every topic without writing anything."""
        for topic in list(self.topics.values()):
            await topic.abandon()
        self.topics.clear()
        self.factory.abandon()

    async def close(self) -> None:
        """Close every topic (persisting cursors), then give the bundles up."""
        for topic in list(self.topics.values()):
            await topic.close()
        self.topics.clear()
        await self.factory.close()
        try:
            await self.ownership.release_all()
        except StripeMQError as exc:  # the session may be gone: the nodes go with it
            log.warning("could not release bundle ownership: %s", exc)
