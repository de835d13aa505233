"""Settings of cursor persistence (Pulsar's managedLedgerCursor* broker settings)."""

from __future__ import annotations

from dataclasses import dataclass

from stripemq.config import setting
from stripemq.errors import ConfigError


@dataclass
class CursorConfig:
    """How cursors persist; built from ``BrokerConfig`` with the managed ledger's config."""

    ensemble_size: int = setting(2, "Bookies each cursor ledger is striped over.")
    write_quorum_size: int = setting(2, "Bookies each snapshot entry is written to.")
    ack_quorum_size: int = setting(2, "Bookies that must confirm a snapshot entry.")
    snapshot_interval_ms: int = setting(
        1000, "A snapshot at most this often (1000 / managedLedgerDefaultMarkDeleteRateLimit) ..."
    )
    snapshot_max_unpersisted_acks: int = setting(
        10_000,
        "... unless this many acks are not yet persisted: then at once (bounds the redelivery "
        "after a crash).",
    )
    snapshot_chunk_bytes: int = setting(1 << 20, "Largest chunk entry of a snapshot.")
    max_entries_per_ledger: int = setting(
        50_000, "The cursor ledger rolls over after this many entries ..."
    )
    rollover_time_s: int = setting(14_400, "... or when it is this old.")
    max_ranges_in_metadata: int = setting(
        1000,
        "When the cursor ledger cannot be written, this many hole ranges go to the metadata "
        "store instead; holes beyond them would be redelivered after a crash, never lost.",
    )

    def validate(self) -> None:
        if not 1 <= self.ack_quorum_size <= self.write_quorum_size <= self.ensemble_size:
            raise ConfigError("cursor quorums need 1 <= ack <= write <= ensemble")
        if self.snapshot_interval_ms < 0 or self.snapshot_max_unpersisted_acks < 1:
            raise ConfigError("snapshot_interval_ms >= 0 and snapshot_max_unpersisted_acks >= 1")
        if self.snapshot_chunk_bytes < 64 * 1024 or self.max_entries_per_ledger < 2:
            raise ConfigError("snapshot_chunk_bytes >= 65536 and max_entries_per_ledger >= 2")
        if self.max_ranges_in_metadata < 0 or self.rollover_time_s <= 0:
            raise ConfigError("max_ranges_in_metadata >= 0 and rollover_time_s > 0")
