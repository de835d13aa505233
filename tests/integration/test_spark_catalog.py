"""The Spark source's driver side (``stripemq.spark.catalog``) against what a real broker
stored: real ZooKeeper, three bookie processes and a broker rolling its ledgers over every
few entries, fed by the official ``pulsar`` client.

Planning must cover exactly what was acknowledged (the open ledger up to its LAC), read
no closed ledger from the bookies, never fence the live writer, prune ledgers and narrow
entry ranges by publish time, and resolve partitioned topics, partitions and patterns.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
import pytest_asyncio

from stripemq.broker.partitions import create_partitioned_topic
from stripemq.broker.server import BrokerServer
from stripemq.errors import DataLossError, SparkSourceError, UnknownTopicError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.ledger_list import LedgerList, managed_ledger_path
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.proto.topic_name import TopicName
from stripemq.spark.catalog import Connection, LedgerCatalog, connect
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import Pushdown, ReadSplit, TimeBounds, TopicPartitionRef
from stripemq.testing.broker import broker_on_bookies
from stripemq.testing.polling import next_millisecond, until
from stripemq.testing.ports import free_port
from stripemq.testing.zookeeper import ZooKeeperServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.asyncio(loop_scope="module"),
]

ROLL_EVERY = 10  # entries per ledger
NS = "persistent://public/default"

Position = tuple[int, int, int]  # (partition, ledger, entry)


# One cluster for the module (three bookies and a broker take seconds to start); every
# test uses topics of its own, and runs on the module's event loop with the broker.
@pytest.fixture(scope="module")
def metadata_url(zookeeper_server: ZooKeeperServer) -> str:
    return zookeeper_server.url(f"/spark_catalog-{uuid.uuid4().hex[:8]}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def store(metadata_url: str) -> AsyncIterator[MetadataStore]:
    opened = create_metadata_store(metadata_url)
    await opened.start()
    yield opened
    await opened.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    metadata_url: str, store: MetadataStore, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[BrokerServer]:
    config = ManagedLedgerConfig(
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        max_entries_per_ledger=ROLL_EVERY,
        min_rollover_time_s=0,
        retention_time_s=-1,  # no cursors: keep every ledger
        retention_size_bytes=-1,
    )
    base = tmp_path_factory.mktemp("spark-catalog")
    async with broker_on_bookies(metadata_url, store, base, bookies=3, ml_config=config) as server:
        yield server


@pytest.fixture
def client(cluster: BrokerServer) -> Iterator[pulsar.Client]:
    official = pulsar.Client(cluster.service_url, operation_timeout_seconds=15)
    yield official
    official.close()


@pytest_asyncio.fixture(loop_scope="module")
async def conn(metadata_url: str, cluster: BrokerServer) -> AsyncIterator[Connection]:
    async with connect(metadata_url) as connection:
        yield connection


def options(metadata_url: str, **raw: str) -> SourceOptions:
    return SourceOptions.parse({"metadata": metadata_url, **raw})


class Producer:
    """An official producer (batching off: one message, one entry) driven from a thread."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self.producer = client.create_producer(
            topic,
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )

    @classmethod
    async def create(cls, client: pulsar.Client, topic: str) -> Producer:
        return await asyncio.to_thread(cls, client, topic)

    async def send(self, count: int, tag: str = "m") -> list[Any]:
        def work() -> list[Any]:
            return [self.producer.send(f"{tag}-{i}".encode()) for i in range(count)]

        return await asyncio.to_thread(work)


def positions(ids: list[Any]) -> set[Position]:
    """Where the broker acknowledged these messages (a non-partitioned topic is -1)."""
    return {(i.partition(), i.ledger_id(), i.entry_id()) for i in ids}


def planned(splits: list[ReadSplit]) -> set[Position]:
    """Every entry the splits cover; no entry may be planned twice."""
    found: set[Position] = set()
    for split in splits:
        for entry in range(split.first_entry, split.last_entry + 1):
            position = (split.ref.partition, split.ledger_id, entry)
            assert position not in found, f"{position} planned twice"
            found.add(position)
    return found


async def plan_until(
    conn: Connection,
    source: SourceOptions,
    pushdown: Pushdown,
    expected: set[Position],
) -> list[ReadSplit]:
    """Plan (with a fresh catalog each time, so the LAC is read again) until the plan
    covers exactly ``expected``: the LAC on the bookies trails the last add until the
    writer's explicit LAC update, a moment later."""
    splits: list[ReadSplit] = []

    async def covered() -> bool:
        nonlocal splits
        splits = await LedgerCatalog(conn).plan(source, pushdown)
        return planned(splits) == expected

    try:
        await until(covered, "the plan covers exactly the expected entries", timeout=15)
    except AssertionError:
        found = planned(splits)
        raise AssertionError(
            f"missing {sorted(expected - found)[:10]}, extra {sorted(found - expected)[:10]}"
        ) from None
    return splits


def record_opens(conn: Connection) -> list[int]:
    """The ledgers the catalog opens on the bookies from now on (checking none recovers)."""
    opened: list[int] = []
    real = conn.bk.open_ledger

    async def open_ledger(ledger_id: int, **kwargs: Any) -> Any:
        assert kwargs.get("recovery") is False, "planning must never recover (fence) a ledger"
        opened.append(ledger_id)
        return await real(ledger_id, **kwargs)

    conn.bk.open_ledger = open_ledger  # type: ignore[method-assign]
    return opened


async def ledger_list(store: MetadataStore, topic: str) -> LedgerList:
    name = TopicName.parse(topic).managed_ledger_name
    found = await store.get(managed_ledger_path(name))
    assert found is not None
    return LedgerList.decode(found[0], name)


async def until_equal(read: Callable[[], Awaitable[Any]], expected: Any, what: str) -> None:
    async def equal() -> bool:
        return await read() == expected

    await until(equal, what, timeout=15)


# ---------------------------------------------------------------------- whole topics


async def test_plan_covers_what_was_acknowledged_and_never_fences_the_writer(
    metadata_url: str, store: MetadataStore, client: pulsar.Client, conn: Connection
) -> None:
    topic = f"{NS}/orders"
    producer = await Producer.create(client, topic)
    sent = await producer.send(35)
    chain = list((await ledger_list(store, topic)).chain)
    assert len(chain) >= 4, "the broker should have rolled over several times"
    assert all(info.closed for info in chain[:-1]) and not chain[-1].closed
    open_id = chain[-1].ledger_id
    opened = record_opens(conn)

    source = options(metadata_url, topic=topic, maxEntriesPerPartition="4")
    splits = await plan_until(conn, source, Pushdown(), positions(sent))
    ref = TopicPartitionRef(topic, -1, TopicName.parse(topic).managed_ledger_name)
    assert all(split.ref == ref for split in splits)
    assert all(1 <= split.entries <= 4 for split in splits)
    order = [(split.ledger_id, split.first_entry) for split in splits]
    assert order == sorted(order)
    assert all(split.estimated_bytes > 0 for split in splits)
    # Closed ledgers come from the ledger list alone: only the open one was opened.
    assert set(opened) == {open_id}

    # The writer was not fenced: it goes on in its ledger, right after what was planned.
    last_planned = max(entry for _, ledger, entry in planned(splits) if ledger == open_id)
    more = await producer.send(3, tag="after")
    assert (more[0].ledger_id(), more[0].entry_id()) == (open_id, last_planned + 1)
    await plan_until(conn, source, Pushdown(), positions(sent + more))


async def test_snapshot_cuts_the_open_ledger_at_its_lac(
    metadata_url: str, client: pulsar.Client, conn: Connection
) -> None:
    topic = f"{NS}/tail"
    producer = await Producer.create(client, topic)
    catalog = LedgerCatalog(conn)
    (ref,) = await catalog.resolve(options(metadata_url, topic=topic))
    # The writer's ledger exists but holds nothing confirmed: LAC -1, nothing to read.
    (span,) = (await catalog.snapshot(ref)).ledgers
    assert (span.last_entry, span.closed, span.closed_ms) == (-1, False, 0)
    assert await catalog.plan(options(metadata_url, topic=topic), Pushdown()) == []

    sent = await producer.send(4)
    assert {m.ledger_id() for m in sent} == {span.ledger_id}

    async def lac() -> int:
        # The same catalog as above: each snapshot reads the LAC again.
        (now,) = (await catalog.snapshot(ref)).ledgers
        assert now.ledger_id == span.ledger_id and not now.closed
        return now.last_entry

    await until_equal(lac, 3, "the open ledger is cut at its LAC, entry 3")
    (now,) = (await LedgerCatalog(conn).snapshot(ref)).ledgers
    assert now.size > 0
    more = await producer.send(2)
    assert [(m.ledger_id(), m.entry_id()) for m in more] == [
        (span.ledger_id, 4),
        (span.ledger_id, 5),
    ]


async def test_partitioned_topics_partitions_and_their_pushdown(
    metadata_url: str, store: MetadataStore, client: pulsar.Client, conn: Connection
) -> None:
    topic = f"{NS}/clicks"
    await create_partitioned_topic(store, TopicName.parse(topic), 3)
    producer = await Producer.create(client, topic)
    sent = await producer.send(45)
    assert {m.partition() for m in sent} == {0, 1, 2}

    source = options(metadata_url, topic=topic, maxEntriesPerPartition="100")
    refs = await LedgerCatalog(conn).resolve(source)
    assert [(r.topic, r.partition) for r in refs] == [
        (f"{topic}-partition-{i}", i) for i in range(3)
    ]
    splits = await plan_until(conn, source, Pushdown(), positions(sent))
    assert {split.ref.partition for split in splits} == {0, 1, 2}

    # Pushdown on __partition and __topic keeps those partitions only.
    one = {p for p in positions(sent) if p[0] == 1}
    await plan_until(conn, source, Pushdown(partitions=frozenset({1})), one)
    two = {p for p in positions(sent) if p[0] == 2}
    await plan_until(conn, source, Pushdown(topics=frozenset({f"{topic}-partition-2"})), two)
    # A partition named alone is read alone, with its index.
    alone = options(metadata_url, topic=f"{topic}-partition-1")
    (ref,) = await LedgerCatalog(conn).resolve(alone)
    assert (ref.topic, ref.partition) == (f"{topic}-partition-1", 1)
    await plan_until(conn, alone, Pushdown(), one)

    # A partitioned topic nobody wrote to yet: its partitions, with nothing to read.
    quiet = f"{NS}/quiet"
    await create_partitioned_topic(store, TopicName.parse(quiet), 2)
    refs = await LedgerCatalog(conn).resolve(options(metadata_url, topics=f"{quiet},{topic}"))
    assert [r.topic for r in refs] == [f"{topic}-partition-{i}" for i in range(3)] + [
        f"{quiet}-partition-{i}" for i in range(2)
    ]
    assert await LedgerCatalog(conn).plan(options(metadata_url, topic=quiet), Pushdown()) == []


async def test_unknown_topics_and_topics_pattern(
    metadata_url: str, store: MetadataStore, client: pulsar.Client, conn: Connection
) -> None:
    catalog = LedgerCatalog(conn)
    with pytest.raises(UnknownTopicError, match=f"{NS}/nowhere"):
        await catalog.resolve(options(metadata_url, topic="nowhere"))

    await create_partitioned_topic(store, TopicName.parse(f"{NS}/pat-parted"), 2)
    for name in ("pat-a", "pat-b", "other", "pat-parted"):
        producer = await Producer.create(client, f"{NS}/{name}")
        await producer.send(2)
    with pytest.raises(UnknownTopicError, match=f"{NS}/missing"):
        await catalog.resolve(options(metadata_url, topics="pat-a,missing"))

    async def matching(pattern: str) -> list[str]:
        refs = await catalog.resolve(options(metadata_url, topicsPattern=pattern))
        return [ref.topic for ref in refs]

    assert await matching(f"{NS}/pat-[ab]") == [f"{NS}/pat-a", f"{NS}/pat-b"]
    # A partitioned topic's name matches its partitions (as Pulsar's pattern consumers do).
    assert await matching("public/default/pat-parted") == [
        f"{NS}/pat-parted-partition-0",
        f"{NS}/pat-parted-partition-1",
    ]
    assert await matching(f"{NS}/pat-.*") == [
        f"{NS}/pat-a",
        f"{NS}/pat-b",
        f"{NS}/pat-parted-partition-0",
        f"{NS}/pat-parted-partition-1",
    ]
    with pytest.raises(UnknownTopicError, match="nothing-"):
        await matching(f"{NS}/nothing-.*")
    with pytest.raises(UnknownTopicError, match="public/empty"):
        await matching("persistent://public/empty/.*")
    # Full match, not search: "pat" alone names no topic.
    with pytest.raises(UnknownTopicError):
        await matching(f"{NS}/pat")


# ---------------------------------------------------------------------- publish time


async def test_publish_time_pushdown_prunes_ledgers_and_narrows_ranges(
    metadata_url: str, store: MetadataStore, client: pulsar.Client, conn: Connection
) -> None:
    topic = f"{NS}/timed"
    producer = await Producer.create(client, topic)
    phase_a = await producer.send(25, tag="a")
    a_to_b = await asyncio.to_thread(next_millisecond)  # after every publish time of A
    phase_b = await producer.send(25, tag="b")
    b_to_c = await asyncio.to_thread(next_millisecond)
    phase_c = await producer.send(15, tag="c")
    # Exact bounds: one producer on this machine's clock publishes in order.
    source = options(metadata_url, topic=topic, publishTimeSkewMs="0")

    opened = record_opens(conn)
    only_b = Pushdown(time=TimeBounds(a_to_b, b_to_c - 1))
    splits = await plan_until(conn, source, only_b, positions(phase_b))
    ledgers_a = {m.ledger_id() for m in phase_a}
    ledgers_b = {m.ledger_id() for m in phase_b}
    straddling = ledgers_a & ledgers_b
    assert straddling, "phase A's last ledger should also hold phase B's first entries"
    assert {split.ledger_id for split in splits} == ledgers_b
    # The ledger both phases share was narrowed: its split starts after phase A's entries.
    (shared,) = straddling
    first_b = min(m.entry_id() for m in phase_b if m.ledger_id() == shared)
    assert min(s.first_entry for s in splits if s.ledger_id == shared) == first_b > 0
    # Only ledgers whose life straddles a bound were read (and the open one, for its
    # LAC): those wholly inside or outside the bounds were planned from the ledger list.
    chain = list((await ledger_list(store, topic)).chain)
    decided = {
        info.ledger_id
        for info in chain
        if info.closed
        and (
            info.closed_ms < a_to_b  # wholly before
            or (info.created_ms >= a_to_b and info.closed_ms <= b_to_c - 1)  # wholly inside
        )
    }
    assert decided & ledgers_a and decided & ledgers_b, "the test needs such ledgers"
    assert opened and not set(opened) & decided

    # One bound only: from B on, everything (C's last entries once the LAC shows them).
    from_b = Pushdown(time=TimeBounds(lower_ms=a_to_b))
    await plan_until(conn, source, from_b, positions(phase_b + phase_c))
    before_b = Pushdown(time=TimeBounds(upper_ms=a_to_b - 1))
    await plan_until(conn, source, before_b, positions(phase_a))
    # With clock skew allowed, nothing is lost, and a little more is read.
    skewed = options(metadata_url, topic=topic, publishTimeSkewMs="60000")
    wide = await LedgerCatalog(conn).plan(skewed, only_b)
    assert positions(phase_b) <= planned(wide)
    nothing = Pushdown(time=TimeBounds(upper_ms=0))
    assert await LedgerCatalog(conn).plan(source, nothing) == []


# ---------------------------------------------------------------------- bad input


async def test_an_open_ledger_gone_from_the_bookies_is_data_loss(
    metadata_url: str, store: MetadataStore
) -> None:
    """A ledger list naming an open ledger whose metadata is gone (no broker needed)."""
    topic = TopicName.parse(f"{NS}/ghost")
    listed = LedgerList(LedgerChain([LedgerInfo(4242, created_ms=1)]))
    await store.create(managed_ledger_path(topic.managed_ledger_name), listed.encode())
    async with connect(metadata_url) as connection:
        catalog = LedgerCatalog(connection)
        (ref,) = await catalog.resolve(options(metadata_url, topic=str(topic)))
        with pytest.raises(DataLossError, match=rf"{topic}.*ledger 4242"):
            await catalog.snapshot(ref)
        assert (await catalog.snapshot(ref, fail_on_data_loss=False)).ledgers == ()
        with pytest.raises(DataLossError, match="ledger 4242"):
            await catalog.plan(options(metadata_url, topic=str(topic)), Pushdown())
        lenient = options(metadata_url, topic=str(topic), failOnDataLoss="false")
        assert await catalog.plan(lenient, Pushdown()) == []
        with pytest.raises(DataLossError, match="ledger 4242"):
            await catalog.publish_time(ref, 4242, 0)


async def test_an_unreachable_metadata_store_is_a_clear_error(tmp_path: Path) -> None:
    url = f"zk://127.0.0.1:{free_port()}/nowhere"
    started = time.monotonic()
    with pytest.raises(SparkSourceError, match=url):
        async with connect(url, timeout_s=1.0):
            pass
    assert time.monotonic() - started < 10
    missing = f"local://{tmp_path / 'no-standalone'}"
    with pytest.raises(SparkSourceError, match=missing):
        async with connect(missing):
            pass
