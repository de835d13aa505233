"""The bounds on what clients choose: each check refuses with the protocol's code, and
refuses a hostile size without allocating in proportion to it."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import pytest

from stripemq.broker.limits import (
    DEFAULT_LIMITS,
    MAX_ID,
    MAX_PERMITS,
    BrokerLimits,
    check_ack,
    check_hash_ranges,
    check_message_id,
    check_producer,
    check_redeliver,
    check_seek_id,
    check_subscribe,
    messages_in_send,
    permits_to_grant,
)
from stripemq.errors import BrokerError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import MAX_BATCH_SIZE, bits_of

ACK_TYPES = [pb.CommandAck.Individual, pb.CommandAck.Cumulative]


def refused(check: Callable[[], object], code: int = pb.NotAllowedError) -> str:
    """The message of the ``BrokerError`` ``check`` raises (with ``code``)."""
    with pytest.raises(BrokerError) as caught:
        check()
    assert caught.value.server_error == code
    return str(caught.value)


def mid(ledger: int = 1, entry: int = 2, **fields: object) -> pb.MessageIdData:
    return pb.MessageIdData(ledgerId=ledger, entryId=entry, **fields)  # type: ignore[arg-type]


def ack(*message_ids: pb.MessageIdData, ack_type: int = 0) -> pb.CommandAck:
    return pb.CommandAck(consumer_id=1, ack_type=ack_type, message_id=list(message_ids))


# ------------------------------------------------------------------ the limits themselves


def test_the_defaults_agree_with_the_cursor_and_the_ack_set_format() -> None:
    assert DEFAULT_LIMITS.max_batch_size == MAX_BATCH_SIZE
    assert DEFAULT_LIMITS.max_ack_set_words == MAX_BATCH_SIZE // 64
    assert BrokerLimits(max_batch_size=65).max_ack_set_words == 2
    with pytest.raises(ValueError):
        BrokerLimits(max_batch_size=MAX_BATCH_SIZE + 1)  # the cursor keeps no more bits


def test_bits_of_refuses_a_size_before_allocating() -> None:
    with pytest.raises(ValueError):
        bits_of([0], 2**31 - 1)
    with pytest.raises(ValueError):
        bits_of([0], -1)
    assert bits_of([0b10], MAX_BATCH_SIZE)[:3] == [False, True, False]


# ------------------------------------------------------------------ acks


@pytest.mark.parametrize("ack_type", ACK_TYPES)
def test_the_hostile_ack_is_refused_without_allocating(ack_type: int) -> None:
    hostile = ack(mid(ack_set=[0], batch_size=2**31 - 1), ack_type=ack_type)
    tracemalloc.start()
    try:
        message = refused(lambda: check_ack(hostile))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "batch size 2147483647" in message
    assert peak < 64 * 1024  # the error and its message, nothing in proportion to 2**31


@pytest.mark.parametrize("size", [-1, -(2**31), MAX_BATCH_SIZE + 1])
def test_batch_sizes_outside_the_bound_are_refused(size: int) -> None:
    refused(lambda: check_ack(ack(mid(ack_set=[0], batch_size=size))))
    refused(lambda: check_redeliver(redeliver(mid(batch_size=size))))


def test_batch_sizes_within_the_bound_pass() -> None:
    check_ack(ack(mid(ack_set=[0], batch_size=1), mid(ack_set=[-1] * 1024, batch_size=2**16)))
    check_ack(ack(mid(batch_size=0), mid(entry=3)))  # no batch at all


def test_an_ack_set_has_at_most_one_word_per_64_messages() -> None:
    check_ack(ack(mid(ack_set=[-1], batch_size=64)))
    check_ack(ack(mid(ack_set=[], batch_size=64)))  # trailing clear words left out
    check_ack(ack(mid(ack_set=[-1, 1], batch_size=65)))
    message = refused(lambda: check_ack(ack(mid(ack_set=[-1, 0], batch_size=64))))
    assert "2 words" in message
    # Without a batch size (the C++ client's), bounded by the largest batch allowed.
    check_ack(ack(mid(ack_set=[0] * DEFAULT_LIMITS.max_ack_set_words)))
    refused(lambda: check_ack(ack(mid(ack_set=[0] * (DEFAULT_LIMITS.max_ack_set_words + 1)))))


def test_batch_indexes_are_within_the_largest_batch() -> None:
    check_ack(ack(mid(batch_index=-1), mid(batch_index=MAX_BATCH_SIZE - 1)))
    refused(lambda: check_ack(ack(mid(batch_index=MAX_BATCH_SIZE))))
    refused(lambda: check_ack(ack(mid(batch_index=-2))))


def test_message_ids_per_ack_are_bounded() -> None:
    most = DEFAULT_LIMITS.max_message_ids_per_ack
    check_ack(ack(*[mid()] * most))
    message = refused(lambda: check_ack(ack(*[mid()] * (most + 1))))
    assert f"{most + 1} message ids" in message
    small = BrokerLimits(max_message_ids_per_ack=2)
    refused(lambda: check_ack(ack(mid(), mid(), mid()), small))


def test_ack_properties_are_bounded() -> None:
    many = pb.CommandAck(
        consumer_id=1,
        message_id=[mid()],
        properties=[pb.KeyLongValue(key="k", value=1)] * (DEFAULT_LIMITS.max_properties + 1),
    )
    refused(lambda: check_ack(many))


@pytest.mark.parametrize("field", ["ledgerId", "entryId"])
@pytest.mark.parametrize("value", [MAX_ID + 1, 2**64 - 2, 2**64 - 1])
def test_ids_beyond_a_java_long_are_refused(field: str, value: int) -> None:
    message_id = pb.MessageIdData(**{"ledgerId": 1, "entryId": 2, field: value})
    refused(lambda: check_message_id(message_id))
    refused(lambda: check_ack(ack(mid(), message_id)))


def test_ids_up_to_the_largest_java_long_pass() -> None:
    check_message_id(mid(MAX_ID, MAX_ID))
    check_message_id(mid(0, 0))


# ------------------------------------------------------------------ redelivery and seeks


def redeliver(*message_ids: pb.MessageIdData) -> pb.CommandRedeliverUnacknowledgedMessages:
    return pb.CommandRedeliverUnacknowledgedMessages(consumer_id=1, message_ids=message_ids)


def test_redeliveries_are_bounded() -> None:
    most = DEFAULT_LIMITS.max_message_ids_per_redeliver
    check_redeliver(redeliver())  # "everything"
    check_redeliver(redeliver(*[mid()] * most))
    refused(lambda: check_redeliver(redeliver(*[mid()] * (most + 1))))
    refused(lambda: check_redeliver(redeliver(mid(entry=2**63))))


def test_seeks_take_entries_and_the_clients_sentinels_only() -> None:
    check_seek_id(mid(2**64 - 1, 2**64 - 1))  # earliest
    check_seek_id(mid(MAX_ID, MAX_ID))  # latest
    check_seek_id(mid(12, 7))
    refused(lambda: check_seek_id(mid(12, 2**63)))
    refused(lambda: check_seek_id(mid(2**64 - 2, 0)))


def test_permits_are_held_to_a_java_int() -> None:
    assert permits_to_grant(0, 1000) == 1000
    assert permits_to_grant(-5, 1000) == 1000  # a batch overdrew them: all of it counts
    assert permits_to_grant(MAX_PERMITS - 10, 2**32 - 1) == 10
    assert permits_to_grant(MAX_PERMITS, 1) == 0


# ------------------------------------------------------------------ subscribing


def subscribe(**fields: object) -> pb.CommandSubscribe:
    defaults = {
        "topic": "t",
        "subscription": "s",
        "subType": pb.CommandSubscribe.Key_Shared,
        "consumer_id": 1,
        "request_id": 1,
    }
    return pb.CommandSubscribe(**{**defaults, **fields})  # type: ignore[arg-type]


def sticky(*ranges: tuple[int, int], mode: int = pb.STICKY) -> pb.KeySharedMeta:
    return pb.KeySharedMeta(
        keySharedMode=mode, hashRanges=[pb.IntRange(start=s, end=e) for s, e in ranges]
    )


def test_hash_ranges_come_back_sorted_and_disjoint() -> None:
    ranges = sticky((100, 199), (0, 9), (10, 99)).hashRanges
    assert check_hash_ranges(ranges) == [(0, 9), (10, 99), (100, 199)]


@pytest.mark.parametrize(
    "ranges",
    [
        [(0, 10), (10, 20)],  # share a hash
        [(50, 60), (0, 100)],  # one inside another, given out of order
        [(5, 5), (5, 5)],
        [(-1, 3)],
        [(3, 65_536)],
        [(9, 8)],
    ],
)
def test_bad_hash_ranges_are_refused(ranges: list[tuple[int, int]]) -> None:
    refused(lambda: check_hash_ranges(sticky(*ranges).hashRanges), pb.ConsumerAssignError)
    refused(
        lambda: check_subscribe(subscribe(keySharedMeta=sticky(*ranges)), 0), pb.ConsumerAssignError
    )


def test_hash_ranges_per_consumer_are_bounded() -> None:
    most = DEFAULT_LIMITS.max_hash_ranges_per_consumer
    check_hash_ranges(sticky(*[(i, i) for i in range(most)]).hashRanges)
    too_many = sticky(*[(i, i) for i in range(most + 1)])
    refused(lambda: check_hash_ranges(too_many.hashRanges), pb.ConsumerAssignError)
    # The count is bounded in AUTO_SPLIT mode too, where the ranges are not used.
    auto = subscribe(keySharedMeta=sticky(*[(0, 0)] * (most + 1), mode=pb.AUTO_SPLIT))
    refused(lambda: check_subscribe(auto, 0), pb.ConsumerAssignError)
    check_subscribe(subscribe(keySharedMeta=sticky((0, 0), (0, 0), mode=pb.AUTO_SPLIT)), 0)


def test_every_hash_its_own_range_is_checked_by_sorting() -> None:
    every = sticky(*[(i, i) for i in reversed(range(65_536))]).hashRanges
    limits = BrokerLimits(max_hash_ranges_per_consumer=65_536)
    assert len(check_hash_ranges(every, limits)) == 65_536


def test_consumers_per_connection_are_bounded() -> None:
    most = DEFAULT_LIMITS.max_consumers_per_connection
    check_subscribe(subscribe(), most - 1)
    refused(lambda: check_subscribe(subscribe(), most))


def test_names_are_bounded() -> None:
    long = "x" * (DEFAULT_LIMITS.max_name_length + 1)
    check_subscribe(subscribe(consumer_name="x" * DEFAULT_LIMITS.max_name_length), 0)
    refused(lambda: check_subscribe(subscribe(consumer_name=long), 0))
    refused(lambda: check_subscribe(subscribe(subscription=long), 0))
    refused(lambda: check_producer(producer(producer_name=long), 0))
    refused(lambda: check_producer(producer(initial_subscription_name=long), 0))


def key_values(count: int, size: int = 1) -> list[pb.KeyValue]:
    return [pb.KeyValue(key="k" * size, value="")] * count


@pytest.mark.parametrize("field", ["metadata", "subscription_properties"])
def test_consumer_metadata_is_bounded_as_in_pulsar(field: str) -> None:
    check_subscribe(subscribe(**{field: key_values(1, 1024)}), 0)
    message = refused(
        lambda: check_subscribe(subscribe(**{field: key_values(2, 513)}), 0), pb.MetadataError
    )
    assert "1024" in message
    check_subscribe(subscribe(**{field: key_values(DEFAULT_LIMITS.max_properties, 0)}), 0)
    refused(
        lambda: check_subscribe(
            subscribe(**{field: key_values(DEFAULT_LIMITS.max_properties + 1, 0)}), 0
        ),
        pb.MetadataError,
    )


def test_a_readers_start_is_checked_like_a_seek() -> None:
    check_subscribe(subscribe(start_message_id=mid(2**64 - 1, 2**64 - 1)), 0)
    refused(lambda: check_subscribe(subscribe(start_message_id=mid(1, 2**63)), 0))


# ------------------------------------------------------------------ producing


def producer(**fields: object) -> pb.CommandProducer:
    return pb.CommandProducer(topic="t", producer_id=1, request_id=1, **fields)  # type: ignore[arg-type]


def test_producers_per_connection_are_bounded() -> None:
    most = DEFAULT_LIMITS.max_producers_per_connection
    check_producer(producer(), most - 1)
    refused(lambda: check_producer(producer(), most))


def test_producer_metadata_is_bounded() -> None:
    size = DEFAULT_LIMITS.max_producer_metadata_size
    check_producer(producer(metadata=key_values(1, size)), 0)
    refused(lambda: check_producer(producer(metadata=key_values(1, size + 1)), 0), pb.MetadataError)
    refused(
        lambda: check_producer(producer(metadata=key_values(DEFAULT_LIMITS.max_properties + 1)), 0),
        pb.MetadataError,
    )


@pytest.mark.parametrize(
    ("declared", "counted"),
    [
        (1, 1),
        (0, 1),
        (-7, 1),
        (100, 100),
        (MAX_BATCH_SIZE, MAX_BATCH_SIZE),
        (2**31 - 1, MAX_BATCH_SIZE),
    ],
)
def test_a_sends_message_count_is_what_it_says_within_one_batch(
    declared: int, counted: int
) -> None:
    assert (
        messages_in_send(pb.CommandSend(producer_id=1, sequence_id=0, num_messages=declared))
        == counted
    )
