"""Broker settings. Names follow Pulsar's ``broker.conf`` in snake_case."""

from __future__ import annotations

from dataclasses import dataclass

from stripemq.broker.delayed_delivery import DelayedDeliveryConfig
from stripemq.errors import ConfigError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.cursor.config import CursorConfig

MiB = 1024 * 1024


@dataclass
class BrokerConfig:
    """Everything a broker process needs; loaded with ``stripemq.config.load_config``."""

    metadata_service_uri: str = "memory://"
    bind_address: str = "127.0.0.1"
    broker_service_port: int = 6650
    web_service_port: int = 8080
    # Host clients are told to connect to (lookups); defaults to bind_address.
    advertised_address: str | None = None
    zk_session_timeout_ms: int = 30_000
    max_message_size: int = 5 * MiB
    # A connection with this many sends stored but not yet receipted is not read until
    # half of them are (maxPendingPublishRequestsPerConnection): memory stays bounded.
    max_pending_publish_requests_per_connection: int = 1000
    # Acknowledge a resent message (producer name + old sequence id) without storing it.
    broker_deduplication_enabled: bool = False
    # Topics that do not exist are created when a client uses them; a partitioned type
    # makes them with default_num_partitions (allowAutoTopicCreation, ...Type).
    allow_auto_topic_creation: bool = True
    allow_auto_topic_creation_type: str = "non-partitioned"
    default_num_partitions: int = 1
    # A quiet client is PINGed this often, and dropped after twice as long in silence.
    keep_alive_interval_seconds: float = 30.0
    # Shared and Key_Shared subscriptions hold a message back until its deliver_at_time;
    # due messages are released at most once per tick (a message may come up to a tick
    # late, never early).
    delayed_delivery_enabled: bool = True
    delayed_delivery_tick_time_millis: int = 1000

    # Topic storage (managedLedger* settings).
    managed_ledger_default_ensemble_size: int = 2
    managed_ledger_default_write_quorum: int = 2
    managed_ledger_default_ack_quorum: int = 2
    managed_ledger_max_entries_per_ledger: int = 50_000
    managed_ledger_max_size_per_ledger_mbytes: int = 2048
    managed_ledger_min_ledger_rollover_time_minutes: float = 10
    managed_ledger_max_ledger_rollover_time_minutes: float = 240
    managed_ledger_cache_size_mb: int = 64
    # Retention of ledgers every subscription has passed (-1: for ever).
    default_retention_time_in_minutes: float = 0
    default_retention_size_in_mb: int = 0
    # Cursors.
    managed_ledger_default_mark_delete_rate_limit: float = 1.0  # snapshots per second
    managed_ledger_cursor_max_entries_per_ledger: int = 50_000
    managed_ledger_max_unacked_ranges_to_persist_in_metadata_store: int = 1000

    def validate(self) -> None:
        if not 0 <= self.broker_service_port < 65536:
            raise ConfigError(f"broker_service_port {self.broker_service_port} out of range")
        if self.max_message_size < 1024:
            raise ConfigError("max_message_size must be at least 1024")
        if self.max_pending_publish_requests_per_connection < 1:
            raise ConfigError("max_pending_publish_requests_per_connection must be >= 1")
        if self.allow_auto_topic_creation_type not in ("non-partitioned", "partitioned"):
            raise ConfigError("allow_auto_topic_creation_type: non-partitioned or partitioned")
        if self.default_num_partitions < 1:
            raise ConfigError("default_num_partitions must be >= 1")
        if self.managed_ledger_default_mark_delete_rate_limit <= 0:
            raise ConfigError("managed_ledger_default_mark_delete_rate_limit must be > 0")
        if self.delayed_delivery_tick_time_millis < 0:
            raise ConfigError("delayed_delivery_tick_time_millis must be >= 0")
        self.managed_ledger_config().validate()

    def delayed_delivery_config(self) -> DelayedDeliveryConfig:
        return DelayedDeliveryConfig(
            enabled=self.delayed_delivery_enabled,
            tick_ms=self.delayed_delivery_tick_time_millis,
        )

    def managed_ledger_config(self) -> ManagedLedgerConfig:
        retention_time = self.default_retention_time_in_minutes
        retention_size = self.default_retention_size_in_mb
        return ManagedLedgerConfig(
            ensemble_size=self.managed_ledger_default_ensemble_size,
            write_quorum_size=self.managed_ledger_default_write_quorum,
            ack_quorum_size=self.managed_ledger_default_ack_quorum,
            max_entries_per_ledger=self.managed_ledger_max_entries_per_ledger,
            max_size_per_ledger_bytes=self.managed_ledger_max_size_per_ledger_mbytes * MiB,
            min_rollover_time_s=self.managed_ledger_min_ledger_rollover_time_minutes * 60,
            max_rollover_time_s=self.managed_ledger_max_ledger_rollover_time_minutes * 60,
            retention_time_s=retention_time * 60 if retention_time >= 0 else -1,
            retention_size_bytes=retention_size * MiB if retention_size >= 0 else -1,
            cache_size_bytes=self.managed_ledger_cache_size_mb * MiB,
            max_entry_bytes=self.max_message_size,
            cursor=CursorConfig(
                ensemble_size=self.managed_ledger_default_ensemble_size,
                write_quorum_size=self.managed_ledger_default_write_quorum,
                ack_quorum_size=self.managed_ledger_default_ack_quorum,
                snapshot_interval_ms=int(1000 / self.managed_ledger_default_mark_delete_rate_limit),
                max_entries_per_ledger=self.managed_ledger_cursor_max_entries_per_ledger,
                max_ranges_in_metadata=(
                    self.managed_ledger_max_unacked_ranges_to_persist_in_metadata_store
                ),
            ),
        )
