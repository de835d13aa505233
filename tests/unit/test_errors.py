"""The error registry (``stripemq.errors``): every code rebuilds the class that carries it,
broker errors answer with their ``ServerError``, retriability, and no transport import."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

from stripemq.errors import (
    BOOKIE_ERRORS_BY_CODE,
    CLIENT_ERRORS_BY_SERVER_ERROR,
    AlreadyClosedError,
    BookieError,
    BookieShuttingDownError,
    BookieTimeoutError,
    BookieUnavailableError,
    BrokerError,
    ClientError,
    ClientTimeoutError,
    ConnectError,
    ConsumerAssignError,
    ConsumerBusyError,
    InvalidConfigurationError,
    InvalidTopicNameError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusyError,
    ReadTimeoutError,
    ServerClientError,
    StripeMQError,
    TopicNotFoundError,
    bookie_code,
    error_for_bk_code,
    error_for_server_error,
    is_retriable,
    server_error_code,
    server_error_of,
)
from stripemq.proto import pulsar_api_pb2 as pb


def subclasses(cls: type) -> list[type]:
    """The subclasses the registry's module defines (a module may derive a private error,
    such as the storage engine's MissingEntryLogError, that never crosses a wire)."""
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *subclasses(sub)]
    return [c for c in found if c.__module__ == "stripemq.errors"]


# --------------------------------------------------------------------------- bookie codes


@pytest.mark.parametrize("cls", subclasses(BookieError), ids=lambda c: c.__name__)
def test_every_bookie_error_has_a_code_that_rebuilds_its_own_class(cls: type) -> None:
    assert BOOKIE_ERRORS_BY_CODE[cls.bk_code] is cls
    rebuilt = error_for_bk_code(cls.bk_code, "from the bookie")
    assert type(rebuilt) is cls
    assert str(rebuilt) == "from the bookie"


def test_timeouts_are_told_apart() -> None:
    # BookKeeper's TimeoutException (-23) once came back as the long-poll ReadTimeoutError.
    assert type(error_for_bk_code(-23, "")) is BookieTimeoutError
    assert type(error_for_bk_code(ReadTimeoutError.bk_code, "")) is ReadTimeoutError
    assert type(error_for_bk_code(-8, "")) is BookieUnavailableError
    shutting_down = error_for_bk_code(BookieShuttingDownError.bk_code, "")
    assert isinstance(shutting_down, BookieUnavailableError)  # still "unavailable" to callers
    assert type(shutting_down) is BookieShuttingDownError


def test_an_unknown_bookie_code_is_a_bookie_error_keeping_the_code() -> None:
    err = error_for_bk_code(-4242, "new")
    assert type(err) is BookieError
    assert err.bk_code == -4242
    assert BookieError.bk_code == -999  # the class is left alone


@pytest.mark.parametrize("cls", [BookieError, *subclasses(BookieError)], ids=lambda c: c.__name__)
def test_grpc_statuses_name_real_grpc_status_codes(cls: type[BookieError]) -> None:
    assert isinstance(grpc.StatusCode[cls.grpc_status], grpc.StatusCode)


def test_a_taken_bookie_code_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="taken by NoSuchLedgerError"):

        @bookie_code(-7)
        class Again(BookieError):
            pass


# --------------------------------------------------------------------------- server errors


@pytest.mark.parametrize(
    "code", [v for v in pb.ServerError.values() if v != pb.UnknownError], ids=pb.ServerError.Name
)
def test_every_server_error_code_rebuilds_its_own_class(code: int) -> None:
    cls = CLIENT_ERRORS_BY_SERVER_ERROR[code]
    rebuilt = error_for_server_error(code, "the broker says no")
    assert type(rebuilt) is cls
    assert rebuilt.server_error == code
    assert str(rebuilt) == "the broker says no"
    assert isinstance(rebuilt, ClientError)
    assert server_error_of(rebuilt) == code  # and a broker raising it answers the same code


def test_every_registered_class_is_registered_under_its_own_code() -> None:
    for code, cls in CLIENT_ERRORS_BY_SERVER_ERROR.items():
        assert cls.server_error == code, cls.__name__


def test_the_two_quota_codes_rebuild_two_classes_of_one_family() -> None:
    held = error_for_server_error(pb.ProducerBlockedQuotaExceededError, "")
    refused = error_for_server_error(pb.ProducerBlockedQuotaExceededException, "")
    assert type(held) is ProducerBlockedQuotaExceededError
    assert type(refused) is ProducerBlockedQuotaExceededException
    assert isinstance(refused, ProducerBlockedQuotaExceededError)


@pytest.mark.parametrize("code", [pb.UnknownError, 99])
def test_unknown_codes_are_server_client_errors_keeping_the_code(code: int) -> None:
    err = error_for_server_error(code, "details")
    assert type(err) is ServerClientError
    assert err.server_error == code
    assert str(err) == "details"
    assert ServerClientError.server_error is None  # the class is left alone


def test_an_empty_message_falls_back_to_the_code_name() -> None:
    assert str(error_for_server_error(pb.ProducerFenced, "")) == "ProducerFenced"
    assert str(error_for_server_error(99, "")) == "ServerError(99)"


def test_a_taken_server_error_code_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="taken by TopicNotFoundError"):

        @server_error_code(pb.TopicNotFound)
        class Again(ServerClientError):
            pass


def test_what_a_broker_answers_for_its_own_errors() -> None:
    assert server_error_of(ManagedLedgerError("disk")) == pb.PersistenceError
    assert server_error_of(ManagedLedgerFencedError("moved")) == pb.ServiceNotReady
    assert server_error_of(BrokerError(pb.TooManyRequests, "slow down")) == pb.TooManyRequests
    assert server_error_of(InvalidTopicNameError("x")) == pb.InvalidTopicName
    assert server_error_of(ConsumerAssignError("overlap")) == pb.ConsumerAssignError
    assert server_error_of(StripeMQError("untyped")) == pb.UnknownError
    assert server_error_of(KeyError("a bug")) == pb.UnknownError


# --------------------------------------------------------------------------- retriability


@pytest.mark.parametrize(
    "code",
    [pb.ServiceNotReady, pb.TooManyRequests, pb.MetadataError, pb.PersistenceError],
    ids=pb.ServerError.Name,
)
def test_transient_server_errors_are_always_retried(code: int) -> None:
    err = error_for_server_error(code, "")
    assert is_retriable(err) and is_retriable(err, reconnecting=True)


@pytest.mark.parametrize(
    "code",
    [
        pb.TopicNotFound,
        pb.ProducerFenced,
        pb.AuthorizationError,
        pb.AuthenticationError,
        pb.NotAllowedError,
        pb.TopicTerminatedError,
        pb.IncompatibleSchema,
        pb.ChecksumError,
        pb.SubscriptionNotFound,
        pb.ConsumerAssignError,
        pb.UnsupportedVersionError,
        pb.InvalidTopicName,
        # Transactions are not served: no attempt changes that.
        pb.TransactionCoordinatorNotFound,
        pb.InvalidTxnStatus,
        pb.TransactionConflict,
        pb.TransactionNotFound,
    ],
    ids=pb.ServerError.Name,
)
def test_final_server_errors_are_never_retried(code: int) -> None:
    err = error_for_server_error(code, "")
    assert not is_retriable(err) and not is_retriable(err, reconnecting=True)


def test_busy_is_retried_only_by_a_reconnection() -> None:
    # The broker may not yet have noticed that this client's previous attachment is gone.
    for err in (ProducerBusyError("busy"), ConsumerBusyError("busy")):
        assert not is_retriable(err)
        assert is_retriable(err, reconnecting=True)
    unknown = error_for_server_error(pb.UnknownError, "")
    assert not is_retriable(unknown) and is_retriable(unknown, reconnecting=True)


def test_client_side_errors_and_foreign_exceptions() -> None:
    assert is_retriable(ClientTimeoutError("slow"))
    assert is_retriable(ConnectError("refused"))
    assert not is_retriable(InvalidConfigurationError("bad url"), reconnecting=True)
    assert not is_retriable(AlreadyClosedError("closed"))
    assert not is_retriable(ValueError("not ours"), reconnecting=True)
    assert not is_retriable(TopicNotFoundError("gone"), reconnecting=True)


def test_client_timeouts_are_builtin_timeouts() -> None:
    assert issubclass(ClientTimeoutError, TimeoutError)
    assert issubclass(ClientTimeoutError, ClientError)


# --------------------------------------------------------------------------- imports


def test_the_client_and_the_errors_load_no_grpc() -> None:
    probe = (
        "import sys, stripemq.errors, stripemq.client; "
        "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
