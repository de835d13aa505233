"""A subscription's delivery decisions, without I/O: what goes to whom, and what waits.

Entries come in two streams: *replays* (given back by a consumer that left or asked for
redelivery, held back by Key_Shared, or delayed by their producer and now due) and *new*
entries read from the cursor's read position. Replays always go first, oldest first.
``plan`` turns entries into deliveries; ``Subscription`` reads the entries and sends what
``plan`` returns.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from stripemq.broker.delayed_delivery import DelayedDeliveryTracker
from stripemq.broker.dispatch import ConsumerSlot, Dispatcher
from stripemq.managed_ledger.position import Position


@dataclass(frozen=True)
class EntryInfo:
    """What dispatch needs of an entry: where it is, how many messages, which key, and
    when its producer wants it delivered (ms since the epoch; ``None``: at once)."""

    position: Position
    messages: int = 1
    key: bytes | None = None
    deliver_at_ms: int | None = None


@dataclass(frozen=True)
class Delivery:
    slot: ConsumerSlot
    position: Position
    redelivery_count: int


@dataclass
class Plan:
    deliveries: list[Delivery]
    # New entries up to here were dealt with (delivered, or kept for replay): the read
    # position may move past it. ``None`` when not even the first one was.
    consumed_through: Position | None


class DeliveryState:
    """Replays, redelivery counts and the dispatcher of one subscription.

    With a ``delayed`` tracker (Shared and Key_Shared subscriptions), new entries whose
    delivery time is still to come are held there instead of being delivered.
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        is_acked: Callable[[Position], bool],
        delayed: DelayedDeliveryTracker | None = None,
        left_in_batch: Callable[[Position], int | None] | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.is_acked = is_acked
        self.delayed = delayed
        # Messages of a partly acknowledged batch still unacknowledged (None: all).
        self.left_in_batch = left_in_batch
        self._replay: list[Position] = []  # sorted
        self._delivered_before: set[Position] = set()  # replays that were delivered once
        self.redelivery_counts: dict[Position, int] = {}

    # ------------------------------------------------------------------ replays

    @property
    def replay_pending(self) -> bool:
        return bool(self._replay)

    def replay_positions(self, limit: int) -> list[Position]:
        """The oldest replays (acknowledged ones are dropped on the way)."""
        live = [p for p in self._replay if not self.is_acked(p)]
        for position in set(self._replay) - set(live):
            self._forget(position)
        return live[:limit]

    def _add_replay(self, position: Position, delivered: bool) -> None:
        i = bisect.bisect_left(self._replay, position)
        if i == len(self._replay) or self._replay[i] != position:
            self._replay.insert(i, position)
        if delivered:
            self._delivered_before.add(position)

    def _forget(self, position: Position) -> None:
        i = bisect.bisect_left(self._replay, position)
        if i < len(self._replay) and self._replay[i] == position:
            del self._replay[i]
        self._delivered_before.discard(position)
        self.dispatcher.forget(position)

    def drop_replay(self, position: Position) -> None:
        """A replay that no longer exists (its ledger was trimmed)."""
        self._forget(position)

    # ------------------------------------------------------------------ delayed delivery

    def release_delayed(self, now_ms: int) -> int:
        """Delayed entries due at ``now_ms`` become replays (first deliveries, so their
        redelivery count stays 0); returns how many."""
        if self.delayed is None:
            return 0
        released = 0
        for position in self.delayed.ready(now_ms):
            if not self.is_acked(position):
                self._add_replay(position, delivered=False)
                released += 1
        return released

    def stop_delaying(self) -> int:
        """No more delays: the entries held become replays now (first deliveries) and
        later ones are delivered as they are read; returns how many were held."""
        if self.delayed is None:
            return 0
        released = 0
        for position in self.delayed.take_all():
            if not self.is_acked(position):
                self._add_replay(position, delivered=False)
                released += 1
        self.delayed = None
        return released

    def _delays(self, entry: EntryInfo, now_ms: int | None) -> bool:
        """Whether ``entry`` is to wait in the tracker (it is put there if so)."""
        if self.delayed is None or entry.deliver_at_ms is None or now_ms is None:
            return False
        if entry.deliver_at_ms <= now_ms:
            return False
        self.delayed.add(entry.position, entry.deliver_at_ms)
        return True

    # ------------------------------------------------------------------ consumers

    def consumer_removed(self, slot: ConsumerSlot) -> None:
        held = self.dispatcher.remove_consumer(slot)
        if not self.dispatcher.exclusive:  # an exclusive one's successor rewinds instead
            for position in held:
                if not self.is_acked(position):
                    self._add_replay(position, delivered=True)

    def give_back(self, slot: ConsumerSlot, positions: Iterable[Position]) -> None:
        """The consumer asked for these to be delivered again (or all, if empty)."""
        wanted = list(positions) or list(slot.pending)
        returned = [p for p in wanted if slot.pending.pop(p, None) is not None]
        self.dispatcher.returned(slot, returned)
        for position in returned:
            self._add_replay(position, delivered=True)

    def acknowledged(self, slot: ConsumerSlot, positions: Iterable[Position]) -> None:
        positions = list(positions)
        done = [p for p in positions if p in slot.pending]
        slot.acknowledged(done)
        self.dispatcher.released(slot, done)
        for position in done:
            self.redelivery_counts.pop(position, None)
        if self.delayed is not None:  # acknowledged before it was due: nothing to deliver
            for position in positions:
                self.delayed.remove(position)

    # ------------------------------------------------------------------ planning

    def plan(
        self,
        entries: list[EntryInfo],
        *,
        replay: bool,
        now_ms: int | None = None,
        acked_too: bool = False,
    ) -> Plan:
        """Deliveries for ``entries`` (replays, or new entries in position order).

        New entries due after ``now_ms`` go to the delayed tracker (if there is one) and
        count as dealt with; replays are never delayed again. With ``acked_too`` entries
        the cursor counts as acknowledged go too (what compaction kept of ledgers trimmed
        behind the cursor).
        """
        deliveries: list[Delivery] = []
        consumed: Position | None = None
        for entry in entries:
            position = entry.position
            acked = not acked_too and self.is_acked(position)
            if acked or self.dispatcher.owner_of(position) is not None:
                if replay:
                    self._forget(position)
                consumed = position
                continue
            if not replay and self._delays(entry, now_ms):
                consumed = position  # held in the tracker: the reads go on past it
                continue
            slot = self.dispatcher.pick(position, entry.messages, entry.key)
            if slot is None:
                if self.dispatcher.skips_blocked:
                    if not replay:
                        self._add_replay(position, delivered=False)
                        consumed = position
                    continue  # other keys may go on
                break  # everything waits for permits, in order
            count = self.redelivery_counts.get(position, 0)
            if replay and position in self._delivered_before:
                count += 1
                self.redelivery_counts[position] = count
            if replay:
                self._forget_replay_only(position)
            held = self.left_in_batch(position) if self.left_in_batch is not None else None
            slot.take(position, entry.messages, held)
            deliveries.append(Delivery(slot, position, count))
            consumed = position
        return Plan(deliveries, consumed)

    def _forget_replay_only(self, position: Position) -> None:
        i = bisect.bisect_left(self._replay, position)
        if i < len(self._replay) and self._replay[i] == position:
            del self._replay[i]
        self._delivered_before.discard(position)
