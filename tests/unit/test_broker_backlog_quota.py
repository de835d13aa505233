"""Backlog quota decisions (sans-IO): exceeded by size and by age, what each policy does,
and how far eviction moves the slowest subscriptions; then the same on a topic over a real
managed ledger (memory:// metadata, in-memory ledger client)."""

from __future__ import annotations

from typing import cast

import pytest
from ledger_fakes import FakeBookKeeper

from stripemq.bookie.client import BookKeeper
from stripemq.broker import backlog_quota as bq
from stripemq.broker.backlog_monitor import enforce
from stripemq.broker.backlog_quota import QuotaAction
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.policies import BacklogQuota, BacklogQuotaPolicy, BacklogQuotaType
from stripemq.broker.publish_time import EntrySequence
from stripemq.broker.topic import Consumer, PersistentTopic, Producer
from stripemq.clock import now_ms
from stripemq.errors import BrokerError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.sinks import NullSink

HOLD = BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD
EXCEPTION = BacklogQuotaPolicy.PRODUCER_EXCEPTION
EVICTION = BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION


def chain(*ledgers: tuple[int, int, int]) -> LedgerChain:
    """``(ledger id, entries, bytes)`` each."""
    return LedgerChain(LedgerInfo(i, entries=n, size=size, closed=True) for i, n, size in ledgers)


def test_size_is_exceeded_at_the_limit_and_never_without_one() -> None:
    quota = BacklogQuota(limit_size=1000)
    assert not bq.size_exceeded(quota, 999)
    assert bq.size_exceeded(quota, 1000)  # Pulsar: backlog >= limit
    assert not bq.size_exceeded(BacklogQuota(limit_size=-1), 1 << 40)


def test_age_is_exceeded_once_the_oldest_message_is_older_than_the_limit() -> None:
    quota = BacklogQuota(limit_time=10)
    assert not bq.age_exceeded(quota, 1_000, now_ms=11_000)
    assert bq.age_exceeded(quota, 1_000, now_ms=11_001)
    assert not bq.age_exceeded(quota, None, now_ms=10**12)  # nothing unacknowledged
    for none in (0, -1):
        assert not bq.age_exceeded(BacklogQuota(limit_time=none), 0, now_ms=10**12)


@pytest.mark.parametrize(
    ("policy", "code", "action"),
    [
        (HOLD, pb.ProducerBlockedQuotaExceededError, QuotaAction.DISCONNECT_PRODUCERS),
        (EXCEPTION, pb.ProducerBlockedQuotaExceededException, QuotaAction.DISCONNECT_PRODUCERS),
        (EVICTION, None, QuotaAction.EVICT),
    ],
)
def test_each_policy_refuses_producers_or_evicts(
    policy: BacklogQuotaPolicy, code: int | None, action: QuotaAction
) -> None:
    quota = BacklogQuota(limit_size=10, policy=policy)
    assert bq.refusal_code(quota) == code
    assert bq.action_for(quota) is action


def test_the_backlog_is_counted_from_the_slowest_mark_delete_position() -> None:
    c = chain((1, 10, 1000), (2, 10, 2000))
    assert bq.backlog_bytes(c, []) == 0
    assert bq.backlog_bytes(c, [Position(2, 9)]) == 0
    assert bq.backlog_bytes(c, [Position(2, 9), Position(1, 4)]) == 500 + 2000
    assert bq.backlog_bytes(c, [Position(1, -1)]) == 3000


def test_eviction_aims_at_ninety_percent_of_the_quota() -> None:
    assert bq.eviction_target_bytes(BacklogQuota(limit_size=1000)) == 900
    assert bq.eviction_target_age_s(BacklogQuota(limit_time=10)) == pytest.approx(9)


def test_the_eviction_position_is_the_first_that_leaves_no_more_than_the_target() -> None:
    c = chain((1, 10, 1000), (2, 10, 1000))  # 100 bytes an entry
    to = bq.eviction_position(c, 950)
    assert to is not None
    assert c.size_after(to) <= 950
    before = Position(to.ledger_id, to.entry_id - 1) if to.entry_id else Position(1, 9)
    assert c.size_after(before) > 950
    assert bq.eviction_position(c, 0) == Position(2, 9)  # only the last entry leaves nothing
    assert bq.eviction_position(chain(), 100) is None


def test_only_the_cursors_behind_the_eviction_point_move_and_all_to_it() -> None:
    c = chain((1, 10, 1000), (2, 10, 1000))
    marks = {"slow": Position(1, -1), "slower": Position(1, 3), "fast": Position(2, 8)}
    moves = bq.cursors_to_evict(c, marks, 500)
    assert set(moves) == {"slow", "slower"}
    to = moves["slow"]
    assert moves["slower"] == to
    assert bq.backlog_bytes(c, [to, marks["fast"]]) <= 500
    # under the target already: nothing moves
    assert bq.cursors_to_evict(c, {"fast": Position(2, 8)}, 500) == {}


def test_eviction_of_a_topic_without_entries_moves_nothing() -> None:
    assert bq.cursors_to_evict(chain(), {"s": Position(1, -1)}, 0) == {}


# ---------------------------------------------------------------- on a live topic


class ClosedProducers(NullSink):
    def __init__(self) -> None:
        self.closed: list[int] = []

    def close_producer(self, producer_id: int) -> None:
        self.closed.append(producer_id)


async def backlogged_topic(
    store: MetadataStore, entries: int, quota: BacklogQuota
) -> PersistentTopic:
    """A topic with one subscription that has ``entries`` entries of 100 bytes or so of
    backlog, obeying ``quota`` (both kinds)."""
    ml = ManagedLedger(
        "acme/orders/persistent/quota",
        store,
        cast(BookKeeper, FakeBookKeeper()),
        ManagedLedgerConfig(max_entries_per_ledger=5, min_rollover_time_s=0),
    )
    await ml.open(create=True)
    topic = PersistentTopic(TopicName.parse("persistent://acme/orders/quota"), ml)
    await topic.apply_policies(
        EffectivePolicies(backlog_quotas={kind: quota for kind in BacklogQuotaType})
    )
    await topic.subscribe("slow", pb.CommandSubscribe.Exclusive, InitialPosition.Earliest)
    old = now_ms() - 120_000
    for _ in range(entries):
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=old)
        await ml.add_entry(encode_entry(metadata, b"x" * 80))
    return topic


@pytest.mark.parametrize(
    ("policy", "code"),
    [
        (HOLD, pb.ProducerBlockedQuotaExceededError),
        (EXCEPTION, pb.ProducerBlockedQuotaExceededException),
    ],
)
@pytest.mark.parametrize("by", ["size", "age"])
async def test_a_producer_is_refused_while_the_quota_is_exceeded(
    store: MetadataStore, policy: BacklogQuotaPolicy, code: int, by: str
) -> None:
    quota = (
        BacklogQuota(limit_size=500, policy=policy)
        if by == "size"
        else BacklogQuota(limit_time=60, policy=policy)
    )
    topic = await backlogged_topic(store, 10, quota)
    with pytest.raises(BrokerError) as refused:
        await topic.add_producer(Producer(1, "p", topic, NullSink()))
    assert refused.value.server_error == code
    assert topic.producers == []
    # consumed: admitted
    topic.subscriptions["slow"].cursor.ack_cumulative(topic.ml.chain.last_confirmed())
    await topic.add_producer(Producer(1, "p", topic, NullSink()))
    assert len(topic.producers) == 1
    await topic.close()


async def test_an_eviction_quota_admits_producers(store: MetadataStore) -> None:
    topic = await backlogged_topic(store, 10, BacklogQuota(limit_size=500, policy=EVICTION))
    await topic.add_producer(Producer(1, "p", topic, NullSink()))
    assert len(topic.producers) == 1
    await topic.close()


async def test_the_periodic_check_disconnects_producers_past_a_producer_quota(
    store: MetadataStore,
) -> None:
    topic = await backlogged_topic(store, 3, BacklogQuota(limit_size=500, policy=HOLD))
    sink = ClosedProducers()
    await topic.add_producer(Producer(7, "p", topic, sink))  # under the quota yet
    await enforce(topic)
    assert sink.closed == []
    for _ in range(10):
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=now_ms())
        await topic.ml.add_entry(encode_entry(metadata, b"x" * 80))
    await enforce(topic)
    assert sink.closed == [7]
    assert topic.producers == []
    await topic.close()


async def test_the_periodic_check_evicts_the_slowest_subscription_by_size(
    store: MetadataStore,
) -> None:
    topic = await backlogged_topic(store, 20, BacklogQuota(limit_size=1000, policy=EVICTION))
    await topic.subscribe("fast", pb.CommandSubscribe.Exclusive, InitialPosition.Latest)
    assert topic.estimated_backlog_size() >= 1000
    await enforce(topic)
    assert topic.estimated_backlog_size() <= 900
    slow = topic.subscriptions["slow"].cursor
    assert 0 < slow.backlog < 20  # moved forward, not emptied
    assert topic.subscriptions["fast"].cursor.backlog == 0
    await topic.close()


async def test_the_periodic_check_evicts_by_age(store: MetadataStore) -> None:
    topic = await backlogged_topic(store, 5, BacklogQuota(limit_time=60, policy=EVICTION))
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=now_ms())
    await topic.ml.add_entry(encode_entry(metadata, b"fresh"))
    await enforce(topic)
    assert topic.subscriptions["slow"].cursor.backlog == 1  # only the fresh one is left
    await topic.close()


async def test_eviction_lets_go_of_what_the_consumers_held(store: MetadataStore) -> None:
    topic = await backlogged_topic(store, 20, BacklogQuota(limit_size=1000, policy=EVICTION))
    slow = topic.subscriptions["slow"]
    consumer = Consumer(ConsumerSlot(1, "c"), NullSink(), slow)
    slow.add_consumer(consumer)
    first = topic.ml.chain.first_position()
    consumer.slot.pending.update({first: 1})  # delivered, not acknowledged
    await enforce(topic)
    assert slow.cursor.is_acked(first)
    assert consumer.slot.pending == {}  # evicted: no longer the consumer's to ack
    await topic.close()


def test_the_entries_of_a_chain_are_one_sequence_to_search() -> None:
    entries = EntrySequence.over(chain((3, 2, 0), (4, 0, 0), (5, 3, 0)))
    assert len(entries) == 5
    assert [entries.position(i) for i in range(5)] == [
        Position(3, 0),
        Position(3, 1),
        Position(5, 0),
        Position(5, 1),
        Position(5, 2),
    ]
    with pytest.raises(IndexError):
        entries.position(5)
