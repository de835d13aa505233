"""Settings of the ledger client (BookKeeper's ClientConfiguration, the parts stripemq has)."""

from __future__ import annotations

from dataclasses import dataclass

from stripemq.config import setting
from stripemq.errors import ConfigError


@dataclass
class ClientConfig:
    """Deadlines and limits of the ledger client (``BookKeeper(store, config)``)."""

    add_entry_timeout_s: float = setting(
        5.0,
        "An add a bookie has not answered in this long counts as that bookie failing, which "
        "starts an ensemble change.",
        pulsar_name="addEntryTimeoutSec",
    )
    read_entry_timeout_s: float = setting(
        5.0, "Deadline of one read on one bookie.", pulsar_name="readEntryTimeoutSec"
    )
    speculative_read_timeout_ms: int = setting(
        2000,
        "A read not answered in this long is also sent to the next replica (0 disables).",
        pulsar_name="speculativeReadTimeout",
    )
    explicit_lac_interval_ms: int = setting(
        500,
        "An idle writer sends its LAC explicitly after this long, so tailing readers see the "
        "last entries (0 disables).",
        pulsar_name="explictLacInterval",
    )
    use_v2_wire_protocol: bool = setting(
        True,
        "Send adds over each bookie's binary add protocol (stripemq's counterpart of "
        "BookKeeper's v2 wire protocol) where the bookie offers it; false keeps them on the "
        "gRPC add stream. Reads and the other calls are gRPC either way.",
        pulsar_name="useV2WireProtocol",
    )
    max_concurrent_reads: int = setting(64, "Reads in flight per read_entries call.")
    max_ensemble_changes: int = setting(
        32, "Ensemble changes one handle may make before giving up with NotEnoughBookies."
    )

    def validate(self) -> None:
        if self.add_entry_timeout_s <= 0 or self.read_entry_timeout_s <= 0:
            raise ConfigError("add_entry_timeout_s and read_entry_timeout_s must be > 0")
        if self.speculative_read_timeout_ms < 0 or self.explicit_lac_interval_ms < 0:
            raise ConfigError("speculative_read_timeout_ms and explicit_lac_interval_ms >= 0")
        if self.max_concurrent_reads < 1 or self.max_ensemble_changes < 1:
            raise ConfigError("max_concurrent_reads and max_ensemble_changes must be >= 1")
