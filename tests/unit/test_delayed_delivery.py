"""Delayed delivery: the tracker alone, the delivery decisions around it, and a
subscription's timer on an in-memory ledger."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from stripemq.broker.config import BrokerConfig, DelayedDeliveryConfig
from stripemq.broker.delayed_delivery import DelayedDeliveryTracker, check_delivery_delay
from stripemq.broker.delivery import DeliveryState, EntryInfo
from stripemq.broker.dispatch import ConsumerSlot, Dispatcher, RoundRobinDispatcher
from stripemq.broker.key_shared import KeySharedDispatcher
from stripemq.broker.namespace_policies import EffectivePolicies
from stripemq.broker.topic import Consumer, Subscription, entry_info
from stripemq.clock import now_ms
from stripemq.errors import BrokerError, ConfigError
from stripemq.managed_ledger.cursor.non_durable import NonDurableCursor
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.managed_ledger import Entry
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import encode_entry
from stripemq.testing.polling import until
from stripemq.testing.sinks import NullSink


def p(entry_id: int) -> Position:
    return Position(1, entry_id)


# ---------------------------------------------------------------------- the tracker


def test_due_positions_come_out_in_position_order_and_never_early() -> None:
    tracker = DelayedDeliveryTracker(tick_ms=0)
    tracker.add(p(3), 1000)
    tracker.add(p(1), 3000)
    tracker.add(p(2), 1000)
    assert len(tracker) == 3
    assert tracker.next_deadline() == 1000
    assert tracker.ready(999) == []
    assert tracker.ready(1000) == [p(2), p(3)]
    assert tracker.next_deadline() == 3000
    assert tracker.ready(2999) == []
    assert tracker.ready(5000) == [p(1)]
    assert len(tracker) == 0
    assert tracker.next_deadline() is None


def test_an_entry_read_twice_keeps_its_first_time() -> None:
    tracker = DelayedDeliveryTracker(tick_ms=0)
    assert tracker.add(p(1), 500)
    assert not tracker.add(p(1), 100)
    assert p(1) in tracker and len(tracker) == 1
    assert tracker.ready(499) == []
    assert tracker.ready(500) == [p(1)]


def test_releases_happen_at_most_once_per_tick() -> None:
    tracker = DelayedDeliveryTracker(tick_ms=1000)
    tracker.add(p(1), 10_000)
    tracker.add(p(2), 10_200)
    assert tracker.next_deadline() == 10_000  # nothing released yet: no tick to wait for
    assert tracker.ready(10_000) == [p(1)]
    assert tracker.next_deadline() == 11_000  # due at 10,200, but within the tick
    assert tracker.ready(10_500) == []
    assert tracker.ready(11_000) == [p(2)]
    tracker.add(p(3), 20_000)
    assert tracker.next_deadline() == 20_000  # the tick has long passed


def test_remove_and_clear() -> None:
    tracker = DelayedDeliveryTracker()
    tracker.add(p(1), 100)
    tracker.add(p(2), 200)
    assert tracker.remove(p(1))
    assert not tracker.remove(p(1))
    assert tracker.next_deadline() == 200
    tracker.clear()
    assert len(tracker) == 0 and tracker.next_deadline() is None and tracker.ready(10**12) == []


def test_a_negative_tick_is_refused() -> None:
    with pytest.raises(ValueError):
        DelayedDeliveryTracker(tick_ms=-1)


def test_broker_settings() -> None:
    config = BrokerConfig()
    assert config.delayed_delivery_config() == DelayedDeliveryConfig(enabled=True, tick_ms=1000)
    config = BrokerConfig(delayed_delivery_enabled=False, delayed_delivery_tick_time_millis=50)
    assert config.delayed_delivery_config() == DelayedDeliveryConfig(enabled=False, tick_ms=50)
    with pytest.raises(ConfigError, match="delayed_delivery_tick_time_millis"):
        BrokerConfig(delayed_delivery_tick_time_millis=-5).validate()


def test_entry_info_reads_the_delivery_time_of_the_entry() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    assert entry_info(p(0), encode_entry(metadata, b"x")).deliver_at_ms is None
    metadata.deliver_at_time = 1_700_000_000_123
    assert entry_info(p(0), encode_entry(metadata, b"x")).deliver_at_ms == 1_700_000_000_123


# ---------------------------------------------------------------------- delivery decisions


def shared_state(acked: set[Position], tick_ms: int = 0) -> DeliveryState:
    return DeliveryState(
        RoundRobinDispatcher(), acked.__contains__, DelayedDeliveryTracker(tick_ms)
    )


def replay(state: DeliveryState, infos: dict[Position, EntryInfo]) -> list[Position]:
    positions = state.replay_positions(100)
    plan = state.plan([infos[position] for position in positions], replay=True, now_ms=0)
    return [delivery.position for delivery in plan.deliveries]


def test_delayed_entries_wait_and_later_ones_go_on() -> None:
    acked: set[Position] = set()
    state = shared_state(acked)
    slot = ConsumerSlot(1, "c", permits=10)
    state.dispatcher.add_consumer(slot)
    infos = {
        p(0): EntryInfo(p(0)),
        p(1): EntryInfo(p(1), deliver_at_ms=2000),
        p(2): EntryInfo(p(2), deliver_at_ms=500),  # already due: not delayed
        p(3): EntryInfo(p(3)),
        p(4): EntryInfo(p(4), deliver_at_ms=3000),
    }
    plan = state.plan(list(infos.values()), replay=False, now_ms=1000)
    assert [d.position for d in plan.deliveries] == [p(0), p(2), p(3)]
    assert plan.consumed_through == p(4)  # the reads go on past the delayed ones
    assert state.delayed is not None and len(state.delayed) == 2
    assert state.release_delayed(1999) == 0 and not state.replay_pending
    assert state.release_delayed(2000) == 1
    [delivery] = state.plan([infos[p(1)]], replay=True, now_ms=2000).deliveries
    assert delivery.position == p(1) and delivery.redelivery_count == 0  # a first delivery
    assert state.release_delayed(3000) == 1
    assert replay(state, infos) == [p(4)]
    assert slot.permits == 10 - 5


def test_released_entries_wait_for_permits() -> None:
    state = shared_state(set())
    slot = ConsumerSlot(1, "c", permits=1)
    state.dispatcher.add_consumer(slot)
    infos = {p(i): EntryInfo(p(i), deliver_at_ms=100) for i in range(3)}
    plan = state.plan(list(infos.values()), replay=False, now_ms=0)
    assert plan.deliveries == [] and plan.consumed_through == p(2)
    assert state.release_delayed(100) == 3
    assert replay(state, infos) == [p(0)]
    assert replay(state, infos) == []  # no permits left: they wait, in order
    slot.permits += 5
    assert replay(state, infos) == [p(1), p(2)]


def test_an_entry_acknowledged_before_its_time_is_not_delivered() -> None:
    acked: set[Position] = set()
    state = shared_state(acked)
    slot = ConsumerSlot(1, "c", permits=10)
    state.dispatcher.add_consumer(slot)
    infos = {p(i): EntryInfo(p(i), deliver_at_ms=100) for i in range(2)}
    state.plan(list(infos.values()), replay=False, now_ms=0)
    acked.add(p(0))
    state.acknowledged(slot, [p(0)])  # acknowledged by id without having received it
    assert state.delayed is not None and len(state.delayed) == 1
    acked.add(p(1))  # acknowledged and still in the tracker: dropped on release
    assert state.release_delayed(100) == 0 and not state.replay_positions(10)


def test_without_a_tracker_nothing_is_delayed() -> None:
    """Exclusive and Failover subscriptions (and a broker with delays disabled)."""
    state = DeliveryState(RoundRobinDispatcher(), lambda _p: False)
    slot = ConsumerSlot(1, "c", permits=10)
    state.dispatcher.add_consumer(slot)
    entries = [EntryInfo(p(0), deliver_at_ms=10**15), EntryInfo(p(1))]
    plan = state.plan(entries, replay=False, now_ms=0)
    assert [d.position for d in plan.deliveries] == [p(0), p(1)]


def test_shared_waits_in_order_behind_missing_permits_and_tracks_nothing_beyond() -> None:
    state = shared_state(set())
    slot = ConsumerSlot(1, "c", permits=1)
    state.dispatcher.add_consumer(slot)
    entries = [EntryInfo(p(0)), EntryInfo(p(1)), EntryInfo(p(2), deliver_at_ms=100)]
    plan = state.plan(entries, replay=False, now_ms=0)
    assert [d.position for d in plan.deliveries] == [p(0)]
    assert plan.consumed_through == p(0)  # p(1) waits for permits; p(2) is read again
    assert state.delayed is not None and len(state.delayed) == 0


@dataclass
class Model:
    """Consumers with random permits, a simulated clock, keyed and delayed messages."""

    dispatcher: Dispatcher
    rng: random.Random
    messages: int = 400
    infos: list[EntryInfo] = field(default_factory=list)
    acked: set[Position] = field(default_factory=set)
    delivered_at: dict[Position, int] = field(default_factory=dict)

    def run(self) -> None:
        for i in range(self.messages):
            delayed = self.rng.random() < 0.3
            deliver_at = self.rng.randrange(0, 20_000) if delayed else None
            key = f"k{self.rng.randrange(8)}".encode()
            self.infos.append(EntryInfo(p(i), 1, key, deliver_at))
        state = DeliveryState(
            self.dispatcher, self.acked.__contains__, DelayedDeliveryTracker(tick_ms=100)
        )
        slots = [ConsumerSlot(i, f"c{i}") for i in range(3)]
        for slot in slots:
            self.dispatcher.add_consumer(slot)
        read, now = 0, 0
        while len(self.acked) < self.messages:
            assert now < 100_000, "delivery stalled"
            for slot in slots:
                slot.permits += self.rng.randrange(0, 4)
            state.release_delayed(now)
            replays = state.replay_positions(50)
            plan = state.plan([self.infos[q.entry_id] for q in replays], replay=True, now_ms=now)
            deliveries = list(plan.deliveries)
            batch = self.infos[read : read + 10]
            plan = state.plan(batch, replay=False, now_ms=now)
            deliveries += plan.deliveries
            if plan.consumed_through is not None:
                read = plan.consumed_through.entry_id + 1
            for delivery in deliveries:
                position = delivery.position
                assert position not in self.delivered_at, f"{position} delivered twice"
                self.delivered_at[position] = now
                self.acked.add(position)
                state.acknowledged(delivery.slot, [position])
            now += 25


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("key_shared", [False, True])
def test_every_message_once_and_none_before_its_time(seed: int, key_shared: bool) -> None:
    dispatcher = KeySharedDispatcher() if key_shared else RoundRobinDispatcher()
    model = Model(dispatcher, random.Random(seed))
    model.run()
    assert len(model.delivered_at) == model.messages
    for info in model.infos:
        if info.deliver_at_ms is not None:
            assert model.delivered_at[info.position] >= info.deliver_at_ms
    # Immediate messages are not held up by the delayed ones before them.
    immediate = [i for i in model.infos if i.deliver_at_ms is None]
    assert max(model.delivered_at[i.position] for i in immediate) < 10_000


# ---------------------------------------------------------------------- the subscription's timer


class MemoryLedger:
    """The part of a managed ledger a subscription uses, in memory, one ledger."""

    def __init__(self) -> None:
        self.chain = LedgerChain([LedgerInfo(1)])
        self.data: list[bytes] = []
        self._wakers: set[Callable[[], None]] = set()
        self.terminated_position: Position | None = None  # never terminated
        self.closed = False

    def append(self, entry: bytes) -> None:
        self.data.append(entry)
        info = self.chain.get(1)
        assert info is not None
        info.entries += 1
        wakers, self._wakers = self._wakers, set()
        for wake in wakers:
            wake()

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        first = max(start.entry_id, 0)
        return [Entry(p(i), self.data[i]) for i in range(first, len(self.data))][:max_entries]

    def has_entries_after(self, after: Position) -> bool:
        return after.entry_id + 1 < len(self.data)

    def wake_on_new_entry(self, wake: Callable[[], None]) -> None:
        self._wakers.add(wake)


@dataclass
class FakeTopicName:
    partition_index: int = -1


@dataclass
class FakeTopic:
    ml: MemoryLedger
    delayed_delivery: DelayedDeliveryConfig
    name: str = "persistent://public/default/delayed"
    topic_name: FakeTopicName = field(default_factory=FakeTopicName)
    policies: EffectivePolicies = field(default_factory=EffectivePolicies)  # no rate limits
    dispatch_limiter: None = None


@dataclass
class Inbox(NullSink):
    """A consumer's connection: what arrived, and when (wall-clock ms)."""

    received: list[tuple[int, bytes]] = field(default_factory=list)

    def send_message(
        self,
        consumer_id: int,
        message_id: pb.MessageIdData,
        redelivery_count: int,
        entry: bytes,
        ack_set: list[int] | None = None,
    ) -> None:
        self.received.append((now_ms(), entry))


def message(text: str, deliver_at_ms: int | None = None) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if deliver_at_ms is not None:
        metadata.deliver_at_time = deliver_at_ms
    return encode_entry(metadata, text.encode())


@pytest.mark.parametrize(
    ("sub_type", "delays"),
    [
        (pb.CommandSubscribe.Shared, True),
        (pb.CommandSubscribe.Key_Shared, True),
        (pb.CommandSubscribe.Exclusive, False),
        (pb.CommandSubscribe.Failover, False),
    ],
)
async def test_the_subscription_timer_releases_due_entries(sub_type: int, delays: bool) -> None:
    ml = MemoryLedger()
    topic = FakeTopic(ml, DelayedDeliveryConfig(enabled=True, tick_ms=20))
    cursor = NonDurableCursor("sub", ml.chain, Position(1, -1))
    subscription = Subscription(topic, cursor, sub_type)  # type: ignore[arg-type]
    inbox = Inbox()
    consumer = Consumer(ConsumerSlot(1, "c"), inbox, subscription)
    subscription.add_consumer(consumer)
    subscription.flow(consumer, 100)
    start = now_ms()
    due = start + 300
    ml.append(message("late", due))
    ml.append(message("now"))
    try:
        if delays:
            await until(lambda: len(inbox.received) == 1, "one message arrived", timeout=5)
            assert inbox.received[0][1].endswith(b"now")
            await until(lambda: len(inbox.received) == 2, "two messages arrived", timeout=5)
            at, entry = inbox.received[1]
            assert entry.endswith(b"late") and at >= due
        else:
            await until(lambda: len(inbox.received) == 2, "two messages arrived", timeout=5)
            assert inbox.received[0][1].endswith(b"late")  # in order, at once
            assert inbox.received[1][0] < due
        # A marker due two ticks from now: once it has come, every release due before it
        # has been dispatched ahead of it.
        ml.append(message("end", now_ms() + 40))
        await until(lambda: len(inbox.received) >= 3, "the end marker arrived", timeout=5)
        arrived = [entry for _, entry in inbox.received]
        assert len(arrived) == 3 and arrived[2].endswith(b"end"), arrived  # nothing twice
    finally:
        await subscription.close()


async def test_disabled_delays_deliver_at_once() -> None:
    ml = MemoryLedger()
    topic = FakeTopic(ml, DelayedDeliveryConfig(enabled=False))
    cursor = NonDurableCursor("sub", ml.chain, Position(1, -1))
    subscription = Subscription(topic, cursor, pb.CommandSubscribe.Shared)  # type: ignore[arg-type]
    inbox = Inbox()
    consumer = Consumer(ConsumerSlot(1, "c"), inbox, subscription)
    subscription.add_consumer(consumer)
    subscription.flow(consumer, 10)
    ml.append(message("late", now_ms() + 60_000))
    try:
        await until(lambda: len(inbox.received) == 1, "one message arrived", timeout=5)
    finally:
        await subscription.close()


@dataclass
class Wire(NullSink):
    """A connection's log of what it was asked: a MESSAGE, or to write the messages out."""

    log: list[str] = field(default_factory=list)

    def send_message(
        self,
        consumer_id: int,
        message_id: pb.MessageIdData,
        redelivery_count: int,
        entry: bytes,
        ack_set: list[int] | None = None,
    ) -> None:
        self.log.append(f"message {consumer_id}")

    def flush_messages(self) -> None:
        self.log.append("flush")


async def test_a_dispatch_round_flushes_each_connection_after_its_messages() -> None:
    """Messages are written out by the round that queued them, once per connection, so
    a consumer does not wait for the rest of the loop turn to hear of them."""
    ml = MemoryLedger()
    topic = FakeTopic(ml, DelayedDeliveryConfig(enabled=False))
    cursor = NonDurableCursor("sub", ml.chain, Position(1, -1))
    subscription = Subscription(topic, cursor, pb.CommandSubscribe.Shared)  # type: ignore[arg-type]
    shared, alone = Wire(), Wire()  # two consumers on one connection, one on another
    consumers = [
        Consumer(ConsumerSlot(1, "a"), shared, subscription),
        Consumer(ConsumerSlot(2, "b"), shared, subscription),
        Consumer(ConsumerSlot(3, "c"), alone, subscription),
    ]
    for consumer in consumers:
        subscription.add_consumer(consumer)
    for text in "abcdef":
        ml.append(message(text))
    for consumer in consumers:
        subscription.flow(consumer, 10)
    try:
        sent = lambda: sum(e != "flush" for w in (shared, alone) for e in w.log)  # noqa: E731
        await until(lambda: sent() == 6, "six messages sent", timeout=5)
        ml.append(message("g"))  # a second round, from the tail
        await until(lambda: sent() == 7, "the seventh message sent", timeout=5)
        for wire in (shared, alone):
            assert wire.log and wire.log[-1] == "flush", wire.log  # nothing left unwritten
            pairs = zip(wire.log, wire.log[1:], strict=False)
            assert ("flush", "flush") not in pairs, wire.log  # a flush only after messages
        assert {e for e in shared.log if e != "flush"} == {"message 1", "message 2"}
    finally:
        await subscription.close()


async def test_switching_delays_off_sends_what_is_held_and_on_holds_again() -> None:
    """A namespace policy changes a live subscription: off, the held entries go out at
    once; on again, entries read from then on wait for their time."""
    ml = MemoryLedger()
    topic = FakeTopic(ml, DelayedDeliveryConfig(enabled=True, tick_ms=20))
    cursor = NonDurableCursor("sub", ml.chain, Position(1, -1))
    subscription = Subscription(topic, cursor, pb.CommandSubscribe.Shared)  # type: ignore[arg-type]
    inbox = Inbox()
    consumer = Consumer(ConsumerSlot(1, "c"), inbox, subscription)
    subscription.add_consumer(consumer)
    subscription.flow(consumer, 100)
    ml.append(message("held", now_ms() + 60_000))
    try:
        await until(
            lambda: (
                subscription.delivery.delayed is not None
                and len(subscription.delivery.delayed) == 1
            ),
            "held",
        )
        assert inbox.received == []
        topic.delayed_delivery = DelayedDeliveryConfig(enabled=False)
        subscription.policies_changed()
        await until(lambda: len(inbox.received) == 1, "the held entry went out", timeout=5)
        assert subscription.delivery.delayed is None
        topic.delayed_delivery = DelayedDeliveryConfig(enabled=True, tick_ms=5)
        subscription.policies_changed()
        assert subscription.delivery.delayed is not None
        assert subscription.delivery.delayed.tick_ms == 5
        ml.append(message("later", now_ms() + 60_000))
        await until(lambda: len(subscription.delivery.delayed or ()) == 1, "held again")
        assert len(inbox.received) == 1
        topic.delayed_delivery = DelayedDeliveryConfig(enabled=True, tick_ms=50)
        subscription.policies_changed()
        assert subscription.delivery.delayed.tick_ms == 50  # the same tracker, a new tick
    finally:
        await subscription.close()


def test_a_delay_past_the_maximum_is_refused() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1_000)
    limited = DelayedDeliveryConfig(enabled=True, max_delay_ms=5_000)
    check_delivery_delay(metadata, limited)  # no delivery time: nothing to check
    metadata.deliver_at_time = 6_000
    check_delivery_delay(metadata, limited)  # exactly the maximum
    metadata.deliver_at_time = 6_001
    with pytest.raises(BrokerError) as refused:
        check_delivery_delay(metadata, limited)
    assert refused.value.server_error == pb.NotAllowedError
    assert str(refused.value) == "Exceeds max allowed delivery delay of 5000 milliseconds"
    check_delivery_delay(metadata, DelayedDeliveryConfig(enabled=True))  # 0: any delay
    check_delivery_delay(metadata, DelayedDeliveryConfig(enabled=False, max_delay_ms=5_000))
