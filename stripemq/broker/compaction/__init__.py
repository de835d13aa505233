"""Topic compaction: the latest message of every key, in a ledger of its own (Pulsar's)."""

from stripemq.broker.compaction.compacted_ledger import CompactedLedger
from stripemq.broker.compaction.topic_compaction import (
    CompactionInProgressError,
    CompactionStats,
    CompactionStatus,
    TopicCompaction,
)

__all__ = [
    "CompactedLedger",
    "CompactionInProgressError",
    "CompactionStats",
    "CompactionStatus",
    "TopicCompaction",
]
