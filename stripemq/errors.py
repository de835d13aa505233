"""Typed errors shared by every stripemq component.

Each error carries the code of the protocol it surfaces through where one exists:
``bk_code`` is BookKeeper's return code (``BKException.Code``) and ``grpc_status`` the
gRPC status a bookie answers with, so a client can map a remote failure back to the
same exception type it would have raised locally.
"""

from __future__ import annotations

import grpc


class StripeMQError(Exception):
    """Base class of every error stripemq raises on purpose."""


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


class BookieError(StripeMQError):
    """A bookie refused or failed a request. ``bk_code`` follows BookKeeper."""

    bk_code: int = -999  # UnexpectedConditionException
    grpc_status: grpc.StatusCode = grpc.StatusCode.INTERNAL


class NoSuchLedgerError(BookieError):
    bk_code = -7  # NoSuchLedgerExistsException
    grpc_status = grpc.StatusCode.NOT_FOUND


class NoSuchEntryError(BookieError):
    bk_code = -13  # NoSuchEntryException
    grpc_status = grpc.StatusCode.NOT_FOUND


class LedgerFencedError(BookieError):
    bk_code = -101  # LedgerFencedException
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class UnauthorizedAccessError(BookieError):
    """Wrong master key for the ledger."""

    bk_code = -102  # UnauthorizedAccessException
    grpc_status = grpc.StatusCode.PERMISSION_DENIED


class EntryTooLargeError(BookieError):
    bk_code = -1001  # stripemq's own: BookKeeper only says WriteException (-12)
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class InvalidEntryError(BookieError):
    """Malformed entry: bad header, negative or duplicate id, mismatched ledger."""

    bk_code = -1002  # stripemq's own
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class DigestMismatchError(BookieError):
    """Stored or received bytes fail their CRC32C: never served as data."""

    bk_code = -5  # DigestMatchException
    grpc_status = grpc.StatusCode.DATA_LOSS


class BookieReadOnlyError(BookieError):
    """The bookie's disks are over the usage threshold; it takes no writes."""

    bk_code = -104  # WriteOnReadOnlyBookieException
    grpc_status = grpc.StatusCode.UNAVAILABLE


class DiskFullError(BookieError):
    bk_code = -1003  # stripemq's own
    grpc_status = grpc.StatusCode.RESOURCE_EXHAUSTED


class BookieUnavailableError(BookieError):
    """The bookie cannot be reached or is shutting down."""

    bk_code = -8  # BookieHandleNotAvailableException
    grpc_status = grpc.StatusCode.UNAVAILABLE


class BookieShuttingDownError(BookieUnavailableError):
    bk_code = -8  # BookieHandleNotAvailableException
    grpc_status = grpc.StatusCode.UNAVAILABLE


class BookieTimeoutError(BookieError):
    """A bookie did not answer in time."""

    bk_code = -23  # TimeoutException
    grpc_status = grpc.StatusCode.DEADLINE_EXCEEDED


class ReadTimeoutError(BookieTimeoutError):
    """A long-poll read found no entry beyond the LAC before its timeout."""


# --------------------------------------------------------------------------- ledger client


class ReadError(BookieError):
    """No replica could serve an entry, or the entry lies past what the reader may see."""

    bk_code = -1  # ReadException


class NotEnoughBookiesError(BookieError):
    """Placement found fewer writable bookies than the ensemble (or a replacement) needs."""

    bk_code = -6  # NotEnoughBookiesException
    grpc_status = grpc.StatusCode.UNAVAILABLE


class LedgerRecoveryError(BookieError):
    """Recovery could not decide the ledger's last entry (too few bookies answered)."""

    bk_code = -10  # LedgerRecoveryException
    grpc_status = grpc.StatusCode.UNAVAILABLE


class LedgerClosedError(BookieError):
    """An add on a ledger handle that is closed (by its writer or by recovery)."""

    bk_code = -11  # LedgerClosedException
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class MetadataVersionError(BookieError):
    """Ledger metadata changed underneath in a way this handle cannot reconcile."""

    bk_code = -17  # MetadataVersionException
    grpc_status = grpc.StatusCode.ABORTED


class ClientClosedError(BookieError):
    bk_code = -19  # ClientClosedException
    grpc_status = grpc.StatusCode.UNAVAILABLE


class IllegalOpError(BookieError):
    """The operation is not allowed on this handle (an add on a read-only handle)."""

    bk_code = -100  # IllegalOpException
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class ReplicationError(BookieError):
    """Auto-recovery could not re-replicate a fragment."""

    bk_code = -200  # ReplicationException


BOOKIE_ERRORS_BY_CODE: dict[int, type[BookieError]] = {}
for _cls in (
    EntryTooLargeError,
    InvalidEntryError,
    DiskFullError,
    NoSuchLedgerError,
    NoSuchEntryError,
    LedgerFencedError,
    UnauthorizedAccessError,
    DigestMismatchError,
    BookieReadOnlyError,
    BookieUnavailableError,
    ReadTimeoutError,
    ReadError,
    NotEnoughBookiesError,
    LedgerRecoveryError,
    LedgerClosedError,
    MetadataVersionError,
    ClientClosedError,
    IllegalOpError,
    ReplicationError,
):
    BOOKIE_ERRORS_BY_CODE[_cls.bk_code] = _cls


def bookie_error_from_code(code: int, message: str) -> BookieError:
    """Rebuild the typed error a bookie reported by its BookKeeper return code."""
    cls = BOOKIE_ERRORS_BY_CODE.get(code, BookieError)
    err = cls(message)
    if cls is BookieError:
        err.bk_code = code
    return err


# --------------------------------------------------------------------------- managed ledger


class ManagedLedgerError(StripeMQError):
    """A topic's storage (managed ledger or cursor) failed. ``server_error`` names the
    Pulsar protocol ``ServerError`` a broker answers with."""

    server_error: str = "PersistenceError"


class ManagedLedgerFencedError(ManagedLedgerError):
    """Another owner opened the managed ledger (or its ledger was fenced): stop writing."""

    server_error = "ServiceNotReady"


class ManagedLedgerClosedError(ManagedLedgerError):
    """The managed ledger or cursor was closed."""

    server_error = "ServiceNotReady"


class ManagedLedgerNotFoundError(ManagedLedgerError):
    """No managed ledger by that name (and creating one was not asked for)."""

    server_error = "TopicNotFound"


class CursorNotFoundError(ManagedLedgerError):
    """No cursor (subscription) by that name."""

    server_error = "SubscriptionNotFound"


class InvalidCursorPositionError(ManagedLedgerError):
    """A position the managed ledger does not hold (an ack or reset beyond its end)."""

    server_error = "NotAllowedError"


class ConfigError(StripeMQError):
    """A configuration file or option is invalid."""


# --------------------------------------------------------------------------- Pulsar client


class ClientError(StripeMQError):
    """A client operation failed. ``server_error`` is the Pulsar ``ServerError`` code the
    broker answered with, when the failure came from a broker."""

    server_error: str | None = None
    retriable: bool = False  # worth another attempt on a fresh connection


class ClientTimeoutError(ClientError, TimeoutError):
    """An operation (send, lookup, subscribe, receive) did not finish in time."""

    retriable = True


class AlreadyClosedError(ClientError):
    """The client, producer, consumer or reader is closed."""


class ConnectError(ClientError):
    """No connection to the broker could be made or it broke mid-request."""

    retriable = True


class TopicLookupError(ClientError):
    """The broker could not say which broker serves a topic."""

    retriable = True


class InvalidConfigurationError(ClientError):
    """An argument that cannot work (a bad URL, an unknown option value)."""


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


# Codes follow Pulsar's ServerError enum.


class MetadataClientError(ServerClientError):
    """The broker's metadata store failed."""

    server_error = "MetadataError"
    retriable = True


class PersistenceClientError(ServerClientError):
    """The broker could not store or read the data."""

    server_error = "PersistenceError"
    retriable = True


class AuthenticationError(ServerClientError):
    """Authentication failed."""

    server_error = "AuthenticationError"


class AuthorizationError(ServerClientError):
    """The role may not do this."""

    server_error = "AuthorizationError"


class ConsumerBusyError(ServerClientError):
    """The subscription is held by another consumer."""

    server_error = "ConsumerBusy"


class ServiceNotReadyError(ServerClientError):
    """The broker does not serve the topic right now (unloading, starting)."""

    server_error = "ServiceNotReady"
    retriable = True


class ProducerBlockedQuotaExceededError(ServerClientError):
    """The topic's backlog quota is exceeded."""

    server_error = "ProducerBlockedQuotaExceededError"


class ChecksumClientError(ServerClientError):
    """The message arrived corrupted."""

    server_error = "ChecksumError"


class UnsupportedVersionError(ServerClientError):
    """The broker does not support this protocol version."""

    server_error = "UnsupportedVersionError"


class TopicNotFoundError(ServerClientError):
    """No such topic."""

    server_error = "TopicNotFound"


class SubscriptionNotFoundError(ServerClientError):
    """No such subscription."""

    server_error = "SubscriptionNotFound"


class ConsumerNotFoundError(ServerClientError):
    """The broker no longer knows this consumer."""

    server_error = "ConsumerNotFound"
    retriable = True


class TooManyRequestsError(ServerClientError):
    """The broker is throttling requests."""

    server_error = "TooManyRequests"
    retriable = True


class TopicTerminatedError(ServerClientError):
    """The topic is terminated."""

    server_error = "TopicTerminatedError"


class ProducerBusyError(ServerClientError):
    """A producer by that name, or with exclusive access, already exists."""

    server_error = "ProducerBusy"


class InvalidTopicNameError(ClientError):
    """Not a topic name Pulsar would accept; raised before anything is sent, and by the
    broker for names clients send."""

    server_error = "InvalidTopicName"


class IncompatibleSchemaError(ServerClientError):
    """The schema is incompatible with the topic's."""

    server_error = "IncompatibleSchema"


class ConsumerAssignError(ServerClientError):
    """No consumer could be assigned."""

    server_error = "ConsumerAssignError"


class NotAllowedError(ServerClientError):
    """The operation is not allowed."""

    server_error = "NotAllowedError"


class ProducerFencedError(ServerClientError):
    """Another producer took exclusive access to the topic."""

    server_error = "ProducerFenced"


CLIENT_ERRORS_BY_SERVER_ERROR: dict[str, type[StripeMQError]] = {
    cls.server_error: cls  # type: ignore[attr-defined]
    for cls in (
        MetadataClientError,
        PersistenceClientError,
        AuthenticationError,
        AuthorizationError,
        ConsumerBusyError,
        ServiceNotReadyError,
        ProducerBlockedQuotaExceededError,
        ChecksumClientError,
        UnsupportedVersionError,
        TopicNotFoundError,
        SubscriptionNotFoundError,
        ConsumerNotFoundError,
        TooManyRequestsError,
        TopicTerminatedError,
        ProducerBusyError,
        InvalidTopicNameError,
        IncompatibleSchemaError,
        ConsumerAssignError,
        NotAllowedError,
        ProducerFencedError,
    )
}
CLIENT_ERRORS_BY_SERVER_ERROR["ProducerBlockedQuotaExceededException"] = (
    ProducerBlockedQuotaExceededError
)


def client_error_from_server(name: str, message: str) -> StripeMQError:
    """The typed error for a broker's ``ServerError`` (by its enum name)."""
    cls = CLIENT_ERRORS_BY_SERVER_ERROR.get(name, ServerClientError)
    err = cls(message or name)
    if cls is ServerClientError:
        err.server_error = name  # type: ignore[attr-defined]
    return err
