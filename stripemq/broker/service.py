"""The topics this broker serves, opened on demand on one metadata store and ledger client."""

from __future__ import annotations

import asyncio
import logging

from stripemq.bookie.client import BookKeeper
from stripemq.broker.managed_ledger import ManagedLedgerFactory
from stripemq.broker.managed_ledger_config import ManagedLedgerConfig
from stripemq.broker.topic import PersistentTopic
from stripemq.broker.topic_name import TopicName
from stripemq.metadata import MetadataStore

log = logging.getLogger(__name__)


class BrokerService:
    """Opens each topic once (its managed ledger), however many clients ask at once."""

    def __init__(
        self,
        store: MetadataStore,
        bk: BookKeeper,
        service_url: str,
        ml_config: ManagedLedgerConfig | None = None,
    ) -> None:
        self.store = store
        self.bk = bk
        self.service_url = service_url
        self.factory = ManagedLedgerFactory(store, bk, ml_config)
        self.topics: dict[str, PersistentTopic] = {}
        self._opening: dict[str, asyncio.Future[PersistentTopic]] = {}

    async def get_topic(self, topic_name: TopicName) -> PersistentTopic:
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
        self.topics[str(topic_name)] = topic
        log.info("serving topic %s", topic_name)
        return topic

    async def close(self) -> None:
        for topic in list(self.topics.values()):
            await topic.close()
        self.topics.clear()
        await self.factory.close()
