"""Auto-recovery: an elected auditor queues the ledgers of lost bookies; replication workers
copy the missing replicas to other bookies and fix the ensembles in the ledger metadata."""

from stripemq.bookie.autorecovery.auditor import Auditor, current_auditor
from stripemq.bookie.autorecovery.config import AutoRecoveryConfig
from stripemq.bookie.autorecovery.replication_worker import ReplicationWorker
from stripemq.bookie.autorecovery.service import AutoRecoveryService
from stripemq.bookie.autorecovery.underreplication import (
    UnderReplicatedLedger,
    UnderReplicationManager,
)

__all__ = [
    "Auditor",
    "AutoRecoveryConfig",
    "AutoRecoveryService",
    "ReplicationWorker",
    "UnderReplicatedLedger",
    "UnderReplicationManager",
    "current_auditor",
]
