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
from pathlib import Path

import pulsar
import pytest

from stripemq.broker.topic import PersistentTopic
from stripemq.managed_ledger.managed_ledger import Entry, ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.testing.polling import until_blocking
from stripemq.testing.standalone import in_process_standalone

pytestmark = pytest.mark.integration

MESSAGES = 150  # more than one read batch (100), so the rewound read stops on acked entries
PINGS = 20  # round trips through the broker's event loop, each at least one turn of it


async def test_rewound_onto_acknowledged_entries_at_the_tail_the_loop_waits(
    tmp_path: Path,
) -> None:
    async with in_process_standalone(tmp_path) as node:
        loop = asyncio.get_running_loop()
        url = f"pulsar://127.0.0.1:{node.broker_config.broker_service_port}"
        topic = "persistent://public/default/tail-holes"
        reads_while_idle: list[int] = []
        reads = 0

        def served() -> PersistentTopic | None:
            assert node.broker is not None and node.broker.server is not None
            return node.broker.server.service.topics.get(topic)

        def acked_on_the_broker() -> int:
            found = served()
            return 0 if found is None else found.subscriptions["sub"].cursor.state.holes.count

        def count_reads(ml: ManagedLedger) -> None:
            read_entries = ml.read_entries

            async def counted(start: Position, max_entries: int) -> list[Entry]:
                nonlocal reads
                reads += 1
                return await read_entries(start, max_entries)

            ml.read_entries = counted  # type: ignore[method-assign]

        def loop_answers() -> bool:
            answered = threading.Event()
            loop.call_soon_threadsafe(answered.set)
            return answered.wait(10)

        def client_side() -> tuple[bytes, bytes]:
            client = pulsar.Client(url, operation_timeout_seconds=10)
            try:
                consumer = client.subscribe(topic, "sub")
                found = served()
                assert found is not None
                count_reads(found.ml)
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
                # Nothing to deliver now: a waiting dispatch loop reads nothing while the
                # event loop turns; a spinning one reads at least once a turn.
                before = reads
                for _ in range(PINGS):
                    assert loop_answers(), "the broker's event loop froze"
                reads_while_idle.append(reads - before)
                producer.send(b"after the holes")
                return again, consumer.receive(10_000).data()
            finally:
                client.close()

        again, after = await loop.run_in_executor(None, client_side)
        assert again == b"m0"
        assert after == b"after the holes"
        # A stray wakeup (a FLOW) may cost a read or two; a spin costs one per turn.
        assert reads_while_idle[0] < PINGS // 4
