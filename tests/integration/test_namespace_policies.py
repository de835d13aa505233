"""Namespace policies enforced live, with real processes: ZooKeeper, bookie processes and a
broker (in this process, so that its topics can be looked at), driven by the official
``pulsar-client``; then two broker processes and a standalone over HTTP.

Every policy is written to the metadata store (``write_policies``, as the admin API does)
while the topics it governs are already served: the broker applies it without a restart.
Rates are checked with loose bounds only (at most twice the limit over a few seconds).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pulsar
import pytest

from stripemq.broker.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    DispatchRate,
    PublishRate,
    RetentionPolicies,
)
from stripemq.broker.server import BrokerServer
from stripemq.broker.service import TopicPolicies
from stripemq.broker.topic import PersistentTopic
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName
from stripemq.testing.broker import broker_on_bookies, broker_pair_on_bookies, owner_url
from stripemq.testing.namespaces import change_policies, fresh_namespace
from stripemq.testing.polling import until
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration

CLUSTER = "standalone"
# Checks every half second, so that tests see a policy act within a second or two.
CHECKS = TopicPolicies(message_expiry_check_interval_s=0.5, backlog_quota_check_interval_s=0.5)
# Small ledgers that roll over at once: trimming (and retention) has ledgers to work on.
LEDGERS = ManagedLedgerConfig(max_entries_per_ledger=10, min_rollover_time_s=0)


@pytest.fixture
async def broker(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[BrokerServer]:
    async with broker_on_bookies(
        metadata_url, store, tmp_path, policies=CHECKS, ml_config=LEDGERS
    ) as server:
        yield server


@pytest.fixture
async def namespace(store: MetadataStore) -> str:
    return await fresh_namespace(store, CLUSTER)


async def rounds_pass(broker: BrokerServer, check: str, count: int = 2) -> None:
    """Let ``count`` more rounds of a periodic check finish (to show what it leaves)."""
    assert broker.service is not None
    task = next(t for t in broker.service.policy_checks.tasks if t.name == check)
    target = task.rounds + count
    await until(lambda: task.rounds >= target, f"{count} rounds of the {check} check")


def served(broker: BrokerServer, topic: str) -> PersistentTopic:
    assert broker.service is not None
    return broker.service.topics[str(TopicName.parse(topic))]


def client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=30)


def subscribe_and_leave(url: str, topic: str, subscription: str) -> None:
    """A durable subscription with no consumer: everything published from now is backlog."""
    c = client(url)
    try:
        c.subscribe(topic, subscription).close()
    finally:
        c.close()


def produce(url: str, topic: str, count: int, size: int = 100, name: str | None = None) -> None:
    c = client(url)
    try:
        producer = c.create_producer(topic, producer_name=name, batching_enabled=False)
        for i in range(count):
            producer.send(f"{i:06d}".encode().ljust(size, b"."))
        producer.close()
    finally:
        c.close()


def drain(url: str, topic: str, subscription: str, wait_ms: int = 1500) -> int:
    """How many messages ``subscription`` still delivers (acknowledging them)."""
    c = client(url)
    try:
        consumer = c.subscribe(topic, subscription)
        got = 0
        while True:
            try:
                message = consumer.receive(timeout_millis=wait_ms)
            except pulsar.Timeout:
                break
            consumer.acknowledge(message)
            got += 1
        consumer.close()
        return got
    finally:
        c.close()


# ---------------------------------------------------------------- message TTL


async def test_a_ttl_expires_the_backlog_of_a_served_topic(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    topic = f"persistent://{namespace}/ttl"
    url = broker.service_url
    await asyncio.to_thread(subscribe_and_leave, url, topic, "sub")
    await asyncio.to_thread(produce, url, topic, 20)
    served_topic = served(broker, topic)
    cursor = served_topic.ml.cursors["sub"]
    assert cursor.backlog == 20
    await rounds_pass(broker, "message expiry")  # nothing expires without a TTL
    assert cursor.backlog == 20

    await change_policies(store, namespace, message_ttl_in_seconds=1)
    await until(lambda: cursor.backlog == 0, "the TTL expires the backlog", timeout=20)
    subscription = served_topic.subscriptions["sub"]
    assert subscription.stats.expired.count == 20
    assert await asyncio.to_thread(drain, url, topic, "sub") == 0

    # Removed live: what is published from now on stays.
    await change_policies(store, namespace, message_ttl_in_seconds=None)
    await until(lambda: served_topic.policies.message_ttl_s == 0, "the TTL is removed")
    await asyncio.to_thread(produce, url, topic, 5)
    await rounds_pass(broker, "message expiry")
    assert served_topic.ml.cursors["sub"].backlog == 5


# ---------------------------------------------------------------- backlog quotas


def quota(limit_size: int = -1, limit_time: int = -1, *, policy: str) -> dict[Any, Any]:
    return {
        "backlog_quotas": {
            BacklogQuotaType.DESTINATION_STORAGE
            if limit_size >= 0
            else BacklogQuotaType.MESSAGE_AGE: BacklogQuota(
                limit_size, limit_time, BacklogQuotaPolicy(policy)
            )
        }
    }


async def over_quota_topic(
    broker: BrokerServer, store: MetadataStore, namespace: str, name: str, policy: str
) -> tuple[str, PersistentTopic]:
    """A served topic with 5 KB of backlog, then a 1 KB quota of ``policy`` on it."""
    topic = f"persistent://{namespace}/{name}"
    await asyncio.to_thread(subscribe_and_leave, broker.service_url, topic, "slow")
    await asyncio.to_thread(produce, broker.service_url, topic, 50)
    served_topic = served(broker, topic)
    assert served_topic.estimated_backlog_size() >= 5000
    await change_policies(store, namespace, **quota(1000, policy=policy))
    await until(
        lambda: (
            served_topic.policies.backlog_quota(BacklogQuotaType.DESTINATION_STORAGE).limit_size
            == 1000
        ),
        "the quota reaches the topic",
    )
    return topic, served_topic


def create_producer_outcome(url: str, topic: str, timeout_s: int) -> str:
    """What creating a producer comes to: "created", or the exception's class name."""
    c = pulsar.Client(url, operation_timeout_seconds=timeout_s)
    try:
        producer = c.create_producer(topic, batching_enabled=False)
        producer.send(b"after")
        producer.close()
        return "created"
    except Exception as exc:
        return type(exc).__name__
    finally:
        c.close()


async def test_a_producer_exception_quota_refuses_producers(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    topic, served_topic = await over_quota_topic(
        broker, store, namespace, "refuse", "producer_exception"
    )
    outcome = await asyncio.to_thread(create_producer_outcome, broker.service_url, topic, 10)
    assert outcome == "ProducerBlockedQuotaExceededException"
    assert served_topic.producers == []
    assert await asyncio.to_thread(drain, broker.service_url, topic, "slow") == 50
    # Under the quota again: admitted.
    outcome = await asyncio.to_thread(create_producer_outcome, broker.service_url, topic, 10)
    assert outcome == "created"


async def test_a_producer_request_hold_quota_holds_producers_until_it_clears(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    """Hold: the periodic check disconnects the producer; its reconnections are refused with
    ProducerBlockedQuotaExceededError, which the client retries, its sends waiting in its
    queue; once the backlog is consumed, it is admitted again and the held sends go out.
    A producer created meanwhile is refused with that error (as Pulsar's clients report it)."""
    topic = f"persistent://{namespace}/hold"
    url = broker.service_url
    await asyncio.to_thread(subscribe_and_leave, url, topic, "slow")
    c = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        producer = await asyncio.to_thread(
            c.create_producer, topic, batching_enabled=False, send_timeout_millis=120_000
        )
        served_topic = served(broker, topic)
        for _ in range(50):
            await asyncio.to_thread(producer.send, b"x" * 100)
        await change_policies(store, namespace, **quota(1000, policy="producer_request_hold"))
        await until(lambda: not served_topic.producers, "the check disconnects the producer")

        receipts: list[str] = []
        for _ in range(3):
            producer.send_async(b"held", lambda res, _id: receipts.append(str(res)))
        await rounds_pass(broker, "backlog quota")
        assert receipts == []  # held in the client, which keeps trying to reconnect
        assert served_topic.producers == []
        outcome = await asyncio.to_thread(create_producer_outcome, url, topic, 10)
        assert outcome == "ProducerBlockedQuotaExceededError"

        # Consumed: the quota clears (the held sends may come in before the drain ends).
        assert await asyncio.to_thread(drain, url, topic, "slow") >= 50
        await until(lambda: len(receipts) == 3, "the held sends go out", timeout=60)
        assert receipts == [str(pulsar.Result.Ok)] * 3
        assert len(served_topic.producers) == 1
    finally:
        await asyncio.to_thread(c.close)


def send_refused(producer: pulsar.Producer, count: int) -> int:
    """Send ``count`` messages; how many were refused for the backlog quota."""
    refused = 0
    for _ in range(count):
        try:
            producer.send(b"x" * 100)
        except pulsar.ProducerBlockedQuotaExceededException:
            refused += 1
    return refused


async def test_the_periodic_check_disconnects_producers_of_a_topic_over_quota(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    """Exception: the producer is disconnected once the backlog passes the quota, its
    reconnection is refused, and its sends fail with ProducerBlockedQuotaExceededException."""
    topic = f"persistent://{namespace}/disconnect"
    url = broker.service_url
    await asyncio.to_thread(subscribe_and_leave, url, topic, "slow")
    c = client(url)
    try:
        producer = await asyncio.to_thread(c.create_producer, topic, batching_enabled=False)
        served_topic = served(broker, topic)
        await change_policies(store, namespace, **quota(1000, policy="producer_exception"))
        await asyncio.to_thread(send_refused, producer, 30)  # past the quota
        await until(lambda: not served_topic.producers, "the check disconnects the producer")
        assert await asyncio.to_thread(send_refused, producer, 1) == 1
        assert served_topic.producers == []  # its reconnections are refused
    finally:
        await asyncio.to_thread(c.close)


async def test_a_consumer_backlog_eviction_quota_moves_the_slowest_subscription(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    topic, served_topic = await over_quota_topic(
        broker, store, namespace, "evict", "consumer_backlog_eviction"
    )
    await until(
        lambda: served_topic.estimated_backlog_size() < 1000, "the backlog is evicted", timeout=15
    )
    cursor = served_topic.ml.cursors["slow"]
    assert 0 < cursor.backlog < 50  # moved forward, not emptied
    # Producers are never refused by an eviction quota.
    outcome = await asyncio.to_thread(create_producer_outcome, broker.service_url, topic, 10)
    assert outcome == "created"


async def test_an_age_quota_evicts_messages_older_than_it(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    topic = f"persistent://{namespace}/age"
    await asyncio.to_thread(subscribe_and_leave, broker.service_url, topic, "slow")
    await asyncio.to_thread(produce, broker.service_url, topic, 10)
    served_topic = served(broker, topic)
    await change_policies(
        store, namespace, **quota(limit_time=2, policy="consumer_backlog_eviction")
    )
    cursor = served_topic.ml.cursors["slow"]
    await until(lambda: cursor.backlog == 0, "messages past the age limit go", timeout=15)


# ---------------------------------------------------------------- rates


def publish_rate_observed(url: str, topic: str, count: int) -> float:
    """Messages per second a producer that never waits gets through (receipts)."""
    c = client(url)
    try:
        producer = c.create_producer(topic, batching_enabled=False, max_pending_messages=count + 10)
        producer.send(b"warm-up")
        done: list[float] = []
        all_done = threading.Event()

        def receipt(_res: object, _id: object) -> None:
            done.append(time.monotonic())
            if len(done) == count:
                all_done.set()

        start = time.monotonic()
        for i in range(count):
            producer.send_async(f"{i}".encode(), receipt)
        producer.flush()
        assert all_done.wait(60), f"{len(done)} of {count} receipts"
        elapsed = max(done) - start
        producer.close()
        return count / elapsed
    finally:
        c.close()


async def test_a_publish_rate_throttles_producers(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    topic = f"persistent://{namespace}/publish-rate"
    await asyncio.to_thread(produce, broker.service_url, topic, 1)  # served before the policy
    served_topic = served(broker, topic)
    await change_policies(store, namespace, publish_rates={CLUSTER: PublishRate(50, -1)})
    await until(lambda: served_topic.publish_limiter is not None, "the rate reaches the topic")
    rate = await asyncio.to_thread(publish_rate_observed, broker.service_url, topic, 150)
    assert rate < 100, f"{rate:.0f} msg/s with a limit of 50"
    # Lifted live.
    await change_policies(store, namespace, publish_rates={})
    await until(lambda: served_topic.publish_limiter is None, "the rate is lifted")


def dispatch_rate_observed(url: str, topic: str, subscription: str, count: int) -> float:
    """Messages per second a consumer that takes everything at once is sent."""
    c = client(url)
    try:
        consumer = c.subscribe(topic, subscription, receiver_queue_size=1000)
        first = consumer.receive(timeout_millis=20_000)
        consumer.acknowledge(first)
        start = time.monotonic()
        for _ in range(count - 1):
            consumer.acknowledge(consumer.receive(timeout_millis=20_000))
        elapsed = time.monotonic() - start
        consumer.close()
        return (count - 1) / elapsed
    finally:
        c.close()


@pytest.mark.parametrize("level", ["topic", "subscription"])
async def test_a_dispatch_rate_throttles_consumers(
    broker: BrokerServer, store: MetadataStore, namespace: str, level: str
) -> None:
    topic = f"persistent://{namespace}/dispatch-rate"
    url = broker.service_url
    await asyncio.to_thread(subscribe_and_leave, url, topic, "sub")
    await asyncio.to_thread(produce, url, topic, 151)
    served_topic = served(broker, topic)
    rate = {CLUSTER: DispatchRate(50, -1, 1)}
    if level == "topic":
        await change_policies(store, namespace, dispatch_rates=rate)
        await until(lambda: served_topic.dispatch_limiter is not None, "the rate is applied")
    else:
        await change_policies(store, namespace, subscription_dispatch_rates=rate)
        await until(
            lambda: (
                served_topic.policies.subscription_dispatch_rate.dispatch_throttling_rate_in_msg
                == 50
            ),
            "the rate is applied",
        )
    observed = await asyncio.to_thread(dispatch_rate_observed, url, topic, "sub", 151)
    assert observed < 100, f"{observed:.0f} msg/s with a limit of 50"


# ---------------------------------------------------------------- retention


async def test_retention_keeps_consumed_ledgers_until_it_is_lifted(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    topic = f"persistent://{namespace}/retention"
    url = broker.service_url
    await asyncio.to_thread(subscribe_and_leave, url, topic, "sub")
    served_topic = served(broker, topic)
    await change_policies(store, namespace, retention=RetentionPolicies(60, 100))
    await until(lambda: served_topic.ml.retention[0] == 3600, "retention reaches the topic")
    await asyncio.to_thread(produce, url, topic, 45)  # 10 entries a ledger: 5 ledgers
    assert await asyncio.to_thread(drain, url, topic, "sub") == 45
    ml = served_topic.ml
    cursor = ml.cursors["sub"]
    await until(lambda: cursor.persisted_mark_delete == ml.last_confirmed, "the acks are persisted")
    ledgers = len(ml.chain)
    assert ledgers >= 5
    assert await ml.trim() == []  # consumed, yet kept
    assert len(ml.chain) == ledgers

    await change_policies(store, namespace, retention=RetentionPolicies(0, 0))
    await until(lambda: len(ml.chain) <= 1, "consumed ledgers are trimmed", timeout=20)


# ---------------------------------------------------------------- deduplication


def send_with_ids(url: str, topic: str, name: str, ids: list[int]) -> None:
    c = client(url)
    try:
        producer = c.create_producer(topic, producer_name=name, batching_enabled=False)
        for sequence_id in ids:
            producer.send(f"seq-{sequence_id}".encode(), sequence_id=sequence_id)
        producer.close()
    finally:
        c.close()


async def test_deduplication_is_switched_on_and_off_live(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    topic = f"persistent://{namespace}/dedup"
    url = broker.service_url
    await asyncio.to_thread(send_with_ids, url, topic, "p", [0, 1, 2])
    served_topic = served(broker, topic)
    ml = served_topic.ml
    await asyncio.to_thread(send_with_ids, url, topic, "p", [0, 1, 2])
    assert ml.entries_added == 6  # off (the broker's default): resends are stored

    await change_policies(store, namespace, deduplication_enabled=True)
    await until(lambda: served_topic.dedup is not None, "deduplication is switched on")
    await asyncio.to_thread(send_with_ids, url, topic, "p", [3, 4, 5])
    await asyncio.to_thread(send_with_ids, url, topic, "p", [3, 4, 5])
    assert ml.entries_added == 9  # the resends are acknowledged, not stored

    await change_policies(store, namespace, deduplication_enabled=False)
    await until(lambda: served_topic.dedup is None, "deduplication is switched off")
    await asyncio.to_thread(send_with_ids, url, topic, "p", [3, 4, 5])
    assert ml.entries_added == 12


# ---------------------------------------------------------------- auto topic creation


def producer_on(url: str, topic: str) -> str:
    return create_producer_outcome(url, topic, 10)


async def test_auto_topic_creation_off_refuses_unknown_topics(
    broker: BrokerServer, store: MetadataStore, namespace: str
) -> None:
    url = broker.service_url
    existing = f"persistent://{namespace}/existing"
    assert await asyncio.to_thread(producer_on, url, existing) == "created"
    await change_policies(store, namespace, auto_topic_creation=AutoTopicCreationOverride(False))
    await until(
        lambda: not served(broker, existing).policies.auto_create, "the override is applied"
    )
    unknown = f"persistent://{namespace}/unknown"
    assert await asyncio.to_thread(producer_on, url, unknown) == "TopicNotFound"
    assert await asyncio.to_thread(producer_on, url, existing) == "created"
    # Back to the broker's setting (on): created on use again.
    await change_policies(store, namespace, auto_topic_creation=None)
    await until(lambda: served(broker, existing).policies.auto_create, "the override is gone")
    assert await asyncio.to_thread(producer_on, url, unknown) == "created"


# ---------------------------------------------------------------- every broker


async def test_every_broker_applies_a_policy_to_the_topics_it_serves(
    metadata_url: str, store: MetadataStore, namespace: str, tmp_path: Path
) -> None:
    settings = {"message_expiry_check_interval_in_minutes": 0.01}  # 0.6 s
    async with broker_pair_on_bookies(metadata_url, tmp_path, settings, bookies=2) as pair:
        urls = {b.service_url for b in pair}
        service_url = pair[0].service_url
        topics: dict[str, str] = {}  # a topic served by each broker
        for i in range(40):
            topic = f"persistent://{namespace}/spread-{i}"
            await asyncio.to_thread(subscribe_and_leave, service_url, topic, "sub")
            owner = await owner_url(store, topic)
            assert owner is not None
            topics.setdefault(owner, topic)
            if set(topics) == urls:
                break
        assert set(topics) == urls, "topics landed on both brokers"
        for topic in topics.values():
            await asyncio.to_thread(produce, service_url, topic, 10)
        for owner, topic in topics.items():
            web = next(b.web_url for b in pair if b.service_url == owner)
            assert await subscription_backlog(web, topic, "sub") == 10
        await change_policies(store, namespace, message_ttl_in_seconds=1)
        for owner, topic in topics.items():
            web = next(b.web_url for b in pair if b.service_url == owner)
            await until(
                lambda web=web, topic=topic: backlog_is(
                    lambda: subscription_backlog(web, topic, "sub"), 0
                ),
                f"{owner} expires the backlog of {topic}",
                timeout=20,
            )
            assert await asyncio.to_thread(drain, service_url, topic, "sub") == 0


# ---------------------------------------------------------------- standalone, over HTTP


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneProcess]:
    process = StandaloneProcess(
        tmp_path / "standalone",
        {"message_expiry_check_interval_in_minutes": 0.01},  # 0.6 s
    )
    asyncio.run(process.start())
    try:
        yield process
    finally:
        process.kill()


async def http(method: str, url: str, body: Any = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else None
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.request(method, url, data=data, headers=headers) as response,
    ):
        return response.status, await response.text()


async def test_a_standalone_obeys_policies_set_over_http(standalone: StandaloneProcess) -> None:
    ns = f"{standalone.web_url}/admin/v2/namespaces/public/default"
    name = f"http-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://public/default/{name}"
    url = standalone.service_url
    await asyncio.to_thread(subscribe_and_leave, url, topic, "sub")
    await asyncio.to_thread(produce, url, topic, 10)

    def backlog() -> Awaitable[int]:
        return subscription_backlog(standalone.web_url, topic, "sub")

    assert await backlog() == 10
    status, text = await http("POST", f"{ns}/messageTTL", 1)
    assert status == 204, text
    await until(lambda: backlog_is(backlog, 0), "the TTL expires the backlog", timeout=20)
    assert await asyncio.to_thread(drain, url, topic, "sub") == 0
    status, text = await http("DELETE", f"{ns}/messageTTL")
    assert status == 204, text


async def backlog_is(backlog: Callable[[], Awaitable[int]], expected: int) -> bool:
    return await backlog() == expected


async def subscription_backlog(web_url: str, topic: str, subscription: str) -> int:
    """``msgBacklog`` of a subscription, from the topic stats of the admin API."""
    path = TopicName.parse(topic).namespace_name + "/" + TopicName.parse(topic).local_name
    status, text = await http("GET", f"{web_url}/admin/v2/persistent/{path}/stats")
    assert status == 200, text
    return int(json.loads(text)["subscriptions"][subscription]["msgBacklog"])
