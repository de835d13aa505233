"""Readers: a non-durable, exclusive view of one topic from a chosen message on."""

from __future__ import annotations

from stripemq.client.consumer import TopicConsumer
from stripemq.client.message import Message, MessageId


class Reader:
    """Reads a topic in order from its start message, acknowledging nothing."""

    def __init__(self, consumer: TopicConsumer) -> None:
        self._consumer = consumer

    def topic(self) -> str:
        return self._consumer.topic_name

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; ``TimeoutError`` after the timeout."""
        return await self._consumer.receive(timeout_millis)

    async def has_message_available(self) -> bool:
        return await self._consumer.has_message_available()

    async def seek(self, target: MessageId | int) -> None:
        """Continue from a message id (that message next) or a publish time in ms."""
        await self._consumer.seek(target)

    def is_connected(self) -> bool:
        return self._consumer.attached

    async def close(self) -> None:
        await self._consumer.close()
