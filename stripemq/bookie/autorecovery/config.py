"""Auto-recovery settings (BookKeeper's auditor and replication worker options, snake_case).

Loaded like every other process's settings with ``stripemq.config.load_config``: defaults,
then a TOML file, then ``STRIPEMQ_*`` variables, then ``-c key=value`` overrides. Each
setting's help is in its ``setting(...)`` (``stripemq autorecovery --print-config``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from stripemq.bookie.config import BookieConfig
from stripemq.config import load_config, setting
from stripemq.errors import ConfigError


@dataclass
class AutoRecoveryConfig:
    """Everything ``stripemq autorecovery`` (or a bookie running it inside) needs."""

    metadata_service_uri: str = setting(
        "memory://",
        "Metadata store: zk://host:port[,host:port]/chroot for a cluster (ZooKeeper), "
        "local:///dir for an embedded one, memory:// for one in this process only.",
        pulsar_name="metadataServiceUri",
        option="--metadata",
    )
    zk_timeout_ms: int = setting(
        10_000,
        "Metadata session timeout: how long the auditor's election node and a worker's ledger "
        "locks outlive a process that died without closing its session.",
        pulsar_name="zkTimeout",
    )
    instance_id: str | None = setting(
        None,
        "How this process names itself in the election and lock nodes; defaults to host:pid "
        "(inside a bookie: the bookie's id).",
    )

    # HTTP endpoint of `stripemq autorecovery`.
    enable_statistics: bool = setting(
        True,
        "Open the HTTP endpoint of `stripemq autorecovery` (false: no port at all), and count "
        "the auditor's and the replication workers' Prometheus metrics.",
        pulsar_name="enableStatistics",
    )
    stats_http_port: int = setting(
        8000,
        "Port of the HTTP endpoint of `stripemq autorecovery`: Prometheus /metrics and the probe "
        "/heartbeat (0 picks a free port). A bookie running auto-recovery inside "
        "(autorecovery_enabled) opens no port for it: its metrics are on the bookie's own "
        "endpoint.",
        pulsar_name="prometheusStatsHttpPort",
    )
    stats_http_address: str = setting(
        "127.0.0.1",
        "Address that endpoint listens on (0.0.0.0: every interface, as in a container).",
        pulsar_name="prometheusStatsHttpAddress",
    )

    # Auditor.
    lost_bookie_recovery_delay_s: float = setting(
        0.0,
        "A bookie that has been gone this long is lost and its ledgers are marked "
        "under-replicated; one that comes back sooner is left alone.",
        pulsar_name="lostBookieRecoveryDelay",
    )
    auditor_periodic_bookie_check_interval_s: float = setting(
        86_400.0,
        "Full check of every ledger against the registered bookies, besides the checks on "
        "election and on every change of the registered bookies (0 turns it off).",
        pulsar_name="auditorPeriodicBookieCheckInterval",
    )

    # Replication workers in this process.
    replication_workers: int = setting(1, "Replication workers in this process (0: none).")
    open_ledger_rereplication_grace_period_s: float = setting(
        30.0,
        "An open ledger whose current fragment lost a bookie is left to its writer this long, "
        "then fenced and closed by recovery before it is re-replicated.",
        pulsar_name="openLedgerRereplicationGracePeriod",
    )
    replication_retry_backoff_s: float = setting(
        1.0,
        "After a failed attempt the worker keeps the ledger locked for a back-off delay, so no "
        "worker retries it at once: the first delay, doubled on each further failure.",
        pulsar_name="rwRereplicateBackoffMs",
    )
    replication_retry_backoff_max_s: float = setting(
        300.0,
        "The longest back-off delay after failed attempts.",
        pulsar_name="lockReleaseOfFailedLedgerGracePeriod",
    )
    replication_max_concurrent_entries: int = setting(
        64, "Entries being copied at once per worker."
    )
    underreplication_poll_interval_s: float = setting(
        60.0,
        "A waiting worker rescans the queue this often even without a watch event (a safety "
        "net: watches normally wake it at once).",
    )

    # Ledger client deadlines used while copying.
    add_entry_timeout_s: float = setting(
        10.0,
        "Deadline of one add on one bookie while copying entries.",
        pulsar_name="addEntryTimeoutSec",
    )
    read_entry_timeout_s: float = setting(
        10.0,
        "Deadline of one read on one bookie while copying entries.",
        pulsar_name="readEntryTimeoutSec",
    )

    def validate(self) -> None:
        if self.zk_timeout_ms <= 0:
            raise ConfigError("zk_timeout_ms must be positive")
        if self.replication_workers < 0:
            raise ConfigError("replication_workers must not be negative")
        if not 0 <= self.stats_http_port <= 65535:
            raise ConfigError("stats_http_port must be between 0 and 65535")
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
    def for_bookie(cls, bookie: BookieConfig) -> AutoRecoveryConfig:
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
