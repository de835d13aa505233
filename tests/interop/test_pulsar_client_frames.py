"""The frame codec against the official ``pulsar-client`` (its C++ core): a scripted peer
answers just enough of the handshake for the client to produce, and every frame the client
sends must decode, with its checksum verified."""

from __future__ import annotations

import asyncio

import pulsar
import pytest

from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import Frame, FrameDecoder, command_body, decode_batch, encode_command

pytestmark = pytest.mark.integration


class ScriptedPeer:
    """Answers CONNECT, lookups, PRODUCER and SEND; records every frame it gets."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                self.frames.append(frame)
                reply = self.reply(frame)
                if reply is not None:
                    writer.write(encode_command(reply))
        writer.close()

    def reply(self, frame: Frame) -> object | None:
        body = command_body(frame.command)
        kind = frame.command.type
        if kind == pb.BaseCommand.CONNECT:
            return pb.CommandConnected(server_version="scripted", protocol_version=20)
        if kind == pb.BaseCommand.PARTITIONED_METADATA:
            return pb.CommandPartitionedTopicMetadataResponse(
                partitions=0, request_id=body.request_id, response=0
            )
        if kind == pb.BaseCommand.LOOKUP:
            return pb.CommandLookupTopicResponse(
                brokerServiceUrl=f"pulsar://127.0.0.1:{self.port}",
                response=pb.CommandLookupTopicResponse.Connect,
                request_id=body.request_id,
                authoritative=True,
            )
        if kind == pb.BaseCommand.PRODUCER:
            return pb.CommandProducerSuccess(request_id=body.request_id, producer_name="p-1")
        if kind == pb.BaseCommand.SEND:
            return pb.CommandSendReceipt(
                producer_id=body.producer_id,
                sequence_id=body.sequence_id,
                message_id=pb.MessageIdData(ledgerId=1, entryId=body.sequence_id),
            )
        if kind == pb.BaseCommand.CLOSE_PRODUCER:
            return pb.CommandSuccess(request_id=body.request_id)
        if kind == pb.BaseCommand.PING:
            return pb.CommandPong()
        return None


def produce(port: int) -> None:
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
    try:
        batched = client.create_producer(
            "persistent://public/default/batched",
            batching_enabled=True,
            batching_max_messages=3,
            batching_max_publish_delay_ms=1000,
        )
        for i in range(3):  # one batch of three
            batched.send_async(f"batched {i}".encode(), lambda result, message_id: None)
        batched.flush()
        single = client.create_producer(
            "persistent://public/default/single", batching_enabled=False
        )
        single.send(b"single", partition_key="key-1", properties={"a": "b"})
    finally:
        client.close()


async def test_frames_from_the_official_client_decode_with_valid_checksums() -> None:
    peer = ScriptedPeer()
    server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    peer.port = server.sockets[0].getsockname()[1]
    try:
        await asyncio.get_running_loop().run_in_executor(None, produce, peer.port)
    finally:
        server.close()
    kinds = [pb.BaseCommand.Type.Name(f.command.type) for f in peer.frames]
    assert kinds[0] == "CONNECT"
    connect = peer.frames[0].command.connect
    assert connect.client_version.startswith("Pulsar-CPP") and connect.protocol_version >= 19
    sends = [f for f in peer.frames if f.command.type == pb.BaseCommand.SEND]
    assert len(sends) == 2
    assert all(f.checksum_ok and f.problem is None and f.entry for f in sends)
    batch, single = sends
    assert batch.metadata is not None and batch.metadata.num_messages_in_batch == 3
    messages = decode_batch(batch.payload, 3)
    assert [m.payload for m in messages] == [f"batched {i}".encode() for i in range(3)]
    assert single.metadata is not None and not single.metadata.HasField("num_messages_in_batch")
    assert single.payload == b"single" and single.metadata.partition_key == "key-1"
    assert [(p.key, p.value) for p in single.metadata.properties] == [("a", "b")]
