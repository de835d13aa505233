"""Subscription acknowledgements, driven directly on an in-memory cursor (no I/O)."""

from __future__ import annotations

from typing import cast

import pytest

from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.topic import Consumer, PersistentTopic, Subscription
from stripemq.errors import BrokerError
from stripemq.managed_ledger.cursor.non_durable import NonDurableCursor
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import words_of
from stripemq.proto.topic_name import TopicName
from stripemq.testing.sinks import NullSink

LEDGER = 7


def subscription(
    entries: int = 4, sub_type: int = pb.CommandSubscribe.Exclusive
) -> tuple[Subscription, Consumer]:
    """A subscription over one ledger of ``entries`` entries and one consumer of it."""
    chain = LedgerChain([LedgerInfo(LEDGER, entries)])
    topic = PersistentTopic(TopicName.parse("t"), cast(ManagedLedger, None))
    cursor = NonDurableCursor("sub", chain, Position(LEDGER, -1))
    sub = Subscription(topic, cursor, sub_type)
    consumer = Consumer(ConsumerSlot(1, "c"), NullSink(), sub)
    return sub, consumer


def ack(
    ack_type: int,
    entry: int,
    unacked: list[bool] | None = None,
    batch_size: int | None = None,
) -> pb.CommandAck:
    message_id = pb.MessageIdData(ledgerId=LEDGER, entryId=entry)
    if unacked is not None:
        message_id.ack_set.extend(words_of(unacked))
    if batch_size is not None:
        message_id.batch_size = batch_size
    return pb.CommandAck(consumer_id=1, ack_type=ack_type, message_id=[message_id])


@pytest.mark.parametrize("with_size", [True, False])
def test_a_cumulative_ack_inside_a_batch_acks_only_up_to_that_message(with_size: bool) -> None:
    sub, consumer = subscription()
    consumer.slot.pending = {Position(LEDGER, 0): 1, Position(LEDGER, 1): 10}
    # Messages 0..4 of the batch at entry 1 acknowledged, cumulatively (the ack set's set
    # bits are the messages still unacknowledged).
    unacked = [False] * 5 + [True] * 5
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 1, unacked, 10 if with_size else None))
    state = sub.cursor.state
    assert state.mark_delete == Position(LEDGER, 0)  # everything before the entry
    assert not state.is_acked(Position(LEDGER, 1))
    bits = state.ack_set(Position(LEDGER, 1))
    assert bits is not None and bits.tolist() == unacked
    # The rest of the batch, later: now the whole entry is acknowledged.
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 1, [False] * 9 + [True], 10))
    assert state.ack_set(Position(LEDGER, 1)).tolist() == [False] * 9 + [True]  # type: ignore[union-attr]
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 1))
    assert state.mark_delete == Position(LEDGER, 1)
    assert state.ack_set(Position(LEDGER, 1)) is None


def test_a_cumulative_ack_whose_ack_set_clears_every_bit_acks_the_entry() -> None:
    sub, consumer = subscription()
    consumer.slot.pending = {Position(LEDGER, 0): 3}
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 0, [False] * 3, 3))
    assert sub.cursor.state.mark_delete == Position(LEDGER, 0)


def test_a_cumulative_ack_that_acks_no_message_of_the_batch_acks_only_what_precedes() -> None:
    sub, consumer = subscription()
    consumer.slot.pending = {Position(LEDGER, 2): 4}
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 2, [True] * 4, 4))
    state = sub.cursor.state
    assert state.mark_delete == Position(LEDGER, 1)
    assert not state.is_acked(Position(LEDGER, 2))


def test_a_cumulative_ack_without_an_ack_set_acks_the_whole_entry() -> None:
    sub, consumer = subscription()
    consumer.slot.pending = {Position(LEDGER, 0): 1, Position(LEDGER, 1): 10}
    sub.ack(consumer, ack(pb.CommandAck.Cumulative, 1))
    assert sub.cursor.state.mark_delete == Position(LEDGER, 1)
    assert consumer.slot.pending == {}


@pytest.mark.parametrize("ack_type", [pb.CommandAck.Individual, pb.CommandAck.Cumulative])
@pytest.mark.parametrize("batch_size", [2**31 - 1, 1 << 17, -5])
def test_a_hostile_batch_size_is_refused_before_anything_is_allocated(
    ack_type: int, batch_size: int
) -> None:
    sub, consumer = subscription()
    with pytest.raises(BrokerError) as caught:
        sub.ack(consumer, ack(ack_type, 1, [False], batch_size))
    assert caught.value.server_error == pb.NotAllowedError
    assert sub.cursor.state.mark_delete == Position(LEDGER, -1)


def test_a_batch_size_taken_from_a_hostile_producers_entry_is_refused() -> None:
    sub, consumer = subscription()
    # The entry's metadata claimed 2**31 - 1 messages; the ack leaves batch_size out.
    consumer.slot.pending = {Position(LEDGER, 1): 2**31 - 1}
    with pytest.raises(BrokerError):
        sub.ack(consumer, ack(pb.CommandAck.Individual, 1, [False]))
    assert sub.cursor.state.ack_set(Position(LEDGER, 1)) is None
