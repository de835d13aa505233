"""Persistence policies with real processes: three bookie processes, ZooKeeper and a broker
(in this process, to look at its topics) whose own settings are E2/Qw2/Qa2, driven by the
official ``pulsar-client``. A namespace's or topic's persistence decides the quorums of the
ledgers its topics create from then on, and each entry is on that many bookies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.bookie.client.metadata import LedgerMetadata
from stripemq.broker.policies import PersistencePolicies, RetentionPolicies
from stripemq.broker.server import BrokerServer
from stripemq.broker.service import TopicPolicies
from stripemq.broker.topic import PersistentTopic
from stripemq.broker.topic_policies import (
    TopicLevelPolicies,
    topic_policies_key,
    write_topic_policies,
)
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.metadata import MetadataStore
from stripemq.metadata.api import ANY_VERSION
from stripemq.proto.topic_name import TopicName
from stripemq.testing.broker import broker_on_bookies
from stripemq.testing.namespaces import change_policies, fresh_namespace
from stripemq.testing.polling import until

pytestmark = pytest.mark.integration

CLUSTER = "standalone"
BROKER_DEFAULT = PersistencePolicies(2, 2, 2, 1.0)
# Ledgers of ten entries that roll over at once: a change shows in the next one.
LEDGERS = ManagedLedgerConfig(max_entries_per_ledger=10, min_rollover_time_s=0)


@pytest.fixture
async def broker(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[BrokerServer]:
    async with broker_on_bookies(
        metadata_url,
        store,
        tmp_path,
        bookies=3,
        policies=TopicPolicies(persistence=BROKER_DEFAULT),
        ml_config=LEDGERS,
    ) as server:
        yield server


@pytest.fixture
async def namespace(store: MetadataStore) -> str:
    return await fresh_namespace(store, CLUSTER)


def produce(url: str, topic: str, count: int) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send(f"{i:04d}".encode())
        producer.close()
    finally:
        client.close()


def read_all(url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(timeout_millis=10_000).data())
        reader.close()
        return got
    finally:
        client.close()


def served(broker: BrokerServer, topic: str) -> PersistentTopic:
    assert broker.service is not None
    return broker.service.topics[str(TopicName.parse(topic))]


async def ledgers_of(store: MetadataStore, topic: PersistentTopic) -> list[LedgerMetadata]:
    manager = LedgerManager(store)
    return [(await manager.read(info.ledger_id))[0] for info in topic.ml.chain]


def quorums(metadata: LedgerMetadata) -> tuple[int, int, int]:
    return metadata.ensemble_size, metadata.write_quorum_size, metadata.ack_quorum_size


async def test_a_namespaces_persistence_decides_its_topics_quorums(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    url, topic = broker.service_url, f"persistent://{namespace}/orders"
    await change_policies(
        store,
        namespace,
        persistence=PersistencePolicies(3, 3, 3, 0.0),
        retention=RetentionPolicies(-1, -1),  # every ledger is kept, to be looked at
    )
    await asyncio.to_thread(produce, url, topic, 5)
    first = (await ledgers_of(store, served(broker, topic)))[-1]
    assert quorums(first) == (3, 3, 3)
    assert len(set(first.ensembles[0])) == 3  # striped over the three bookies
    # Changed on the live topic: the next ledger (after ten entries) has the new quorums.
    await change_policies(store, namespace, persistence=PersistencePolicies(3, 2, 2, 2.0))
    ml = served(broker, topic).ml
    await until(lambda: ml.persistence.write_quorum_size == 2, "the change is applied")
    assert ml.cursor_env.config.snapshot_interval_ms == 500  # two mark-deletes a second
    await asyncio.to_thread(produce, url, topic, 10)
    assert quorums((await ledgers_of(store, served(broker, topic)))[-1]) == (3, 2, 2)
    # Removed: the broker's own settings, from the next ledger on.
    await change_policies(store, namespace, persistence=None)
    await until(lambda: ml.persistence.ensemble_size == 2, "the broker's settings apply")
    await asyncio.to_thread(produce, url, topic, 10)
    chain = await ledgers_of(store, served(broker, topic))
    assert quorums(chain[-1]) == (2, 2, 2)
    assert quorums(chain[0]) == (3, 3, 3)  # earlier ledgers keep theirs
    messages = await asyncio.to_thread(read_all, url, topic)
    assert messages == [f"{i:04d}".encode() for n in (5, 10, 10) for i in range(n)]


async def test_a_topics_own_persistence_wins_over_its_namespaces(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    url, topic = broker.service_url, f"persistent://{namespace}/payments"
    await change_policies(store, namespace, persistence=PersistencePolicies(3, 3, 2, 0.0))
    name = TopicName.parse(topic)
    own = TopicLevelPolicies(persistence=PersistencePolicies(1, 1, 1, 0.0))
    await asyncio.to_thread(produce, url, topic, 1)  # the topic exists
    await write_topic_policies(store, topic_policies_key(name), own, ANY_VERSION)
    ml = served(broker, topic).ml
    await until(lambda: ml.persistence.ensemble_size == 1, "the topic's own applies")
    # A reload opens a new ledger at once, with the topic's quorums.
    assert broker.service is not None
    await broker.service.unload_topic(name)
    await asyncio.to_thread(produce, url, topic, 1)
    assert quorums((await ledgers_of(store, served(broker, topic)))[-1]) == (1, 1, 1)
