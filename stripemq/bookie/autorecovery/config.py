"""Auto-recovery settings (BookKeeper's auditor and replication worker options, snake_case).

Loaded like every other process's settings with ``stripemq.config.load_config``: defaults,
then a TOML file, then ``-c key=value`` overrides.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Protocol

from stripemq.config import load_config
from stripemq.errors import ConfigError


class _BookieSettings(Protocol):
    metadata_service_uri: str
    zk_timeout_ms: int
    autorecovery_conf: str | None

    @property
    def bookie_id(self) -> str: ...


@dataclass
class AutoRecoveryConfig:
    """Everything ``stripemq autorecovery`` (or a bookie running it inside) needs."""

    metadata_service_uri: str = "memory://"
    # ZooKeeper session timeout: how long the auditor's election node and a worker's ledger
    # locks outlive a process that died without closing its session (zkTimeout).
    zk_timeout_ms: int = 10_000
    # How this process names itself in the election and lock nodes; default host:pid.
    instance_id: str | None = None

    # Auditor. A bookie that has been gone this long is lost and its ledgers are marked
    # under-replicated; one that comes back sooner is left alone (lostBookieRecoveryDelay).
    lost_bookie_recovery_delay_s: float = 0.0
    # Full check of every ledger against the registered bookies, besides the checks on
    # election and on every change of the registered bookies; 0 disables
    # (auditorPeriodicBookieCheckInterval).
    auditor_periodic_bookie_check_interval_s: float = 86_400.0

    # Replication workers in this process.
    replication_workers: int = 1
    # An open ledger whose current fragment lost a bookie is left to its writer this long,
    # then fenced and closed by recovery before it is re-replicated
    # (openLedgerRereplicationGracePeriod).
    open_ledger_rereplication_grace_period_s: float = 30.0
    # After a failed attempt the worker keeps the ledger locked for a back-off delay (from
    # the first value, doubling up to the second), so no worker retries it at once
    # (rwRereplicateBackoffMs, lockReleaseOfFailedLedgerGracePeriod).
    replication_retry_backoff_s: float = 1.0
    replication_retry_backoff_max_s: float = 300.0
    # Entries being copied at once per worker.
    replication_max_concurrent_entries: int = 64
    # A waiting worker rescans the queue this often even without a watch event (a safety
    # net: watches normally wake it at once).
    underreplication_poll_interval_s: float = 60.0

    # Ledger client deadlines used while copying.
    add_entry_timeout_s: float = 10.0
    read_entry_timeout_s: float = 10.0

    def validate(self) -> None:
        if self.zk_timeout_ms <= 0:
            raise ConfigError("zk_timeout_ms must be positive")
        if self.replication_workers < 0:
            raise ConfigError("replication_workers must not be negative")
        if self.replication_max_concurrent_entries < 1:
            raise ConfigError("replication_max_concurrent_entries must be >= 1")
        for name in (
            "lost_bookie_recovery_delay_s",
            "auditor_periodic_bookie_check_interval_s",
            "open_ledger_rereplication_grace_period_s",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative")
        for name in (
            "replication_retry_backoff_s",
            "replication_retry_backoff_max_s",
            "underreplication_poll_interval_s",
            "add_entry_timeout_s",
            "read_entry_timeout_s",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if self.replication_retry_backoff_max_s < self.replication_retry_backoff_s:
            raise ConfigError(
                "replication_retry_backoff_max_s is below replication_retry_backoff_s"
            )

    @property
    def participant_id(self) -> str:
        return self.instance_id or f"{socket.gethostname()}:{os.getpid()}"

    @classmethod
    def for_bookie(cls, bookie: _BookieSettings) -> AutoRecoveryConfig:
        """The settings of the auto-recovery a bookie runs inside (``autorecovery_enabled``):
        the bookie's ``autorecovery_conf`` file if it names one, with the bookie's metadata
        service, session timeout and id on top."""
        return load_config(
            cls,
            bookie.autorecovery_conf,
            {
                "metadata_service_uri": bookie.metadata_service_uri,
                "zk_timeout_ms": bookie.zk_timeout_ms,
                "instance_id": bookie.bookie_id,
            },
        )
