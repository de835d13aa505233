"""Key_Shared dispatch: hashing, STICKY ranges, and per-key order while consumers churn."""

from __future__ import annotations

import random

import pytest

from stripemq.broker.delivery import DeliveryState, EntryInfo
from stripemq.broker.dispatch import ConsumerSlot
from stripemq.broker.key_shared import KeySharedDispatcher, sticky_key_hash
from stripemq.errors import ConsumerAssignError
from stripemq.managed_ledger.position import Position


def test_hashes_are_murmur3_positive_mod_65536() -> None:
    assert sticky_key_hash(b"hello") == 613153351 % 65536
    assert all(0 <= sticky_key_hash(f"k{i}".encode()) < 65536 for i in range(1000))


def test_sticky_ranges_must_not_overlap() -> None:
    dispatcher = KeySharedDispatcher(sticky=True)
    dispatcher.add_consumer(ConsumerSlot(1, "a", permits=10), [(0, 32767)])
    with pytest.raises(ConsumerAssignError):
        dispatcher.add_consumer(ConsumerSlot(2, "b", permits=10), [(30000, 65535)])
    dispatcher.add_consumer(ConsumerSlot(3, "c", permits=10), [(32768, 65535)])
    key = b"some-key"
    owner = dispatcher.owner_of_hash(sticky_key_hash(key))
    assert owner is not None and owner.consumer_id == (1 if sticky_key_hash(key) < 32768 else 3)


def test_auto_split_spreads_keys_over_consumers() -> None:
    dispatcher = KeySharedDispatcher()
    for i in range(4):
        dispatcher.add_consumer(ConsumerSlot(i, f"c{i}", permits=10**6))
    owners = [dispatcher.owner_of_hash(sticky_key_hash(f"key-{k}".encode())) for k in range(4000)]
    counts = [sum(1 for o in owners if o is not None and o.consumer_id == i) for i in range(4)]
    assert all(600 < c < 1500 for c in counts), counts


class Simulation:
    """Consumers join, leave, crash, nack and ack while keyed messages flow."""

    def __init__(self, seed: int, messages: int = 3000, keys: int = 40) -> None:
        self.rng = random.Random(seed)
        self.keys = [f"key-{self.rng.randrange(keys)}".encode() for _ in range(messages)]
        self.positions = [Position(1, i) for i in range(messages)]
        self.acked: set[Position] = set()
        self.dispatcher = KeySharedDispatcher()
        self.state = DeliveryState(self.dispatcher, self.acked.__contains__)
        self.consumers: dict[int, ConsumerSlot] = {}
        self.received: dict[int, list[Position]] = {}
        self.read = 0
        self.next_id = 0
        self.deliveries = 0

    def info(self, position: Position) -> EntryInfo:
        return EntryInfo(position, 1, self.keys[position.entry_id])

    def join(self) -> None:
        # Every consumer has id 0, as consumers on different connections may: the
        # dispatcher must tell them apart by slot.
        slot = ConsumerSlot(0, f"consumer-{self.next_id}", permits=0)
        self.next_id += 1
        self.dispatcher.add_consumer(slot)
        self.consumers[slot.slot_id] = slot
        self.received[slot.slot_id] = []
        slot.permits += self.rng.randint(1, 30)

    def leave(self) -> None:
        slot = self.consumers.pop(self.rng.choice(sorted(self.consumers)))
        self.state.consumer_removed(slot)  # a crash looks the same to the broker
        self.received.pop(slot.slot_id)

    def dispatch(self) -> None:
        replays = self.state.replay_positions(50)
        plan = self.state.plan([self.info(p) for p in replays], replay=True)
        deliveries = list(plan.deliveries)
        if self.read < len(self.positions):
            batch = [self.info(p) for p in self.positions[self.read : self.read + 20]]
            plan = self.state.plan(batch, replay=False)
            deliveries += plan.deliveries
            if plan.consumed_through is not None:
                self.read = plan.consumed_through.entry_id + 1
        for delivery in deliveries:
            self.check_order(delivery.slot, delivery.position)
            self.received[delivery.slot.slot_id].append(delivery.position)
            self.deliveries += 1

    def check_order(self, slot: ConsumerSlot, position: Position) -> None:
        key = self.keys[position.entry_id]
        for older in self.positions[: position.entry_id]:
            if self.keys[older.entry_id] != key or older in self.acked:
                continue
            assert older in slot.pending and older != position, (
                f"{position} (key {key!r}) went to consumer {slot.name} while "
                f"{older} of the same key was neither acknowledged nor held by it"
            )

    def consume(self) -> None:
        for slot_id, slot in self.consumers.items():
            inbox = [p for p in self.received[slot_id] if p in slot.pending]
            if not inbox:
                continue
            roll = self.rng.random()
            if roll < 0.05:  # negative ack / ack timeout: give some back
                back = self.rng.sample(inbox, self.rng.randint(1, len(inbox)))
                self.state.give_back(slot, back)
                slot.permits += len(back)  # taken off its queue: the client asks for more
            else:  # process in the order received, acking most
                done = inbox[: self.rng.randint(1, len(inbox))]
                done = [p for p in done if self.rng.random() < 0.9]
                self.acked.update(done)
                self.state.acknowledged(slot, done)
                slot.permits += len(done)
            self.received[slot_id] = [p for p in self.received[slot_id] if p in slot.pending]

    def run(self, steps: int) -> None:
        self.join()
        for _ in range(steps):
            roll = self.rng.random()
            if roll < 0.04 and len(self.consumers) < 6:
                self.join()
            elif roll < 0.07 and len(self.consumers) > 1:
                self.leave()
            self.dispatch()
            self.consume()
        while len(self.acked) < len(self.positions):  # then drain with whoever is left
            before = len(self.acked)
            for _ in range(200):
                self.dispatch()
                self.consume()
            assert len(self.acked) > before, "delivery stalled"


@pytest.mark.parametrize("seed", range(12))
def test_per_key_order_and_no_loss_while_consumers_churn(seed: int) -> None:
    simulation = Simulation(seed)
    simulation.run(steps=600)
    assert simulation.acked == set(simulation.positions)
    assert simulation.deliveries >= len(simulation.positions)


def test_sticky_ranges_are_checked_against_every_other_consumers() -> None:
    dispatcher = KeySharedDispatcher(sticky=True)
    evens = [(i, i) for i in range(0, 65_536, 2)]  # every even hash, one range each
    dispatcher.add_consumer(ConsumerSlot(1, "evens", permits=10), evens)
    for claimed in ([(65_534, 65_535)], [(1, 1), (3, 4)], [(99, 101)]):
        with pytest.raises(ConsumerAssignError):
            dispatcher.add_consumer(ConsumerSlot(2, "b", permits=10), claimed)
    odds = [(i, i) for i in range(1, 65_536, 2)]
    dispatcher.add_consumer(ConsumerSlot(3, "odds", permits=10), odds[::-1])  # any order
    for key_hash, owner in ((0, 1), (1, 3), (65_534, 1), (65_535, 3)):
        slot = dispatcher.owner_of_hash(key_hash)
        assert slot is not None and slot.consumer_id == owner
    with pytest.raises(ConsumerAssignError):  # its own ranges overlap
        dispatcher.add_consumer(ConsumerSlot(4, "d", permits=10), [(5, 9), (0, 5)])


def test_a_leaving_sticky_consumer_frees_its_ranges() -> None:
    dispatcher = KeySharedDispatcher(sticky=True)
    first = ConsumerSlot(1, "a", permits=10)
    dispatcher.add_consumer(first, [(0, 99), (200, 299)])
    assert dispatcher.owner_of_hash(150) is None
    dispatcher.remove_consumer(first)
    assert dispatcher.owner_of_hash(50) is None
    dispatcher.add_consumer(ConsumerSlot(2, "b", permits=10), [(0, 65_535)])
    owner = dispatcher.owner_of_hash(250)
    assert owner is not None and owner.consumer_id == 2
