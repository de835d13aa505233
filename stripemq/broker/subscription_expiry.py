"""Subscription expiry (Pulsar's ``subscriptionExpirationTimeMinutes``): a durable
subscription that has had no consumer for longer than its namespace's
``subscriptionExpirationTime`` (else the broker's setting) is deleted with its cursor.

Idle time counts from a subscription's last consumer coming, leaving or acknowledging. A
durable cursor stores that time with its position (Pulsar's lastActive), so the count goes
on across unloads, takeovers and restarts, from the cursor's last stored state. The
broker's own cursors and replicators' subscriptions never expire.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from stripemq.broker.names import COMPACTION_CURSOR, REPLICATOR_PREFIX
from stripemq.clock import now_ms
from stripemq.errors import BrokerError, CursorNotFoundError

if TYPE_CHECKING:
    from stripemq.broker.topic import PersistentTopic

log = logging.getLogger(__name__)


def idle_subscriptions(topic: PersistentTopic, limit_minutes: int, now: int) -> list[str]:
    """The subscriptions of ``topic`` without consumers for more than ``limit_minutes``."""
    if limit_minutes <= 0:
        return []
    limit_ms = limit_minutes * 60_000
    idle = []
    for name in topic.subscription_names():
        if name.startswith(REPLICATOR_PREFIX) or name == COMPACTION_CURSOR:
            continue
        subscription = topic.subscriptions.get(name)  # None: being made right now
        if subscription is not None and subscription.durable and not subscription.consumers:
            if now - subscription.last_active_ms > limit_ms:
                idle.append(name)
    return idle


async def expire_subscriptions(topic: PersistentTopic, limit_minutes: int) -> list[str]:
    """Delete the subscriptions idle past the limit; returns their names. One a consumer
    took meanwhile is left alone."""
    deleted = []
    for name in idle_subscriptions(topic, limit_minutes, now_ms()):
        try:
            await topic.remove_subscription(name)
        except (BrokerError, CursorNotFoundError) as exc:  # a consumer came, or it went
            log.debug("[%s] subscription %s stays: %s", topic.name, name, exc)
            continue
        log.info(
            "[%s] deleted subscription %s: no consumer within its expiration time (%d min)",
            topic.name,
            name,
            limit_minutes,
        )
        deleted.append(name)
    return deleted
