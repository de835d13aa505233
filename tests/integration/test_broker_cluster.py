"""Two broker processes on real ZooKeeper and bookies: lookup, ownership and takeover."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from stripemq.metadata import MetadataStore
from stripemq.testing.broker import (
    BrokerProcess,
    broker_pair_on_bookies,
    cluster_service_url,
    owner_killer,
    owner_url,
)
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.polling import until

pytestmark = pytest.mark.integration

SETTINGS = {
    "zk_session_timeout_ms": 4000,  # a killed broker's bundles free up after this
    "managed_ledger_default_ensemble_size": 2,
    "managed_ledger_default_write_quorum": 2,
    "managed_ledger_default_ack_quorum": 2,
    "managed_ledger_default_mark_delete_rate_limit": 10,
}


@pytest.fixture(params=[False, True], ids=["plain", "dedup"])
async def brokers(
    metadata_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[BrokerProcess, BrokerProcess]]:
    settings = {**SETTINGS, "broker_deduplication_enabled": request.param}
    async with broker_pair_on_bookies(metadata_url, tmp_path, settings) as pair:
        yield pair


MESSAGES = 300
KILL_AT = 100  # the owner is killed before this send; every later ack is the survivor's
# The first sends after the kill wait while the topic moves; should that take longer than
# their 30 s send timeout, these few may fail. Every later one must be acknowledged.
MAY_FAIL_AFTER_KILL = 3


def produce_through_a_kill(url: str, topic: str, kill) -> tuple[list[int], list[int]]:  # type: ignore[no-untyped-def]
    """Send ``MESSAGES`` messages one by one; before send ``KILL_AT``, ``kill()`` the owner
    (it returns once the process is dead). Returns the sequence numbers acknowledged and
    those that failed."""
    client = pulsar.Client(url, operation_timeout_seconds=30)
    acked: list[int] = []
    failed: list[int] = []
    try:
        client.subscribe(topic, "sub").close()
        producer = client.create_producer(
            topic, producer_name="rider", batching_enabled=False, send_timeout_millis=30_000
        )
        for i in range(MESSAGES):
            if i == KILL_AT:
                kill()
            try:
                producer.send(f"m{i}".encode())
                acked.append(i)
            except pulsar.PulsarException:
                failed.append(i)
                if len(failed) > MAY_FAIL_AFTER_KILL:
                    break  # the topic did not move: no use waiting out every send
        return acked, failed
    finally:
        client.close()


def consume_all(url: str, topic: str) -> list[int]:
    """Receive and acknowledge the subscription's messages up to an end marker sent now,
    after every earlier send finished: whatever the topic stored before it (duplicates too)
    has then been received."""
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic, batching_enabled=False).send(b"end")
        got = []
        while True:
            message = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(message)
            if message.data() == b"end":
                return got
            got.append(int(message.data().decode()[1:]))
    finally:
        client.close()


async def test_lookup_picks_an_owner_and_redirects_other_brokers_to_it(
    brokers: tuple[BrokerProcess, BrokerProcess], store: MetadataStore
) -> None:
    loop = asyncio.get_running_loop()
    topics = [f"persistent://public/default/spread-{i}" for i in range(8)]

    def touch_all() -> None:
        client = pulsar.Client(brokers[0].service_url, operation_timeout_seconds=30)
        try:
            for topic in topics:  # every lookup enters through the first broker
                client.create_producer(topic).send(b"x")
        finally:
            client.close()

    await loop.run_in_executor(None, touch_all)
    owners = {await owner_url(store, topic) for topic in topics}
    assert owners == {b.service_url for b in brokers}  # bundles spread over both


async def test_a_killed_brokers_topics_are_taken_over_without_loss(
    brokers: tuple[BrokerProcess, BrokerProcess], store: MetadataStore
) -> None:
    topic = "persistent://public/default/takeover"
    loop = asyncio.get_running_loop()
    url = cluster_service_url(brokers)
    kill_owner, killed = owner_killer(store, topic, brokers, loop)

    acked, failed = await loop.run_in_executor(None, produce_through_a_kill, url, topic, kill_owner)
    assert killed
    assert set(range(KILL_AT)) <= set(acked), f"sends before the kill failed: {failed}"
    # The killed broker acknowledges nothing: each ack from KILL_AT on came from the survivor.
    after_takeover = set(range(KILL_AT + MAY_FAIL_AFTER_KILL, MESSAGES))
    assert after_takeover <= set(acked), f"sends after the kill failed: {failed}"
    survivor = next(b for b in brokers if b is not killed[0])

    async def moved() -> bool:
        return await owner_url(store, topic) == survivor.service_url

    await until(moved, "the survivor owns the topic", timeout=30)
    got = await loop.run_in_executor(None, consume_all, survivor.service_url, topic)
    assert set(acked) <= set(got)  # every acknowledged message is there
    assert set(got) <= set(acked) | set(failed)
    duplicates = len(got) - len(set(got))
    if brokers[0].settings["broker_deduplication_enabled"]:
        assert duplicates == 0, "a resend after the takeover was stored twice"
    print(f"\n{len(acked)} acked, {len(failed)} failed, {len(got)} consumed, {duplicates} twice")


async def test_a_broker_that_loses_its_session_stops_serving_and_comes_back(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    from stripemq.broker.app import BrokerApp
    from stripemq.broker.config import BrokerConfig

    async with BookieCluster(metadata_url, tmp_path / "bookies", 2):
        app = BrokerApp(BrokerConfig(metadata_service_uri=metadata_url, broker_service_port=0))
        await app.start()
        try:
            url = app.server.service_url  # type: ignore[union-attr]
            topic = "persistent://public/default/session"
            loop = asyncio.get_running_loop()

            def send(count: int, start: int) -> None:
                client = pulsar.Client(url, operation_timeout_seconds=30)
                try:
                    client.subscribe(topic, "sub").close()
                    producer = client.create_producer(topic, batching_enabled=False)
                    for i in range(start, start + count):
                        producer.send(f"m{i}".encode())
                finally:
                    client.close()

            await loop.run_in_executor(None, send, 20, 0)
            assert await owner_url(store, topic) == url
            old_store = app.store
            await old_store.expire_session()  # type: ignore[union-attr]

            async def serving_again() -> bool:
                return (
                    app.store is not None
                    and app.store is not old_store
                    and (app.server is not None)
                )

            await until(serving_again, "the broker joined again", timeout=30)
            await loop.run_in_executor(None, send, 20, 20)  # lookup, new ownership, new session
            got = await loop.run_in_executor(None, consume_all, url, topic)
            assert sorted(set(got)) == list(range(40))
        finally:
            await app.stop()
