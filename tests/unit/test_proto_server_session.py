"""ServerSession driven with frames: what it answers and the events it hands over."""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import (
    FRAME_PADDING,
    FrameDecoder,
    FrameTooLargeError,
    base_command,
    encode_command,
    encode_entry,
    encode_payload_command,
)
from stripemq.proto.server_session import (
    ClientConnected,
    ConsumerCommand,
    MalformedCommand,
    Request,
    SendReceived,
    ServerSession,
    UnsupportedCommand,
)
from stripemq.proto.session import (
    PROTOCOL_VERSION,
    HandshakeError,
    Keepalive,
    Liveness,
    SessionState,
    negotiate_version,
)

Session = ServerSession[str, str]
ENTRY = encode_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"x")


def written(session: Session) -> list[pb.BaseCommand]:
    """The commands in the session's outbox (which it empties)."""
    return [frame.command for frame in FrameDecoder().feed(session.data_to_send())]


def receive(session: Session, *bodies: Message) -> list[object]:
    return session.receive_data(b"".join(encode_command(body) for body in bodies))


def connected(**kwargs: int) -> Session:
    session: Session = ServerSession("test-broker", **kwargs)
    receive(session, pb.CommandConnect(client_version="c", protocol_version=PROTOCOL_VERSION))
    session.data_to_send()
    return session


def send(producer_id: int, sequence_id: int, entry: bytes = ENTRY) -> bytes:
    command = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id, num_messages=1)
    return encode_payload_command(command, entry)


# ---------------------------------------------------------------------------- handshake


@pytest.mark.parametrize(
    "first",
    [
        pb.CommandPing(),
        pb.CommandLookupTopic(topic="t", request_id=1),
        pb.CommandProducer(topic="t", producer_id=1, request_id=1),
        pb.BaseCommand(type=pb.BaseCommand.CONNECT),  # CONNECT without its body
    ],
)
def test_the_first_command_must_be_connect(first: Message) -> None:
    session: Session = ServerSession("test-broker")
    assert session.state is SessionState.HANDSHAKE
    with pytest.raises(HandshakeError, match="the first command must be CONNECT"):
        receive(session, first)
    assert written(session) == []
    assert not session.connected


@pytest.mark.parametrize("offered, spoken", [(15, 15), (20, 20), (25, 20), (None, 0)])
def test_connect_is_answered_at_the_lower_version(offered: int | None, spoken: int) -> None:
    session: Session = ServerSession("test-broker", max_message_size=1234)
    connect = pb.CommandConnect(client_version="client-9")
    if offered is not None:
        connect.protocol_version = offered
    assert receive(session, connect) == [ClientConnected("client-9", spoken)]
    assert written(session) == [
        base_command(
            pb.CommandConnected(
                server_version="test-broker", protocol_version=spoken, max_message_size=1234
            )
        )
    ]
    assert session.connected and session.protocol_version == spoken


def test_the_broker_s_own_version_bounds_the_negotiation() -> None:
    session: Session = ServerSession("test-broker", protocol_version=12)
    assert receive(session, pb.CommandConnect(client_version="c", protocol_version=20)) == [
        ClientConnected("c", 12)
    ]
    assert negotiate_version(7) == 7 and negotiate_version(99) == PROTOCOL_VERSION == 20


@pytest.mark.parametrize(
    ("client_version", "protocol_version", "told"),
    [
        ("Pulsar-Java-v3.3.0", 19, True),
        ("stripemq-0.1", 20, True),
        ("Pulsar Go 0.12.0", 8, False),  # before v9: Pulsar's brokers do not send it either
        ("Pulsar-CPP-v4.2.0", 20, False),  # its connection would close on it
    ],
)
def test_who_is_told_the_end_of_a_topic(
    client_version: str, protocol_version: int, told: bool
) -> None:
    session: Session = ServerSession("test-broker")
    assert not session.understands_reached_end_of_topic  # not connected yet
    connect = pb.CommandConnect(client_version=client_version, protocol_version=protocol_version)
    receive(session, connect)
    assert session.understands_reached_end_of_topic is told


def test_a_second_connect_is_not_supported_and_not_answered() -> None:
    session = connected()
    again = pb.CommandConnect(client_version="c", protocol_version=20)
    assert receive(session, again) == [UnsupportedCommand(pb.BaseCommand.CONNECT, None)]
    assert written(session) == []


def test_frames_over_the_limit_are_a_protocol_error() -> None:
    session = connected(max_message_size=100)
    assert session.max_frame_size == 100 + FRAME_PADDING
    with pytest.raises(FrameTooLargeError):
        session.feed((100 + FRAME_PADDING + 1).to_bytes(4, "big"))


# ---------------------------------------------------------------------------- answered here


def test_ping_is_answered_and_pong_taken() -> None:
    session = connected()
    assert receive(session, pb.CommandPing(), pb.CommandPong()) == []
    assert written(session) == [base_command(pb.CommandPong())]


def test_unsupported_commands_with_a_request_id_are_refused() -> None:
    session = connected()
    stats = pb.CommandConsumerStats(request_id=5, consumer_id=1)
    auth = pb.CommandAuthResponse()  # no request id: nothing to answer
    assert receive(session, stats, auth) == [
        UnsupportedCommand(pb.BaseCommand.CONSUMER_STATS, 5),
        UnsupportedCommand(pb.BaseCommand.AUTH_RESPONSE, None),
    ]
    assert written(session) == [
        base_command(
            pb.CommandError(
                request_id=5, error=pb.NotAllowedError, message="CONSUMER_STATS is not supported"
            )
        )
    ]


def test_a_served_type_without_its_body_is_malformed_and_not_answered() -> None:
    session = connected()
    bodiless = [pb.BaseCommand(type=kind) for kind in (pb.BaseCommand.SEND, pb.BaseCommand.LOOKUP)]
    events = session.receive_data(b"".join(encode_command(c) for c in bodiless))
    assert events == [
        MalformedCommand(pb.BaseCommand.SEND),
        MalformedCommand(pb.BaseCommand.LOOKUP),
    ]
    assert written(session) == []


def test_a_send_for_an_unknown_producer_is_refused() -> None:
    session = connected()
    session.producers[1] = "p1"
    assert session.receive_data(send(2, 7)) == []
    assert written(session) == [
        base_command(
            pb.CommandSendError(
                producer_id=2, sequence_id=7, error=pb.NotAllowedError, message="no such producer"
            )
        )
    ]


def test_a_send_with_a_bad_checksum_is_refused() -> None:
    session = connected()
    session.producers[1] = "p1"
    corrupt = bytearray(ENTRY)
    corrupt[-1] ^= 0xFF
    assert session.receive_data(send(1, 3, bytes(corrupt))) == []
    assert written(session) == [
        base_command(
            pb.CommandSendError(
                producer_id=1, sequence_id=3, error=pb.ChecksumError, message="checksum mismatch"
            )
        )
    ]


def test_a_send_without_metadata_is_refused_as_unknown() -> None:
    session = connected()
    session.producers[1] = "p1"
    assert session.receive_data(send(1, 4, b"")) == []
    [error] = written(session)
    assert error.send_error.error == pb.UnknownError
    assert error.send_error.message == "no metadata size"


def test_get_last_message_id_for_an_unknown_consumer_is_refused() -> None:
    session = connected()
    assert receive(session, pb.CommandGetLastMessageId(consumer_id=3, request_id=9)) == []
    assert written(session) == [
        base_command(
            pb.CommandError(request_id=9, error=pb.ConsumerNotFound, message="no such consumer")
        )
    ]


def test_flow_and_redeliver_for_unknown_consumers_are_dropped() -> None:
    session = connected()
    session.consumers[1] = "c1"
    flow = pb.CommandFlow(consumer_id=2, messagePermits=10)
    redeliver = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=2)
    assert receive(session, flow, redeliver) == []
    assert written(session) == []


# ---------------------------------------------------------------------------- handed over


def test_a_send_for_a_known_producer_is_handed_over_with_its_frame() -> None:
    session = connected()
    session.producers[1] = "p1"
    [event] = session.receive_data(send(1, 5))
    assert isinstance(event, SendReceived)
    assert (event.producer_id, event.producer, event.command.sequence_id) == (1, "p1", 5)
    assert event.frame.entry == ENTRY and event.frame.payload == b"x"
    assert (event.kind, event.request_id) == (pb.BaseCommand.SEND, None)
    assert written(session) == []


@pytest.mark.parametrize(
    "body",
    [
        pb.CommandFlow(consumer_id=1, messagePermits=10),
        pb.CommandRedeliverUnacknowledgedMessages(consumer_id=1),
        pb.CommandGetLastMessageId(consumer_id=1, request_id=4),
        pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual),
    ],
)
def test_consumer_commands_go_to_their_consumer(body: Message) -> None:
    session = connected()
    session.consumers[1] = "c1"
    kind = base_command(body).type
    assert receive(session, body) == [ConsumerCommand(kind, 1, "c1", body)]
    assert written(session) == []


def test_an_ack_for_an_unknown_consumer_is_handed_over_for_its_bounds_check() -> None:
    session = connected()
    ack = pb.CommandAck(consumer_id=4, ack_type=pb.CommandAck.Individual, request_id=2)
    [event] = receive(session, ack)
    assert event == ConsumerCommand(pb.BaseCommand.ACK, 4, None, ack)
    assert isinstance(event, ConsumerCommand) and event.request_id == 2
    assert written(session) == []


@pytest.mark.parametrize(
    "body, request_id",
    [
        (pb.CommandLookupTopic(topic="t", request_id=1), 1),
        (pb.CommandPartitionedTopicMetadata(topic="t", request_id=2), 2),
        (pb.CommandGetTopicsOfNamespace(namespace="a/b", request_id=3), 3),
        (pb.CommandProducer(topic="t", producer_id=1, request_id=4), 4),
        (pb.CommandCloseProducer(producer_id=9, request_id=5), 5),
        (
            pb.CommandSubscribe(
                topic="t", subscription="s", subType=0, consumer_id=1, request_id=6
            ),
            6,
        ),
        (pb.CommandCloseConsumer(consumer_id=9, request_id=7), 7),
        (pb.CommandUnsubscribe(consumer_id=9, request_id=8), 8),
        (pb.CommandSeek(consumer_id=9, request_id=9), 9),
    ],
)
def test_requests_are_handed_over_whatever_their_ids(body: Message, request_id: int) -> None:
    session = connected()
    [event] = receive(session, body)
    assert isinstance(event, Request)
    assert (event.kind, event.body, event.request_id) == (base_command(body).type, body, request_id)
    assert written(session) == []


# ---------------------------------------------------------------------------- ids


def test_an_id_is_reserved_once_until_released() -> None:
    session = connected()
    assert session.reserve("producer", 1)
    assert not session.reserve("producer", 1)
    assert session.reserve("consumer", 1)  # ids of producers and consumers are apart
    session.release("producer", 1)
    assert session.reserve("producer", 1)


def test_closing_a_producer_or_consumer_tells_the_client() -> None:
    session = connected()
    session.producers[1] = "p1"
    session.consumers[2] = "c2"
    assert session.close_producer(1) == "p1"
    assert session.close_consumer(2) == "c2"
    assert session.close_consumer(3) is None
    assert written(session) == [
        base_command(pb.CommandCloseProducer(producer_id=1, request_id=0)),
        base_command(pb.CommandCloseConsumer(consumer_id=2, request_id=0)),
        base_command(pb.CommandCloseConsumer(consumer_id=3, request_id=0)),
    ]
    assert session.producers == {} and session.consumers == {}
    assert session.receive_data(send(1, 0)) == []
    assert written(session)[0].send_error.message == "no such producer"


def test_a_closed_session_drops_what_arrives() -> None:
    session = connected()
    session.close()
    assert session.state is SessionState.CLOSED
    assert receive(session, pb.CommandPing(), pb.CommandLookupTopic(topic="t", request_id=1)) == []
    assert written(session) == []


# ---------------------------------------------------------------------------- answers


def test_refusals_of_lookups_and_schema_requests_use_their_response_types() -> None:
    session = connected()
    session.refuse(pb.BaseCommand.LOOKUP, 1, pb.ServiceNotReady, "a")
    session.refuse(pb.BaseCommand.PARTITIONED_METADATA, 2, pb.TopicNotFound, "b")
    session.refuse(pb.BaseCommand.SUBSCRIBE, 3, pb.ConsumerBusy, "c")
    session.refuse(pb.BaseCommand.GET_SCHEMA, 4, pb.TopicNotFound, "d")
    session.refuse(pb.BaseCommand.GET_OR_CREATE_SCHEMA, 5, pb.IncompatibleSchema, "e")
    assert written(session) == [
        base_command(
            pb.CommandLookupTopicResponse(
                request_id=1,
                response=pb.CommandLookupTopicResponse.Failed,
                error=pb.ServiceNotReady,
                message="a",
            )
        ),
        base_command(
            pb.CommandPartitionedTopicMetadataResponse(
                request_id=2,
                response=pb.CommandPartitionedTopicMetadataResponse.Failed,
                error=pb.TopicNotFound,
                message="b",
            )
        ),
        base_command(pb.CommandError(request_id=3, error=pb.ConsumerBusy, message="c")),
        base_command(
            pb.CommandGetSchemaResponse(
                request_id=4, error_code=pb.TopicNotFound, error_message="d"
            )
        ),
        base_command(
            pb.CommandGetOrCreateSchemaResponse(
                request_id=5, error_code=pb.IncompatibleSchema, error_message="e"
            )
        ),
    ]


def test_acks_are_answered_only_when_they_ask() -> None:
    session = connected()
    asked = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, request_id=5)
    silent = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual)
    session.answer_ack(asked, None, "")
    session.answer_ack(asked, pb.ConsumerNotFound, "no consumer 1")
    session.answer_ack(silent, pb.NotAllowedError, "nope")
    assert written(session) == [
        base_command(pb.CommandAckResponse(consumer_id=1, request_id=5)),
        base_command(
            pb.CommandAckResponse(
                consumer_id=1, request_id=5, error=pb.ConsumerNotFound, message="no consumer 1"
            )
        ),
    ]


def test_refuse_send_answers_by_sequence_id() -> None:
    session = connected()
    session.refuse_send(
        pb.CommandSend(producer_id=3, sequence_id=11), pb.PersistenceError, "in flight"
    )
    assert written(session) == [
        base_command(
            pb.CommandSendError(
                producer_id=3, sequence_id=11, error=pb.PersistenceError, message="in flight"
            )
        )
    ]


# ---------------------------------------------------------------------------- keep-alive


def test_keepalive_pings_after_one_quiet_interval_and_gives_up_after_two() -> None:
    keepalive = Keepalive(interval_s=10.0, last_heard=100.0)
    assert keepalive.check(109.9) is Liveness.FINE
    assert keepalive.check(110.0) is Liveness.PING
    assert keepalive.check(120.0) is Liveness.DEAD
    keepalive.heard(115.0)
    assert keepalive.check(120.0) is Liveness.FINE
    assert keepalive.quiet_for(130.0) == 15.0


def test_an_optional_request_id_counts_only_when_set() -> None:
    from stripemq.proto.session import request_id_of

    ack = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual)
    assert request_id_of(ack) is None  # not "request 0", the client's first request
    ack.request_id = 0
    assert request_id_of(ack) == 0
    assert request_id_of(pb.CommandLookupTopic(topic="t", request_id=7)) == 7
    assert request_id_of(pb.CommandFlow(consumer_id=1, messagePermits=1)) is None
    assert request_id_of(None) is None
