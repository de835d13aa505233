"""A producer that pipelines numbered messages, then a consumer that reads them all back.

Used by the publish-order and write-failure tests and ``bench/publish_order.py``, with
either client module (the official ``pulsar`` or ``stripemq.client``: same API). An end
marker is sent after ``flush``: it is stored after every resend, so what the consumer reads
before it is everything the topic holds, duplicates included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

END = b"end"


@dataclass
class PipelinedRun:
    received: list[int]  # the numbers read back, in arrival order
    failures: list[object]  # results of sends that did not succeed
    publish_s: float  # from the first send_async to the end of flush


def send_all_then_read(
    module: ModuleType, url: str, topic: str, count: int, **producer_options: Any
) -> PipelinedRun:
    """Subscribe (earliest), ``send_async`` 0..count-1 then flush, and read back to the end
    marker. Blocking: run it in a thread next to an in-process broker."""
    client = module.Client(url, operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(
            topic,
            "check",
            consumer_type=module.ConsumerType.Exclusive,
            initial_position=module.InitialPosition.Earliest,
        )
        producer = client.create_producer(topic, block_if_queue_full=True, **producer_options)
        failures: list[object] = []

        def sent(result: object, _message_id: object) -> None:
            if result != module.Result.Ok:
                failures.append(result)

        start = time.perf_counter()
        for i in range(count):
            producer.send_async(str(i).encode(), sent)
        producer.flush()
        publish_s = time.perf_counter() - start
        producer.send(END)
        received: list[int] = []
        while (data := consumer.receive(timeout_millis=60_000).data()) != END:
            received.append(int(data))
        return PipelinedRun(received, failures, publish_s)
    finally:
        client.close()
