"""Settings of cursor persistence (Pulsar's managedLedgerCursor* broker settings)."""

from __future__ import annotations

from dataclasses import dataclass

from stripemq.errors import ConfigError


@dataclass
class CursorConfig:
    # Replication of each cursor ledger (managedLedgerDefault{Ensemble,WriteQuorum,AckQuorum}).
    ensemble_size: int = 2
    write_quorum_size: int = 2
    ack_quorum_size: int = 2
    # A snapshot at most this often (managedLedgerDefaultMarkDeleteRateLimit = 1/s) ...
    snapshot_interval_ms: int = 1000
    # ... unless this many acks are not yet persisted: then at once (bounds the redelivery
    # after a crash).
    snapshot_max_unpersisted_acks: int = 10_000
    # Largest chunk entry of a snapshot.
    snapshot_chunk_bytes: int = 1 << 20
    # The cursor ledger rolls over after this many entries or this long
    # (managedLedgerCursorMaxEntriesPerLedger, managedLedgerCursorRolloverTimeInSeconds).
    max_entries_per_ledger: int = 50_000
    rollover_time_s: int = 14_400
    # When the cursor ledger cannot be written, this many hole ranges go to the metadata
    # store instead (managedLedgerMaxUnackedRangesToPersistInMetadataStore); holes beyond
    # them would be redelivered after a crash, never lost.
    max_ranges_in_metadata: int = 1000

    def validate(self) -> None:
        if not 1 <= self.ack_quorum_size <= self.write_quorum_size <= self.ensemble_size:
            raise ConfigError("cursor quorums need 1 <= ack <= write <= ensemble")
        if self.snapshot_interval_ms < 0 or self.snapshot_max_unpersisted_acks < 1:
            raise ConfigError("snapshot_interval_ms >= 0 and snapshot_max_unpersisted_acks >= 1")
        if self.snapshot_chunk_bytes < 64 * 1024 or self.max_entries_per_ledger < 2:
            raise ConfigError("snapshot_chunk_bytes >= 65536 and max_entries_per_ledger >= 2")
        if self.max_ranges_in_metadata < 0 or self.rollover_time_s <= 0:
            raise ConfigError("max_ranges_in_metadata >= 0 and rollover_time_s > 0")
