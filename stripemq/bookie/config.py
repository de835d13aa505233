"""Bookie settings. Names follow BookKeeper's ``bk_server.conf`` in snake_case."""

from __future__ import annotations

from dataclasses import dataclass

from stripemq.errors import ConfigError

MiB = 1024 * 1024


@dataclass
class BookieConfig:
    """Everything a bookie process needs; loaded with ``stripemq.config.load_config``."""

    metadata_service_uri: str = "memory://"
    bookie_host: str = "127.0.0.1"
    bookie_port: int = 3181
    # Address other processes use to reach this bookie; defaults to host:port.
    advertised_address: str | None = None
    rack: str | None = None
    # ZooKeeper session timeout: a bookie that dies stays registered this long (zkTimeout).
    zk_timeout_ms: int = 10_000
    # Also run auto-recovery (auditor candidate + replication worker) in this process, with
    # the settings of the TOML file autorecovery_conf (those of `stripemq autorecovery`).
    autorecovery_enabled: bool = False
    autorecovery_conf: str | None = None
    # Prometheus /metrics; port 0 picks a free port.
    enable_statistics: bool = True
    stats_http_port: int = 8000

    data_dir: str = "data/bookie"
    # Journal and ledger directories default to subdirectories of data_dir.
    journal_directory: str | None = None
    ledger_directory: str | None = None

    # Journal: one fsync covers every record that arrived within the group wait or until
    # the buffered bytes pass the threshold. journal_sync_data=false skips fsync (unsafe).
    journal_max_group_wait_ms: float = 2.0
    journal_buffered_writes_threshold: int = 512 * 1024
    journal_sync_data: bool = True
    journal_max_size_mb: int = 2048

    # Entry logs (interleaved, all ledgers) rotate at this size.
    entry_log_size_limit: int = 1024 * MiB
    # Memtable: flushed to the entry log when it holds this much, or every flush_interval.
    write_cache_max_size_mb: int = 64
    flush_interval_ms: int = 10_000
    read_cache_max_size_mb: int = 16
    max_entry_size: int = 5 * MiB

    # Disk usage: read-only above the threshold, writable again below the low-water mark.
    disk_usage_threshold: float = 0.95
    disk_usage_lwm_threshold: float = 0.90
    disk_check_interval_ms: int = 10_000

    # Largest long-poll a reader may ask for.
    max_long_poll_timeout_ms: int = 60_000

    # Garbage collection: every gc_wait_time_ms, drop ledgers deleted from metadata (<= 0
    # turns GC off). Entry logs whose live fraction is below a threshold are compacted, minor
    # and major levels each on its own interval; a threshold or interval of 0 turns that
    # level off. Compaction is considered at each GC round.
    gc_wait_time_ms: int = 900_000
    minor_compaction_threshold: float = 0.2
    minor_compaction_interval_s: float = 3600.0
    major_compaction_threshold: float = 0.8
    major_compaction_interval_s: float = 86400.0

    def validate(self) -> None:
        if not 0 < self.disk_usage_lwm_threshold <= self.disk_usage_threshold <= 1:
            raise ConfigError(
                "need 0 < disk_usage_lwm_threshold <= disk_usage_threshold <= 1, got "
                f"{self.disk_usage_lwm_threshold} and {self.disk_usage_threshold}"
            )
        for name in (
            "journal_buffered_writes_threshold",
            "journal_max_size_mb",
            "entry_log_size_limit",
            "write_cache_max_size_mb",
            "max_entry_size",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        for name in ("flush_interval_ms", "disk_check_interval_ms", "max_long_poll_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if self.journal_max_group_wait_ms < 0:
            raise ConfigError("journal_max_group_wait_ms must not be negative")
        for name in ("minor_compaction_threshold", "major_compaction_threshold"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be between 0 and 1")
        for name in ("minor_compaction_interval_s", "major_compaction_interval_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative")
        if (
            self.minor_compaction_enabled
            and self.major_compaction_enabled
            and self.minor_compaction_threshold > self.major_compaction_threshold
        ):
            raise ConfigError(
                "minor_compaction_threshold must not exceed major_compaction_threshold, got "
                f"{self.minor_compaction_threshold} and {self.major_compaction_threshold}"
            )
        if self.zk_timeout_ms <= 0:
            raise ConfigError("zk_timeout_ms must be positive")
        if not 0 <= self.bookie_port <= 65535:
            raise ConfigError(f"bookie_port out of range: {self.bookie_port}")

    @property
    def bookie_id(self) -> str:
        """The identity other processes know this bookie by (``host:port``)."""
        return self.advertised_address or f"{self.bookie_host}:{self.bookie_port}"

    @property
    def gc_enabled(self) -> bool:
        return self.gc_wait_time_ms > 0

    @property
    def minor_compaction_enabled(self) -> bool:
        return self.minor_compaction_threshold > 0 and self.minor_compaction_interval_s > 0

    @property
    def major_compaction_enabled(self) -> bool:
        return self.major_compaction_threshold > 0 and self.major_compaction_interval_s > 0

    @property
    def journal_dir(self) -> str:
        return self.journal_directory or f"{self.data_dir}/journal"

    @property
    def ledger_dir(self) -> str:
        return self.ledger_directory or f"{self.data_dir}/ledgers"
