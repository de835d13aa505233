"""``stripemq standalone`` with the official pulsar-client: produce, consume, SIGKILL,
restart on the same data directory, and every acknowledged message is still there."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pulsar
import pytest

from stripemq.testing.polling import until
from stripemq.testing.ports import free_port

pytestmark = pytest.mark.integration


class StandaloneProcess:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.broker_port, self.bookie_port, self.stats_port = free_port(), free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / "standalone.log"

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.broker_port}"

    async def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "stripemq",
                    "standalone",
                    "--data-dir",
                    str(self.data_dir),
                    "--broker-port",
                    str(self.broker_port),
                    "--bookie-port",
                    str(self.bookie_port),
                    "-c",
                    f"stats_http_port={self.stats_port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        async def serving() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", self.broker_port)
            except OSError:
                return False
            writer.close()
            return True

        await until(serving, "the standalone broker listens", timeout=30)

    def signal(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(30)


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
        await loop.run_in_executor(None, produce, standalone.url, 500)
        first = await loop.run_in_executor(None, consume, standalone.url, 200)
        assert first == [f"order {i}" for i in range(200)]
        await asyncio.sleep(1.5)  # a cursor snapshot (once a second) holds those acks
        assert standalone.signal(signal.SIGKILL) == -signal.SIGKILL

        await standalone.start()
        rest = await loop.run_in_executor(None, consume, standalone.url, None)
        assert rest == [f"order {i}" for i in range(200, 500)]
        assert standalone.signal(signal.SIGINT) == 0  # Ctrl-C: a clean stop
    finally:
        if standalone.proc is not None and standalone.proc.poll() is None:
            standalone.proc.kill()
