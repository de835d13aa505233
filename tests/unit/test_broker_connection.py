"""``ServerConnection`` driven without a socket: a SEND counts as a bounded number of
messages against its topic's publish rate, a changed rate ends a pause at once, and what
one turn of the event loop writes leaves in one socket write, in order."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from stripemq.broker.config import DelayedDeliveryConfig
from stripemq.broker.connection import ServerConnection
from stripemq.broker.rate_limiter import Rate, RateLimiter
from stripemq.broker.service import BrokerService
from stripemq.broker.stats import TopicCounters
from stripemq.broker.topic import Producer
from stripemq.errors import ManagedLedgerError
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import MAX_BATCH_SIZE
from stripemq.proto.frames import Frame, base_command, encode_command, encode_entry
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
        self.writes = 0

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1234)

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.written += data
        self.writes += 1


def connection(writer: Writer | None = None) -> ServerConnection:
    reader = cast(asyncio.StreamReader, None)
    return ServerConnection(cast(BrokerService, None), reader, cast(Any, writer or Writer()))


class Topic:
    """What a SEND reaches of its topic: its publish rate, and appends that succeed."""

    def __init__(self, limiter: RateLimiter | None, *, fail: bool = False) -> None:
        self.publish_limiter = limiter
        self.fail = fail
        self.dedup = None
        self.stats = TopicCounters()
        self.topic_name = TopicName.parse("t")
        self.delayed_delivery = DelayedDeliveryConfig()

    def check_encrypted_message(self, producer: object, metadata: object) -> None:
        """No producer here says it encrypts."""

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


async def test_frames_written_in_one_loop_turn_leave_in_one_write_in_order() -> None:
    writer = Writer()
    conn = connection(writer)
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    for entry_id in range(50):
        message_id = pb.MessageIdData(ledgerId=3, entryId=entry_id)
        conn.send_message(7, message_id, 0, encode_entry(metadata, b"<m%d>" % entry_id))
    conn.write(pb.CommandSuccess(request_id=9))
    assert writer.writes == 0  # nothing is written while this turn goes on
    await until(lambda: writer.writes > 0, "the queued frames are written")
    assert writer.writes == 1
    positions = [writer.written.find(b"<m%d>" % i) for i in range(50)]
    assert -1 not in positions and positions == sorted(positions)
    assert writer.written.endswith(encode_command(pb.CommandSuccess(request_id=9)))
