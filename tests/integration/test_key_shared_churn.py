"""Key_Shared with the official client while consumers join and leave mid-stream: every
message arrives, and no consumer ever sees a key's messages out of order."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from stripemq.broker.managed_ledger_config import ManagedLedgerConfig
from stripemq.broker.server import BrokerServer
from stripemq.metadata import MetadataStore
from stripemq.testing.broker import broker_on_bookies

pytestmark = pytest.mark.integration

MESSAGES = 3000
KEYS = 60


@pytest.fixture
async def broker(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[BrokerServer]:
    config = ManagedLedgerConfig(max_entries_per_ledger=500, min_rollover_time_s=0)
    async with broker_on_bookies(metadata_url, store, tmp_path, ml_config=config) as server:
        yield server


class ChurningConsumer(threading.Thread):
    """One consumer on its own client: receives, records, acknowledges until told to stop."""

    def __init__(self, url: str, topic: str, name: str, log: list[tuple[str, str, int]]) -> None:
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
            self.log.append((self.name, message.partition_key(), int(message.data())))
            self.consumer.acknowledge(message)

    def leave(self) -> None:
        """Close the whole client: whatever it holds unacknowledged goes to the others."""
        self.stopping.set()
        self.join(5)
        self.client.close()


def churn(url: str, topic: str, seed: int) -> list[tuple[str, str, int]]:
    rng = random.Random(seed)
    log: list[tuple[str, str, int]] = []
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
        while len({value for _, _, value in log}) < MESSAGES and time.monotonic() < deadline:
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
    assert {value for _, _, value in log} == set(range(MESSAGES)), "messages were lost"
    seen: dict[tuple[str, str], int] = {}
    for consumer, key, value in log:
        last = seen.get((consumer, key), -1)
        assert value > last, f"{consumer} got {key} #{value} after #{last}"
        seen[(consumer, key)] = value
