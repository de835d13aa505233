"""Settings of managed ledgers (Pulsar's managedLedger* broker settings)."""

from __future__ import annotations

from dataclasses import dataclass, field

from stripemq.errors import ConfigError
from stripemq.managed_ledger.cursor.config import CursorConfig


@dataclass
class ManagedLedgerConfig:
    # Replication of each topic ledger (managedLedgerDefault{Ensemble,WriteQuorum,AckQuorum}).
    ensemble_size: int = 2
    write_quorum_size: int = 2
    ack_quorum_size: int = 2
    # The current ledger rolls over after this many entries or bytes
    # (managedLedgerMaxEntriesPerLedger, managedLedgerMaxSizePerLedgerMbytes) ...
    max_entries_per_ledger: int = 50_000
    max_size_per_ledger_bytes: int = 2048 * 1024 * 1024
    # ... or when older than the maximum, but never before the minimum
    # (managedLedger{Min,Max}LedgerRolloverTimeMinutes).
    min_rollover_time_s: float = 600.0
    max_rollover_time_s: float = 14_400.0
    # Ledgers every cursor has passed are kept while younger than this or while the topic
    # is under this size; -1 keeps them for ever (defaultRetention{TimeInMinutes,SizeInMB}).
    retention_time_s: float = 0.0
    retention_size_bytes: int = 0
    # Bytes of recent entries kept in memory for tailing reads, for all the topics of a
    # broker together (managedLedgerCacheSizeMB).
    cache_size_bytes: int = 64 * 1024 * 1024
    # Largest entry accepted (the protocol's 5 MiB frame, less headers).
    max_entry_bytes: int = 5 * 1024 * 1024
    # Password of the topic's ledgers (Pulsar uses an empty one with CRC32C digests).
    password: bytes = b""
    cursor: CursorConfig = field(default_factory=CursorConfig)

    def validate(self) -> None:
        if not 1 <= self.ack_quorum_size <= self.write_quorum_size <= self.ensemble_size:
            raise ConfigError("managed ledger quorums need 1 <= ack <= write <= ensemble")
        if self.max_entries_per_ledger < 1 or self.max_size_per_ledger_bytes < 1:
            raise ConfigError("max_entries_per_ledger and max_size_per_ledger_bytes >= 1")
        if not 0 <= self.min_rollover_time_s <= self.max_rollover_time_s:
            raise ConfigError("need 0 <= min_rollover_time_s <= max_rollover_time_s")
        if self.retention_time_s < -1 or self.retention_size_bytes < -1:
            raise ConfigError("retention_time_s and retention_size_bytes are >= -1")
        if self.cache_size_bytes < 0 or self.max_entry_bytes < 1:
            raise ConfigError("cache_size_bytes >= 0 and max_entry_bytes >= 1")
        self.cursor.validate()
