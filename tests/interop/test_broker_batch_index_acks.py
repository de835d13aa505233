"""Batch-index acknowledgements (PIP-54) from the official pulsar-client: a cumulative ack
of a message inside a batch acknowledges that batch only up to that message."""

from __future__ import annotations

import asyncio

import pulsar
import pytest

from stripemq.broker.server import BrokerServer

pytestmark = pytest.mark.integration

BATCH = 10
ACKED_THROUGH = 4  # the batch index acknowledged cumulatively


def publish_one_batch(client: pulsar.Client, topic: str) -> list[pulsar.MessageId]:
    """``BATCH`` messages in one batch entry."""
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=BATCH,
        batching_max_publish_delay_ms=1000,
    )
    ids: list[pulsar.MessageId] = []
    for i in range(BATCH):
        producer.send_async(f"m{i}".encode(), lambda result, message_id: ids.append(message_id))
    producer.flush()
    producer.close()
    return ids


def subscribe(client: pulsar.Client, topic: str) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "batch-index",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        batch_index_ack_enabled=True,
    )


def cumulative_ack_inside_a_batch(url: str, topic: str) -> tuple[set[tuple[int, int]], list[str]]:
    """Ack the batch cumulatively up to ``ACKED_THROUGH``, close, and read what is left:
    returns the entries the batch went to and what came back the second time."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        subscribe(client, topic).close()  # the subscription exists before the messages
        ids = publish_one_batch(client, topic)
        consumer = subscribe(client, topic)
        received = [consumer.receive(timeout_millis=10_000) for _ in range(BATCH)]
        assert [m.data().decode() for m in received] == [f"m{i}" for i in range(BATCH)]
        consumer.acknowledge_cumulative(received[ACKED_THROUGH])
        consumer.close()  # sends the pending acks first
        again = subscribe(client, topic)
        left = []
        while True:
            try:
                message = again.receive(timeout_millis=2000)
            except pulsar.Timeout:
                break
            left.append(message.data().decode())
        again.close()
        return {(i.ledger_id(), i.entry_id()) for i in ids}, left
    finally:
        client.close()


async def test_a_cumulative_ack_inside_a_batch_redelivers_the_rest_of_it(
    broker: BrokerServer,
) -> None:
    entries, left = await asyncio.get_running_loop().run_in_executor(
        None,
        cumulative_ack_inside_a_batch,
        broker.service_url,
        "persistent://public/default/batch-index-cumulative",
    )
    assert len(entries) == 1  # one batch entry, so the ack lands inside it
    assert left == [f"m{i}" for i in range(ACKED_THROUGH + 1, BATCH)]
