"""Liveness: a subscription's dispatch loop outlives any failure, and every request gets an
answer even when its handler fails in a way nobody planned for."""

from __future__ import annotations

import logging
import uuid

import pytest

from stripemq.broker.server import BrokerServer
from stripemq.client import aio
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.testing.raw_connection import RawConnection

pytestmark = pytest.mark.integration


async def test_a_dispatch_loop_survives_a_failing_round_and_delivers_everything(
    broker: BrokerServer, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"persistent://public/default/live-{uuid.uuid4().hex[:8]}"
    async with aio.Client(broker.service_url, operation_timeout_seconds=15) as client:
        consumer = await client.subscribe(topic, "sub")
        assert broker.service is not None
        subscription = broker.service.topics[topic].subscriptions["sub"]
        real_plan = subscription.delivery.plan
        failures = 0

        def failing_plan(*args: object, **kwargs: object) -> object:
            nonlocal failures
            if failures < 3:  # three rounds in a row fail, as a bug would
                failures += 1
                raise RuntimeError("injected dispatch bug")
            return real_plan(*args, **kwargs)  # type: ignore[arg-type]

        subscription.delivery.plan = failing_plan  # type: ignore[method-assign]
        producer = await client.create_producer(topic, batching_enabled=False)
        with caplog.at_level(logging.WARNING, logger="stripemq.broker.topic"):
            for i in range(20):
                await producer.send(b"%d" % i)
            received = []
            for _ in range(20):
                message = await consumer.receive(timeout_millis=15_000)
                received.append(int(message.data()))
                await consumer.acknowledge(message)
        assert received == list(range(20))
        assert failures == 3
        reports = [r for r in caplog.records if "dispatch failed" in r.getMessage()]
        assert len(reports) == 1  # logged once for the streak, with its traceback
        assert reports[0].exc_info is not None


async def test_a_request_whose_handler_fails_unexpectedly_gets_an_error(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert broker.service is not None

    async def broken_lookup(*args: object, **kwargs: object) -> str:
        raise KeyError("injected bug in lookup")

    monkeypatch.setattr(broker.service, "lookup_broker", broken_lookup)
    conn = await RawConnection.open(broker.port, handshake=True)
    try:
        conn.command(pb.CommandLookupTopic(topic="persistent://public/default/x", request_id=7))
        answer = await conn.wait_for(pb.BaseCommand.LOOKUP_RESPONSE)
        response = answer.command.lookupTopicResponse
        assert response.request_id == 7
        assert response.response == pb.CommandLookupTopicResponse.Failed
        assert response.error == pb.UnknownError
        conn.command(pb.CommandPing())  # the connection is still served
        await conn.wait_for(pb.BaseCommand.PONG)
    finally:
        await conn.close()


async def test_a_request_whose_inline_handler_fails_unexpectedly_gets_an_error(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = await RawConnection.open(broker.port, handshake=True)
    try:
        conn.command(
            pb.CommandSubscribe(
                topic="persistent://public/default/inline",
                subscription="s",
                subType=pb.CommandSubscribe.Exclusive,
                consumer_id=1,
                request_id=1,
            )
        )
        await conn.expect(pb.BaseCommand.SUCCESS)

        def broken(self: ManagedLedger) -> Position:
            raise KeyError("injected bug")

        monkeypatch.setattr(ManagedLedger, "last_confirmed", property(broken))
        conn.command(pb.CommandGetLastMessageId(consumer_id=1, request_id=2))
        error = (await conn.expect(pb.BaseCommand.ERROR)).error
        assert error.request_id == 2 and error.error == pb.UnknownError
        conn.command(pb.CommandPing())
        await conn.expect(pb.BaseCommand.PONG)
    finally:
        await conn.close()
