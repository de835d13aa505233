"""Compaction by size (Pulsar's ``PersistentTopic.checkCompaction``): a topic is compacted
once the backlog compaction has not read yet passes its ``compactionThreshold`` (the topic's,
else its namespace's, else ``brokerServiceCompactionThresholdInBytes``; 0: never)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from stripemq.broker.backlog_quota import backlog_bytes
from stripemq.broker.names import COMPACTION_CURSOR

if TYPE_CHECKING:
    from stripemq.broker.topic import PersistentTopic

log = logging.getLogger(__name__)

__all__ = ["compact_if_due", "uncompacted_bytes"]


def uncompacted_bytes(topic: PersistentTopic) -> int:
    """Bytes the next compaction would read, as Pulsar estimates them: after the
    compaction cursor; without one, the whole topic if no subscription holds a backlog
    (nothing keeps it), else the topic's backlog."""
    chain = topic.ml.chain
    cursor = topic.ml.cursors.get(COMPACTION_CURSOR)
    if cursor is not None:
        return backlog_bytes(chain, [cursor.mark_delete_position])
    if not topic.subscription_cursors():
        return chain.size
    return topic.estimated_backlog_size()


async def compact_if_due(topic: PersistentTopic) -> bool:
    """Start a compaction if the topic is past its threshold and none runs; whether one
    started."""
    threshold = topic.policies.compaction_threshold_bytes
    if threshold <= 0 or topic.compaction.running:
        return False
    backlog = uncompacted_bytes(topic)
    if backlog <= threshold:
        return False
    log.info(
        "[%s] %d bytes not compacted, over the threshold of %d: compacting",
        topic.name,
        backlog,
        threshold,
    )
    topic.compaction.trigger()
    return True
