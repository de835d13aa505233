"""Settings of managed ledgers (Pulsar's managedLedger* broker settings)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from stripemq.config import setting
from stripemq.errors import ConfigError
from stripemq.managed_ledger.cursor.config import CursorConfig


@dataclass
class ManagedLedgerConfig:
    """How a broker keeps its topics; built from ``BrokerConfig.managed_ledger_config``."""

    ensemble_size: int = setting(2, "Bookies each topic ledger is striped over.")
    write_quorum_size: int = setting(2, "Bookies each entry is written to.")
    ack_quorum_size: int = setting(
        2, "Bookies that must confirm an entry before it is acknowledged."
    )
    max_entries_per_ledger: int = setting(
        50_000,
        "The current ledger rolls over after this many entries (once older than the minimum "
        "rollover time).",
    )
    max_size_per_ledger_bytes: int = setting(
        2048 * 1024 * 1024,
        "... or after this many bytes (once older than the minimum rollover time).",
    )
    min_rollover_time_s: float = setting(
        600.0, "A ledger never rolls over for its size or entry count before it is this old."
    )
    max_rollover_time_s: float = setting(
        14_400.0, "A ledger rolls over when it is this old, whatever its size."
    )
    retention_time_s: float = setting(
        0.0, "Ledgers every cursor has passed are kept while younger than this (-1: for ever)."
    )
    retention_size_bytes: int = setting(
        0, "... or while the topic is under this size (-1: for ever)."
    )
    cache_size_bytes: int = setting(
        64 * 1024 * 1024,
        "Bytes of recent entries kept in memory for tailing reads, for all the topics of a "
        "broker together.",
    )
    max_entry_bytes: int = setting(
        5 * 1024 * 1024 + 9 * 1024,
        "Largest entry accepted: a message of the protocol's 5 MiB with its metadata (a chunk "
        "of a larger message is that big), leaving 1 KiB of the frame's 10 KiB of padding for "
        "the command that delivers it.",
    )
    password: bytes = setting(
        b"", "Password of the topic's ledgers (Pulsar uses an empty one with CRC32C digests)."
    )
    cursor: CursorConfig = field(
        default_factory=CursorConfig,
        metadata={"doc": "Persistence of the topic's cursors (subscriptions)."},
    )

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


@dataclass(frozen=True)
class LedgerPersistence:
    """How one managed ledger writes, over its configuration (Pulsar's persistence
    policies): the quorums of the ledgers it creates from now on, and how often its
    cursors persist their positions (0 ms: as soon as one moves)."""

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    mark_delete_interval_ms: int

    def validate(self) -> None:
        if not 1 <= self.ack_quorum_size <= self.write_quorum_size <= self.ensemble_size:
            raise ConfigError("quorums need 1 <= ack <= write <= ensemble")
        if self.mark_delete_interval_ms < 0:
            raise ConfigError("mark_delete_interval_ms must be >= 0")

    @classmethod
    def of(cls, config: ManagedLedgerConfig) -> LedgerPersistence:
        """What ``config`` itself says."""
        return cls(
            config.ensemble_size,
            config.write_quorum_size,
            config.ack_quorum_size,
            config.cursor.snapshot_interval_ms,
        )

    def cursor_config(self, config: CursorConfig) -> CursorConfig:
        """``config`` with this persistence's snapshot interval (the cursor ledgers' own
        quorums stay the broker's, as Pulsar keeps them)."""
        return replace(config, snapshot_interval_ms=self.mark_delete_interval_ms)
