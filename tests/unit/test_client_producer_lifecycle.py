"""The producer's lifecycle (``ProducerLifecycle``): sends in each state, losing and
regaining the connection, giving up for good, closing. The broker side is a fake
connection that answers registration and records what is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest

from stripemq.client.client import AsyncClient
from stripemq.client.producer import (
    PRODUCER_TRANSITIONS,
    Producer,
    ProducerConfig,
    ProducerLifecycle,
    outgoing_message,
)
from stripemq.errors import AlreadyClosedError, StripeMQError, TopicTerminatedError
from stripemq.lifecycle import IllegalTransitionError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.testing.polling import until

P = ProducerLifecycle
TOPIC = "persistent://public/default/t"


class FakeConnection:
    max_message_size = 5 * 1024 * 1024

    def __init__(self, refuse: StripeMQError | None = None) -> None:
        self.refuse = refuse
        self.sent: list[bytes] = []
        self.producers: dict[int, Any] = {}
        self.is_closed = False
        self._ids = 0

    def new_request_id(self) -> int:
        self._ids += 1
        return self._ids

    async def register(
        self,
        table: dict[int, Any],
        handle_id: int,
        handle: Any,
        command: pb.CommandProducer,
        request_id: int,
        close_command: Callable[[int], Any],
    ) -> pb.BaseCommand:
        if self.refuse is not None:
            raise self.refuse
        table[handle_id] = handle
        success = pb.CommandProducerSuccess(
            request_id=request_id, producer_name="p", last_sequence_id=-1
        )
        return pb.BaseCommand(type=pb.BaseCommand.PRODUCER_SUCCESS, producer_success=success)

    def send_raw(self, frame: bytes) -> None:
        self.sent.append(frame)

    async def request(self, command: Any, request_id: int) -> None:
        return None

    async def close(self) -> None:
        self.is_closed = True


@dataclass
class Address:
    logical: str = "pulsar://broker:6650"
    physical: str = "broker:6650"


class Lookup:
    async def lookup(self, topic: str) -> Address:
        return Address()


class Pool:
    """Each attach gets the next connection (the last one for ever after)."""

    def __init__(self, connections: list[FakeConnection]) -> None:
        self.connections = connections

    async def get(self, logical: str, physical: str) -> FakeConnection:
        return self.connections.pop(0) if len(self.connections) > 1 else self.connections[0]


class FakeClient:
    """The parts of ``AsyncClient`` a producer uses."""

    operation_timeout_s = 0.5

    def __init__(self, *connections: FakeConnection) -> None:
        self.lookup = Lookup()
        self.pool = Pool(list(connections))
        self.forgotten: list[Any] = []

    def new_producer_id(self) -> int:
        return 1

    def forget(self, handle: Any) -> None:
        self.forgotten.append(handle)


def new_producer(client: FakeClient) -> Producer:
    config = ProducerConfig(send_timeout_millis=0)
    producer = Producer(cast(AsyncClient, client), TOPIC, config)
    assert producer.lifecycle is P.CONNECTING and not producer.closed
    return producer


def receipt(sequence_id: int) -> pb.CommandSendReceipt:
    return pb.CommandSendReceipt(
        producer_id=1, sequence_id=sequence_id, message_id=pb.MessageIdData(ledgerId=1, entryId=0)
    )


async def test_ready_once_attached_sends_go_out_at_once() -> None:
    connection = FakeConnection()
    producer = new_producer(FakeClient(connection))
    await producer.connect_first()
    assert producer.lifecycle is P.READY
    sent = await producer.send_message(outgoing_message(b"a"))
    assert len(connection.sent) == 1
    producer.on_send_receipt(receipt(0))
    await sent
    await producer.close()


async def test_detached_sends_wait_and_go_out_again_on_reattach() -> None:
    first, second = FakeConnection(), FakeConnection()
    producer = new_producer(FakeClient(first, second))
    await producer.connect_first()
    producer.on_connection_closed(cast(Any, first))
    assert producer.lifecycle is P.CONNECTING
    sent = await producer.send_message(outgoing_message(b"a"))
    assert first.sent == [] and second.sent == []  # queued, not sent
    await until(lambda: producer.lifecycle is P.READY, "the producer reattaches")
    assert len(second.sent) == 1  # sent again on the new connection
    producer.on_send_receipt(receipt(0))
    await sent
    await producer.close()


async def test_failed_for_good_fails_what_waits_and_refuses_sends() -> None:
    first = FakeConnection()
    refusing = FakeConnection(refuse=TopicTerminatedError("terminated"))
    producer = new_producer(FakeClient(first, refusing))
    await producer.connect_first()
    producer.on_connection_closed(cast(Any, first))
    sent = await producer.send_message(outgoing_message(b"a"))
    await until(lambda: producer.lifecycle is P.FAILED, "the producer gives up")
    with pytest.raises(TopicTerminatedError):
        await sent
    with pytest.raises(TopicTerminatedError):
        await producer.send_message(outgoing_message(b"b"))
    await producer.close()
    assert producer.lifecycle is P.CLOSED


async def test_close_refuses_sends_and_sends_nothing_more() -> None:
    connection = FakeConnection()
    client = FakeClient(connection)
    producer = new_producer(client)
    await producer.connect_first()
    await producer.close()
    assert producer.lifecycle is P.CLOSED and producer.closed
    assert client.forgotten == [producer]
    with pytest.raises(AlreadyClosedError):
        await producer.send_message(outgoing_message(b"a"))
    producer.detached()  # the broker's late close of it: stays closed
    await producer.close()  # twice: nothing more
    assert producer.lifecycle is P.CLOSED and connection.sent == []


async def test_closed_while_never_attached() -> None:
    producer = new_producer(FakeClient(FakeConnection()))
    await producer.close()
    assert producer.lifecycle is P.CLOSED


async def test_illegal_moves_are_refused_and_change_nothing() -> None:
    producer = new_producer(FakeClient(FakeConnection()))
    await producer.connect_first()
    producer._move_to(P.READY)  # staying is always allowed
    with pytest.raises(IllegalTransitionError, match="READY -> FAILED"):
        producer._move_to(P.FAILED)  # giving up happens only while detached
    assert producer.lifecycle is P.READY
    await producer.close()
    for state in (P.CONNECTING, P.READY, P.FAILED):
        with pytest.raises(IllegalTransitionError, match=f"CLOSED -> {state.name}"):
            producer._move_to(state)
    with pytest.raises(AttributeError):
        producer.closed = False  # type: ignore[misc]  # a view of the lifecycle: read-only
    assert producer.lifecycle is P.CLOSED


def test_the_transition_table() -> None:
    t = PRODUCER_TRANSITIONS
    assert t.targets(P.CLOSED) == frozenset()
    assert all(P.CLOSED in t.targets(s) for s in P if s is not P.CLOSED)
    assert not t.allows(P.FAILED, P.READY) and not t.allows(P.FAILED, P.CONNECTING)
    assert not t.allows(P.READY, P.FAILED)  # giving up happens only while detached


async def test_sends_during_close_wait_for_their_receipts() -> None:
    connection = FakeConnection()
    producer = new_producer(FakeClient(connection))
    await producer.connect_first()
    sent = await producer.send_message(outgoing_message(b"a"))
    closing = asyncio.ensure_future(producer.close())
    await asyncio.sleep(0)
    assert producer.lifecycle is P.READY  # still flushing: no CLOSING state
    producer.on_send_receipt(receipt(0))
    await closing
    assert (await sent).entry_id() == 0 and producer.lifecycle is P.CLOSED
