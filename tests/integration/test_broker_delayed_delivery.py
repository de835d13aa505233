"""Delayed message delivery with the official pulsar-client: Shared and Key_Shared
subscriptions hold a message until its time, Exclusive ones deliver it at once, and the
delay survives a broker restart (the cursor reads the unacknowledged entries again)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pulsar
import pytest

from stripemq.bookie.client import BookKeeper, ClientConfig
from stripemq.broker.server import BrokerServer
from stripemq.metadata import MetadataStore
from stripemq.testing.cluster import BookieCluster

pytestmark = pytest.mark.integration

DELAY_S = 2.0
TICK_S = 1.0  # the broker's default delayed_delivery_tick_time_millis
SLACK_S = 3.0  # how late a delayed message may come on a loaded test machine
EARLY_TOLERANCE_S = 0.005  # delivery times are whole milliseconds
MESSAGES = 12


@dataclass(frozen=True)
class Arrival:
    text: str
    at: float  # time.time() when the consumer got it


async def in_thread(work, *args):  # type: ignore[no-untyped-def]
    return await asyncio.get_running_loop().run_in_executor(None, work, *args)


END = b"end"  # sent last, due after every other message


def send_end(producer: pulsar.Producer, due: dict[str, float | None]) -> None:
    """The end marker: due just after the last delayed message (Exclusive: at once). The
    tracker releases what is due first, so a duplicate of any message comes before it."""
    last = max(t for t in due.values() if t is not None)
    producer.send(END, deliver_at=int((last + 0.1) * 1000))


def receive_all(consumer: pulsar.Consumer, deadline: float) -> list[Arrival]:
    """Receive and acknowledge until the end marker: everything that came before it."""
    got: list[Arrival] = []
    while (remaining_ms := int((deadline - time.time()) * 1000)) > 0:
        try:
            message = consumer.receive(timeout_millis=remaining_ms)
        except pulsar.Timeout:
            continue
        at = time.time()
        consumer.acknowledge(message)
        if message.data() == END:
            return got
        got.append(Arrival(message.data().decode(), at))
    raise AssertionError(f"no end marker by the deadline, after {[a.text for a in got]}")


def send_mix(producer: pulsar.Producer, prefix: str, count: int) -> dict[str, float | None]:
    """Every third message at once, the others delayed by ``deliver_after`` or by
    ``deliver_at``; returns each message's earliest allowed arrival (``None``: at once)."""
    due: dict[str, float | None] = {}
    for i in range(count):
        text = f"{prefix}{i}"
        key = f"k{i % 4}"
        sent = time.time()
        if i % 3 == 0:
            producer.send(text.encode(), partition_key=key)
            due[text] = None
        elif i % 3 == 1:
            producer.send(
                text.encode(), partition_key=key, deliver_after=timedelta(seconds=DELAY_S)
            )
            due[text] = sent + DELAY_S
        else:
            deliver_at_ms = int((sent + DELAY_S) * 1000)
            producer.send(text.encode(), partition_key=key, deliver_at=deliver_at_ms)
            due[text] = deliver_at_ms / 1000
    return due


def mixed_round(url: str, topic: str) -> tuple[dict[str, float | None], dict[str, list[Arrival]]]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumers = {
            kind: client.subscribe(topic, f"sub-{kind}", consumer_type=consumer_type)
            for kind, consumer_type in [
                ("shared", pulsar.ConsumerType.Shared),
                ("key_shared", pulsar.ConsumerType.KeyShared),
                ("exclusive", pulsar.ConsumerType.Exclusive),
            ]
        }
        producer = client.create_producer(topic, batching_enabled=False)
        deadline = time.time() + DELAY_S + TICK_S + SLACK_S + 2
        # One thread per consumer: arrival times are taken as messages come, not later.
        with ThreadPoolExecutor(len(consumers)) as pool:
            futures = {
                kind: pool.submit(receive_all, consumer, deadline)
                for kind, consumer in consumers.items()
            }
            due = send_mix(producer, "m", MESSAGES)
            send_end(producer, due)
            arrivals = {kind: future.result() for kind, future in futures.items()}
        return due, arrivals
    finally:
        client.close()


def check_delayed(due: dict[str, float | None], got: list[Arrival], what: str) -> None:
    """Each message exactly once; immediate ones before any delay ran out; delayed ones
    not before their time and not much after it."""
    assert Counter(a.text for a in got) == Counter(list(due)), f"{what}: {[a.text for a in got]}"
    first_due = min(t for t in due.values() if t is not None)
    for arrival in got:
        deliver_at = due[arrival.text]
        if deliver_at is None:
            assert arrival.at < first_due, f"{what}: {arrival.text} was held up"
        else:
            assert arrival.at >= deliver_at - EARLY_TOLERANCE_S, (
                f"{what}: {arrival.text} came {deliver_at - arrival.at:.3f}s early"
            )
            assert arrival.at <= deliver_at + TICK_S + SLACK_S, f"{what}: {arrival.text} late"


async def test_shared_and_key_shared_delay_and_exclusive_does_not(broker: BrokerServer) -> None:
    topic = "persistent://public/default/delayed-mix"
    due, arrivals = await in_thread(mixed_round, broker.service_url, topic)
    check_delayed(due, arrivals["shared"], "Shared")
    check_delayed(due, arrivals["key_shared"], "Key_Shared")
    exclusive = arrivals["exclusive"]
    assert [a.text for a in exclusive] == list(due)  # all, once, in order
    first_due = min(t for t in due.values() if t is not None)
    assert all(a.at < first_due for a in exclusive), "Exclusive held delayed messages back"


RESTART_DELAY_S = 4.0


def before_restart(url: str, topic: str) -> dict[str, float | None]:
    """Send immediate and delayed messages; receive and acknowledge the immediate ones."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        due: dict[str, float | None] = {}
        for i in range(6):
            text = f"r{i}"
            sent = time.time()
            if i % 2:
                delay = timedelta(seconds=RESTART_DELAY_S)
                producer.send(text.encode(), deliver_after=delay)
                due[text] = sent + RESTART_DELAY_S
            else:
                producer.send(text.encode())
                due[text] = None
        for _ in range(3):
            message = consumer.receive(timeout_millis=10_000)
            assert due[message.data().decode()] is None, "a delayed message came early"
            consumer.acknowledge(message)
        consumer.close()  # returns once the broker has persisted the acks
        return due
    finally:
        client.close()


def after_restart(url: str, topic: str, due: dict[str, float | None]) -> list[Arrival]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        send_end(client.create_producer(topic, batching_enabled=False), due)
        deadline = time.time() + RESTART_DELAY_S + TICK_S + SLACK_S + 2
        return receive_all(consumer, deadline)
    finally:
        client.close()


async def test_delayed_messages_wait_out_a_broker_restart(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    topic = "persistent://public/default/delayed-restart"
    async with BookieCluster(metadata_url, tmp_path / "bookies", 2):
        bk = BookKeeper(store, ClientConfig(explicit_lac_interval_ms=100))
        await bk.start()
        try:
            first = BrokerServer(store, bk, port=0)
            await first.start()
            try:
                due = await in_thread(before_restart, first.service_url, topic)
            finally:
                await first.stop()
            # A new broker takes the topic over: its cursor reads the unacknowledged
            # (delayed) entries again and holds them until their time.
            second = BrokerServer(store, bk, port=0)
            await second.start()
            try:
                got = await in_thread(after_restart, second.service_url, topic, due)
            finally:
                await second.stop()
        finally:
            await bk.close()
    delayed = {text: at for text, at in due.items() if at is not None}
    assert Counter(a.text for a in got) == Counter(list(delayed)), [a.text for a in got]
    for arrival in got:
        assert arrival.at >= delayed[arrival.text] - EARLY_TOLERANCE_S, f"{arrival} came early"
