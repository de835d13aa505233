"""The broker's Prometheus ``/metrics``, with Pulsar's metric names, labels and types.

At each scrape the live topics of ``ctx.service`` are read on the event loop into a
snapshot (each topic's ``stats.topic_stats``, so ``/metrics`` and the admin API's ``/stats``
agree), and the text is rendered from the snapshot off the loop, together with the extra
collectors (the standalone's bookie).

What is exposed (every metric a gauge, as Pulsar writes them, so a family's name is the
name a dashboard queries, ``_total`` included):

- per topic (``cluster``, ``namespace``, ``topic`` labels; ``topic`` is the full name,
  ``persistent://tenant/ns/topic``) when ``expose_topic_level_metrics_in_prometheus`` is
  true: ``TOPIC_METRICS`` and the storage write latency buckets, and per subscription
  (plus ``subscription``) ``SUBSCRIPTION_METRICS``, for every subscription the topic has,
  consumers or not; ``pulsar_topics_count`` per namespace. ``pulsar_out_bytes_total`` and
  ``pulsar_out_messages_total`` have a sample per topic and one per subscription, as
  Pulsar writes them.
- otherwise per namespace (``cluster``, ``namespace``): ``NAMESPACE_METRICS`` and the
  latency buckets, summed over the namespace's topics.
- per broker (``cluster``): ``BROKER_METRICS``, and ``pulsar_active_connections``
  (``cluster``, ``broker``, ``metric``), the client connections open now.

The storage write latency (``pulsar_storage_write_latency_le_*``) counts entries by the
time from their SEND to being durable, in Pulsar's millisecond buckets (each bucket counts
only its own range; ``_count`` and ``_sum``, in milliseconds, are over all), since the topic
was loaded. Pulsar names the last bucket ``_overflow`` and its documentation
``_le_overflow``: both are written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from stripemq.broker.admin.rest import AdminContext
from stripemq.broker.stats import WRITE_LATENCY_BOUNDS_MS, LatencyBuckets, topic_stats

log = logging.getLogger(__name__)

T = TypeVar("T")


@runtime_checkable
class HttpEndpoints(Protocol):
    """An extra collector that also serves HTTP resources of its own on the web port
    (the standalone's bookie: its probes ``/heartbeat`` and ``/api/v1/bookie/is_ready``)."""

    def add_routes(self, router: web.UrlDispatcher) -> None: ...


@dataclass(frozen=True)
class Gauge(Generic[T]):
    """One metric: its name, help, and how to read its value from a ``T``."""

    name: str
    help: str
    value: Callable[[T], float]


@dataclass
class Totals:
    """A topic's figures, or their sum over a namespace or the broker."""

    topics: int = 0
    subscriptions: int = 0
    producers: int = 0
    consumers: int = 0
    rate_in: float = 0.0
    rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0
    average_msg_size: float = 0.0  # a topic's only (Pulsar does not sum it)
    in_bytes: int = 0
    in_messages: int = 0
    out_bytes: int = 0
    out_messages: int = 0
    storage_size: int = 0
    backlog_size: int = 0
    msg_backlog: int = 0
    msg_delayed: int = 0
    ack_rate: float = 0.0
    write_latency: LatencyBuckets = field(default_factory=LatencyBuckets)

    @classmethod
    def of_topic(cls, stats: dict[str, Any], write_latency: LatencyBuckets) -> Totals:
        subscriptions = stats["subscriptions"].values()
        latency = LatencyBuckets()
        latency.add(write_latency)  # a copy: the live one keeps counting meanwhile
        return cls(
            topics=1,
            subscriptions=len(stats["subscriptions"]),
            producers=len(stats["publishers"]),
            consumers=sum(len(s["consumers"]) for s in subscriptions),
            rate_in=stats["msgRateIn"],
            rate_out=stats["msgRateOut"],
            throughput_in=stats["msgThroughputIn"],
            throughput_out=stats["msgThroughputOut"],
            average_msg_size=stats["averageMsgSize"],
            in_bytes=stats["bytesInCounter"],
            in_messages=stats["msgInCounter"],
            out_bytes=stats["bytesOutCounter"],
            out_messages=stats["msgOutCounter"],
            storage_size=stats["storageSize"],
            backlog_size=stats["backlogSize"],
            msg_backlog=sum(s["msgBacklog"] for s in subscriptions),
            msg_delayed=sum(s["msgDelayed"] for s in subscriptions),
            ack_rate=sum(s["messageAckRate"] for s in subscriptions),
            write_latency=latency,
        )

    def add(self, other: Totals) -> None:
        for name in (
            "topics",
            "subscriptions",
            "producers",
            "consumers",
            "rate_in",
            "rate_out",
            "throughput_in",
            "throughput_out",
            "in_bytes",
            "in_messages",
            "out_bytes",
            "out_messages",
            "storage_size",
            "backlog_size",
            "msg_backlog",
            "msg_delayed",
            "ack_rate",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.write_latency.add(other.write_latency)


def _bound_name(bound_ms: float) -> str:
    """0.5 -> ``0_5``, 10.0 -> ``10`` (Pulsar's bucket suffixes)."""
    return f"{bound_ms:g}".replace(".", "_")


def _bucket(index: int) -> Callable[[Totals], float]:
    return lambda totals: totals.write_latency.buckets[index]


def _latency_gauges() -> tuple[Gauge[Totals], ...]:
    """``pulsar_storage_write_latency_le_*``, the overflow bucket, ``_count`` and ``_sum``."""
    gauges: list[Gauge[Totals]] = []
    for i, bound in enumerate(WRITE_LATENCY_BOUNDS_MS):
        gauges.append(
            Gauge(
                f"pulsar_storage_write_latency_le_{_bound_name(bound)}",
                f"Entries stored in at most {bound:g} ms (and more than the bucket below)",
                _bucket(i),
            )
        )
    last = len(WRITE_LATENCY_BOUNDS_MS)
    overflow = f"Entries stored in more than {WRITE_LATENCY_BOUNDS_MS[-1]:g} ms"
    gauges += [
        Gauge(
            "pulsar_storage_write_latency_overflow",
            overflow,
            lambda t: t.write_latency.buckets[last],
        ),
        Gauge(
            "pulsar_storage_write_latency_le_overflow",
            overflow + " (the name Pulsar's documentation uses)",
            lambda t: t.write_latency.buckets[last],
        ),
        Gauge(
            "pulsar_storage_write_latency_count",
            "Entries stored",
            lambda t: t.write_latency.count,
        ),
        Gauge(
            "pulsar_storage_write_latency_sum",
            "Milliseconds taken to store them, in all",
            lambda t: t.write_latency.sum_ms,
        ),
    ]
    return tuple(gauges)


WRITE_LATENCY_METRICS = _latency_gauges()

# Per topic (labels cluster, namespace, topic).
TOPIC_METRICS: tuple[Gauge[Totals], ...] = (
    Gauge("pulsar_subscriptions_count", "Subscriptions of the topic", lambda t: t.subscriptions),
    Gauge("pulsar_producers_count", "Producers connected to the topic", lambda t: t.producers),
    Gauge("pulsar_consumers_count", "Consumers connected to the topic", lambda t: t.consumers),
    Gauge("pulsar_rate_in", "Messages published per second", lambda t: t.rate_in),
    Gauge("pulsar_rate_out", "Messages dispatched per second", lambda t: t.rate_out),
    Gauge("pulsar_throughput_in", "Bytes published per second", lambda t: t.throughput_in),
    Gauge("pulsar_throughput_out", "Bytes dispatched per second", lambda t: t.throughput_out),
    Gauge(
        "pulsar_average_msg_size",
        "Average size of the messages published in the rate window (bytes)",
        lambda t: t.average_msg_size,
    ),
    Gauge("pulsar_storage_size", "Bytes of the topic's ledgers", lambda t: t.storage_size),
    Gauge(
        "pulsar_storage_logical_size",
        "Bytes of the topic's ledgers, one copy (without replication)",
        lambda t: t.storage_size,
    ),
    Gauge(
        "pulsar_msg_backlog",
        "Entries not acknowledged, over all subscriptions",
        lambda t: t.msg_backlog,
    ),
    Gauge(
        "pulsar_storage_backlog_size",
        "Bytes after the slowest subscription's mark-delete position",
        lambda t: t.backlog_size,
    ),
    Gauge("pulsar_storage_offloaded_size", "Bytes offloaded to tiered storage", lambda t: 0),
    Gauge("pulsar_in_bytes_total", "Bytes published since loaded", lambda t: t.in_bytes),
    Gauge("pulsar_in_messages_total", "Messages published since loaded", lambda t: t.in_messages),
    # The topic's dispatch, over its subscriptions (each has its own sample below too).
    Gauge("pulsar_out_bytes_total", "Bytes dispatched since loaded", lambda t: t.out_bytes),
    Gauge(
        "pulsar_out_messages_total", "Messages dispatched since loaded", lambda t: t.out_messages
    ),
    *WRITE_LATENCY_METRICS,
)

# Per subscription (labels cluster, namespace, topic, subscription), read from its
# SubscriptionStats.
SUBSCRIPTION_METRICS: tuple[Gauge[dict[str, Any]], ...] = (
    Gauge("pulsar_subscription_back_log", "Entries not acknowledged", lambda s: s["msgBacklog"]),
    Gauge(
        "pulsar_subscription_back_log_no_delayed",
        "Entries not acknowledged, less those waiting for their delivery time",
        lambda s: s["msgBacklogNoDelayed"],
    ),
    Gauge(
        "pulsar_subscription_delayed",
        "Entries waiting for their delivery time",
        lambda s: s["msgDelayed"],
    ),
    Gauge(
        "pulsar_subscription_msg_rate_redeliver",
        "Messages given back for redelivery per second",
        lambda s: s["msgRateRedeliver"],
    ),
    Gauge(
        "pulsar_subscription_unacked_messages",
        "Messages delivered and not acknowledged",
        lambda s: s["unackedMessages"],
    ),
    Gauge(
        "pulsar_subscription_blocked_on_unacked_messages",
        "1 while dispatch is blocked on unacknowledged messages",
        lambda s: int(s["blockedSubscriptionOnUnackedMsgs"]),
    ),
    Gauge(
        "pulsar_subscription_msg_rate_out",
        "Messages dispatched per second",
        lambda s: s["msgRateOut"],
    ),
    Gauge(
        "pulsar_subscription_msg_ack_rate",
        "Message ids acknowledged per second",
        lambda s: s["messageAckRate"],
    ),
    Gauge(
        "pulsar_subscription_msg_throughput_out",
        "Bytes dispatched per second",
        lambda s: s["msgThroughputOut"],
    ),
    Gauge(
        "pulsar_out_bytes_total", "Bytes dispatched since loaded", lambda s: s["bytesOutCounter"]
    ),
    Gauge(
        "pulsar_out_messages_total",
        "Messages dispatched since loaded",
        lambda s: s["msgOutCounter"],
    ),
    Gauge(
        "pulsar_subscription_last_expire_timestamp",
        "When message TTL last ran (ms since the epoch)",
        lambda s: s["lastExpireTimestamp"],
    ),
    Gauge(
        "pulsar_subscription_last_acked_timestamp",
        "When a message was last acknowledged (ms since the epoch)",
        lambda s: s["lastAckedTimestamp"],
    ),
    Gauge(
        "pulsar_subscription_last_consumed_flow_timestamp",
        "When a consumer last asked for messages (ms since the epoch)",
        lambda s: s["lastConsumedFlowTimestamp"],
    ),
    Gauge(
        "pulsar_subscription_last_consumed_timestamp",
        "When a message was last dispatched (ms since the epoch)",
        lambda s: s["lastConsumedTimestamp"],
    ),
    Gauge(
        "pulsar_subscription_last_mark_delete_advanced_timestamp",
        "When the mark-delete position last moved (ms since the epoch)",
        lambda s: s["lastMarkDeleteAdvancedTimestamp"],
    ),
    Gauge(
        "pulsar_subscription_msg_rate_expired",
        "Messages expired by message TTL per second",
        lambda s: s["msgRateExpired"],
    ),
    Gauge(
        "pulsar_subscription_total_msg_expired",
        "Messages expired by message TTL since loaded",
        lambda s: s["totalMsgExpired"],
    ),
    Gauge(
        "pulsar_subscription_consumers_count",
        "Consumers of the subscription",
        lambda s: len(s["consumers"]),
    ),
)

# Per namespace (labels cluster, namespace), when topics are not shown one by one.
NAMESPACE_METRICS: tuple[Gauge[Totals], ...] = (
    Gauge("pulsar_topics_count", "Topics of the namespace served here", lambda t: t.topics),
    *(g for g in TOPIC_METRICS if g.name not in ("pulsar_average_msg_size",)),
    Gauge(
        "pulsar_consumer_msg_ack_rate",
        "Message ids acknowledged per second",
        lambda t: t.ack_rate,
    ),
    Gauge(
        "pulsar_subscription_delayed",
        "Entries waiting for their delivery time",
        lambda t: t.msg_delayed,
    ),
)
# Pulsar labels the namespace-level backlog with the (local) cluster it is in as well.
NAMESPACE_EXTRA_LABELS = {"pulsar_msg_backlog": {"remote_cluster": "local"}}

# Per broker (label cluster): everything this broker serves.
BROKER_METRICS: tuple[Gauge[Totals], ...] = (
    Gauge("pulsar_broker_topics_count", "Topics served", lambda t: t.topics),
    Gauge("pulsar_broker_subscriptions_count", "Subscriptions", lambda t: t.subscriptions),
    Gauge("pulsar_broker_producers_count", "Producers connected", lambda t: t.producers),
    Gauge("pulsar_broker_consumers_count", "Consumers connected", lambda t: t.consumers),
    Gauge("pulsar_broker_rate_in", "Messages published per second", lambda t: t.rate_in),
    Gauge("pulsar_broker_rate_out", "Messages dispatched per second", lambda t: t.rate_out),
    Gauge("pulsar_broker_throughput_in", "Bytes published per second", lambda t: t.throughput_in),
    Gauge(
        "pulsar_broker_throughput_out", "Bytes dispatched per second", lambda t: t.throughput_out
    ),
    Gauge("pulsar_broker_storage_size", "Bytes of all ledgers", lambda t: t.storage_size),
    Gauge(
        "pulsar_broker_storage_logical_size",
        "Bytes of all ledgers, one copy",
        lambda t: t.storage_size,
    ),
    Gauge("pulsar_broker_msg_backlog", "Entries not acknowledged", lambda t: t.msg_backlog),
    Gauge("pulsar_broker_in_bytes_total", "Bytes published since loaded", lambda t: t.in_bytes),
    Gauge("pulsar_broker_out_bytes_total", "Bytes dispatched since loaded", lambda t: t.out_bytes),
)
# Pulsar splits the broker's byte totals by system topics and subscriptions (none here).
BROKER_EXTRA_LABELS = {
    "pulsar_broker_in_bytes_total": {"system_topic": "false"},
    "pulsar_broker_out_bytes_total": {"system_subscription": "false"},
}


@dataclass
class TopicSample:
    """One topic, as read at the scrape."""

    namespace: str
    topic: str
    totals: Totals
    subscriptions: dict[str, dict[str, Any]]


@dataclass
class BrokerSnapshot:
    """Everything ``/metrics`` shows, read on the event loop in one go."""

    cluster: str
    broker: str
    per_topic: bool
    topics: list[TopicSample]
    active_connections: int

    @classmethod
    def take(cls, ctx: AdminContext) -> BrokerSnapshot:
        """Read the live topics (none while the broker starts) and connections."""
        service = ctx.get_service()
        samples = []
        for topic in list(service.topics.values()) if service is not None else []:
            stats = topic_stats(topic)
            samples.append(
                TopicSample(
                    namespace=topic.topic_name.namespace_name,
                    topic=topic.name,
                    totals=Totals.of_topic(stats, topic.stats.write_latency),
                    subscriptions=stats["subscriptions"],
                )
            )
        server = ctx.get_server()
        config = ctx.config
        return cls(
            cluster=ctx.cluster,
            broker=config.advertised_address or config.bind_address,
            per_topic=config.expose_topic_level_metrics_in_prometheus,
            topics=samples,
            active_connections=len(server.connections) if server is not None else 0,
        )


class _Families:
    """Gauge families in the order their first sample came, each under one TYPE line."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def add(self, gauge: Gauge[T], source: T, labels: dict[str, str]) -> None:
        family = self._families.get(gauge.name)
        if family is None:
            family = self._families[gauge.name] = Metric(gauge.name, gauge.help, "gauge")
        family.add_sample(gauge.name, labels, float(gauge.value(source)))

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


class BrokerMetricsCollector(Collector):
    """Pulsar's broker metrics from one ``BrokerSnapshot``, by the tables above."""

    def __init__(self, snapshot: BrokerSnapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        cluster = snapshot.cluster
        families = _Families()
        namespaces: dict[str, Totals] = {}
        broker = Totals()
        for sample in snapshot.topics:
            namespaces.setdefault(sample.namespace, Totals()).add(sample.totals)
            broker.add(sample.totals)
            if not snapshot.per_topic:
                continue
            labels = {"cluster": cluster, "namespace": sample.namespace, "topic": sample.topic}
            for gauge in TOPIC_METRICS:
                families.add(gauge, sample.totals, labels)
            for name, subscription in sample.subscriptions.items():
                sub_labels = {**labels, "subscription": name}
                for sub_gauge in SUBSCRIPTION_METRICS:
                    families.add(sub_gauge, subscription, sub_labels)
        topics_count = NAMESPACE_METRICS[0]
        for namespace, totals in namespaces.items():
            labels = {"cluster": cluster, "namespace": namespace}
            if snapshot.per_topic:
                families.add(topics_count, totals, labels)
                continue
            for gauge in NAMESPACE_METRICS:
                families.add(
                    gauge, totals, {**labels, **NAMESPACE_EXTRA_LABELS.get(gauge.name, {})}
                )
        for gauge in BROKER_METRICS:
            families.add(
                gauge, broker, {"cluster": cluster, **BROKER_EXTRA_LABELS.get(gauge.name, {})}
            )
        families.add(
            Gauge("pulsar_active_connections", "Client connections open now", lambda n: n),
            snapshot.active_connections,
            {"cluster": cluster, "broker": snapshot.broker, "metric": "broker_connection"},
        )
        yield from families


def render(snapshot: BrokerSnapshot, extra_collectors: Iterable[Collector] = ()) -> bytes:
    """The text exposition of the snapshot, then of each extra collector."""
    parts = [generate_latest(BrokerMetricsCollector(snapshot))]
    for collector in extra_collectors:
        parts.append(generate_latest(collector))
    return b"".join(parts)


def add_metrics_routes(
    router: web.UrlDispatcher, ctx: AdminContext, extra_collectors: list[Collector]
) -> None:
    """Add ``/metrics`` (and ``/metrics/``, as Pulsar answers both) to ``router``, and the
    HTTP resources of extra collectors that have some (``HttpEndpoints``)."""

    async def handle(request: web.Request) -> web.Response:
        snapshot = BrokerSnapshot.take(ctx)  # on the loop: the topics change under it
        body = await asyncio.to_thread(render, snapshot, extra_collectors)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    router.add_get("/metrics", handle)
    router.add_get("/metrics/", handle)
    for collector in extra_collectors:
        if isinstance(collector, HttpEndpoints):
            collector.add_routes(router)
