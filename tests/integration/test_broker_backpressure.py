"""Backpressure and producer identity on one connection, against an in-process standalone.

A producer that never waits for receipts cannot make the broker hold more than
``max_pending_publish_requests_per_connection`` sends: past it the broker stops reading the
connection until half are receipted. The journal's sync is held shut (see
``stripemq.testing.journal_gate``) so that no send can complete while the test looks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from stripemq.broker.connection import MAX_UNSENT_BYTES
from stripemq.broker.server import BrokerServer
from stripemq.broker.topic import READ_BATCH
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry as encode_message
from stripemq.proto.frames import encode_payload_command
from stripemq.standalone import Standalone
from stripemq.testing.journal_gate import installed_gate
from stripemq.testing.polling import until
from stripemq.testing.raw_connection import RawConnection
from stripemq.testing.standalone import in_process_standalone

pytestmark = pytest.mark.integration

WINDOW = 10  # max_pending_publish_requests_per_connection
SENDS = 100
GREEDY_MESSAGES = 600  # of 64 KiB: far more than a socket's buffers hold


@pytest.fixture
async def standalone(tmp_path: Path) -> AsyncIterator[Standalone]:
    async with in_process_standalone(
        tmp_path, {"stats_http_port": 0, "max_pending_publish_requests_per_connection": WINDOW}
    ) as node:
        yield node


def broker_server(node: Standalone) -> BrokerServer:
    assert node.broker is not None and node.broker.server is not None
    return node.broker.server


async def producing(node: Standalone, topic: str) -> RawConnection:
    """A raw connection with producer 1 on ``topic``."""
    conn = await RawConnection.open(node.broker_config.broker_service_port, handshake=True)
    conn.command(pb.CommandProducer(topic=topic, producer_id=1, request_id=1))
    await conn.wait_for(pb.BaseCommand.PRODUCER_SUCCESS)
    return conn


def send_frame(sequence_id: int, payload: bytes | None = None) -> bytes:
    metadata = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id, publish_time=1)
    return encode_payload_command(
        pb.CommandSend(producer_id=1, sequence_id=sequence_id, num_messages=1),
        encode_message(metadata, payload if payload is not None else b"m%d" % sequence_id),
    )


async def test_a_producer_that_never_waits_is_not_read_past_the_window(
    standalone: Standalone,
) -> None:
    assert standalone.bookie is not None
    gate = installed_gate(standalone.bookie.storage.journal)
    topic = f"persistent://public/default/flood-{uuid.uuid4().hex[:8]}"
    conn = await producing(standalone, topic)
    [served] = broker_server(standalone).connections
    try:
        gate.close()
        conn.send(b"".join(send_frame(i) for i in range(SENDS)))
        conn.command(pb.CommandPing())
        await until(lambda: served.pending_publishes >= WINDOW, "the window filled")
        assert served.pending_publishes == WINDOW  # the rest waits, unread, in the socket
        gate.open()
        await conn.wait_for(pb.BaseCommand.PONG, timeout=30)
        receipts = [
            f.command.send_receipt.sequence_id
            for f in conn.frames
            if f.command.type == pb.BaseCommand.SEND_RECEIPT
        ]
        # The PING came after every SEND, and is read only once all but a window's worth
        # of them are receipted: had the broker read on, it would have answered at once.
        assert len(receipts) >= SENDS - WINDOW
        await conn.wait_for(pb.BaseCommand.SEND_RECEIPT, count=SENDS, timeout=30)
        receipts = [
            f.command.send_receipt.sequence_id
            for f in conn.frames
            if f.command.type == pb.BaseCommand.SEND_RECEIPT
        ]
        assert receipts == list(range(SENDS))
        assert served.pending_publishes == 0
    finally:
        gate.open()
        await conn.close()


def producer_names_are_exclusive(url: str, topic: str) -> None:
    first = pulsar.Client(url)
    second = pulsar.Client(url)
    try:
        producer = first.create_producer(topic, producer_name="billing")
        with pytest.raises(pulsar.ProducerBusy):
            second.create_producer(topic, producer_name="billing")
        producer.close()
        again = second.create_producer(topic, producer_name="billing")  # free once closed
        again.send(b"after")
    finally:
        first.close()
        second.close()


async def test_a_producer_name_in_use_on_the_topic_is_refused(standalone: Standalone) -> None:
    topic = f"persistent://public/default/names-{uuid.uuid4().hex[:8]}"
    url = broker_server(standalone).service_url
    await asyncio.to_thread(producer_names_are_exclusive, url, topic)


def generated_names(url: str, topic: str) -> list[str]:
    clients = [pulsar.Client(url) for _ in range(3)]
    try:
        return [
            client.create_producer(topic).producer_name() for client in clients for _ in range(5)
        ]
    finally:
        for client in clients:
            client.close()


async def test_generated_producer_names_are_unique(standalone: Standalone) -> None:
    topic = f"persistent://public/default/generated-{uuid.uuid4().hex[:8]}"
    names = await asyncio.to_thread(generated_names, broker_server(standalone).service_url, topic)
    assert len(set(names)) == len(names) == 15


async def test_a_repeated_producer_id_leaves_no_producer_behind(standalone: Standalone) -> None:
    topic = f"persistent://public/default/twice-{uuid.uuid4().hex[:8]}"
    conn = await RawConnection.open(standalone.broker_config.broker_service_port, handshake=True)
    for request_id in (1, 2):  # back to back: the second comes while the first is made
        conn.command(
            pb.CommandProducer(
                topic=topic, producer_id=1, request_id=request_id, initial_subscription_name="s"
            )
        )
    await conn.expect(pb.BaseCommand.PRODUCER_SUCCESS)
    conn.command(pb.CommandProducer(topic=topic, producer_id=1, request_id=3))  # a retry
    await conn.wait_for(pb.BaseCommand.PRODUCER_SUCCESS, count=2)
    answers = {
        f.command.producer_success.request_id
        for f in conn.frames
        if f.command.type == pb.BaseCommand.PRODUCER_SUCCESS
    } | {f.command.error.request_id for f in conn.frames if f.command.type == pb.BaseCommand.ERROR}
    assert answers == {1, 2, 3}  # each request answered
    service = broker_server(standalone).service
    assert service is not None
    assert len(service.topics[topic].producers) == 1
    await conn.close()
    await until(lambda: not service.topics[topic].producers, "the producer left with its client")


async def test_a_consumer_that_asks_for_everything_and_reads_nothing_is_not_buffered_for(
    standalone: Standalone,
) -> None:
    """FLOW for a million messages, then no reading: the broker stops handing it entries
    once its socket holds ``MAX_UNSENT_BYTES`` unsent; the rest waits in storage. When the
    client reads again, everything comes."""
    topic = f"persistent://public/default/greedy-{uuid.uuid4().hex[:8]}"
    port = standalone.broker_config.broker_service_port
    consumer = await RawConnection.open(port, handshake=True)
    consumer.command(
        pb.CommandSubscribe(
            topic=topic, subscription="greedy", subType=0, consumer_id=1, request_id=1
        )
    )
    await consumer.expect(pb.BaseCommand.SUCCESS)
    service = broker_server(standalone).service
    assert service is not None
    served = next(c for c in broker_server(standalone).connections if c.consumers)
    subscription = served.consumers[1].subscription
    consumer.pause_reading()
    consumer.command(pb.CommandFlow(consumer_id=1, messagePermits=1_000_000))
    producer = await producing(standalone, topic)
    body = b"x" * (64 * 1024)
    producer.send(b"".join(send_frame(i, body) for i in range(GREEDY_MESSAGES)))
    await producer.wait_for(pb.BaseCommand.SEND_RECEIPT, count=GREEDY_MESSAGES, timeout=60)
    await until(lambda: not subscription.dispatcher.has_permits(), "dispatch waits for the socket")
    unsent = served.writer.transport.get_write_buffer_size()
    delivered = len(served.consumers[1].slot.pending)
    assert unsent <= MAX_UNSENT_BYTES + READ_BATCH * len(body)
    assert not served.consumers[1].slot.writable
    consumer.resume_reading()
    await consumer.wait_for(pb.BaseCommand.MESSAGE, count=GREEDY_MESSAGES, timeout=60)
    assert delivered < GREEDY_MESSAGES
    await consumer.close()
    await producer.close()
