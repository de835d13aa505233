"""Inactive topic deletion with real processes: ZooKeeper, two bookie processes and a broker
(in this process) that checks every half second and deletes topics inactive for a second,
driven by the official ``pulsar-client``. A topic its producer left, with no subscription,
goes with its ledgers; one with a subscription stays."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from stripemq.bookie.client.ledger_manager import ledger_path
from stripemq.broker.policies import InactiveTopicDeleteMode, InactiveTopicPolicies
from stripemq.broker.server import BrokerServer
from stripemq.broker.service import TopicPolicies
from stripemq.managed_ledger.ledger_list import managed_ledger_path
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName
from stripemq.testing.broker import broker_on_bookies
from stripemq.testing.polling import until

pytestmark = pytest.mark.integration

POLICIES = TopicPolicies(
    inactive_topic_policies=InactiveTopicPolicies(
        True, 1, InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS
    ),
    inactive_topic_check_interval_s=0.5,
)


@pytest.fixture
async def broker(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[BrokerServer]:
    async with broker_on_bookies(metadata_url, store, tmp_path, policies=POLICIES) as server:
        yield server


def produce(url: str, topic: str, subscription: str | None = None) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        if subscription is not None:
            client.subscribe(topic, subscription).close()
        producer = client.create_producer(topic)
        producer.send(b"hello")
        producer.close()
    finally:
        client.close()


async def test_an_inactive_topic_goes_with_its_ledgers(
    broker: BrokerServer, store: MetadataStore
) -> None:
    assert broker.service is not None
    idle, kept = "persistent://public/default/idle", "persistent://public/default/kept"
    await asyncio.to_thread(produce, broker.service_url, idle)
    await asyncio.to_thread(produce, broker.service_url, kept, "keep")
    ledgers = [info.ledger_id for info in broker.service.topics[idle].ml.chain]
    idle_path = managed_ledger_path(TopicName.parse(idle).managed_ledger_name)

    async def idle_deleted() -> bool:
        return await store.exists(idle_path) is None

    await until(idle_deleted, "the idle topic is deleted", timeout=15)
    for ledger_id in ledgers:
        assert await store.exists(ledger_path(ledger_id)) is None
    assert idle not in broker.service.topics
    checks = next(t for t in broker.service.policy_checks.tasks if t.name == "inactive topics")
    target = checks.rounds + 4  # two seconds more: the one with a subscription stays
    await until(lambda: checks.rounds >= target, "four more rounds")
    kept_path = managed_ledger_path(TopicName.parse(kept).managed_ledger_name)
    assert await store.exists(kept_path) is not None
