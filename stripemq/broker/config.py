"""Broker settings. Names follow Pulsar's ``broker.conf`` in snake_case; each setting's help is
in its ``setting(...)`` (``stripemq broker --print-config``, the README's tables)."""

from __future__ import annotations

from dataclasses import dataclass, field

from stripemq.bookie.client.config import ClientConfig
from stripemq.broker.delayed_delivery import DEFAULT_TICK_MS
from stripemq.broker.policies import (
    BacklogQuotaPolicy,
    DelayedDeliveryPolicies,
    InactiveTopicPolicies,
    InvalidPolicyError,
    PersistencePolicies,
    QuorumBounds,
    parse_delete_mode,
    parse_subscription_types,
)
from stripemq.broker.schema.types import CompatibilityStrategy
from stripemq.config import setting
from stripemq.errors import ConfigError
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.cursor.config import CursorConfig
from stripemq.proto.frames import FRAME_PADDING
from stripemq.subscription_types import SUBSCRIPTION_TYPES
from stripemq.topic_limits import Limit

MiB = 1024 * 1024
# Bytes left, in a frame of maxMessageSize + FRAME_PADDING, for the MESSAGE command around
# an entry (its message id, redelivery count, ack set).
DELIVERY_ROOM = 1024
# Pulsar's backlog quota retention policies, as the setting names them.
BACKLOG_QUOTA_POLICIES = tuple(policy.value for policy in BacklogQuotaPolicy)
# The strategies a broker may default to (UNDEFINED is a namespace's "not set").
SCHEMA_STRATEGIES = tuple(
    s.value for s in CompatibilityStrategy if s is not CompatibilityStrategy.UNDEFINED
)


@dataclass(frozen=True)
class DelayedDeliveryConfig:
    """Whether subscriptions delay messages, and how often due ones are released; built from
    ``BrokerConfig`` (``delayed_delivery_config``) for ``stripemq.broker.delayed_delivery``."""

    enabled: bool = setting(
        True,
        "Shared and Key_Shared subscriptions hold a message back until its deliver_at_time.",
        pulsar_name="delayedDeliveryEnabled",
    )
    tick_ms: int = setting(
        DEFAULT_TICK_MS,
        "Due messages are released at most once per tick (late by up to a tick, never early).",
        pulsar_name="delayedDeliveryTickTimeMillis",
    )
    max_delay_ms: int = setting(
        0,
        "A message asking to be delivered more than this long after it was published is "
        "refused (0: any delay).",
        pulsar_name="delayedDeliveryMaxDelayInMillis",
    )

    def as_policies(self) -> DelayedDeliveryPolicies:
        """These settings as a namespace's policies would set them."""
        return DelayedDeliveryPolicies(self.tick_ms, self.enabled, self.max_delay_ms)


@dataclass
class BrokerConfig:
    """Everything a broker process needs; loaded with ``stripemq.config.load_config``."""

    metadata_service_uri: str = setting(
        "memory://",
        "Metadata store: zk://host:port[,host:port]/chroot for a cluster (ZooKeeper), "
        "local:///dir for an embedded one, memory:// for one in this process only.",
        pulsar_name="metadataStoreUrl",
        option="--metadata",
    )
    bind_address: str = setting(
        "127.0.0.1", "Address the broker listens on.", pulsar_name="bindAddress", option="--host"
    )
    broker_service_port: int = setting(
        6650,
        "Port of the Pulsar binary protocol (0 picks a free port).",
        pulsar_name="brokerServicePort",
        option="--port",
    )
    web_service_port: int = setting(
        8080,
        "Port of the HTTP service: the admin REST API, lookups and /metrics (0 picks a free port).",
        pulsar_name="webServicePort",
        option="--web-port",
    )
    broker_service_port_tls: int | None = setting(
        None,
        "Port of the Pulsar binary protocol over TLS (pulsar+ssl://; Pulsar's 6651; 0 picks a "
        "free port); unset: no TLS listener. Needs tls_certificate_file_path and "
        "tls_key_file_path.",
        pulsar_name="brokerServicePortTls",
    )
    web_service_port_tls: int | None = setting(
        None,
        "Port of the HTTP service over TLS (https://; Pulsar's 8443; 0 picks a free port); "
        "unset: no HTTPS listener. Needs tls_certificate_file_path and tls_key_file_path.",
        pulsar_name="webServicePortTls",
    )
    cluster_name: str = setting(
        "standalone",
        "Name of the cluster this broker belongs to (made by initialize-cluster-metadata "
        "or at first start).",
        pulsar_name="clusterName",
        option="--cluster",
    )
    advertised_address: str | None = setting(
        None,
        "Host clients are told to connect to (lookups); defaults to bind_address.",
        pulsar_name="advertisedAddress",
        option="--advertised-address",
    )
    zk_session_timeout_ms: int = setting(
        30_000,
        "Metadata session timeout: a killed broker's bundles are free for other brokers after "
        "this long.",
        pulsar_name="zkSessionTimeoutMillis",
    )
    max_message_size: int = setting(
        5 * MiB,
        "Largest message (frame) accepted, in bytes (5 MiB); larger ones are refused.",
        pulsar_name="maxMessageSize",
    )
    max_pending_publish_requests_per_connection: int = setting(
        1000,
        "A connection with this many sends stored but not yet receipted is not read until half "
        "of them are: a producer that never waits cannot grow the broker's memory.",
        pulsar_name="maxPendingPublishRequestsPerConnection",
    )
    broker_deduplication_enabled: bool = setting(
        False,
        "Acknowledge a resent message (producer name + old sequence id) without storing it twice.",
        pulsar_name="brokerDeduplicationEnabled",
    )
    schema_compatibility_strategy: str = setting(
        "FULL",
        "How a topic's new schema must agree with its earlier ones, where the namespace sets "
        "no schemaCompatibilityStrategy: " + ", ".join(SCHEMA_STRATEGIES) + ".",
        pulsar_name="schemaCompatibilityStrategy",
    )
    is_allow_auto_update_schema_enabled: bool = setting(
        True,
        "A producer's new schema that passes the compatibility check is registered; off, only "
        "schemas already registered are accepted (a namespace's isAllowAutoUpdateSchema wins).",
        pulsar_name="isAllowAutoUpdateSchemaEnabled",
    )
    is_schema_validation_enforced: bool = setting(
        False,
        "Refuse producers without a schema on topics that have one (as does a namespace's "
        "schemaValidationEnforced).",
        pulsar_name="isSchemaValidationEnforced",
    )
    allow_auto_topic_creation: bool = setting(
        True,
        "Topics that do not exist are created when a client uses them.",
        pulsar_name="allowAutoTopicCreation",
    )
    allow_auto_topic_creation_type: str = setting(
        "non-partitioned",
        "What auto-creation makes: non-partitioned, or partitioned (with "
        "default_num_partitions partitions).",
        pulsar_name="allowAutoTopicCreationType",
    )
    default_num_partitions: int = setting(
        1,
        "Partitions of an auto-created partitioned topic.",
        pulsar_name="defaultNumPartitions",
    )
    expose_topic_level_metrics_in_prometheus: bool = setting(
        True,
        "/metrics shows each topic and subscription (labels topic, subscription); false "
        "aggregates per namespace instead (fewer series on brokers with many topics).",
        pulsar_name="exposeTopicLevelMetricsInPrometheus",
    )
    keep_alive_interval_seconds: float = setting(
        30.0,
        "A quiet client is PINGed this often, and dropped after twice as long in silence.",
        pulsar_name="keepAliveIntervalSeconds",
    )
    delayed_delivery_enabled: bool = setting(
        True,
        "Shared and Key_Shared subscriptions hold a message back until its deliver_at_time "
        "(Exclusive and Failover ignore it).",
        pulsar_name="delayedDeliveryEnabled",
    )
    delayed_delivery_tick_time_millis: int = setting(
        DEFAULT_TICK_MS,
        "Due delayed messages are released at most once per tick: a message may come up to a "
        "tick late, never early.",
        pulsar_name="delayedDeliveryTickTimeMillis",
    )
    delayed_delivery_max_delay_in_millis: int = setting(
        0,
        "A producer asking for a message to be delivered more than this long after it was "
        "published is refused, NotAllowed (0: any delay).",
        pulsar_name="delayedDeliveryMaxDelayInMillis",
    )

    # Topic storage (managedLedger* settings).
    managed_ledger_default_ensemble_size: int = setting(
        2,
        "Bookies each topic and cursor ledger is striped over (E; standalone: 1).",
        pulsar_name="managedLedgerDefaultEnsembleSize",
    )
    managed_ledger_default_write_quorum: int = setting(
        2,
        "Bookies each entry is written to (Qw; standalone: 1).",
        pulsar_name="managedLedgerDefaultWriteQuorum",
    )
    managed_ledger_default_ack_quorum: int = setting(
        2,
        "Bookies that must confirm an entry before it is acknowledged (Qa; standalone: 1).",
        pulsar_name="managedLedgerDefaultAckQuorum",
    )
    managed_ledger_max_ensemble_size: int = setting(
        5,
        "The largest ensemble a namespace's or topic's persistence policies may ask for.",
        pulsar_name="managedLedgerMaxEnsembleSize",
    )
    managed_ledger_max_write_quorum: int = setting(
        5,
        "The largest write quorum persistence policies may ask for.",
        pulsar_name="managedLedgerMaxWriteQuorum",
    )
    managed_ledger_max_ack_quorum: int = setting(
        5,
        "The largest ack quorum persistence policies may ask for.",
        pulsar_name="managedLedgerMaxAckQuorum",
    )
    bookkeeper_use_v2_wire_protocol: bool = setting(
        True,
        "Write to bookies over their binary add protocol rather than the gRPC add stream "
        "(the ledger client's useV2WireProtocol).",
        pulsar_name="bookkeeperUseV2WireProtocol",
    )
    managed_ledger_max_entries_per_ledger: int = setting(
        50_000,
        "A topic's current ledger rolls over after this many entries (once it is older than "
        "the minimum rollover time).",
        pulsar_name="managedLedgerMaxEntriesPerLedger",
    )
    managed_ledger_max_size_per_ledger_mbytes: int = setting(
        2048,
        "... or after this many MiB (once it is older than the minimum rollover time).",
        pulsar_name="managedLedgerMaxSizePerLedgerMbytes",
    )
    managed_ledger_min_ledger_rollover_time_minutes: float = setting(
        10,
        "A ledger never rolls over for its size or entry count before it is this old.",
        pulsar_name="managedLedgerMinLedgerRolloverTimeMinutes",
    )
    managed_ledger_max_ledger_rollover_time_minutes: float = setting(
        240,
        "A ledger rolls over when it is this old, whatever its size.",
        pulsar_name="managedLedgerMaxLedgerRolloverTimeMinutes",
    )
    managed_ledger_cache_size_mb: int = setting(
        64,
        "Recent entries kept in memory for tailing readers, in MiB, for all the broker's "
        "topics together.",
        pulsar_name="managedLedgerCacheSizeMB",
    )
    default_retention_time_in_minutes: float = setting(
        0,
        "Ledgers every subscription has passed are kept this long (-1: for ever).",
        pulsar_name="defaultRetentionTimeInMinutes",
    )
    default_retention_size_in_mb: int = setting(
        0,
        "... or while the topic is under this many MiB (-1: for ever).",
        pulsar_name="defaultRetentionSizeInMB",
    )

    # Namespace policies: the broker's defaults, and how often they are checked.
    ttl_duration_default_in_seconds: int = setting(
        0,
        "Message TTL of namespaces that set none: unacknowledged messages older than this "
        "are expired (0: never).",
        pulsar_name="ttlDurationDefaultInSeconds",
    )
    subscription_expiration_time_minutes: int = setting(
        0,
        "Delete a subscription that has had no consumer for this many minutes (0: never); "
        "a namespace's subscriptionExpirationTime overrides it.",
        pulsar_name="subscriptionExpirationTimeMinutes",
    )
    subscription_expiry_check_interval_in_minutes: float = setting(
        5,
        "How often subscriptions are checked for expiry.",
        pulsar_name="subscriptionExpiryCheckIntervalInMinutes",
    )
    message_expiry_check_interval_in_minutes: float = setting(
        5,
        "How often subscriptions are moved past messages older than their TTL.",
        pulsar_name="messageExpiryCheckIntervalInMinutes",
    )
    backlog_quota_check_enabled: bool = setting(
        True,
        "Check backlog quotas periodically (producers are refused at creation either way).",
        pulsar_name="backlogQuotaCheckEnabled",
    )
    backlog_quota_check_interval_in_seconds: float = setting(
        60,
        "How often topics are checked against their backlog quotas (disconnecting producers "
        "or evicting backlog as the quota's policy says).",
        pulsar_name="backlogQuotaCheckIntervalInSeconds",
    )
    backlog_quota_default_limit_bytes: int = setting(
        -1,
        "Backlog quota by size of namespaces that set none, in bytes (-1: none).",
        pulsar_name="backlogQuotaDefaultLimitBytes",
    )
    backlog_quota_default_limit_second: int = setting(
        -1,
        "Backlog quota by age of the oldest unacknowledged message, of namespaces that set "
        "none, in seconds (-1: none).",
        pulsar_name="backlogQuotaDefaultLimitSecond",
    )
    backlog_quota_default_retention_policy: str = setting(
        "producer_request_hold",
        "What the default backlog quota does when exceeded: producer_request_hold, "
        "producer_exception or consumer_backlog_eviction.",
        pulsar_name="backlogQuotaDefaultRetentionPolicy",
    )
    broker_service_compaction_threshold_in_bytes: int = setting(
        0,
        "Compact a topic once the backlog of its compaction cursor passes this many bytes "
        "(0: never); a namespace's or topic's compactionThreshold overrides it.",
        pulsar_name="brokerServiceCompactionThresholdInBytes",
    )
    broker_service_compaction_monitor_interval_in_seconds: float = setting(
        60,
        "How often topics are checked against their compaction threshold.",
        pulsar_name="brokerServiceCompactionMonitorIntervalInSeconds",
    )
    # Count limits on a topic (0: none); a namespace's or topic's policy overrides each.
    max_producers_per_topic: int = setting(
        Limit.MAX_PRODUCERS.names.default,
        "Producers a topic takes at once (0: no limit); one more is refused ProducerBusy.",
        pulsar_name="maxProducersPerTopic",
    )
    max_consumers_per_topic: int = setting(
        Limit.MAX_CONSUMERS.names.default,
        "Consumers a topic takes at once, readers included (0: no limit); one more is "
        "refused ConsumerBusy.",
        pulsar_name="maxConsumersPerTopic",
    )
    max_consumers_per_subscription: int = setting(
        Limit.MAX_CONSUMERS_PER_SUBSCRIPTION.names.default,
        "Consumers a subscription takes at once (0: no limit); one more is refused ConsumerBusy.",
        pulsar_name="maxConsumersPerSubscription",
    )
    max_subscriptions_per_topic: int = setting(
        Limit.MAX_SUBSCRIPTIONS.names.default,
        "Subscriptions a topic has (0: no limit); a new one past it is refused NotAllowed.",
        pulsar_name="maxSubscriptionsPerTopic",
    )
    broker_delete_inactive_topics_enabled: bool = setting(
        False,
        "Delete topics that stay inactive: no producers or consumers and, by the mode, no "
        "subscriptions or no backlog (Pulsar's default is true; off here so that nothing "
        "produced is lost unasked).",
        pulsar_name="brokerDeleteInactiveTopicsEnabled",
    )
    broker_delete_inactive_topics_frequency_seconds: int = setting(
        60,
        "How often served topics are checked for inactivity.",
        pulsar_name="brokerDeleteInactiveTopicsFrequencySeconds",
    )
    broker_delete_inactive_topics_mode: str = setting(
        "delete_when_no_subscriptions",
        "delete_when_no_subscriptions, or delete_when_subscriptions_caught_up (subscriptions "
        "go with the topic once none has a backlog).",
        pulsar_name="brokerDeleteInactiveTopicsMode",
    )
    broker_delete_inactive_topics_max_inactive_duration_seconds: int = setting(
        0,
        "How long a topic stays inactive before it is deleted (0: the check frequency).",
        pulsar_name="brokerDeleteInactiveTopicsMaxInactiveDurationSeconds",
    )
    broker_delete_inactive_partitioned_topic_metadata_enabled: bool = setting(
        False,
        "Once inactive-topic deletion has taken every partition of a partitioned topic, "
        "delete the partitioned topic too (its metadata, schemas and policies).",
        pulsar_name="brokerDeleteInactivePartitionedTopicMetadataEnabled",
    )
    max_topics_per_namespace: int = setting(
        0,
        "Topics a namespace holds, each partition counting (0: no limit); creating one past "
        "it is refused: 412 over REST, NotAllowed when a client would create it.",
        pulsar_name="maxTopicsPerNamespace",
    )
    max_unacked_messages_per_consumer: int = setting(
        Limit.MAX_UNACKED_PER_CONSUMER.names.default,
        "Unacknowledged messages a Shared or Key_Shared consumer may hold before it gets "
        "no more, until it holds half as many (0: no limit).",
        pulsar_name="maxUnackedMessagesPerConsumer",
    )
    max_unacked_messages_per_subscription: int = setting(
        Limit.MAX_UNACKED_PER_SUBSCRIPTION.names.default,
        "Unacknowledged messages a Shared or Key_Shared subscription's consumers may hold "
        "together before it dispatches no more, until they hold half as many (0: no limit).",
        pulsar_name="maxUnackedMessagesPerSubscription",
    )
    topic_compaction_retain_null_key: bool = setting(
        False,
        "Whether topic compaction keeps messages without a key (else it leaves them out, "
        "as Pulsar 3.2 and later do).",
        pulsar_name="topicCompactionRetainNullKey",
    )
    max_publish_rate_per_topic_in_messages: int = setting(
        0,
        "Messages per second a topic accepts when its namespace sets no publish rate "
        "(0: unlimited); past it, producers' connections are not read for a while.",
        pulsar_name="maxPublishRatePerTopicInMessages",
    )
    max_publish_rate_per_topic_in_bytes: int = setting(
        0,
        "... and bytes per second (0: unlimited).",
        pulsar_name="maxPublishRatePerTopicInBytes",
    )
    dispatch_throttling_rate_per_topic_in_msg: int = setting(
        0,
        "Messages per second a topic dispatches to all its subscriptions together when its "
        "namespace sets no dispatch rate (0: unlimited).",
        pulsar_name="dispatchThrottlingRatePerTopicInMsg",
    )
    dispatch_throttling_rate_per_topic_in_byte: int = setting(
        0,
        "... and bytes per second (0: unlimited).",
        pulsar_name="dispatchThrottlingRatePerTopicInByte",
    )
    dispatch_throttling_rate_per_subscription_in_msg: int = setting(
        0,
        "Messages per second each subscription is dispatched when its namespace sets no "
        "subscription dispatch rate (0: unlimited).",
        pulsar_name="dispatchThrottlingRatePerSubscriptionInMsg",
    )
    dispatch_throttling_rate_per_subscription_in_byte: int = setting(
        0,
        "... and bytes per second (0: unlimited).",
        pulsar_name="dispatchThrottlingRatePerSubscriptionInByte",
    )

    # Cursors.
    managed_ledger_default_mark_delete_rate_limit: float = setting(
        1.0,
        "Cursor snapshots (persisted acknowledgements) per second, at most.",
        pulsar_name="managedLedgerDefaultMarkDeleteRateLimit",
    )
    managed_ledger_cursor_max_entries_per_ledger: int = setting(
        50_000,
        "A cursor's own ledger rolls over after this many snapshots.",
        pulsar_name="managedLedgerCursorMaxEntriesPerLedger",
    )
    managed_ledger_max_unacked_ranges_to_persist_in_metadata_store: int = setting(
        1000,
        "When a cursor ledger cannot be written, this many acknowledgement holes go to the "
        "metadata store instead; holes beyond them are redelivered after a crash, never lost.",
        pulsar_name="managedLedgerMaxUnackedRangesToPersistInMetadataStore",
    )

    # ---------------------------------------------------------------- security
    authentication_enabled: bool = setting(
        False,
        "Clients must authenticate: CONNECT with a token on the binary protocol, "
        "'Authorization: Bearer <token>' on the HTTP service.",
        pulsar_name="authenticationEnabled",
    )
    authentication_providers: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "Authentication providers, comma-separated: token, or Pulsar's class name "
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken (the only "
            "provider there is; empty means token when authentication is enabled).",
            "pulsar_name": "authenticationProviders",
        },
    )
    authorization_enabled: bool = setting(
        False,
        "Check every lookup, producer, subscription and admin call against the role's "
        "rights: superuser, tenant admin, or namespace permissions (produce, consume). "
        "Needs authentication_enabled.",
        pulsar_name="authorizationEnabled",
    )
    subscription_types_enabled: list[str] = field(
        default_factory=lambda: list(SUBSCRIPTION_TYPES),
        metadata={
            "doc": "Subscription types consumers may subscribe with (comma-separated), where "
            "a namespace or topic enables none of its own.",
            "pulsar_name": "subscriptionTypesEnabled",
        },
    )
    super_user_roles: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "Roles (comma-separated) allowed everything, on every tenant.",
            "pulsar_name": "superUserRoles",
        },
    )
    anonymous_user_role: str | None = setting(
        None,
        "Role given to a client that presents no credentials; unset: such a client is "
        "refused when authentication is enabled.",
        pulsar_name="anonymousUserRole",
    )
    token_secret_key: str | None = setting(
        None,
        "HS256 secret key that signed the tokens: file:///path or data:;base64,<key>.",
        pulsar_name="tokenSecretKey",
    )
    token_public_key: str | None = setting(
        None,
        "Public key (DER or PEM) of RS256/ES256 tokens: file:///path or data:;base64,<key>.",
        pulsar_name="tokenPublicKey",
    )
    token_public_alg: str = setting(
        "RS256",
        "Algorithm of tokens verified with token_public_key: RS256 (or another RS/PS) or "
        "ES256 (or another ES).",
        pulsar_name="tokenPublicAlg",
    )
    token_auth_claim: str = setting(
        "sub",
        "Claim of the token that holds the role.",
        pulsar_name="tokenAuthClaim",
    )
    token_audience_claim: str | None = setting(
        None,
        "Claim that must hold token_audience (usually aud); unset: audiences are not checked.",
        pulsar_name="tokenAudienceClaim",
    )
    token_audience: str | None = setting(
        None,
        "This broker's audience, required in token_audience_claim when that is set.",
        pulsar_name="tokenAudience",
    )
    authentication_refresh_check_seconds: float = setting(
        60.0,
        "How often a connection's token is checked for expiry; an expired one is refreshed "
        "with AUTH_CHALLENGE (clients that support it) or the connection is closed.",
        pulsar_name="authenticationRefreshCheckSeconds",
    )
    authenticate_metrics_endpoint: bool = setting(
        False,
        "/metrics needs authentication too (when authentication is enabled).",
        pulsar_name="authenticateMetricsEndpoint",
    )
    tls_certificate_file_path: str | None = setting(
        None,
        "PEM certificate (chain) the TLS listeners present.",
        pulsar_name="tlsCertificateFilePath",
    )
    tls_key_file_path: str | None = setting(
        None,
        "PEM private key of tls_certificate_file_path.",
        pulsar_name="tlsKeyFilePath",
    )
    tls_trust_certs_file_path: str | None = setting(
        None,
        "PEM CA certificates that client certificates are checked against.",
        pulsar_name="tlsTrustCertsFilePath",
    )
    tls_require_trusted_client_cert_on_connect: bool = setting(
        False,
        "TLS clients must present a certificate signed by tls_trust_certs_file_path.",
        pulsar_name="tlsRequireTrustedClientCertOnConnect",
    )

    def validate(self) -> None:
        if not 0 <= self.broker_service_port < 65536:
            raise ConfigError(f"broker_service_port {self.broker_service_port} out of range")
        if not 0 <= self.web_service_port < 65536:
            raise ConfigError(f"web_service_port {self.web_service_port} out of range")
        if not self.cluster_name or "/" in self.cluster_name:
            raise ConfigError(f"cluster_name {self.cluster_name!r} is not a valid name")
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
        if self.delayed_delivery_max_delay_in_millis < 0:
            raise ConfigError("delayed_delivery_max_delay_in_millis must be >= 0")
        if self.authentication_refresh_check_seconds <= 0:
            raise ConfigError("authentication_refresh_check_seconds must be > 0")
        if self.broker_delete_inactive_topics_frequency_seconds <= 0:
            raise ConfigError("broker_delete_inactive_topics_frequency_seconds must be > 0")
        if self.broker_delete_inactive_topics_max_inactive_duration_seconds < 0:
            raise ConfigError(
                "broker_delete_inactive_topics_max_inactive_duration_seconds must be >= 0"
            )
        for name, check in (
            ("broker_delete_inactive_topics_mode", self.default_inactive_topic_policies),
            (
                "subscription_types_enabled",
                lambda: parse_subscription_types(self.subscription_types_enabled),
            ),
        ):
            try:
                check()
            except InvalidPolicyError as exc:
                raise ConfigError(f"{name}: {exc}") from None
        self._validate_policy_defaults()
        self._validate_tls()
        self.managed_ledger_config().validate()

    def _validate_tls(self) -> None:
        """The TLS ports in range, apart from the plain ones, and a certificate and key for
        any TLS listener (the files themselves are read when the broker starts)."""
        listeners = (
            ("broker_service_port", self.broker_service_port, self.broker_service_port_tls),
            ("web_service_port", self.web_service_port, self.web_service_port_tls),
        )
        for plain, plain_port, port in listeners:
            name = f"{plain}_tls"
            if port is None:
                continue
            if not 0 <= port < 65536:
                raise ConfigError(f"{name} {port} out of range")
            if port != 0 and port == plain_port:
                raise ConfigError(f"{name} and {plain} are both {port}: TLS needs its own port")
            if not self.tls_certificate_file_path or not self.tls_key_file_path:
                raise ConfigError(
                    f"{name} is set: TLS needs tls_certificate_file_path and tls_key_file_path "
                    "(the PEM certificate and key the broker presents)"
                )
            if self.tls_require_trusted_client_cert_on_connect and not (
                self.tls_trust_certs_file_path
            ):
                raise ConfigError(
                    "tls_require_trusted_client_cert_on_connect needs tls_trust_certs_file_path "
                    "(the CA certificates client certificates are checked against)"
                )

    def _validate_policy_defaults(self) -> None:
        if self.schema_compatibility_strategy.upper() not in SCHEMA_STRATEGIES:
            raise ConfigError(
                "schema_compatibility_strategy: one of " + ", ".join(SCHEMA_STRATEGIES)
            )
        if self.backlog_quota_default_retention_policy not in BACKLOG_QUOTA_POLICIES:
            raise ConfigError(
                "backlog_quota_default_retention_policy: one of "
                + ", ".join(BACKLOG_QUOTA_POLICIES)
            )
        for name in (
            "ttl_duration_default_in_seconds",
            "message_expiry_check_interval_in_minutes",
            "subscription_expiration_time_minutes",
            "subscription_expiry_check_interval_in_minutes",
            "backlog_quota_check_interval_in_seconds",
            "max_publish_rate_per_topic_in_messages",
            "max_publish_rate_per_topic_in_bytes",
            "dispatch_throttling_rate_per_topic_in_msg",
            "dispatch_throttling_rate_per_topic_in_byte",
            "dispatch_throttling_rate_per_subscription_in_msg",
            "dispatch_throttling_rate_per_subscription_in_byte",
            "max_producers_per_topic",
            "max_consumers_per_topic",
            "max_consumers_per_subscription",
            "max_subscriptions_per_topic",
            "max_topics_per_namespace",
            "max_unacked_messages_per_consumer",
            "max_unacked_messages_per_subscription",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")
        for name in ("backlog_quota_default_limit_bytes", "backlog_quota_default_limit_second"):
            if getattr(self, name) < -1:
                raise ConfigError(f"{name} must be >= -1 (-1: no limit)")

    def bookkeeper_client_config(self) -> ClientConfig:
        return ClientConfig(use_v2_wire_protocol=self.bookkeeper_use_v2_wire_protocol)

    def delayed_delivery_config(self) -> DelayedDeliveryConfig:
        return DelayedDeliveryConfig(
            enabled=self.delayed_delivery_enabled,
            tick_ms=self.delayed_delivery_tick_time_millis,
            max_delay_ms=self.delayed_delivery_max_delay_in_millis,
        )

    def default_inactive_topic_policies(self) -> InactiveTopicPolicies:
        """What a topic whose namespace and own policies set none obeys."""
        duration = self.broker_delete_inactive_topics_max_inactive_duration_seconds
        return InactiveTopicPolicies(
            self.broker_delete_inactive_topics_enabled,
            duration or self.broker_delete_inactive_topics_frequency_seconds,
            parse_delete_mode(self.broker_delete_inactive_topics_mode),
        )

    def quorum_bounds(self) -> QuorumBounds:
        """What persistence policies may ask for (``managedLedgerMax*``)."""
        return QuorumBounds(
            self.managed_ledger_max_ensemble_size,
            self.managed_ledger_max_write_quorum,
            self.managed_ledger_max_ack_quorum,
        )

    def default_persistence(self) -> PersistencePolicies:
        """The persistence of a topic whose namespace and own policies set none."""
        return PersistencePolicies(
            self.managed_ledger_default_ensemble_size,
            self.managed_ledger_default_write_quorum,
            self.managed_ledger_default_ack_quorum,
            self.managed_ledger_default_mark_delete_rate_limit,
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
            # A message of maxMessageSize with its metadata (a chunk is that big), in the
            # frame's padding, less room for the MESSAGE command that delivers it: every
            # stored entry fits the frame a consumer takes (Pulsar's bookies refuse more).
            max_entry_bytes=self.max_message_size + FRAME_PADDING - DELIVERY_ROOM,
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
