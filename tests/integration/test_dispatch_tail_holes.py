"""A subscription whose read position sits on acknowledged entries up to the tail waits.

Rewinding (a redelivery request, a reconnect, a Failover switch) puts the read position
back on entries the consumer has already acknowledged. When the acknowledged run reaches
the end of the topic, the next read returns nothing, and the dispatch loop must wait for new
entries. It must not treat the acknowledged entries as new ones: that kept the event loop to
itself, freezing the broker (and the standalone's bookie) for good.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pulsar
import pytest

from stripemq.testing.polling import until_blocking
from stripemq.testing.standalone import in_process_standalone

pytestmark = pytest.mark.integration

MESSAGES = 150  # more than one read batch (100), so the rewound read stops on acked entries
IDLE_S = 1.0


async def test_rewound_onto_acknowledged_entries_at_the_tail_the_loop_waits(
    tmp_path: Path,
) -> None:
    async with in_process_standalone(tmp_path) as node:
        loop = asyncio.get_running_loop()
        url = f"pulsar://127.0.0.1:{node.broker_config.broker_service_port}"
        topic = "persistent://public/default/tail-holes"
        idle_cpu: list[float] = []

        def acked_on_the_broker() -> int:
            assert node.broker is not None and node.broker.server is not None
            served = node.broker.server.service.topics.get(topic)
            if served is None:
                return 0
            return served.subscriptions["sub"].cursor.state.holes.count

        def loop_answers() -> bool:
            answered = threading.Event()
            loop.call_soon_threadsafe(answered.set)
            return answered.wait(10)

        def client_side() -> tuple[bytes, bytes]:
            client = pulsar.Client(url, operation_timeout_seconds=10)
            try:
                consumer = client.subscribe(topic, "sub")
                producer = client.create_producer(topic, batching_enabled=False)
                for i in range(MESSAGES):
                    producer.send(f"m{i}".encode())
                received = [consumer.receive(10_000) for _ in range(MESSAGES)]
                for message in received[1:]:  # all but the first
                    consumer.acknowledge(message)
                # The client groups acks: the broker must hold them before the rewind.
                until_blocking(
                    lambda: acked_on_the_broker() == MESSAGES - 1, "the broker holds the acks"
                )
                consumer.redeliver_unacknowledged_messages()
                again = consumer.receive(10_000).data()
                assert loop_answers(), "the broker's event loop froze"
                started = time.process_time()
                time.sleep(IDLE_S)  # nothing to deliver: the broker should be idle too
                idle_cpu.append(time.process_time() - started)
                assert loop_answers(), "the broker's event loop froze"
                producer.send(b"after the holes")
                return again, consumer.receive(10_000).data()
            finally:
                client.close()

        again, after = await loop.run_in_executor(None, client_side)
        assert again == b"m0"
        assert after == b"after the holes"
        # A spinning dispatch loop burns the whole second; an idle broker almost none of it.
        assert idle_cpu[0] < IDLE_S / 2
