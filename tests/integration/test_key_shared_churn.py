"""Key_Shared with the official client while consumers join and leave mid-stream: every
message arrives, and each key's messages are received in order across the whole
subscription, redeliveries of what a departed consumer held aside."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from stripemq.broker.server import BrokerServer
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.metadata import MetadataStore
from stripemq.testing.broker import broker_on_bookies

pytestmark = pytest.mark.integration

MESSAGES = 3000
KEYS = 60

# The subscription's receipts, in the order they happened (appended from every consumer's
# thread): (consumer, key, value) for a message; (consumer, None, -1) once it has left.
Event = tuple[str, str | None, int]


@pytest.fixture
async def broker(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[BrokerServer]:
    config = ManagedLedgerConfig(max_entries_per_ledger=500, min_rollover_time_s=0)
    async with broker_on_bookies(metadata_url, store, tmp_path, ml_config=config) as server:
        yield server


class ChurningConsumer(threading.Thread):
    """One consumer on its own client: receives, records, acknowledges until told to stop."""

    def __init__(self, url: str, topic: str, name: str, log: list[Event]) -> None:
        super().__init__(daemon=True)
        self.client = pulsar.Client(url, operation_timeout_seconds=30)
        self.consumer = self.client.subscribe(
            topic,
            "churn",
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=name,
            receiver_queue_size=20,
        )
        self.name = name
        self.log = log
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                message = self.consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            except pulsar.PulsarException:
                return
            # Recorded before the ack: whatever the ack lets through is recorded later.
            self.log.append((self.name, message.partition_key(), int(message.data())))
            # A little work per message: consumers lag, so when one joins or leaves the
            # others hold delivered, unacknowledged messages of the keys that move.
            time.sleep(0.001)
            self.consumer.acknowledge(message)

    def leave(self) -> None:
        """Close the whole client: whatever it holds unacknowledged goes to the others. Its
        departure is recorded after its last receipt and before the broker hears of it."""
        self.stopping.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name} did not stop receiving"
        self.log.append((self.name, None, -1))
        self.client.close()


def received_values(log: list[Event]) -> set[int]:
    return {value for _, key, value in log if key is not None}


def order_violations(log: list[Event]) -> list[str]:
    """Where a key's messages were received out of order across the subscription.

    Per key, in the order of receipt, whichever consumer received them: a message received
    for the first time must be newer than every message of that key received before it. A
    message received again is a redelivery, allowed only of what a consumer that has left
    since held (its acknowledgement may not have reached the broker), and only before
    anything newer of that key reached another consumer: the broker replays it before the
    key moves on.
    """
    left_at = {consumer: t for t, (consumer, key, _) in enumerate(log) if key is None}
    by_key: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
    for t, (consumer, key, value) in enumerate(log):
        if key is not None:
            by_key[key].append((t, consumer, value))
    problems = []
    for key, receipts in by_key.items():
        highest = -1
        latest: dict[int, tuple[int, str]] = {}  # value -> (when, by whom) last received
        for n, (t, consumer, value) in enumerate(receipts):
            if value not in latest:
                if value < highest:
                    problems.append(f"{key} #{value} first reached {consumer} after #{highest}")
            else:
                t0, holder = latest[value]
                if not t0 < left_at.get(holder, len(log)) < t:
                    problems.append(
                        f"{key} #{value} reached {consumer} again, but {holder}, which had it,"
                        " had not left"
                    )
                newer = [v for t1, c1, v in receipts[:n] if t1 > t0 and c1 != holder and v > value]
                if newer:
                    problems.append(
                        f"{key} #{value} was redelivered to {consumer} after #{newer[0]}"
                        " had reached another consumer"
                    )
            latest[value] = (t, consumer)
            highest = max(highest, value)
    return problems


def test_order_violations_are_found_across_consumers() -> None:
    assert order_violations([]) == []
    # c0 leaves holding #3: replayed to c1 before #5.
    fine: list[Event] = [("c0", "k", 1), ("c0", "k", 3), ("c0", None, -1), ("c1", "k", 3)]
    assert order_violations([*fine, ("c1", "k", 5)]) == []
    # Each consumer in order, the key not: #1 after #3.
    assert order_violations([("c0", "k", 3), ("c1", "k", 1)])
    # A redelivery nobody's departure explains.
    assert order_violations([("c0", "k", 1), ("c1", "k", 1)])
    assert order_violations([*fine, ("c2", "k", 3)])  # c1, which had it last, is still here
    # A replay after something newer went out.
    assert order_violations([("c0", "k", 1), ("c0", None, -1), ("c1", "k", 2), ("c1", "k", 1)])


def churn(url: str, topic: str, seed: int) -> list[Event]:
    rng = random.Random(seed)
    log: list[Event] = []
    consumers: list[ChurningConsumer] = []
    counter = 0

    def join() -> None:
        nonlocal counter
        consumer = ChurningConsumer(url, topic, f"c{counter}", log)
        counter += 1
        consumer.start()
        consumers.append(consumer)

    join()
    join()
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send_async(
                str(i).encode(),
                lambda result, message_id: None,
                partition_key=f"key-{rng.randrange(KEYS)}",
            )
            if i % 150 == 0:
                producer.flush()
                roll = rng.random()
                if roll < 0.4 and len(consumers) < 4:
                    join()
                elif roll < 0.8 and len(consumers) > 1:
                    consumers.pop(rng.randrange(len(consumers))).leave()
                time.sleep(0.05)
        producer.flush()
        deadline = time.monotonic() + 60
        while len(received_values(log)) < MESSAGES and time.monotonic() < deadline:
            time.sleep(0.2)
        return log
    finally:
        for consumer in consumers:
            consumer.leave()
        client.close()


@pytest.mark.parametrize("seed", [1, 2])
async def test_key_shared_order_and_completeness_while_consumers_churn(
    broker: BrokerServer, seed: int
) -> None:
    topic = f"persistent://public/default/churn-{seed}"
    log = await asyncio.get_running_loop().run_in_executor(
        None, churn, broker.service_url, topic, seed
    )
    assert received_values(log) == set(range(MESSAGES)), "messages were lost"
    problems = order_violations(log)
    assert not problems, f"{len(problems)} out of order: {problems[:10]}"
    print(f"\n{sum(1 for _, key, _ in log if key is not None) - MESSAGES} redelivered")
