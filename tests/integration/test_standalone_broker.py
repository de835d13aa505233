"""``stripemq standalone`` with the official pulsar-client: produce, consume, SIGKILL,
restart on the same data directory, and every acknowledged message is still there."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pulsar
import pytest

from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration


def produce(url: str, count: int) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        client.subscribe("orders", "billing").close()  # the subscription keeps the messages
        # One message per entry: a batch is acknowledged only when all of it is (no
        # batch-index acks by default), so half a batch would come again after a restart.
        producer = client.create_producer("orders", batching_enabled=False)
        for i in range(count):
            producer.send_async(f"order {i}".encode(), lambda result, message_id: None)
        producer.flush()
    finally:
        client.close()


def consume(url: str, count: int | None) -> list[str]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe("orders", "billing")
        got: list[str] = []
        while count is None or len(got) < count:
            try:
                message = consumer.receive(timeout_millis=3000)
            except pulsar.Timeout:
                break
            got.append(message.data().decode())
            consumer.acknowledge(message)
        consumer.close()
        return got
    finally:
        client.close()


async def test_standalone_survives_sigkill_without_losing_a_message(tmp_path: Path) -> None:
    standalone = StandaloneProcess(tmp_path / "data")
    await standalone.start()
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, produce, standalone.service_url, 500)
        first = await loop.run_in_executor(None, consume, standalone.service_url, 200)
        assert first == [f"order {i}" for i in range(200)]
        # The consumer's close returned once the broker had persisted its acks.
        standalone.kill()
        assert standalone.proc is not None and standalone.proc.wait(30) == -signal.SIGKILL

        await standalone.start()
        rest = await loop.run_in_executor(None, consume, standalone.service_url, None)
        assert rest == [f"order {i}" for i in range(200, 500)]
        assert standalone._signal(signal.SIGINT) == 0  # Ctrl-C: a clean stop
    finally:
        standalone.kill()
