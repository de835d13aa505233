"""Typed errors shared by every stripemq component, and the one registry of their codes.

An error that crosses a wire carries the code of that protocol: ``bk_code`` is
BookKeeper's return code (``BKException.Code``) and ``grpc_status`` the name of the gRPC
status a bookie answers with; ``server_error`` is the Pulsar protocol's ``ServerError``.
Classes register their codes themselves (``@bookie_code``, ``@server_error_code``, as
kazoo's ``_zookeeper_exception`` does), so each code rebuilds exactly the class that sent
it. Whether another attempt may succeed is decided here too (``Retry``, ``is_retriable``).

This module imports no transport: the gRPC status is kept by name, and the bookie server
turns it into ``grpc.StatusCode`` itself.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import ClassVar, TypeVar

from stripemq.proto import pulsar_api_pb2 as pb


class Retry(enum.Enum):
    """Whether an attempt that failed with an error is worth making again."""

    NEVER = "never"  # no attempt can fix it (Java's PulsarClientException.isRetriableError)
    ON_RECONNECT = "on-reconnect"  # a reconnection keeps trying ("busy": the old one lingers)
    ALWAYS = "always"  # transient: a timeout, an unready or unreachable broker


class StripeMQError(Exception):
    """Base class of every error stripemq raises on purpose.

    ``server_error`` is the ``ServerError`` a broker answers with when this error ends a
    client's request (None: ``UnknownError``)."""

    server_error: pb.ServerError | None = None
    retry: ClassVar[Retry] = Retry.ON_RECONNECT


def is_retriable(exc: BaseException, *, reconnecting: bool = False) -> bool:
    """Whether another attempt may succeed. A first attempt retries only what is meant to
    pass; a reconnection keeps trying everything but what no attempt can fix."""
    if not isinstance(exc, StripeMQError):
        return False
    if exc.retry is Retry.ALWAYS:
        return True
    return reconnecting and exc.retry is Retry.ON_RECONNECT


E = TypeVar("E", bound=type[StripeMQError])


# --------------------------------------------------------------------------- metadata


class MetadataError(StripeMQError):
    """A metadata store operation failed."""


class NotFoundError(MetadataError):
    """The node does not exist."""


class NodeExistsError(MetadataError):
    """The node already exists (create of an existing path)."""


class BadVersionError(MetadataError):
    """A compare-and-set saw a different version than expected."""


class NotEmptyError(MetadataError):
    """The node still has children and cannot be deleted."""


class SessionLostError(MetadataError):
    """The metadata session expired or the store is closed."""


class InvalidPathError(MetadataError):
    """The path is not an absolute, normalised node path."""


class NoChildrenForEphemeralsError(MetadataError):
    """Ephemeral nodes cannot have children (ZooKeeper's NoChildrenForEphemerals)."""


# --------------------------------------------------------------------------- bookie

BOOKIE_ERRORS_BY_CODE: dict[int, type[BookieError]] = {}


def bookie_code(code: int, grpc_status: str | None = None) -> Callable[[E], E]:
    """Register a bookie error class under its BookKeeper return code (unique), with the
    name of the gRPC status its bookie answers with (inherited when not given)."""

    def register(cls: E) -> E:
        assert issubclass(cls, BookieError)
        taken = BOOKIE_ERRORS_BY_CODE.get(code)
        if taken is not None:
            raise TypeError(f"bk_code {code} is taken by {taken.__name__}")
        cls.bk_code = code
        if grpc_status is not None:
            cls.grpc_status = grpc_status
        BOOKIE_ERRORS_BY_CODE[code] = cls
        return cls

    return register


class BookieError(StripeMQError):
    """A bookie refused or failed a request. ``bk_code`` follows BookKeeper."""

    bk_code: int = -999  # UnexpectedConditionException
    grpc_status: ClassVar[str] = "INTERNAL"


@bookie_code(-7, "NOT_FOUND")  # NoSuchLedgerExistsException
class NoSuchLedgerError(BookieError):
    pass


@bookie_code(-13, "NOT_FOUND")  # NoSuchEntryException
class NoSuchEntryError(BookieError):
    pass


@bookie_code(-101, "FAILED_PRECONDITION")  # LedgerFencedException
class LedgerFencedError(BookieError):
    pass


@bookie_code(-102, "PERMISSION_DENIED")  # UnauthorizedAccessException
class UnauthorizedAccessError(BookieError):
    """Wrong master key for the ledger."""


@bookie_code(-1001, "INVALID_ARGUMENT")  # stripemq's own: BookKeeper says WriteException
class EntryTooLargeError(BookieError):
    pass


@bookie_code(-1002, "INVALID_ARGUMENT")  # stripemq's own
class InvalidEntryError(BookieError):
    """Malformed entry: bad header, negative or duplicate id, mismatched ledger."""


@bookie_code(-5, "DATA_LOSS")  # DigestMatchException
class DigestMismatchError(BookieError):
    """Stored or received bytes fail their CRC32C: never served as data."""


@bookie_code(-104, "UNAVAILABLE")  # WriteOnReadOnlyBookieException
class BookieReadOnlyError(BookieError):
    """The bookie's disks are over the usage threshold; it takes no writes."""


@bookie_code(-1003, "RESOURCE_EXHAUSTED")  # stripemq's own
class DiskFullError(BookieError):
    pass


@bookie_code(-8, "UNAVAILABLE")  # BookieHandleNotAvailableException
class BookieUnavailableError(BookieError):
    """The bookie cannot be reached or is shutting down."""


@bookie_code(-1004)  # stripemq's own: BookKeeper answers BookieHandleNotAvailable
class BookieShuttingDownError(BookieUnavailableError):
    """The bookie is stopping and takes no more requests."""


@bookie_code(-23, "DEADLINE_EXCEEDED")  # TimeoutException
class BookieTimeoutError(BookieError):
    """A bookie did not answer in time."""


@bookie_code(-1005)  # stripemq's own: BookKeeper's long poll answers without an entry
class ReadTimeoutError(BookieTimeoutError):
    """A long-poll read found no entry beyond the LAC before its timeout."""


# --------------------------------------------------------------------------- ledger client


@bookie_code(-1)  # ReadException
class ReadError(BookieError):
    """No replica could serve an entry, or the entry lies past what the reader may see."""


@bookie_code(-16, "INVALID_ARGUMENT")  # ProtocolVersionException
class BookieProtocolError(BookieError):
    """Bytes on the bookie's binary add protocol that are not a frame it knows: a bad
    version, an unknown opcode, a frame too short for its fields or too large."""


@bookie_code(-6, "UNAVAILABLE")  # NotEnoughBookiesException
class NotEnoughBookiesError(BookieError):
    """Placement found fewer writable bookies than the ensemble (or a replacement) needs."""


@bookie_code(-10, "UNAVAILABLE")  # LedgerRecoveryException
class LedgerRecoveryError(BookieError):
    """Recovery could not decide the ledger's last entry (too few bookies answered)."""


@bookie_code(-11, "FAILED_PRECONDITION")  # LedgerClosedException
class LedgerClosedError(BookieError):
    """An add on a ledger handle that is closed (by its writer or by recovery)."""


@bookie_code(-17, "ABORTED")  # MetadataVersionException
class MetadataVersionError(BookieError):
    """Ledger metadata changed underneath in a way this handle cannot reconcile."""


@bookie_code(-19, "UNAVAILABLE")  # ClientClosedException
class ClientClosedError(BookieError):
    pass


@bookie_code(-100, "FAILED_PRECONDITION")  # IllegalOpException
class IllegalOpError(BookieError):
    """The operation is not allowed on this handle (an add on a read-only handle)."""


@bookie_code(-200)  # ReplicationException
class ReplicationError(BookieError):
    """Auto-recovery could not re-replicate a fragment."""


def error_for_bk_code(code: int, message: str) -> BookieError:
    """Rebuild the typed error a bookie reported by its BookKeeper return code."""
    cls = BOOKIE_ERRORS_BY_CODE.get(code, BookieError)
    err = cls(message)
    if cls is BookieError:
        err.bk_code = code
    return err


# --------------------------------------------------------------------------- managed ledger


class ManagedLedgerError(StripeMQError):
    """A topic's storage (managed ledger or cursor) failed."""

    server_error = pb.PersistenceError


class ManagedLedgerFencedError(ManagedLedgerError):
    """Another owner opened the managed ledger (or its ledger was fenced): stop writing."""

    server_error = pb.ServiceNotReady


class ManagedLedgerClosedError(ManagedLedgerError):
    """The managed ledger or cursor was closed."""

    server_error = pb.ServiceNotReady


class ManagedLedgerNotFoundError(ManagedLedgerError):
    """No managed ledger by that name (and creating one was not asked for)."""

    server_error = pb.TopicNotFound


class ManagedLedgerTerminatedError(ManagedLedgerError):
    """The topic was terminated: it takes no more entries (Pulsar's TopicTerminated)."""

    server_error = pb.TopicTerminatedError


class CursorNotFoundError(ManagedLedgerError):
    """No cursor (subscription) by that name."""

    server_error = pb.SubscriptionNotFound


class InvalidCursorPositionError(ManagedLedgerError):
    """A position the managed ledger does not hold (an ack or reset beyond its end)."""

    server_error = pb.NotAllowedError


class ConfigError(StripeMQError):
    """A configuration file or option is invalid."""


class InvalidCookieError(ConfigError):
    """A bookie's directories and the cluster's record of that bookie (its cookie) disagree,
    as BookKeeper's InvalidCookieException: the bookie refuses to start rather than serve
    under a known id without the data the cluster believes it holds. The message says why
    and what to do."""

    retry = Retry.NEVER


# --------------------------------------------------------------------------- spark


class SparkSourceError(StripeMQError):
    """Reading topics straight from the bookies (``stripemq.spark``) failed; the message
    names the topic and, where one is involved, the ledger."""

    retry = Retry.NEVER


class UnknownTopicError(SparkSourceError):
    """A topic to read has no managed ledger (and is not a partitioned topic)."""


class DataLossError(SparkSourceError):
    """Entries planned or checkpointed are gone: their ledger was trimmed or deleted
    (``failOnDataLoss=false`` skips them instead)."""


class CorruptEntryError(SparkSourceError):
    """A stored entry fails its checksum or does not parse as a Pulsar entry."""


# --------------------------------------------------------------------------- broker


class BrokerError(StripeMQError):
    """A request the broker refuses with the protocol code it names."""

    def __init__(self, server_error: pb.ServerError, message: str) -> None:
        super().__init__(message)
        self.server_error = server_error


def server_error_of(exc: BaseException) -> pb.ServerError:
    """The ``ServerError`` a broker answers with when ``exc`` ends a client's request."""
    code = exc.server_error if isinstance(exc, StripeMQError) else None
    return pb.UnknownError if code is None else code


# --------------------------------------------------------------------------- Pulsar client

CLIENT_ERRORS_BY_SERVER_ERROR: dict[int, type[ClientError]] = {}


def server_error_code(code: pb.ServerError) -> Callable[[E], E]:
    """Register a client error class as what a broker's ``code`` rebuilds (unique)."""

    def register(cls: E) -> E:
        assert issubclass(cls, ClientError)
        taken = CLIENT_ERRORS_BY_SERVER_ERROR.get(code)
        if taken is not None:
            raise TypeError(f"ServerError {code} is taken by {taken.__name__}")
        cls.server_error = code
        CLIENT_ERRORS_BY_SERVER_ERROR[code] = cls
        return cls

    return register


class ClientError(StripeMQError):
    """A client operation failed. ``server_error`` is the Pulsar ``ServerError`` code the
    broker answered with, when the failure came from a broker."""


class ClientTimeoutError(ClientError, TimeoutError):
    """An operation (send, lookup, subscribe, receive) did not finish in time."""

    retry = Retry.ALWAYS


class AlreadyClosedError(ClientError):
    """The client, producer, consumer or reader is closed."""


class ConnectError(ClientError):
    """No connection to the broker could be made or it broke mid-request."""

    retry = Retry.ALWAYS


class TopicLookupError(ClientError):
    """The broker could not say which broker serves a topic."""

    retry = Retry.ALWAYS


class InvalidConfigurationError(ClientError):
    """An argument that cannot work (a bad URL, an unknown option value)."""

    retry = Retry.NEVER


class InvalidMessageError(ClientError):
    """A message id or message that does not belong where it is used (another topic's)."""


class MessageTooBigError(ClientError):
    """The message exceeds the broker's maximum message size; refused before sending."""


class ProducerQueueIsFullError(ClientError):
    """The producer's pending-message limit is reached and it does not block."""


class CumulativeAcknowledgementNotAllowedError(ClientError):
    """Cumulative acks are not allowed on Shared and Key_Shared subscriptions."""


class ServerClientError(ClientError):
    """A broker refused a request with a ``ServerError`` this client has no own type for."""


# Each code of Pulsar's ServerError enum but UnknownError has its class.


@server_error_code(pb.MetadataError)
class MetadataClientError(ServerClientError):
    """The broker's metadata store failed."""

    retry = Retry.ALWAYS


@server_error_code(pb.PersistenceError)
class PersistenceClientError(ServerClientError):
    """The broker could not store or read the data."""

    retry = Retry.ALWAYS


@server_error_code(pb.AuthenticationError)
class AuthenticationError(ServerClientError):
    """Authentication failed."""

    retry = Retry.NEVER


@server_error_code(pb.AuthorizationError)
class AuthorizationError(ServerClientError):
    """The role may not do this."""

    retry = Retry.NEVER


@server_error_code(pb.ConsumerBusy)
class ConsumerBusyError(ServerClientError):
    """The subscription is held by another consumer."""


@server_error_code(pb.ServiceNotReady)
class ServiceNotReadyError(ServerClientError):
    """The broker does not serve the topic right now (unloading, starting)."""

    retry = Retry.ALWAYS


@server_error_code(pb.ProducerBlockedQuotaExceededError)
class ProducerBlockedQuotaExceededError(ServerClientError):
    """The topic's backlog quota is exceeded (the producer is held back)."""


@server_error_code(pb.ProducerBlockedQuotaExceededException)
class ProducerBlockedQuotaExceededException(ProducerBlockedQuotaExceededError):
    """The topic's backlog quota is exceeded (the producer's request is refused)."""


@server_error_code(pb.ChecksumError)
class ChecksumClientError(ServerClientError):
    """The message arrived corrupted."""

    retry = Retry.NEVER


@server_error_code(pb.UnsupportedVersionError)
class UnsupportedVersionError(ServerClientError):
    """The broker does not support this protocol version."""

    retry = Retry.NEVER


@server_error_code(pb.TopicNotFound)
class TopicNotFoundError(ServerClientError):
    """No such topic."""

    retry = Retry.NEVER


@server_error_code(pb.SubscriptionNotFound)
class SubscriptionNotFoundError(ServerClientError):
    """No such subscription."""

    retry = Retry.NEVER


@server_error_code(pb.ConsumerNotFound)
class ConsumerNotFoundError(ServerClientError):
    """The broker no longer knows this consumer."""

    retry = Retry.ALWAYS


@server_error_code(pb.TooManyRequests)
class TooManyRequestsError(ServerClientError):
    """The broker is throttling requests."""

    retry = Retry.ALWAYS


@server_error_code(pb.TopicTerminatedError)
class TopicTerminatedError(ServerClientError):
    """The topic is terminated."""

    retry = Retry.NEVER


@server_error_code(pb.ProducerBusy)
class ProducerBusyError(ServerClientError):
    """A producer by that name, or with exclusive access, already exists."""


@server_error_code(pb.InvalidTopicName)
class InvalidTopicNameError(ClientError):
    """Not a topic name Pulsar would accept; raised before anything is sent, and by the
    broker for names clients send."""

    retry = Retry.NEVER


@server_error_code(pb.IncompatibleSchema)
class IncompatibleSchemaError(ServerClientError):
    """The schema is incompatible with the topic's."""

    retry = Retry.NEVER


class InvalidSchemaError(IncompatibleSchemaError):
    """The schema's definition is not valid for its type (Pulsar's
    ``InvalidSchemaDataException``, answered with the same code)."""


@server_error_code(pb.ConsumerAssignError)
class ConsumerAssignError(ServerClientError):
    """No consumer could be assigned: a Key_Shared STICKY consumer's hash ranges are out of
    bounds or overlap another's (raised by the broker's dispatcher, rebuilt by clients)."""

    retry = Retry.NEVER


@server_error_code(pb.TransactionCoordinatorNotFound)
class TransactionCoordinatorNotFoundError(ServerClientError):
    """The broker runs no transaction coordinator."""

    retry = Retry.NEVER


@server_error_code(pb.InvalidTxnStatus)
class InvalidTxnStatusError(ServerClientError):
    """The transaction is not in a state that allows the request."""

    retry = Retry.NEVER


@server_error_code(pb.NotAllowedError)
class NotAllowedError(ServerClientError):
    """The operation is not allowed."""

    retry = Retry.NEVER


@server_error_code(pb.TransactionConflict)
class TransactionConflictError(ServerClientError):
    """Another transaction holds what this one asks for."""

    retry = Retry.NEVER


@server_error_code(pb.TransactionNotFound)
class TransactionNotFoundError(ServerClientError):
    """No such transaction."""

    retry = Retry.NEVER


@server_error_code(pb.ProducerFenced)
class ProducerFencedError(ServerClientError):
    """Another producer took exclusive access to the topic."""

    retry = Retry.NEVER


def error_for_server_error(code: int, message: str) -> ClientError:
    """The typed error for a broker's ``ServerError`` code (the message, or the code's name
    when the broker sent none)."""
    cls = CLIENT_ERRORS_BY_SERVER_ERROR.get(code, ServerClientError)
    try:
        name = pb.ServerError.Name(code)
    except ValueError:
        name = f"ServerError({code})"
    err = cls(message or name)
    if cls is ServerClientError:
        err.server_error = code  # type: ignore[assignment]  # a code newer than this client
    return err
