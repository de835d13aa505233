"""The broker's Prometheus ``/metrics``: Pulsar's names and labels, per topic or per
namespace, values that match the topic stats, parsed with ``prometheus_client``'s parser;
served over HTTP by the web application (aiohttp's test server)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import test_utils, web
from ledger_fakes import FakeBookKeeper
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from stripemq.bookie.client import BookKeeper
from stripemq.broker.admin.rest import AdminContext
from stripemq.broker.config import BrokerConfig
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.metrics import (
    BROKER_METRICS,
    SUBSCRIPTION_METRICS,
    TOPIC_METRICS,
    BrokerSnapshot,
    render,
)
from stripemq.broker.stats import record_publish, topic_stats
from stripemq.broker.topic import Consumer, PersistentTopic, Producer
from stripemq.broker.web import build_app
from stripemq.managed_ledger.managed_ledger import ManagedLedgerFactory
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.polling import until
from stripemq.testing.sinks import NullSink

T1 = "persistent://public/default/m1"
T2 = "persistent://other/ns/m2"


@dataclass
class Broker:
    """What the metrics read: the service's topics, the server's connections."""

    topics: dict[str, PersistentTopic]
    connections: set[object]
    config: BrokerConfig

    def context(self) -> AdminContext:
        service = SimpleNamespace(topics=self.topics)
        server = SimpleNamespace(connections=self.connections)
        return AdminContext(
            self.config,
            "http://127.0.0.1:8080",
            lambda: cast(Any, service),
            lambda: None,
            get_server=lambda: cast(Any, server),
        )


class Counting(NullSink):
    def __init__(self) -> None:
        self.received = 0

    def send_message(self, *args: Any, **kwargs: Any) -> None:
        self.received += 1


async def loaded_topic(factory: ManagedLedgerFactory, name: str, batches: int) -> PersistentTopic:
    """A topic with a producer that stored ``batches`` entries of 5 messages, and a
    subscription whose consumer received them all."""
    topic_name = TopicName.parse(name)
    topic = PersistentTopic(topic_name, await factory.open(topic_name.managed_ledger_name))
    producer = Producer(1, "prod", topic, NullSink())
    await topic.add_producer(producer)
    sub = await topic.subscribe("sub", pb.CommandSubscribe.Shared, InitialPosition.Earliest)
    metadata = pb.MessageMetadata(producer_name="prod", sequence_id=0, publish_time=1)
    metadata.num_messages_in_batch = 5
    data = encode_entry(metadata, b"y" * 50)
    for _ in range(batches):
        await topic.publish(data)
        record_publish(producer, 5, len(data), 1.0)
    sink = Counting()
    consumer = Consumer(ConsumerSlot(9, "cons"), sink, sub)
    sub.add_consumer(consumer)
    sub.flow(consumer, 1000)
    await until(lambda: sink.received == batches)
    return topic


@pytest.fixture
async def broker(store: MetadataStore) -> AsyncIterator[Broker]:
    factory = ManagedLedgerFactory(store, cast(BookKeeper, FakeBookKeeper()))
    topics = {T1: await loaded_topic(factory, T1, 3), T2: await loaded_topic(factory, T2, 2)}
    yield Broker(topics, {object(), object()}, BrokerConfig())
    for topic in topics.values():
        await topic.close()


def parse(text: bytes) -> dict[str, Metric]:
    return {family.name: family for family in text_string_to_metric_families(text.decode())}


def value(families: dict[str, Metric], name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [
        s.value
        for s in families[name].samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_per_topic_metrics_have_pulsars_names_labels_and_the_stats_values(
    broker: Broker,
) -> None:
    families = parse(render(BrokerSnapshot.take(broker.context())))
    stats = topic_stats(broker.topics[T1])
    topic = {"cluster": "standalone", "namespace": "public/default", "topic": T1}
    assert value(families, "pulsar_in_messages_total", **topic) == stats["msgInCounter"] == 15
    assert value(families, "pulsar_in_bytes_total", **topic) == stats["bytesInCounter"]
    assert value(families, "pulsar_storage_size", **topic) == stats["storageSize"]
    assert value(families, "pulsar_storage_backlog_size", **topic) == stats["backlogSize"]
    assert value(families, "pulsar_msg_backlog", **topic) == 3
    assert value(families, "pulsar_producers_count", **topic) == 1
    assert value(families, "pulsar_consumers_count", **topic) == 1
    assert value(families, "pulsar_subscriptions_count", **topic) == 1
    assert value(families, "pulsar_rate_in", **topic) == pytest.approx(stats["msgRateIn"], rel=0.2)
    assert value(families, "pulsar_rate_out", **topic) == pytest.approx(
        stats["msgRateOut"], rel=0.2
    )
    assert value(families, "pulsar_throughput_in", **topic) > 0
    assert value(families, "pulsar_storage_write_latency_count", **topic) == 3
    buckets = [
        value(families, g.name, **topic)
        for g in TOPIC_METRICS
        if g.name.startswith("pulsar_storage_write_latency_le_") and "overflow" not in g.name
    ]
    overflow = value(families, "pulsar_storage_write_latency_overflow", **topic)
    assert sum(buckets) + overflow == 3
    assert value(families, "pulsar_storage_write_latency_le_overflow", **topic) == overflow

    sub = {**topic, "subscription": "sub"}
    sub_stats = stats["subscriptions"]["sub"]
    assert value(families, "pulsar_subscription_back_log", **sub) == sub_stats["msgBacklog"] == 3
    assert value(families, "pulsar_subscription_unacked_messages", **sub) == 15
    assert value(families, "pulsar_out_messages_total", **sub) == 15
    assert value(families, "pulsar_out_bytes_total", **sub) == sub_stats["bytesOutCounter"]
    assert value(families, "pulsar_subscription_msg_rate_out", **sub) > 0
    assert value(families, "pulsar_topics_count", namespace="public/default") == 1
    assert value(families, "pulsar_topics_count", namespace="other/ns") == 1

    # Every family is a gauge, under Pulsar's exact name.
    assert all(family.type == "gauge" for family in families.values())
    expected = {g.name for g in TOPIC_METRICS} | {g.name for g in SUBSCRIPTION_METRICS}
    assert expected <= set(families)


def test_dispatch_totals_have_a_topic_sample_besides_each_subscriptions(
    broker: Broker,
) -> None:
    families = parse(render(BrokerSnapshot.take(broker.context())))
    stats = topic_stats(broker.topics[T1])
    for name, field in (
        ("pulsar_out_messages_total", "msgOutCounter"),
        ("pulsar_out_bytes_total", "bytesOutCounter"),
    ):
        of_topic = [
            s.value
            for s in families[name].samples
            if s.labels.get("topic") == T1 and "subscription" not in s.labels
        ]
        assert of_topic == [stats[field]], name
        assert stats[field] > 0


async def test_a_subscription_nobody_consumes_is_shown_after_a_reload(
    store: MetadataStore,
) -> None:
    factory = ManagedLedgerFactory(store, cast(BookKeeper, FakeBookKeeper()))
    topic = await loaded_topic(factory, T1, 2)
    await topic.subscribe("idle", None, InitialPosition.Earliest)  # nobody ever consumed
    await topic.close()
    name = TopicName.parse(T1)
    topic = PersistentTopic(name, await factory.open(name.managed_ledger_name))
    config = BrokerConfig()
    families = parse(render(BrokerSnapshot.take(Broker({T1: topic}, set(), config).context())))
    labels = {"topic": T1}
    assert value(families, "pulsar_subscription_back_log", **labels, subscription="idle") == 2
    assert value(families, "pulsar_subscription_back_log", **labels, subscription="sub") == 2
    assert value(families, "pulsar_subscriptions_count", **labels) == 2
    assert value(families, "pulsar_msg_backlog", **labels) == 4
    await topic.close()
    await factory.close()


def test_broker_aggregates_and_connections(broker: Broker) -> None:
    families = parse(render(BrokerSnapshot.take(broker.context())))
    assert {g.name for g in BROKER_METRICS} <= set(families)
    assert value(families, "pulsar_broker_topics_count", cluster="standalone") == 2
    assert value(families, "pulsar_broker_producers_count") == 2
    assert value(families, "pulsar_broker_consumers_count") == 2
    assert value(families, "pulsar_broker_subscriptions_count") == 2
    assert value(families, "pulsar_broker_msg_backlog") == 5
    stored = sum(t.ml.chain.size for t in broker.topics.values())
    assert value(families, "pulsar_broker_storage_size") == stored
    assert value(families, "pulsar_broker_in_bytes_total", system_topic="false") == stored
    assert value(families, "pulsar_broker_rate_in") > 0
    assert value(families, "pulsar_active_connections", metric="broker_connection") == 2


def test_namespace_level_metrics_when_topics_are_not_exposed(broker: Broker) -> None:
    broker.config.expose_topic_level_metrics_in_prometheus = False
    families = parse(render(BrokerSnapshot.take(broker.context())))
    for family in families.values():
        for sample in family.samples:
            assert "topic" not in sample.labels
            assert "subscription" not in sample.labels
    ns = {"cluster": "standalone", "namespace": "public/default"}
    assert value(families, "pulsar_topics_count", **ns) == 1
    assert value(families, "pulsar_in_messages_total", **ns) == 15
    assert value(families, "pulsar_out_messages_total", **ns) == 15
    assert value(families, "pulsar_msg_backlog", **ns, remote_cluster="local") == 3
    assert value(families, "pulsar_producers_count", namespace="other/ns") == 1
    assert value(families, "pulsar_storage_write_latency_count", **ns) == 3


def test_a_broker_that_is_not_serving_yet_shows_empty_totals() -> None:
    config = BrokerConfig()
    ctx = AdminContext(config, "http://x", lambda: None, lambda: None)
    families = parse(render(BrokerSnapshot.take(ctx)))
    assert value(families, "pulsar_broker_topics_count") == 0
    assert value(families, "pulsar_active_connections") == 0
    assert "pulsar_rate_in" not in families


class Extra(Collector):
    """A collector with HTTP resources of its own (as the standalone's bookie)."""

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("bookie_SERVER_STATUS", "writable", value=1)

    def add_routes(self, router: web.UrlDispatcher) -> None:
        async def heartbeat(request: web.Request) -> web.Response:
            return web.Response(text="OK\n")

        router.add_get("/heartbeat", heartbeat)


async def test_the_web_port_serves_metrics_and_extra_collectors(broker: Broker) -> None:
    app = build_app(broker.context(), [Extra()])
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        for path in ("/metrics", "/metrics/"):
            response = await client.get(path)
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            families = parse(await response.read())
            assert value(families, "pulsar_in_messages_total", topic=T2) == 10
            assert value(families, "bookie_SERVER_STATUS") == 1
        response = await client.get("/heartbeat")
        assert response.status == 200
        assert await response.text() == "OK\n"


async def test_metrics_answer_while_the_broker_starts() -> None:
    ctx = AdminContext(BrokerConfig(), "http://x", lambda: None, lambda: None)
    async with test_utils.TestClient(test_utils.TestServer(build_app(ctx))) as client:
        response = await client.get("/metrics")
        assert response.status == 200
        text = await response.text()
    assert "pulsar_broker_topics_count" in text
