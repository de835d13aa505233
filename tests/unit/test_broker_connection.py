"""``ServerConnection``'s publish throttling, driven without a socket: a SEND counts as a
bounded number of messages against its topic's publish rate, and a changed rate ends a
pause at once."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from stripemq.broker.connection import ServerConnection
from stripemq.broker.rate_limiter import Rate, RateLimiter
from stripemq.broker.service import BrokerService
from stripemq.broker.stats import TopicCounters
from stripemq.broker.topic import Producer
from stripemq.errors import ManagedLedgerError
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import MAX_BATCH_SIZE
from stripemq.proto.frames import Frame, base_command, encode_entry
from stripemq.proto.topic_name import TopicName
from stripemq.testing.polling import until


class Transport:
    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class Writer:
    """A stream writer that keeps what is written."""

    def __init__(self) -> None:
        self.transport = Transport()
        self.written = b""

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1234)

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.written += data


def connection() -> ServerConnection:
    reader = cast(asyncio.StreamReader, None)
    return ServerConnection(cast(BrokerService, None), reader, cast(Any, Writer()))


class Topic:
    """What a SEND reaches of its topic: its publish rate, and appends that succeed."""

    def __init__(self, limiter: RateLimiter | None, *, fail: bool = False) -> None:
        self.publish_limiter = limiter
        self.fail = fail
        self.dedup = None
        self.stats = TopicCounters()
        self.topic_name = TopicName.parse("t")

    def publish(self, entry: bytes) -> asyncio.Future[Position]:
        stored: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        if self.fail:
            stored.set_exception(ManagedLedgerError("no"))
        else:
            stored.set_result(Position(1, 0))
        return stored


def send(conn: ServerConnection, producer: Producer, num_messages: int) -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    entry = encode_entry(metadata, b"x")
    body = pb.CommandSend(producer_id=1, sequence_id=0, num_messages=num_messages)
    conn._on_send(producer, body, Frame(base_command(body), entry, metadata))


async def test_a_send_claiming_billions_of_messages_counts_as_one_batch_at_most() -> None:
    conn = connection()
    limiter = RateLimiter(Rate(100))
    producer = Producer(1, "p", cast(Any, Topic(limiter)))
    send(conn, producer, 2**31 - 1)
    assert conn.publish_throttled
    # A batch's worth of debt at 100 msg/s, not 2**31 - 1 messages' (about 250 days).
    assert limiter.delay() <= MAX_BATCH_SIZE / 100 + 1
    await until(lambda: producer.stats.meter.count > 0, "the SEND is stored")
    assert producer.stats.meter.count == MAX_BATCH_SIZE  # the same count in the stats
    conn.publish_rate_changed()


async def test_a_changed_publish_rate_ends_the_pause_at_once() -> None:
    conn = connection()
    producer = Producer(1, "p", cast(Any, Topic(RateLimiter(Rate(1)))))
    send(conn, producer, 1000)
    assert conn.publish_throttled  # for about 1000 s at the old rate
    conn.publish_rate_changed()  # the next SEND is measured against the new rate
    assert not conn.publish_throttled
    conn.publish_rate_changed()  # not paused: nothing to do
    assert not conn.publish_throttled


async def test_failed_appends_are_not_counted() -> None:
    conn = connection()
    topic = Topic(None, fail=True)
    producer = Producer(1, "p", cast(Any, topic))
    send(conn, producer, 5)
    await until(lambda: conn.pending_publishes == 0, "the failed append is answered")
    assert topic.stats.meter.count == 0
    assert producer.stats.meter.count == 0
