"""Dead-letter and retry-letter topics: where a consumer sends the messages it gave up on
(too many redeliveries) or asked to see again later (``reconsume_later``)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING

from stripemq.client.message import Message
from stripemq.client.options import ConsumerDeadLetterPolicy
from stripemq.client.producer import Producer, ProducerConfig, outgoing_message
from stripemq.errors import StripeMQError
from stripemq.proto.topic_name import TopicName

if TYPE_CHECKING:
    from stripemq.client.client import AsyncClient

log = logging.getLogger(__name__)

REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
DLQ_SUFFIX = "-DLQ"
RETRY_SUFFIX = "-RETRY"


def base_topic(topic: str) -> str:
    """The partitioned topic a partition belongs to (the topic itself otherwise)."""
    return str(TopicName.parse(topic).partitioned_topic)


async def _republish(
    producer: Producer,
    message: Message,
    properties: dict[str, str],
    deliver_after_ms: int | None = None,
) -> None:
    """Send ``message`` again (payload, keys, event time) with ``properties``; returns once
    it is durable."""
    outgoing = outgoing_message(
        message.data(),
        properties=properties,
        partition_key=message.partition_key() or None,
        ordering_key=message.ordering_key() or None,
        event_timestamp=message.event_timestamp() or None,
        deliver_after=deliver_after_ms,
    )
    await (await producer.send_message(outgoing))


class DeadLetters:
    """The dead-letter and retry producers of one subscription, created on first use."""

    def __init__(
        self,
        client: AsyncClient,
        topic: str,
        subscription: str,
        policy: ConsumerDeadLetterPolicy,
    ) -> None:
        self.client = client
        self.policy = policy
        origin = base_topic(topic)
        self.dead_letter_topic = policy.dead_letter_topic or f"{origin}-{subscription}{DLQ_SUFFIX}"
        self.retry_letter_topic = (
            policy.retry_letter_topic or f"{origin}-{subscription}{RETRY_SUFFIX}"
        )
        self._producers: dict[str, Producer] = {}
        self._lock = asyncio.Lock()

    @property
    def max_redeliver_count(self) -> int:
        return self.policy.max_redeliver_count

    async def _producer(self, topic: str, initial_subscription: str | None) -> Producer:
        async with self._lock:
            producer = self._producers.get(topic)
            if producer is None or producer.closed or producer.failure is not None:
                config = ProducerConfig(
                    initial_subscription_name=initial_subscription, block_if_queue_full=True
                )
                producer = await self.client.create_single_producer(topic, config)
                self._producers[topic] = producer
            return producer

    async def send_to_dead_letter(self, message: Message) -> None:
        """Publish ``message`` to the dead-letter topic, with where it came from."""
        properties = message.properties()
        properties.setdefault(REAL_TOPIC, base_topic(message.topic_name()))
        properties.setdefault(ORIGIN_MESSAGE_ID, str(message.message_id()))
        producer = await self._producer(
            self.dead_letter_topic, self.policy.initial_subscription_name
        )
        await _republish(producer, message, properties)
        log.info("sent %s to dead-letter topic %s", message.message_id(), self.dead_letter_topic)

    async def send_to_retry(
        self, message: Message, delay_ms: int, extra: dict[str, str] | None
    ) -> bool:
        """Publish ``message`` to the retry topic to come back after ``delay_ms``; once it
        has come back ``max_redeliver_count`` times it goes to the dead-letter topic
        instead. True if it went to the retry topic."""
        properties = message.properties()
        properties.update(extra or {})
        times = int(properties.get(RECONSUME_TIMES, "0") or 0) + 1
        properties.setdefault(REAL_TOPIC, base_topic(message.topic_name()))
        properties.setdefault(ORIGIN_MESSAGE_ID, str(message.message_id()))
        properties[RECONSUME_TIMES] = str(times)
        properties[DELAY_TIME] = str(delay_ms)
        if times > self.max_redeliver_count:
            dead = dataclasses.replace(message, _properties=properties)
            await self.send_to_dead_letter(dead)
            return False
        producer = await self._producer(self.retry_letter_topic, None)
        await _republish(producer, message, properties, delay_ms)
        return True

    async def close(self) -> None:
        producers = list(self._producers.values())
        self._producers.clear()
        for producer in producers:
            try:
                await producer.close()
            except StripeMQError as exc:
                log.debug("closing dead-letter producer: %s", exc)
