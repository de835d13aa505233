"""Message TTL: subscriptions are moved past messages published too long ago.

A message expires ``expire_after_s`` seconds after its publish time (Pulsar's
``isEntryExpired``: expired once ``now > publish_time + ttl``). Expiring a subscription
acknowledges, cumulatively, every entry up to the last expired one (Pulsar's
``PersistentMessageExpiryMonitor`` marks the cursor deleted up to there); what was not
expired keeps its acknowledgement state. The last expired entry is found by the topic's
binary search over publish times (``PersistentTopic.find_first_published``, which seek by
time uses too: ``O(log n)`` reads; publish times are taken to rise along the topic, as
Pulsar takes them), once per topic and check.

``expire_messages`` is the one-subscription operation (the admin API's
``expireMessages/{seconds}`` and the TTL task both use it); ``expire_topic`` applies a TTL
to every subscription of a topic (the topic holds one for each durable cursor, whether or
not a consumer is connected); the broker runs it every
``message_expiry_check_interval_minutes`` (Pulsar's ``messageExpiryCheckIntervalInMinutes``)
for every topic whose namespace (or the broker) sets a TTL. Each subscription checked has
its ``lastExpireTimestamp`` stamped, expired messages or not, as Pulsar stamps it; what it
expired, its consumers no longer hold (``Subscription.cursor_moved_on``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from stripemq.broker.names import COMPACTION_CURSOR
from stripemq.clock import now_ms
from stripemq.managed_ledger.ledger_chain import LedgerChain
from stripemq.managed_ledger.position import Position

if TYPE_CHECKING:
    from stripemq.broker.topic import PersistentTopic, Subscription

log = logging.getLogger(__name__)


class Cursor(Protocol):
    """What expiry needs of a cursor, durable or not."""

    @property
    def mark_delete_position(self) -> Position: ...

    @property
    def backlog(self) -> int: ...

    def ack_cumulative(self, position: Position) -> None: ...


def entry_before(chain: LedgerChain, position: Position) -> Position | None:
    """The entry just before ``position`` in the chain (``None``: there is none)."""
    if position.entry_id > 0 and chain.exists(Position(position.ledger_id, position.entry_id - 1)):
        return Position(position.ledger_id, position.entry_id - 1)
    previous = None
    for info in chain:
        if info.ledger_id >= position.ledger_id:
            break
        if info.entries:
            previous = Position(info.ledger_id, info.entries - 1)
    return previous


async def last_expired(
    topic: PersistentTopic, expire_after_s: float, now: int | None = None
) -> Position | None:
    """The newest entry of ``topic`` published more than ``expire_after_s`` seconds before
    ``now`` (ms; default: the wall clock); ``None`` if no entry has expired."""
    now = now_ms() if now is None else now
    # Expired: published before ``threshold``; the search finds the first entry that is not.
    threshold = now - int(expire_after_s * 1000)
    chain = topic.ml.chain
    first_kept = await topic.find_first_published(threshold)
    if first_kept is None:  # every entry has expired (or there are none)
        last = chain.last_confirmed()
        return last if chain.exists(last) else None
    return entry_before(chain, first_kept)


def expire_cursor_to(cursor: Cursor, last: Position | None) -> int:
    """Acknowledge everything of ``cursor`` up to ``last``; returns how many entries that
    took off its backlog (0 if it was past ``last`` already)."""
    if last is None or last <= cursor.mark_delete_position:
        return 0
    before = cursor.backlog
    cursor.ack_cumulative(last)
    return max(0, before - cursor.backlog)


async def expire_messages(
    topic: PersistentTopic, subscription: Subscription, expire_after_s: float
) -> int:
    """Move ``subscription`` past the messages published more than ``expire_after_s``
    seconds ago; returns the number of entries expired (recorded in its stats)."""
    last = None
    if subscription.cursor.backlog:
        last = await last_expired(topic, expire_after_s)
    return _expire_subscription(topic, subscription, last)


def _expire_subscription(
    topic: PersistentTopic, subscription: Subscription, last: Position | None
) -> int:
    expired = expire_cursor_to(subscription.cursor, last)
    subscription.stats.record_expired(expired)
    if expired:
        subscription.cursor_moved_on()  # what its consumers hold may be acknowledged now
        log.info(
            "[%s] [%s] expired %d entries (up to %s)", topic.name, subscription.name, expired, last
        )
    return expired


async def expire_topic(topic: PersistentTopic, expire_after_s: float) -> int:
    """Apply a TTL to every subscription of ``topic``; returns the entries expired in
    all. The topic is searched once, and only if a subscription has a backlog."""
    last = None
    if any(s.cursor.backlog for s in _expirable(topic)):
        last = await last_expired(topic, expire_after_s)
    total = 0
    # Looked up again after the search: a subscription may have gone meanwhile.
    for subscription in _expirable(topic):
        total += _expire_subscription(topic, subscription, last)
    return total


def _expirable(topic: PersistentTopic) -> list[Subscription]:
    """The subscriptions a TTL applies to: not the compaction cursor, whose backlog is
    what the next compaction reads (Pulsar leaves it alone too)."""
    return [s for s in topic.subscriptions.values() if s.name != COMPACTION_CURSOR]
