"""Inactive topic deletion (Pulsar's ``brokerDeleteInactiveTopics*`` settings and
``inactiveTopicPolicies``): a served topic without producers or consumers and, by the
policy's mode, without subscriptions (``delete_when_no_subscriptions``) or without backlog
(``delete_when_subscriptions_caught_up``, its subscriptions going with it) is deleted once
it has stayed so for ``maxInactiveDurationSeconds``, unless its retention still keeps it
(Pulsar's ``shouldTopicBeRetained``).

Inactivity counts from the last time the topic had a client or a subscription: its last
producer or consumer leaving, a subscription deleted, a client looking it up, or the
periodic check (every ``brokerDeleteInactiveTopicsFrequencySeconds``) finding it active.
The decision is sans-IO (``inactive_for_deletion``); deleting is the broker service's,
which refuses a topic a client reached meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from stripemq.broker.policies import InactiveTopicDeleteMode
from stripemq.clock import now_ms
from stripemq.errors import StripeMQError

if TYPE_CHECKING:
    from stripemq.broker.topic import PersistentTopic

log = logging.getLogger(__name__)


def is_active(topic: PersistentTopic, mode: InactiveTopicDeleteMode) -> bool:
    """Pulsar's ``isActive``: clients connected, or subscriptions (with a backlog, by
    ``mode``)."""
    if topic.has_clients:
        return True
    cursors = topic.subscription_cursors()  # not the broker's deduplication cursor
    if mode is InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS:
        return bool(cursors) or any(not s.durable for s in topic.subscriptions.values())
    return any(cursor.backlog > 0 for cursor in cursors.values())


def inactive_for_deletion(topic: PersistentTopic, now: int) -> bool:
    """Whether ``topic`` is to be deleted now; a topic found active is marked so
    (``last_active_ms``), which restarts its count."""
    policies = topic.policies.inactive_topic_policies
    if not policies.delete_while_inactive:
        return False
    if is_active(topic, policies.mode):
        topic.last_active_ms = now
        return False
    idle_ms = now - topic.last_active_ms
    if idle_ms < policies.max_inactive_duration_seconds * 1000:
        return False
    retention_s, _ = topic.ml.retention
    return not (retention_s < 0 or idle_ms < retention_s * 1000)


async def delete_inactive_topics(
    topics: Iterable[PersistentTopic], delete: Callable[[PersistentTopic], Awaitable[None]]
) -> list[str]:
    """Delete the served topics due for it; their names. One that fails (a client came,
    the store failed) is logged and stays."""
    deleted = []
    now = now_ms()
    for topic in list(topics):
        if not topic.serving or not inactive_for_deletion(topic, now):
            continue
        policies = topic.policies.inactive_topic_policies
        try:
            await delete(topic)
        except StripeMQError as exc:  # a client came meanwhile, the store failed
            log.info("[%s] inactive, but not deleted: %s", topic.name, exc)
            continue
        except Exception:
            log.exception("[%s] inactive, but deleting it failed", topic.name)
            continue
        log.info(
            "[%s] deleted: inactive for over %ds (%s)",
            topic.name,
            policies.max_inactive_duration_seconds,
            policies.mode.value,
        )
        deleted.append(topic.name)
    return deleted
