"""Backlog quotas on a live topic: admitting producers, and acting on a quota exceeded.

The decisions are ``backlog_quota``'s; this module reads what they need from the topic (the
subscriptions' mark-delete positions, the publish time of the oldest unacknowledged
message) and carries them out: a refused producer gets the quota's error, an exceeded
``producer_*`` quota disconnects the topic's producers, an exceeded
``consumer_backlog_eviction`` quota moves the slowest subscriptions forward.

Only durable subscriptions count: a reader (non-durable cursor) holds nothing back, and
neither does the deduplication cursor.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from stripemq.broker import backlog_quota
from stripemq.broker.backlog_quota import QuotaAction
from stripemq.broker.message_expiry import expire_topic
from stripemq.broker.policies import BacklogQuota, BacklogQuotaType
from stripemq.broker.publish_time import publish_time_of
from stripemq.clock import now_ms
from stripemq.errors import BrokerError
from stripemq.managed_ledger.position import Position

if TYPE_CHECKING:
    from stripemq.broker.topic import PersistentTopic

log = logging.getLogger(__name__)

REFUSAL = "Cannot create producer on topic with backlog quota exceeded"


async def oldest_unacked_publish_ms(topic: PersistentTopic) -> int | None:
    """Publish time of the oldest message a subscription has not acknowledged (``None``:
    every subscription is caught up, or there are none)."""
    cursors = topic.subscription_cursors().values()
    slowest = backlog_quota.slowest(c.mark_delete_position for c in cursors)
    if slowest is None:
        return None
    chain = topic.ml.chain
    position = chain.next_valid(slowest)
    if not chain.exists(position):
        return None
    entries = await topic.ml.read_entries(position, 1)
    if not entries or entries[0].position != position:
        return None
    return publish_time_of(entries[0].data)


async def is_exceeded(topic: PersistentTopic, kind: BacklogQuotaType, quota: BacklogQuota) -> bool:
    """Whether ``topic``'s backlog is over ``quota`` of ``kind`` now."""
    if kind is BacklogQuotaType.DESTINATION_STORAGE:
        if quota.limit_size < 0:
            return False
        return backlog_quota.size_exceeded(quota, topic.estimated_backlog_size())
    if quota.limit_time <= 0:
        return False
    oldest = await oldest_unacked_publish_ms(topic)
    return backlog_quota.age_exceeded(quota, oldest, now_ms())


async def check_producer_admission(topic: PersistentTopic, producer_name: str) -> None:
    """Refuse a producer while a ``producer_request_hold`` or ``producer_exception`` quota
    of the topic is exceeded (Pulsar checks the size quota, then the age quota).

    Raises:
        BrokerError: ``ProducerBlockedQuotaExceededError`` (hold) or
            ``ProducerBlockedQuotaExceededException`` (exception).
    """
    for kind in (BacklogQuotaType.DESTINATION_STORAGE, BacklogQuotaType.MESSAGE_AGE):
        quota = topic.policies.backlog_quota(kind)
        code = backlog_quota.refusal_code(quota)
        if code is None or not await is_exceeded(topic, kind, quota):
            continue
        log.info(
            "[%s] backlog quota (%s) exceeded: producer %s refused",
            topic.name,
            kind.value,
            producer_name or "(unnamed)",
        )
        raise BrokerError(code, REFUSAL)


async def enforce(topic: PersistentTopic) -> None:
    """The periodic check of one topic: act on each quota it exceeds."""
    for kind in (BacklogQuotaType.DESTINATION_STORAGE, BacklogQuotaType.MESSAGE_AGE):
        quota = topic.policies.backlog_quota(kind)
        if not await is_exceeded(topic, kind, quota):
            continue
        action = backlog_quota.action_for(quota)
        log.info(
            "[%s] backlog quota (%s) exceeded: applying %s",
            topic.name,
            kind.value,
            quota.policy.value,
        )
        if action is QuotaAction.DISCONNECT_PRODUCERS:
            topic.disconnect_producers()
        elif kind is BacklogQuotaType.DESTINATION_STORAGE:
            evict_by_size(topic, quota)
        else:
            await expire_topic(topic, backlog_quota.eviction_target_age_s(quota))


def evict_by_size(topic: PersistentTopic, quota: BacklogQuota) -> dict[str, Position]:
    """Move the slowest subscriptions forward until the backlog is under 90 % of the
    quota; returns where each moved subscription now stands."""
    cursors = topic.subscription_cursors()
    target = backlog_quota.eviction_target_bytes(quota)
    moves = backlog_quota.cursors_to_evict(
        topic.ml.chain, {name: c.mark_delete_position for name, c in cursors.items()}, target
    )
    for name, position in moves.items():
        before = cursors[name].backlog
        cursors[name].ack_cumulative(position)
        subscription = topic.subscriptions.get(name)
        if subscription is not None:
            subscription.cursor_moved_on()  # what its consumers hold is acknowledged now
        log.info(
            "[%s] [%s] evicted %d entries of backlog (now at %s)",
            topic.name,
            name,
            before - cursors[name].backlog,
            position,
        )
    return moves
