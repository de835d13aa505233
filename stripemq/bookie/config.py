"""Bookie settings. Names follow BookKeeper's ``bk_server.conf`` in snake_case; each setting's
help is in its ``setting(...)`` (``stripemq bookie --print-config``, the README's tables)."""

from __future__ import annotations

from dataclasses import dataclass

from stripemq.config import setting
from stripemq.errors import ConfigError

MiB = 1024 * 1024


@dataclass
class BookieConfig:
    """Everything a bookie process needs; loaded with ``stripemq.config.load_config``."""

    metadata_service_uri: str = setting(
        "memory://",
        "Metadata store: zk://host:port[,host:port]/chroot for a cluster (ZooKeeper), "
        "local:///dir for an embedded one, memory:// for one in this process only.",
        pulsar_name="metadataServiceUri",
        option="--metadata",
    )
    bookie_host: str = setting(
        "127.0.0.1", "Address the bookie listens on (gRPC and metrics).", option="--host"
    )
    bookie_port: int = setting(3181, "gRPC port.", pulsar_name="bookiePort", option="--port")
    binary_add_port: int = setting(
        0,
        "Port of the binary add protocol, the lean write path brokers use instead of the gRPC "
        "add stream (see useV2WireProtocol). 0 picks a free port; clients learn it from "
        "GetInfo. -1 turns it off: adds then go over gRPC only.",
    )
    advertised_address: str | None = setting(
        None,
        "Address other processes use to reach this bookie, its id in the metadata: host:port, "
        "or a host alone (BookKeeper's form), which gets :bookie_port; defaults to "
        "bookie_host:bookie_port.",
        pulsar_name="advertisedAddress",
    )
    rack: str | None = setting(
        None, "Rack label used by rack-aware placement (unset: the default rack).", option="--rack"
    )
    zk_timeout_ms: int = setting(
        10_000,
        "Metadata session timeout: a bookie that dies stays registered in /ledgers/available "
        "this long.",
        pulsar_name="zkTimeout",
    )
    autorecovery_enabled: bool = setting(
        False,
        "Also run auto-recovery (auditor candidate and replication worker) in this process, "
        "with the settings of the file autorecovery_conf.",
        pulsar_name="autoRecoveryDaemonEnabled",
    )
    autorecovery_conf: str | None = setting(
        None,
        "TOML file of auto-recovery settings (those of `stripemq autorecovery`) for "
        "autorecovery_enabled; unset: their defaults.",
    )
    enable_statistics: bool = setting(
        True, "Serve Prometheus metrics on /metrics.", pulsar_name="enableStatistics"
    )
    stats_http_port: int = setting(
        8000,
        "Port of the bookie's HTTP endpoint: Prometheus /metrics and the probes /heartbeat "
        "and /api/v1/bookie/is_ready (0 picks a free port). A standalone opens it only when "
        "set: otherwise they are on its web port.",
        pulsar_name="prometheusStatsHttpPort",
    )

    data_dir: str = setting(
        "data/bookie",
        "Storage directory; the journal and ledger directories default to subdirectories.",
        option="--data-dir",
    )
    journal_directory: str | None = setting(
        None, "Journal directory; defaults to data_dir/journal.", pulsar_name="journalDirectory"
    )
    ledger_directory: str | None = setting(
        None,
        "Entry log and index directory; defaults to data_dir/ledgers.",
        pulsar_name="ledgerDirectories",
    )

    # Journal: one fsync covers every record queued while the previous one was on the disk
    # (and, unless flushing when the queue empties, within the group wait or until the
    # buffered bytes pass the threshold).
    journal_max_group_wait_ms: float = setting(
        2.0,
        "How long a journal group may wait for company before its fsync.",
        pulsar_name="journalMaxGroupWaitMSec",
    )
    journal_flush_when_queue_empty: bool = setting(
        True,
        "Sync a journal group as soon as nothing more is queued, without waiting "
        "`journal_max_group_wait_ms`: an idle bookie acknowledges after one fsync, and groups "
        "still grow under load, while the previous sync is on the disk. BookKeeper's "
        "default is `false`.",
        pulsar_name="journalFlushWhenQueueEmpty",
    )
    journal_buffered_writes_threshold: int = setting(
        512 * 1024,
        "Bytes that make a journal group fsync at once, without waiting.",
        pulsar_name="journalBufferedWritesThreshold",
    )
    journal_sync_data: bool = setting(
        True,
        "`false` skips fsync: faster, and **acknowledged entries can be lost** on power failure.",
        pulsar_name="journalSyncData",
    )
    journal_kernel_aio_sync: bool = setting(
        True,
        "Sync the journal with Linux's asynchronous fdatasync (native AIO, `IOCB_CMD_FDSYNC`): "
        "the kernel syncs each group on its own worker and wakes the event loop through an "
        "eventfd, with no thread hand-offs. The durability is the same as `fdatasync`. Where "
        "the kernel or the file system refuses it, or when `false`, the journal thread "
        "syncs.",
    )
    journal_max_size_mb: int = setting(
        2048, "Journal file rotation size, in MiB.", pulsar_name="journalMaxSizeMB"
    )

    entry_log_size_limit: int = setting(
        1024 * MiB,
        "Entry logs (interleaved, all ledgers) rotate at this size, in bytes (1 GiB).",
        pulsar_name="logSizeLimit",
    )
    write_cache_max_size_mb: int = setting(
        64,
        "Memtable size, in MiB, that triggers a flush to the entry log.",
        pulsar_name="dbStorage_writeCacheMaxSizeMb",
    )
    flush_interval_ms: int = setting(
        10_000,
        "The memtable is also flushed (and a checkpoint taken) this often.",
        pulsar_name="flushInterval",
    )
    read_cache_max_size_mb: int = setting(
        16,
        "Cache of entries read from entry logs, in MiB (entries over a quarter of it are not "
        "cached).",
        pulsar_name="dbStorage_readAheadCacheMaxSizeMb",
    )
    max_entry_size: int = setting(
        5 * MiB + 10 * 1024,
        "Largest entry accepted, in bytes; larger ones are refused. 5 MiB and 10 KiB: a "
        "broker's largest entry, a message of its maxMessageSize with its metadata (Pulsar "
        "sets BookKeeper's nettyMaxFrameSizeBytes to 5253120 alike).",
    )

    disk_usage_threshold: float = setting(
        0.95,
        "Disk usage fraction above which the bookie turns read-only.",
        pulsar_name="diskUsageThreshold",
    )
    disk_usage_lwm_threshold: float = setting(
        0.90,
        "Disk usage fraction below which a read-only bookie is writable again.",
        pulsar_name="diskUsageLwmThreshold",
    )
    disk_check_interval_ms: int = setting(
        10_000, "Disk usage is checked this often.", pulsar_name="diskCheckInterval"
    )

    max_long_poll_timeout_ms: int = setting(
        60_000, "Longest long-poll (wait for the LAC to pass an entry) a reader may ask for."
    )

    # Garbage collection and compaction; compaction is considered at each GC round.
    gc_wait_time_ms: int = setting(
        900_000,
        "Interval of garbage-collection rounds, which drop the ledgers deleted from metadata "
        "(0 or less turns GC off).",
        pulsar_name="gcWaitTime",
    )
    minor_compaction_threshold: float = setting(
        0.2,
        "Minor compaction rewrites entry logs whose live fraction is below this (0 turns it off).",
        pulsar_name="minorCompactionThreshold",
    )
    minor_compaction_interval_s: float = setting(
        3600.0,
        "Minor compaction runs at most this often (0 turns it off).",
        pulsar_name="minorCompactionInterval",
    )
    major_compaction_threshold: float = setting(
        0.8,
        "Major compaction rewrites entry logs whose live fraction is below this (0 turns it "
        "off); not below minor_compaction_threshold.",
        pulsar_name="majorCompactionThreshold",
    )
    major_compaction_interval_s: float = setting(
        86400.0,
        "Major compaction runs at most this often (0 turns it off).",
        pulsar_name="majorCompactionInterval",
    )

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
        if not -1 <= self.binary_add_port <= 65535:
            raise ConfigError(f"binary_add_port out of range: {self.binary_add_port}")

    @property
    def bookie_id(self) -> str:
        """The identity other processes know this bookie by (``host:port``)."""
        if not self.advertised_address:
            return f"{self.bookie_host}:{self.bookie_port}"
        if ":" in self.advertised_address:
            return self.advertised_address
        return f"{self.advertised_address}:{self.bookie_port}"

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
