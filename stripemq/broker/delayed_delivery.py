"""Delayed message delivery: which held-back entries are due, without I/O or clocks.

A producer may ask for a message to be delivered no earlier than a time of its choosing
(``MessageMetadata.deliver_at_time``, milliseconds since the epoch). On Shared and
Key_Shared subscriptions the dispatcher does not hand such an entry out when it reads it;
it records the entry's position here and reads on, so later messages are not held up.
When the time comes the positions are replayed (read again and dispatched like
redeliveries). Exclusive and Failover subscriptions ignore the delay, as in Pulsar.

The tracker is in memory only, like Pulsar's ``InMemoryDelayedDeliveryTracker``: delayed
entries are not acknowledged, so after a restart or a takeover the cursor reads them again
and the tracker fills up anew.

Unlike Pulsar's default (which may release a message up to one tick early), an entry is
never released before its time; the tick only limits how often releases happen, so an
entry may come up to one tick late when another release has just taken place.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

from stripemq.errors import BrokerError
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from stripemq.broker.config import DelayedDeliveryConfig

log = logging.getLogger(__name__)

# Settings: ``DelayedDeliveryConfig`` in ``stripemq.broker.config``.
DEFAULT_TICK_MS = 1000


def check_delivery_delay(
    metadata: pb.MessageMetadata | None, config: DelayedDeliveryConfig
) -> None:
    """Refuse a message asking to be delivered later after its publish time than the
    topic allows (Pulsar's ``delayedDeliveryMaxDelayInMillis``, while delayed delivery is
    on), with Pulsar's NotAllowed."""
    most = config.max_delay_ms
    if most <= 0 or not config.enabled or metadata is None:
        return
    if not metadata.HasField("deliver_at_time"):
        return
    if metadata.deliver_at_time - metadata.publish_time > most:
        raise BrokerError(
            pb.NotAllowedError, f"Exceeds max allowed delivery delay of {most} milliseconds"
        )


class DelayedDeliveryTracker:
    """Positions waiting for their delivery time, ordered by that time (then position).

    The owner asks ``next_deadline`` when to look again, and at that time calls ``ready``
    with the current time to collect what is due.
    """

    def __init__(self, tick_ms: int = DEFAULT_TICK_MS) -> None:
        if tick_ms < 0:
            raise ValueError(f"tick_ms must be >= 0, not {tick_ms}")
        self.tick_ms = tick_ms
        self._queue: SortedList[tuple[int, Position]] = SortedList()
        self._deliver_at: dict[Position, int] = {}
        self._last_release_ms: int | None = None

    def __len__(self) -> int:
        return len(self._deliver_at)

    def __contains__(self, position: object) -> bool:
        return position in self._deliver_at

    def add(self, position: Position, deliver_at_ms: int) -> bool:
        """Hold ``position`` until ``deliver_at_ms``; ``False`` if it was held already (an
        entry read twice keeps its first time: it is the same entry)."""
        if position in self._deliver_at:
            return False
        self._deliver_at[position] = deliver_at_ms
        self._queue.add((deliver_at_ms, position))
        return True

    def remove(self, position: Position) -> bool:
        """Stop holding ``position`` (acknowledged meanwhile); ``False`` if it was not held."""
        deliver_at_ms = self._deliver_at.pop(position, None)
        if deliver_at_ms is None:
            return False
        self._queue.remove((deliver_at_ms, position))
        return True

    def clear(self) -> None:
        """Forget every position (the subscription starts over, e.g. after a seek)."""
        self._queue.clear()
        self._deliver_at.clear()
        self._last_release_ms = None

    def take_all(self) -> list[Position]:
        """Every position held, in position order, and none held from now on (delayed
        delivery was switched off: they go out now)."""
        held = sorted(self._deliver_at)
        self.clear()
        return held

    def ready(self, now_ms: int) -> list[Position]:
        """Take out the positions due at ``now_ms``, in position order.

        Nothing is released within one tick of the previous release: those wait for
        ``next_deadline``, so that many close deadlines make one release, not many.
        """
        last = self._last_release_ms
        if last is not None and last <= now_ms < last + self.tick_ms:
            return []
        due: list[Position] = []
        while self._queue:
            deliver_at_ms, position = self._queue[0]
            if deliver_at_ms > now_ms:
                break
            del self._queue[0]
            del self._deliver_at[position]
            due.append(position)
        if due:
            self._last_release_ms = now_ms
        due.sort()
        return due

    def next_deadline(self) -> int | None:
        """When (ms since the epoch) ``ready`` will next have something: the earliest
        delivery time, but not within a tick of the last release. ``None`` when empty."""
        if not self._queue:
            return None
        earliest = self._queue[0][0]
        if self._last_release_ms is None:
            return earliest
        return max(earliest, self._last_release_ms + self.tick_ms)
