"""ClientSession driven with frames: what it writes and the events it returns."""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.client_session import (
    ActiveConsumerChanged,
    ClientSession,
    Connected,
    ConsumerClosed,
    EndOfTopic,
    HandshakeRefused,
    MessageReceived,
    ProducerClosed,
    ProducerQueued,
    RequestFailed,
    ResponseReceived,
    SendFailed,
    SendReceipt,
    UnexpectedResponse,
    UnhandledCommand,
    Unrouted,
)
from stripemq.proto.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_PADDING,
    FrameDecoder,
    FrameTooLargeError,
    ProtocolError,
    base_command,
    encode_command,
    encode_entry,
    encode_payload_command,
)
from stripemq.proto.session import (
    PROTOCOL_VERSION,
    HandshakeError,
    LocalProtocolError,
    SessionState,
)

Session = ClientSession[str, str]


def written(session: Session) -> list[pb.BaseCommand]:
    """The commands in the session's outbox (which it empties)."""
    return [frame.command for frame in FrameDecoder().feed(session.data_to_send())]


def receive(session: Session, *bodies: Message) -> list[object]:
    return session.receive_data(b"".join(encode_command(body) for body in bodies))


def connected(max_message_size: int | None = None) -> Session:
    session: Session = ClientSession("test-client")
    session.connect()
    session.data_to_send()
    answer = pb.CommandConnected(server_version="broker-1", protocol_version=17)
    if max_message_size is not None:
        answer.max_message_size = max_message_size
    receive(session, answer)
    return session


# ---------------------------------------------------------------------------- handshake


def test_connect_queues_connect_with_the_one_protocol_version() -> None:
    session: Session = ClientSession("test-client")
    assert session.state is SessionState.IDLE
    assert session.data_to_send() == b""
    session.connect()
    assert written(session) == [
        base_command(pb.CommandConnect(client_version="test-client", protocol_version=20))
    ]
    assert PROTOCOL_VERSION == 20
    assert session.state is SessionState.HANDSHAKE
    assert session.data_to_send() == b""  # the outbox was emptied


def test_connect_twice_is_a_local_error() -> None:
    session: Session = ClientSession("test-client")
    session.connect()
    with pytest.raises(LocalProtocolError):
        session.connect()


def test_connected_gives_the_negotiated_version_and_the_brokers_frame_limit() -> None:
    session: Session = ClientSession("test-client", protocol_version=19)
    session.connect()
    assert written(session)[0].connect.protocol_version == 19
    events = receive(
        session,
        pb.CommandConnected(server_version="broker-1", protocol_version=15, max_message_size=1000),
    )
    assert events == [Connected("broker-1", 15, 1000)]
    assert session.state is SessionState.CONNECTED
    assert (session.server_version, session.protocol_version) == ("broker-1", 15)
    assert session.max_message_size == 1000
    assert session.max_frame_size == 1000 + FRAME_PADDING
    assert written(session) == []  # nothing to answer


def test_connected_without_a_limit_keeps_the_default() -> None:
    session = connected()
    assert session.max_message_size == DEFAULT_MAX_MESSAGE_SIZE
    assert session.protocol_version == 17


def test_a_frame_over_the_negotiated_limit_is_a_protocol_error() -> None:
    oversized = (100 + FRAME_PADDING + 1).to_bytes(4, "big")  # a frame's announced size
    assert connected().receive_data(oversized) == []  # within the default: wait for the rest
    with pytest.raises(FrameTooLargeError):
        connected(max_message_size=100).receive_data(oversized)


def test_an_error_in_answer_to_connect_refuses_the_handshake_and_ends_the_session() -> None:
    session: Session = ClientSession("test-client")
    session.connect()
    session.data_to_send()
    refusal = pb.CommandError(request_id=0, error=pb.AuthenticationError, message="who are you")
    events = receive(session, refusal, pb.CommandPing())
    assert events == [
        HandshakeRefused(pb.AuthenticationError, "who are you", base_command(refusal))
    ]
    assert session.state is SessionState.CLOSED
    assert written(session) == []  # the PING behind it is dropped, not answered


@pytest.mark.parametrize(
    "body, name",
    [(pb.CommandPing(), "PING"), (pb.CommandSuccess(request_id=0), "SUCCESS")],
)
def test_anything_else_in_answer_to_connect_is_a_handshake_error(body: Message, name: str) -> None:
    session: Session = ClientSession("test-client")
    session.connect()
    with pytest.raises(HandshakeError, match=f"expected CONNECTED, got {name}"):
        receive(session, body)
    assert issubclass(HandshakeError, ProtocolError)


def test_the_broker_may_not_speak_before_connect() -> None:
    session: Session = ClientSession("test-client")
    with pytest.raises(HandshakeError, match="CONNECTED before the client sent CONNECT"):
        receive(session, pb.CommandConnected(server_version="x"))


def test_frames_behind_connected_are_handled_as_connected() -> None:
    session: Session = ClientSession("test-client")
    session.connect()
    session.data_to_send()
    events = receive(session, pb.CommandConnected(server_version="b"), pb.CommandPing())
    assert events == [Connected("b", 0, DEFAULT_MAX_MESSAGE_SIZE)]
    assert written(session) == [base_command(pb.CommandPong())]


# ---------------------------------------------------------------------------- requests


def test_request_ids_count_up_from_zero() -> None:
    session = connected()
    assert [session.new_request_id() for _ in range(3)] == [0, 1, 2]


def test_a_request_before_connected_is_a_local_error() -> None:
    session: Session = ClientSession("test-client")
    session.connect()
    with pytest.raises(LocalProtocolError):
        session.send_request(pb.CommandLookupTopic(topic="t", request_id=0), 0)


def test_a_request_is_written_and_its_success_matched_by_id() -> None:
    session = connected()
    lookup = pb.CommandLookupTopic(topic="persistent://a/b/c", request_id=4)
    session.send_request(lookup, 4)
    assert written(session) == [base_command(lookup)]
    assert session.outstanding == {4}
    answer = pb.CommandLookupTopicResponse(
        request_id=4, response=pb.CommandLookupTopicResponse.Connect, brokerServiceUrl="pulsar://x"
    )
    assert receive(session, answer) == [ResponseReceived(4, base_command(answer))]
    assert session.outstanding == frozenset()
    # The same answer again is nobody's.
    assert receive(session, answer) == [UnexpectedResponse(4, base_command(answer))]


def test_a_queued_producer_s_request_waits_for_the_ready_answer() -> None:
    session = connected()
    producer = pb.CommandProducer(
        topic="t", producer_id=1, request_id=6, producer_access_mode=pb.WaitForExclusive
    )
    session.send_request(producer, 6)
    queued = pb.CommandProducerSuccess(request_id=6, producer_name="p", producer_ready=False)
    assert receive(session, queued) == [ProducerQueued(6)]
    assert session.outstanding == {6}
    ready = pb.CommandProducerSuccess(request_id=6, producer_name="p")
    assert receive(session, ready) == [ResponseReceived(6, base_command(ready))]
    assert session.outstanding == frozenset()


def test_an_outstanding_id_may_not_be_sent_twice() -> None:
    session = connected()
    session.send_request(pb.CommandSeek(consumer_id=1, request_id=3), 3)
    with pytest.raises(LocalProtocolError):
        session.send_request(pb.CommandSeek(consumer_id=1, request_id=3), 3)


def test_a_response_to_an_unknown_request_id_is_unexpected() -> None:
    session = connected()
    session.send_request(pb.CommandCloseProducer(producer_id=1, request_id=1), 1)
    answer = pb.CommandSuccess(request_id=99)
    assert receive(session, answer) == [UnexpectedResponse(99, base_command(answer))]
    assert session.outstanding == {1}


def test_a_forgotten_request_s_late_answer_is_unexpected() -> None:
    session = connected()
    session.send_request(pb.CommandCloseConsumer(consumer_id=1, request_id=2), 2)
    session.forget_request(2)
    answer = pb.CommandSuccess(request_id=2)
    assert receive(session, answer) == [UnexpectedResponse(2, base_command(answer))]


def _sent(session: Session, request_id: int) -> None:
    session.send_request(pb.CommandSuccess(request_id=request_id), request_id)


@pytest.mark.parametrize(
    "answer, error, message",
    [
        (
            pb.CommandError(request_id=5, error=pb.TopicNotFound, message="gone"),
            pb.TopicNotFound,
            "gone",
        ),
        (
            pb.CommandLookupTopicResponse(
                request_id=5,
                response=pb.CommandLookupTopicResponse.Failed,
                error=pb.ServiceNotReady,
                message="later",
            ),
            pb.ServiceNotReady,
            "later",
        ),
        (
            pb.CommandLookupTopicResponse(
                request_id=5, response=pb.CommandLookupTopicResponse.Failed, message="no code"
            ),
            None,
            "no code",
        ),
        (
            pb.CommandPartitionedTopicMetadataResponse(
                request_id=5,
                response=pb.CommandPartitionedTopicMetadataResponse.Failed,
                error=pb.AuthorizationError,
                message="no",
            ),
            pb.AuthorizationError,
            "no",
        ),
        (
            pb.CommandPartitionedTopicMetadataResponse(
                request_id=5, response=pb.CommandPartitionedTopicMetadataResponse.Failed
            ),
            None,
            "",
        ),
        (
            pb.CommandAckResponse(
                consumer_id=1, request_id=5, error=pb.NotAllowedError, message="batch size"
            ),
            pb.NotAllowedError,
            "batch size",
        ),
    ],
)
def test_refusals_carry_the_protocol_s_code(
    answer: Message, error: int | None, message: str
) -> None:
    session = connected()
    _sent(session, 5)
    assert receive(session, answer) == [RequestFailed(5, base_command(answer), error, message)]
    assert session.outstanding == frozenset()


@pytest.mark.parametrize(
    "answer",
    [
        pb.CommandSuccess(request_id=5),
        pb.CommandProducerSuccess(request_id=5, producer_name="p"),
        pb.CommandPartitionedTopicMetadataResponse(
            request_id=5, partitions=3, response=pb.CommandPartitionedTopicMetadataResponse.Success
        ),
        pb.CommandAckResponse(consumer_id=1, request_id=5),
        pb.CommandGetLastMessageIdResponse(
            request_id=5, last_message_id=pb.MessageIdData(ledgerId=1, entryId=2)
        ),
        pb.CommandGetTopicsOfNamespaceResponse(request_id=5, topics=["a"]),
    ],
)
def test_successes_are_responses(answer: Message) -> None:
    session = connected()
    _sent(session, 5)
    assert receive(session, answer) == [ResponseReceived(5, base_command(answer))]


def test_close_ends_every_request_and_unregisters_everyone() -> None:
    session = connected()
    _sent(session, 1)
    session.data_to_send()
    session.producers[1] = "p1"
    session.consumers[2] = "c2"
    session.producers[3] = "p3"
    assert session.close() == ["p1", "p3", "c2"]
    assert session.state is SessionState.CLOSED
    assert session.outstanding == frozenset()
    assert session.producers == {} and session.consumers == {}
    assert receive(session, pb.CommandSuccess(request_id=1), pb.CommandPing()) == []
    assert written(session) == []
    with pytest.raises(LocalProtocolError):
        _sent(session, 2)


# ---------------------------------------------------------------------------- routing


def test_ping_is_answered_with_pong_and_pong_is_taken_silently() -> None:
    session = connected()
    assert receive(session, pb.CommandPing(), pb.CommandPong(), pb.CommandPing()) == []
    assert written(session) == [base_command(pb.CommandPong())] * 2


def test_ping_queues_a_ping() -> None:
    session = connected()
    session.ping()
    assert written(session) == [base_command(pb.CommandPing())]


def test_send_receipts_and_errors_go_to_their_producer() -> None:
    session = connected()
    session.producers[1] = "p1"
    receipt = pb.CommandSendReceipt(
        producer_id=1, sequence_id=7, message_id=pb.MessageIdData(ledgerId=3, entryId=4)
    )
    error = pb.CommandSendError(
        producer_id=1, sequence_id=8, error=pb.PersistenceError, message="bookies down"
    )
    assert receive(session, receipt, error) == [
        SendReceipt(1, "p1", receipt),
        SendFailed(1, "p1", error),
    ]


def test_commands_for_unknown_producer_ids_are_unrouted() -> None:
    session = connected()
    session.producers[1] = "p1"
    receipt = pb.CommandSendReceipt(producer_id=2, sequence_id=0)
    error = pb.CommandSendError(producer_id=3, sequence_id=0, error=pb.UnknownError, message="")
    close = pb.CommandCloseProducer(producer_id=4, request_id=0)
    assert receive(session, receipt, error, close) == [
        Unrouted(pb.BaseCommand.SEND_RECEIPT, 2, base_command(receipt)),
        Unrouted(pb.BaseCommand.SEND_ERROR, 3, base_command(error)),
        Unrouted(pb.BaseCommand.CLOSE_PRODUCER, 4, base_command(close)),
    ]
    assert session.producers == {1: "p1"}


def test_close_producer_unregisters_it() -> None:
    session = connected()
    session.producers[1] = "p1"
    close = pb.CommandCloseProducer(producer_id=1, request_id=0)
    receipt = pb.CommandSendReceipt(producer_id=1, sequence_id=0)
    assert receive(session, close, receipt) == [
        ProducerClosed(1, "p1"),
        Unrouted(pb.BaseCommand.SEND_RECEIPT, 1, base_command(receipt)),
    ]
    assert session.producers == {}


def test_messages_go_to_their_consumer_with_the_entry() -> None:
    session = connected()
    session.consumers[2] = "c2"
    entry = encode_entry(
        pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"hi"
    )
    message = pb.CommandMessage(consumer_id=2, message_id=pb.MessageIdData(ledgerId=1, entryId=0))
    stray = pb.CommandMessage(consumer_id=9, message_id=pb.MessageIdData(ledgerId=1, entryId=1))
    events = session.receive_data(
        encode_payload_command(message, entry) + encode_payload_command(stray, entry)
    )
    first, second = events
    assert isinstance(first, MessageReceived)
    assert (first.consumer_id, first.consumer, first.command) == (2, "c2", message)
    assert first.frame.entry == entry and first.frame.payload == b"hi"
    assert isinstance(second, Unrouted)
    assert (second.kind, second.handle_id) == (pb.BaseCommand.MESSAGE, 9)


def test_consumer_notices_go_to_their_consumer() -> None:
    session = connected()
    session.consumers[2] = "c2"
    change = pb.CommandActiveConsumerChange(consumer_id=2, is_active=True)
    end = pb.CommandReachedEndOfTopic(consumer_id=2)
    close = pb.CommandCloseConsumer(consumer_id=2, request_id=0)
    again = pb.CommandActiveConsumerChange(consumer_id=2, is_active=False)
    assert receive(session, change, end, close, again) == [
        ActiveConsumerChanged(2, "c2", True),
        EndOfTopic(2, "c2"),
        ConsumerClosed(2, "c2"),
        Unrouted(pb.BaseCommand.ACTIVE_CONSUMER_CHANGE, 2, base_command(again)),
    ]
    assert session.consumers == {}


def test_consumer_notices_for_unknown_ids_are_unrouted() -> None:
    session = connected()
    end = pb.CommandReachedEndOfTopic(consumer_id=5)
    close = pb.CommandCloseConsumer(consumer_id=6, request_id=0)
    assert receive(session, end, close) == [
        Unrouted(pb.BaseCommand.REACHED_END_OF_TOPIC, 5, base_command(end)),
        Unrouted(pb.BaseCommand.CLOSE_CONSUMER, 6, base_command(close)),
    ]


def test_what_the_client_does_not_handle_is_reported() -> None:
    session = connected()
    migrated = pb.CommandTopicMigrated(
        resource_id=1, resource_type=pb.CommandTopicMigrated.Producer
    )
    again = pb.CommandConnected(server_version="b")
    bodiless = pb.BaseCommand(type=pb.BaseCommand.MESSAGE)
    assert receive(session, migrated, again, bodiless) == [
        UnhandledCommand(pb.BaseCommand.TOPIC_MIGRATED, base_command(migrated)),
        UnhandledCommand(pb.BaseCommand.CONNECTED, base_command(again)),
        UnhandledCommand(pb.BaseCommand.MESSAGE, bodiless),
    ]
    assert written(session) == []


def test_garbage_is_a_protocol_error() -> None:
    session = connected()
    with pytest.raises(ProtocolError):
        session.receive_data(b"\x00\x00\x00\x05\x00\x00\x00\x09x")
