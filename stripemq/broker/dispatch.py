"""Which consumer gets the next entry of a subscription: the dispatch decisions, no I/O.

A ``Dispatcher`` holds each consumer's permits (messages it asked for with FLOW) and the
entries it was given and has not acknowledged. ``Subscription`` reads entries and asks
``pick`` where each goes; what a consumer leaves unacknowledged when it goes away comes
back through ``remove_consumer`` to be delivered again.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field

from stripemq.managed_ledger.position import Position

_slot_ids = itertools.count()


class PendingAcks(MutableMapping[Position, int]):
    """Entries handed to a consumer and not acknowledged (position -> messages in the
    entry), with the messages still unacknowledged in them kept as a running total: a
    batch counts whole until some of its messages are acknowledged (``set_unacked``)."""

    def __init__(self) -> None:
        self._entries: dict[Position, int] = {}
        self._unacked: dict[Position, int] = {}  # partly acknowledged batches only
        self.messages = 0

    def _held(self, position: Position) -> int:
        return self._unacked.get(position, self._entries.get(position, 0))

    def __getitem__(self, position: Position) -> int:
        return self._entries[position]

    def __setitem__(self, position: Position, messages: int) -> None:
        self.messages += messages - self._held(position)
        self._unacked.pop(position, None)
        self._entries[position] = messages

    def __delitem__(self, position: Position) -> None:
        self.messages -= self._held(position)
        self._unacked.pop(position, None)
        del self._entries[position]

    def __iter__(self) -> Iterator[Position]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, position: object) -> bool:
        return position in self._entries

    def get(self, position: Position, default: int = 0) -> int:  # type: ignore[override]
        return self._entries.get(position, default)

    def pop(self, position: Position, *default: int | None) -> int | None:  # type: ignore[override]
        """As ``dict.pop``: ``KeyError`` for an entry it does not hold unless given a
        default. Answers the entry's size."""
        if position not in self._entries:
            if default:
                return default[0]
            raise KeyError(position)
        size = self._entries[position]
        del self[position]
        return size

    def set_unacked(self, position: Position, messages: int) -> None:
        """Of the batch entry at ``position`` (if held), only ``messages`` are still
        unacknowledged (Pulsar counts batch-index acks at once); its size stays."""
        size = self._entries.get(position)
        if size is None:
            return
        messages = max(0, min(messages, size))
        self.messages += messages - self._held(position)
        if messages == size:
            self._unacked.pop(position, None)
        else:
            self._unacked[position] = messages

    def clear(self) -> None:
        self._entries.clear()
        self._unacked.clear()
        self.messages = 0


@dataclass(eq=False)
class ConsumerSlot:
    """What the dispatcher knows of one consumer.

    ``consumer_id`` is the client's (unique on its connection only); ``slot_id`` tells
    consumers apart within a subscription.
    """

    consumer_id: int
    name: str
    priority: int = 0
    permits: int = 0
    pending: PendingAcks = field(default_factory=PendingAcks)
    slot_id: int = field(default_factory=lambda: next(_slot_ids))
    # False while its connection has more unsent bytes than it may (a client that asks
    # for messages and does not read them): it gets nothing more until that drains.
    writable: bool = True
    # Pulsar's maxUnackedMessagesPerConsumer (0: no limit; Shared and Key_Shared only): a
    # consumer holding that many unacknowledged messages gets nothing more until it holds
    # half as many.
    max_unacked: int = 0
    _blocked_on_unacked: bool = False

    @property
    def ready(self) -> bool:
        """Whether it may be handed an entry now: it has permits, is writable and is not
        blocked on unacknowledged messages."""
        return self.permits > 0 and self.writable and not self.blocked_on_unacked

    @property
    def blocked_on_unacked(self) -> bool:
        """Pulsar's blockedConsumerOnUnackedMsgs."""
        if self._blocked_on_unacked and (
            self.max_unacked <= 0 or self.pending.messages <= self.max_unacked // 2
        ):
            self._blocked_on_unacked = False
        return self._blocked_on_unacked

    def take(self, position: Position, messages: int, held: int | None = None) -> None:
        """Hand it the entry at ``position`` of ``messages`` messages, of which ``held``
        are still unacknowledged (a partly acknowledged batch; None: all of them). Its
        permits go down by them all: its client gives back those it skips."""
        self.pending[position] = messages
        if held is not None:
            self.pending.set_unacked(position, held)
        self.permits -= messages
        if 0 < self.max_unacked <= self.pending.messages:
            self._blocked_on_unacked = True

    def acknowledged(self, positions: Iterable[Position]) -> None:
        for position in positions:
            self.pending.pop(position, None)


def blocked_on_unacked(consumers: Iterable[ConsumerSlot], limit: int, blocked: bool) -> bool:
    """Whether a subscription stays (or becomes) blocked on unacknowledged messages, as
    Pulsar's dispatcher is at maxUnackedMessagesPerSubscription: from ``limit`` held by
    its consumers together until they hold half as many (``limit`` 0: never)."""
    if limit <= 0:
        return False
    held = sum(slot.pending.messages for slot in consumers)
    return held > limit // 2 if blocked else held >= limit


class Dispatcher:
    """Base: consumers in the order they came; subclasses decide who gets an entry."""

    exclusive = False
    # Whether an entry that cannot go out now may wait while later ones go (Key_Shared);
    # otherwise everything waits, in order, until a consumer has permits.
    skips_blocked = False

    def __init__(self) -> None:
        self.consumers: list[ConsumerSlot] = []

    def add_consumer(self, slot: ConsumerSlot) -> None:
        self.consumers.append(slot)

    def remove_consumer(self, slot: ConsumerSlot) -> list[Position]:
        """Drop a consumer; returns the entries it held unacknowledged (to redeliver)."""
        self.consumers.remove(slot)
        held = sorted(slot.pending)
        slot.pending.clear()
        return held

    def owner_of(self, position: Position) -> ConsumerSlot | None:
        for slot in self.consumers:
            if position in slot.pending:
                return slot
        return None

    def released(self, slot: ConsumerSlot, positions: list[Position]) -> None:
        """A consumer acknowledged (or gave back) these entries."""

    def returned(self, slot: ConsumerSlot, positions: list[Position]) -> None:
        """A consumer gave these entries back, to be delivered again."""
        self.released(slot, positions)

    def forget(self, position: Position) -> None:
        """An entry waiting for delivery is gone (acknowledged meanwhile, or trimmed)."""

    def has_permits(self) -> bool:
        return any(slot.ready for slot in self.consumers)

    def pick(self, position: Position, messages: int, key: bytes | None) -> ConsumerSlot | None:
        raise NotImplementedError


class SingleActiveDispatcher(Dispatcher):
    """Exclusive: one consumer (a second is refused by the subscription)."""

    exclusive = True

    def pick(self, position: Position, messages: int, key: bytes | None) -> ConsumerSlot | None:
        if self.consumers and self.consumers[0].ready:
            return self.consumers[0]
        return None


class RoundRobinDispatcher(Dispatcher):
    """Shared: each entry to the next consumer that has permits."""

    def __init__(self) -> None:
        super().__init__()
        self._next = 0

    def pick(self, position: Position, messages: int, key: bytes | None) -> ConsumerSlot | None:
        count = len(self.consumers)
        for step in range(count):
            slot = self.consumers[(self._next + step) % count]
            if slot.ready:
                self._next = (self._next + step + 1) % count
                return slot
        return None


class FailoverDispatcher(Dispatcher):
    """Failover: one active consumer, by priority level then name; on a partition, the
    partitions spread over the consumers (partition index modulo their count)."""

    exclusive = True  # a change of active consumer rewinds to the first unacked entry

    def __init__(self, partition_index: int = -1) -> None:
        super().__init__()
        self.partition_index = partition_index

    def active(self) -> ConsumerSlot | None:
        if not self.consumers:
            return None
        ordered = sorted(self.consumers, key=lambda slot: (slot.priority, slot.name))
        return ordered[max(self.partition_index, 0) % len(ordered)]

    def pick(self, position: Position, messages: int, key: bytes | None) -> ConsumerSlot | None:
        active = self.active()
        return active if active is not None and active.ready else None
