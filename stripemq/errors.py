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
