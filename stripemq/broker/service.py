"""The topics this broker serves, opened on demand on one metadata store and ledger client,
and only while this broker owns their bundle."""

from __future__ import annotations

import asyncio
import logging

from stripemq.bookie.client import BookKeeper
from stripemq.broker.dedup import Deduplication
from stripemq.broker.managed_ledger import ManagedLedgerFactory
from stripemq.broker.managed_ledger_config import ManagedLedgerConfig
from stripemq.broker.ownership import BrokerInfo, Ownership, bundle_of
from stripemq.broker.topic import BrokerError, PersistentTopic
from stripemq.broker.topic_name import TopicName
from stripemq.errors import StripeMQError
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)


class BrokerService:
    """Opens each topic once (its managed ledger), however many clients ask at once."""

    def __init__(
        self,
        store: MetadataStore,
        bk: BookKeeper,
        me: BrokerInfo,
        ml_config: ManagedLedgerConfig | None = None,
        *,
        deduplication: bool = False,
    ) -> None:
        self.store = store
        self.bk = bk
        self.service_url = me.service_url
        self.ownership = Ownership(store, me)
        self.deduplication = deduplication
        self.factory = ManagedLedgerFactory(store, bk, ml_config)
        self.topics: dict[str, PersistentTopic] = {}
        self._opening: dict[str, asyncio.Future[PersistentTopic]] = {}

    async def start(self) -> None:
        await self.ownership.register()

    async def lookup(self, topic_name: TopicName, authoritative: bool) -> str:
        """The service URL of the broker that serves (or is to serve) the topic."""
        bundle = bundle_of(topic_name)
        owner = await self.ownership.owner_of(bundle)
        if owner is not None:
            return owner
        if not authoritative:
            target = await self.ownership.least_loaded_broker()
            if target != self.service_url:
                return target  # that broker takes it when the client asks it (authoritative)
        return await self.ownership.try_acquire(bundle)

    async def get_topic(self, topic_name: TopicName) -> PersistentTopic:
        """The topic, opened here; ``ServiceNotReady`` if another broker owns its bundle."""
        owner = await self.ownership.try_acquire(bundle_of(topic_name))
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
        ml = await self.factory.open(topic_name.managed_ledger_name)
        topic = PersistentTopic(topic_name, ml)
        if self.deduplication:
            topic.dedup = Deduplication(ml)
            await topic.dedup.start()
        self.topics[str(topic_name)] = topic
        log.info("serving topic %s", topic_name)
        return topic

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
