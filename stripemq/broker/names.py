"""Names the broker refuses before it touches any state (sans-IO).

- ``non-persistent://`` topics: stripemq serves persistent topics only. Pulsar's broker
  answers ``NotAllowedError`` for a non-persistent topic when they are disabled
  (``enableNonPersistentTopics=false``); so does stripemq, at lookup, partitioned metadata,
  producer and subscribe, before any metadata is read or written.
- Subscription names: an empty (or blank) name, the deduplication cursor's name
  (``pulsar.dedup``) and names starting with the replicator's prefix (``pulsar.repl``) are
  refused, as Pulsar's ``PersistentTopic.subscribe`` refuses them ("Subscription with
  reserved subscription name attempted"); so is the compaction cursor's (``__compaction``),
  which Pulsar leaves to clients (its compactor subscribes with it): here compaction runs
  inside the broker, and a client acknowledging on it would move the horizon. Pulsar
  answers these with the code of its ``NamingException``, which maps to ``ProducerBusy``;
  stripemq answers ``NotAllowedError``, the code the official clients report as "operation
  not allowed".
"""

from __future__ import annotations

import logging

from stripemq.errors import StripeMQError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import TopicName

log = logging.getLogger(__name__)

__all__ = [
    "COMPACTION_CURSOR",
    "DEDUPLICATION_CURSOR",
    "REPLICATOR_PREFIX",
    "ReservedSubscriptionNameError",
    "UnsupportedTopicError",
    "check_subscription_name",
    "check_topic_supported",
]

REPLICATOR_PREFIX = "pulsar.repl"
# The deduplication cursor's name (Pulsar's): the one name for it across the broker.
DEDUPLICATION_CURSOR = "pulsar.dedup"
# The compaction cursor's name (Pulsar's): it holds what the next compaction reads.
COMPACTION_CURSOR = "__compaction"


class UnsupportedTopicError(StripeMQError):
    """A topic of a kind this broker does not serve (``non-persistent://``)."""

    server_error = pb.NotAllowedError


class ReservedSubscriptionNameError(StripeMQError):
    """A subscription name clients may not use (empty, or reserved for the broker)."""

    server_error = pb.NotAllowedError


def check_topic_supported(topic: TopicName) -> None:
    """Raises ``UnsupportedTopicError`` for a topic this broker does not serve."""
    if not topic.persistent:
        raise UnsupportedTopicError(f"{topic}: non-persistent topics are not supported")


def check_subscription_name(name: str) -> None:
    """Raises ``ReservedSubscriptionNameError`` for a name no client may subscribe with."""
    if not name.strip():
        raise ReservedSubscriptionNameError("empty subscription name")
    if name in (".", "..") or "\x00" in name:  # no cursor node could be named so
        raise ReservedSubscriptionNameError(f"invalid subscription name {name!r}")
    if name in (DEDUPLICATION_CURSOR, COMPACTION_CURSOR) or name.startswith(REPLICATOR_PREFIX):
        log.warning("refused a subscription with the reserved name %r", name)
        raise ReservedSubscriptionNameError(
            f"subscription name {name!r} is reserved (subscription with reserved "
            "subscription name attempted)"
        )
