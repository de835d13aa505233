"""Message ids (``client.message``): order, equality, serialization, and their interop
with the official ``pulsar-client``'s ``MessageId``."""

from __future__ import annotations

import pulsar
import pytest
from client_helpers import LONG_MAX
from hypothesis import given
from hypothesis import strategies as st

from stripemq.client.message import MessageId
from stripemq.errors import InvalidMessageError
from stripemq.proto import pulsar_api_pb2 as pb


def test_message_ids_order_by_ledger_then_entry() -> None:
    ids = [
        MessageId(ledger_id=2, entry_id=0),
        MessageId(ledger_id=1, entry_id=7),
        MessageId(ledger_id=1, entry_id=2),
        MessageId(ledger_id=3, entry_id=0),
        MessageId(ledger_id=2, entry_id=1),
    ]
    assert sorted(ids) == [
        MessageId(ledger_id=1, entry_id=2),
        MessageId(ledger_id=1, entry_id=7),
        MessageId(ledger_id=2, entry_id=0),
        MessageId(ledger_id=2, entry_id=1),
        MessageId(ledger_id=3, entry_id=0),
    ]
    assert MessageId(ledger_id=1, entry_id=9) < MessageId(ledger_id=2, entry_id=0)
    assert MessageId(ledger_id=2, entry_id=0) >= MessageId(ledger_id=1, entry_id=9)


def test_a_whole_entry_sorts_after_its_batch_messages() -> None:
    whole = MessageId(ledger_id=5, entry_id=5)
    batch = [MessageId(ledger_id=5, entry_id=5, batch_index=i, batch_size=3) for i in range(3)]
    assert all(m < whole for m in batch)
    assert whole > batch[-1]
    assert sorted([whole, *reversed(batch)]) == [*batch, whole]
    assert MessageId(ledger_id=5, entry_id=4) < batch[0]
    assert whole < MessageId(ledger_id=5, entry_id=6, batch_index=0, batch_size=2)


def test_equality_ignores_topic_and_batch_size() -> None:
    a = MessageId(
        ledger_id=1,
        entry_id=2,
        partition=0,
        batch_index=3,
        batch_size=10,
        topic="persistent://t/n/a",
    )
    b = MessageId(ledger_id=1, entry_id=2, partition=0, batch_index=3, topic="persistent://t/n/b")
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a <= b and a >= b
    assert a != MessageId(ledger_id=1, entry_id=2, partition=1, batch_index=3)
    assert a != MessageId(ledger_id=1, entry_id=2, partition=0, batch_index=4)
    assert a != MessageId(ledger_id=1, entry_id=2, partition=0, batch_index=-1)
    assert a != "1:2:0:3"


def test_accessors_and_the_official_constructor_order() -> None:
    mid = MessageId(3, 10, 20, 4)  # partition, ledger, entry, batch index: the official order
    assert (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index()) == (3, 10, 20, 4)
    official = pulsar.MessageId(3, 10, 20, 4)
    assert MessageId.deserialize(official.serialize()) == mid


def test_entry_id_only_and_with_topic() -> None:
    mid = MessageId(ledger_id=1, entry_id=2, partition=3, batch_index=4, batch_size=5, topic="t")
    entry = mid.entry_id_only()
    assert entry == MessageId(ledger_id=1, entry_id=2, partition=3)
    assert entry.batch_index() == -1 and entry.batch_size == 0 and entry.topic == "t"
    moved = mid.with_topic("u")
    assert moved == mid and moved.topic == "u" and moved.batch_size == 5
    assert mid.topic == "t"


ids_strategy = st.builds(
    MessageId,
    ledger_id=st.integers(-1, LONG_MAX),
    entry_id=st.integers(-1, LONG_MAX),
    partition=st.integers(-1, 1000),
    batch_index=st.integers(-1, 10_000),
    batch_size=st.integers(0, 10_000),
)


@given(ids_strategy, st.none() | st.text(max_size=10))
def test_serialize_round_trips(mid: MessageId, topic: str | None) -> None:
    back = MessageId.deserialize(mid.serialize(), topic)
    assert back == mid
    assert back.batch_size == mid.batch_size
    assert back.topic == topic
    assert MessageId.from_proto(mid.to_proto()) == mid


@given(
    st.integers(-1, 1000),
    st.integers(-1, LONG_MAX),
    st.integers(-1, LONG_MAX),
    st.integers(-1, 10_000),
)
def test_serialized_ids_interoperate_with_the_official_client(
    partition: int, ledger: int, entry: int, batch_index: int
) -> None:
    ours = MessageId(ledger_id=ledger, entry_id=entry, partition=partition, batch_index=batch_index)
    official = pulsar.MessageId(partition, ledger, entry, batch_index)
    assert ours.serialize() == official.serialize()
    theirs = pulsar.MessageId.deserialize(ours.serialize())
    assert (theirs.partition(), theirs.ledger_id(), theirs.entry_id(), theirs.batch_index()) == (
        partition,
        ledger,
        entry,
        batch_index,
    )
    back = MessageId.deserialize(official.serialize())
    assert (back.partition(), back.ledger_id(), back.entry_id(), back.batch_index()) == (
        partition,
        ledger,
        entry,
        batch_index,
    )


@given(
    st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 4)),
    st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 4)),
)
def test_ordering_of_batch_messages_agrees_with_the_official_client(
    a: tuple[int, int, int], b: tuple[int, int, int]
) -> None:
    ours_a, ours_b = MessageId(0, *a), MessageId(0, *b)  # the official argument order
    theirs_a, theirs_b = pulsar.MessageId(0, *a), pulsar.MessageId(0, *b)
    assert (ours_a < ours_b) == (theirs_a < theirs_b)
    assert (ours_a == ours_b) == (theirs_a == theirs_b)


def test_a_batch_size_in_serialized_form_is_kept() -> None:
    data = pb.MessageIdData(ledgerId=1, entryId=2, batch_index=3, batch_size=8)
    mid = MessageId.deserialize(data.SerializeToString())
    assert mid.batch_size == 8 and mid.batch_index() == 3
    assert MessageId.deserialize(mid.serialize()).batch_size == 8


def test_earliest_and_latest_are_the_official_sentinels() -> None:
    assert MessageId.earliest.serialize() == pulsar.MessageId.earliest.serialize()
    assert MessageId.latest.serialize() == pulsar.MessageId.latest.serialize()
    assert MessageId.deserialize(pulsar.MessageId.earliest.serialize()) == MessageId.earliest
    assert MessageId.deserialize(pulsar.MessageId.latest.serialize()) == MessageId.latest
    assert (MessageId.earliest.ledger_id(), MessageId.earliest.entry_id()) == (-1, -1)
    assert (MessageId.latest.ledger_id(), MessageId.latest.entry_id()) == (LONG_MAX, LONG_MAX)
    assert MessageId.earliest != MessageId.latest


@given(st.integers(0, LONG_MAX - 1), st.integers(0, LONG_MAX - 1), st.integers(-1, 100))
def test_earliest_sorts_first_and_latest_last(ledger: int, entry: int, batch: int) -> None:
    mid = MessageId(ledger_id=ledger, entry_id=entry, partition=-1, batch_index=batch)
    assert MessageId.earliest < mid < MessageId.latest


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\xff\xff\xff\xff",
        b"\x08\x01",  # a ledger id, no entry id
        b"\x10\x01",  # an entry id, no ledger id
        b"\x08",  # cut short
        b"not a message id",
    ],
)
def test_deserializing_garbage_is_an_invalid_message(garbage: bytes) -> None:
    with pytest.raises(InvalidMessageError):
        MessageId.deserialize(garbage)


@given(st.binary(max_size=40))
def test_deserializing_any_bytes_either_works_or_is_an_invalid_message(data: bytes) -> None:
    try:
        mid = MessageId.deserialize(data)
    except InvalidMessageError:
        return
    assert isinstance(mid, MessageId)
