"""The client's enumerations and policies, named as in the official ``pulsar-client``."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from stripemq.proto import pulsar_api_pb2 as pb

# Shared with the broker and the managed ledger; offered here with the other options.
from stripemq.proto.initial_position import InitialPosition as InitialPosition


class ConsumerType(enum.Enum):
    """Subscription type; values are the protocol's ``CommandSubscribe.SubType``."""

    Exclusive = pb.CommandSubscribe.Exclusive
    Shared = pb.CommandSubscribe.Shared
    Failover = pb.CommandSubscribe.Failover
    KeyShared = pb.CommandSubscribe.Key_Shared


class CompressionType(enum.Enum):
    """Payload compression; values are the protocol's ``CompressionType``."""

    NONE = pb.NONE
    LZ4 = pb.LZ4
    ZLib = pb.ZLIB
    ZSTD = pb.ZSTD
    SNAPPY = pb.SNAPPY


class PartitionsRoutingMode(enum.Enum):
    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


class HashingScheme(enum.Enum):
    """How a key picks a partition. ``BoostHash`` is the official Python client's default;
    ``JavaStringHash`` the Java client's."""

    BoostHash = 0
    JavaStringHash = 1
    Murmur3_32Hash = 2


class BatchingType(enum.Enum):
    """``KeyBased`` batches hold messages of one key only, so that Key_Shared consumers
    get each key's messages (a batch is dispatched by its first message's key)."""

    Default = 0
    KeyBased = 1


class ProducerAccessMode(enum.Enum):
    Shared = pb.Shared
    Exclusive = pb.Exclusive
    WaitForExclusive = pb.WaitForExclusive
    ExclusiveWithFencing = pb.ExclusiveWithFencing


class KeySharedMode(enum.Enum):
    AutoSplit = pb.AUTO_SPLIT
    Sticky = pb.STICKY


class RegexSubscriptionMode(enum.Enum):
    PersistentOnly = pb.CommandGetTopicsOfNamespace.PERSISTENT
    NonPersistentOnly = pb.CommandGetTopicsOfNamespace.NON_PERSISTENT
    AllTopics = pb.CommandGetTopicsOfNamespace.ALL


class Result(enum.Enum):
    """What a ``send_async`` callback is given: ``Ok`` or the failure's kind, with the
    official client's names and values."""

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ReadError = 6
    AuthenticationError = 7
    AuthorizationError = 8
    ErrorGettingAuthenticationData = 9
    BrokerMetadataError = 10
    BrokerPersistenceError = 11
    ChecksumError = 12
    ConsumerBusy = 13
    NotConnected = 14
    AlreadyClosed = 15
    InvalidMessage = 16
    ConsumerNotInitialized = 17
    ProducerNotInitialized = 18
    ProducerBusy = 19
    TooManyLookupRequestException = 20
    InvalidTopicName = 21
    InvalidUrl = 22
    ServiceUnitNotReady = 23
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    ConsumerNotFound = 31
    UnsupportedVersionError = 32
    TopicTerminated = 33
    CryptoError = 34
    IncompatibleSchema = 35
    ConsumerAssignError = 36
    CumulativeAcknowledgementNotAllowedError = 37
    TransactionCoordinatorNotFoundError = 38
    InvalidTxnStatusError = 39
    NotAllowedError = 40
    TransactionConflict = 41
    TransactionNotFound = 42
    ProducerFenced = 43
    MemoryBufferIsFull = 44
    Interrupted = 45


@dataclass(frozen=True)
class ConsumerDeadLetterPolicy:
    """After ``max_redeliver_count`` redeliveries a message goes to ``dead_letter_topic``
    (default ``<topic>-<subscription>-DLQ``) instead of back to a consumer. With retry
    enabled, ``reconsume_later`` publishes to ``retry_letter_topic`` (default
    ``<topic>-<subscription>-RETRY``)."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    initial_subscription_name: str | None = None
    retry_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if self.max_redeliver_count < 1:
            raise ValueError("max_redeliver_count must be at least 1")


@dataclass(frozen=True)
class BatchReceivePolicy:
    """``batch_receive`` returns once it has ``max_num_messages`` messages, ``max_num_bytes``
    bytes, or ``timeout_ms`` passed with at least one message (-1 means no limit)."""

    max_num_messages: int = 100
    max_num_bytes: int = 10 * 1024 * 1024
    timeout_ms: int = 100

    def __post_init__(self) -> None:
        if self.max_num_messages <= 0 and self.max_num_bytes <= 0 and self.timeout_ms <= 0:
            raise ValueError("a batch receive policy needs at least one limit")


# The official client's name for the same policy.
ConsumerBatchReceivePolicy = BatchReceivePolicy


@dataclass(frozen=True)
class ConsumerKeySharedPolicy:
    """Key_Shared mode; with ``Sticky``, ``sticky_ranges`` are ``(start, end)`` hash ranges
    (inclusive, in 0..65535) this consumer takes."""

    key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit
    allow_out_of_order_delivery: bool = False
    sticky_ranges: tuple[tuple[int, int], ...] = ()
