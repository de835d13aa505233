"""Settings of the ledger client (BookKeeper's ClientConfiguration, the parts stripemq has)."""

from __future__ import annotations

from dataclasses import dataclass

from stripemq.errors import ConfigError


@dataclass
class ClientConfig:
    # An add a bookie has not answered in this long counts as that bookie failing, which
    # starts an ensemble change (BookKeeper: addEntryTimeoutSec).
    add_entry_timeout_s: float = 5.0
    # Deadline of one read on one bookie (readEntryTimeoutSec).
    read_entry_timeout_s: float = 5.0
    # A read not answered in this long is also sent to the next replica (0 disables).
    speculative_read_timeout_ms: int = 2000
    # An idle writer sends its LAC explicitly after this long, so tailing readers see the
    # last entries (explictLacInterval; 0 disables).
    explicit_lac_interval_ms: int = 500
    # Reads in flight per read_entries call.
    max_concurrent_reads: int = 64
    # Ensemble changes one handle may make before giving up with NotEnoughBookies.
    max_ensemble_changes: int = 32

    def validate(self) -> None:
        if self.add_entry_timeout_s <= 0 or self.read_entry_timeout_s <= 0:
            raise ConfigError("add_entry_timeout_s and read_entry_timeout_s must be > 0")
        if self.speculative_read_timeout_ms < 0 or self.explicit_lac_interval_ms < 0:
            raise ConfigError("speculative_read_timeout_ms and explicit_lac_interval_ms >= 0")
        if self.max_concurrent_reads < 1 or self.max_ensemble_changes < 1:
            raise ConfigError("max_concurrent_reads and max_ensemble_changes must be >= 1")
