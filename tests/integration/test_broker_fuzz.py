"""Hypothesis against a live broker: whatever one connection sends, the broker keeps serving
everyone else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stripemq.bookie.client import BookKeeper
from stripemq.broker.server import BrokerServer
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import FrameDecoder, base_command, encode_command, encode_payload_command

pytestmark = pytest.mark.integration

TOPIC = "persistent://public/default/fuzz"
ids = st.integers(0, 5)
commands = st.one_of(
    st.builds(lambda r: pb.CommandLookupTopic(topic=TOPIC, request_id=r), ids),
    st.builds(lambda t, r: pb.CommandLookupTopic(topic=t, request_id=r), st.text(max_size=20), ids),
    st.builds(lambda p, r: pb.CommandProducer(topic=TOPIC, producer_id=p, request_id=r), ids, ids),
    st.builds(
        lambda c, r, t: pb.CommandSubscribe(
            topic=TOPIC, subscription="s", subType=t, consumer_id=c, request_id=r
        ),
        ids,
        ids,
        st.integers(0, 3),
    ),
    st.builds(
        lambda c, n: pb.CommandFlow(consumer_id=c, messagePermits=n), ids, st.integers(0, 50)
    ),
    st.builds(
        lambda c, ledger, e: pb.CommandAck(
            consumer_id=c, ack_type=0, message_id=[pb.MessageIdData(ledgerId=ledger, entryId=e)]
        ),
        ids,
        st.integers(0, 3),
        st.integers(0, 10),
    ),
    st.builds(lambda c, r: pb.CommandCloseConsumer(consumer_id=c, request_id=r), ids, ids),
    st.builds(lambda c, r: pb.CommandUnsubscribe(consumer_id=c, request_id=r), ids, ids),
    st.builds(lambda c, r: pb.CommandSeek(consumer_id=c, request_id=r), ids, ids),
    st.just(pb.CommandPing()),
)
frames = st.one_of(
    commands.map(encode_command),
    st.builds(
        lambda p, s, body: encode_payload_command(
            pb.CommandSend(producer_id=p, sequence_id=s), body
        ),
        ids,
        st.integers(0, 100),
        st.binary(max_size=60),
    ),
    st.binary(max_size=40),  # garbage
)


@pytest.fixture
async def broker(metadata_url: str) -> AsyncIterator[BrokerServer]:
    store: MetadataStore = create_metadata_store(metadata_url)
    await store.start()
    bk = BookKeeper(store)
    await bk.start()
    server = BrokerServer(store, bk, port=0)
    await server.start()
    yield server
    await server.stop()
    await bk.close()
    await store.close()


async def still_serving(port: int) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode_command(pb.CommandConnect(client_version="check", protocol_version=20)))
    data = await asyncio.wait_for(reader.read(4096), 5)
    writer.close()
    [frame] = FrameDecoder().feed(data)
    return frame.command.type == pb.BaseCommand.CONNECTED


async def test_random_command_streams_never_stop_the_broker(broker: BrokerServer) -> None:
    loop = asyncio.get_running_loop()
    examples: list[int] = []

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.booleans(), st.lists(frames, max_size=12))
    def run(connect_first: bool, stream: list[bytes]) -> None:
        async def one() -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            if connect_first:
                writer.write(
                    encode_command(
                        base_command(pb.CommandConnect(client_version="fuzz", protocol_version=20))
                    )
                )
            for chunk in stream:
                writer.write(chunk)
            await writer.drain()
            try:
                await asyncio.wait_for(reader.read(65536), 0.2)
            except (TimeoutError, ConnectionError):
                pass
            writer.close()
            assert await still_serving(broker.port)

        asyncio.run_coroutine_threadsafe(one(), loop).result(30)
        examples.append(len(stream))

    await loop.run_in_executor(None, run)
    assert len(examples) >= 50 and sum(examples) > 100  # the streams did run
