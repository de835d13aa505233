"""The broker's periodic policy checks over the topics it serves.

- Message TTL, every ``message_expiry_check_interval_in_minutes`` (Pulsar's
  ``messageExpiryCheckIntervalInMinutes``, 5): each topic whose effective TTL is set has its
  subscriptions moved past expired messages (``message_expiry.expire_topic``).
- Backlog quotas, every ``backlog_quota_check_interval_in_seconds`` (Pulsar's
  ``backlogQuotaCheckIntervalInSeconds``, 60) unless ``backlog_quota_check_enabled`` is off:
  each topic over a quota is dealt with by its policy (``backlog_monitor.enforce``).
- Subscription expiry, every ``subscription_expiry_check_interval_in_minutes`` (Pulsar's
  ``subscriptionExpiryCheckIntervalInMinutes``, 5): subscriptions without consumers for
  longer than the effective expiration time are deleted (``subscription_expiry``).
- Compaction by size, every ``broker_service_compaction_monitor_interval_in_seconds``
  (Pulsar's ``brokerServiceCompactionMonitorIntervalInSeconds``, 60): each topic whose
  uncompacted backlog passes its compaction threshold is compacted (``compaction.threshold``).
- Inactive topics, every ``broker_delete_inactive_topics_frequency_seconds`` (Pulsar's
  ``brokerDeleteInactiveTopicsFrequencySeconds``, 60): topics whose inactive-topic policy
  deletes them and that stayed inactive long enough are deleted (``inactive_topics``).

A failure on one topic is logged and the check goes on with the next; a check never stops
the broker, and the next round tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from stripemq.broker.backlog_monitor import enforce
from stripemq.broker.compaction.threshold import compact_if_due
from stripemq.broker.inactive_topics import delete_inactive_topics
from stripemq.broker.message_expiry import expire_topic
from stripemq.broker.subscription_expiry import expire_subscriptions
from stripemq.errors import StripeMQError

if TYPE_CHECKING:
    from stripemq.broker.topic import PersistentTopic

log = logging.getLogger(__name__)


class PeriodicTask:
    """Runs ``work`` every ``interval_s`` seconds until stopped (0 or less: never)."""

    def __init__(self, name: str, interval_s: float, work: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self.interval_s = interval_s
        self.work = work
        self.rounds = 0  # rounds finished (what a test waits on to show a check left alone)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.interval_s > 0 and self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.work()
            except Exception:
                log.exception("%s check failed; trying again in %gs", self.name, self.interval_s)
            self.rounds += 1

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class PolicyChecks:
    """The TTL, backlog-quota and subscription-expiry checks over ``topics()`` (the topics
    served now)."""

    def __init__(
        self,
        topics: Callable[[], Iterable[PersistentTopic]],
        *,
        message_expiry_interval_s: float,
        backlog_quota_interval_s: float,
        subscription_expiry_interval_s: float = 0.0,
        compaction_interval_s: float = 0.0,
        inactive_topic_interval_s: float = 0.0,
        delete_topic: Callable[[PersistentTopic], Awaitable[None]] | None = None,
    ) -> None:
        self.topics = topics
        self.delete_topic = delete_topic
        self.tasks = [
            PeriodicTask("message expiry", message_expiry_interval_s, self.check_message_expiry),
            PeriodicTask("backlog quota", backlog_quota_interval_s, self.check_backlog_quotas),
            PeriodicTask(
                "subscription expiry",
                subscription_expiry_interval_s,
                self.check_subscription_expiry,
            ),
            PeriodicTask("compaction", compaction_interval_s, self.check_compaction),
            PeriodicTask(
                "inactive topics",
                inactive_topic_interval_s if delete_topic is not None else 0.0,
                self.check_inactive_topics,
            ),
        ]

    def start(self) -> None:
        for task in self.tasks:
            task.start()

    async def stop(self) -> None:
        for task in self.tasks:
            await task.stop()

    async def check_message_expiry(self) -> None:
        for topic in list(self.topics()):
            ttl = topic.policies.message_ttl_s
            if ttl > 0 and topic.serving:
                await self._check(topic, "message expiry", expire_topic(topic, ttl))

    async def check_subscription_expiry(self) -> None:
        for topic in list(self.topics()):
            limit = topic.policies.subscription_expiration_minutes
            if limit > 0 and topic.serving:
                await self._check(topic, "subscription expiry", expire_subscriptions(topic, limit))

    async def check_inactive_topics(self) -> None:
        if self.delete_topic is not None:
            await delete_inactive_topics(self.topics(), self.delete_topic)

    async def check_compaction(self) -> None:
        for topic in list(self.topics()):
            if topic.serving:
                await self._check(topic, "compaction check", compact_if_due(topic))

    async def check_backlog_quotas(self) -> None:
        for topic in list(self.topics()):
            if topic.serving:
                await self._check(topic, "backlog quota check", enforce(topic))

    @staticmethod
    async def _check(topic: PersistentTopic, what: str, work: Awaitable[object]) -> None:
        """One topic's check: whatever it raises is logged, and the round goes on."""
        try:
            await work
        except StripeMQError as exc:
            log.warning("[%s] %s failed: %s", topic.name, what, exc)
        except Exception:
            log.exception("[%s] %s failed", topic.name, what)
