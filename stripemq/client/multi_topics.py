"""One consumer over several topics: a partitioned topic's partitions, a list of topics, or
every topic of a namespace matching a pattern (found again periodically)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from typing import TYPE_CHECKING

from stripemq.client.consumer import ConsumerBase, ConsumerConfig, TopicConsumer
from stripemq.client.dead_letter import DeadLetters
from stripemq.client.message import Message, MessageId
from stripemq.client.receiver_queue import ReceiverQueue
from stripemq.errors import InvalidMessageError, NotAllowedError, StripeMQError
from stripemq.proto.topic_name import TopicName

if TYPE_CHECKING:
    from stripemq.client.client import AsyncClient

log = logging.getLogger(__name__)


def pattern_namespace(pattern: re.Pattern[str]) -> TopicName:
    """The namespace a topic pattern lists (``persistent://tenant/ns/<regex>``)."""
    text = pattern.pattern
    domain, sep, rest = text.partition("://")
    if not sep:
        domain, rest = "persistent", text
    parts = rest.split("/", 2)
    if len(parts) != 3:
        parts = ["public", "default", rest]
    return TopicName(domain, parts[0], parts[1], "x")


class MultiTopicsConsumer(ConsumerBase):
    """Consumers of many topics sharing one receiver queue and one subscription name."""

    def __init__(
        self,
        client: AsyncClient,
        topics: list[str],
        config: ConsumerConfig,
        *,
        pattern: re.Pattern[str] | None = None,
        name: str | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.pattern = pattern
        self.topics = [str(TopicName.parse(t)) for t in topics]
        self.topic_name = name or ",".join(self.topics)
        self.queue = ReceiverQueue(self._taken)
        self.children: dict[str, TopicConsumer] = {}
        self._closed = False
        self.dead_letters = (
            DeadLetters(client, self.topics[0], config.subscription_name, config.dead_letter_policy)
            if config.dead_letter_policy is not None and self.topics
            else None
        )
        self._discovery: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"MultiTopicsConsumer({self.topic_name}, {self.config.subscription_name})"

    @property
    def closed(self) -> bool:
        return self._closed

    def consumer_name(self) -> str:
        return self.config.consumer_name or ""

    def is_connected(self) -> bool:
        return bool(self.children) and all(c.attached for c in self.children.values())

    # ------------------------------------------------------------------ children

    def _taken(self, message: Message) -> None:
        consumer = message._consumer
        if isinstance(consumer, TopicConsumer):
            consumer.message_taken(message)

    async def _expand(self, topic: str) -> list[tuple[str, int]]:
        """The topics to consume for ``topic``: its partitions if it has any."""
        partitions = await self.client.lookup.partitions(topic)
        if partitions <= 0:
            return [(topic, -1)]
        return [(f"{topic}-partition-{i}", i) for i in range(partitions)]

    async def start(self) -> None:
        """Subscribe to every topic (raising if any subscription fails)."""
        if self.pattern is not None:
            self.topics = await self._matching_topics()
        try:
            await self._add_topics(self.topics)
        except BaseException:
            await self.close()
            raise
        if self.pattern is not None:
            self._discovery = asyncio.get_running_loop().create_task(self._rediscover())

    async def _add_topics(self, topics: list[str]) -> None:
        async with self._lock:
            targets = [t for topic in topics for t in await self._expand(topic)]
            count = max(1, len(targets))
            queue_size = max(
                1,
                min(
                    self.config.receiver_queue_size,
                    self.config.max_total_receiver_queue_size_across_partitions // count,
                ),
            )
            config = dataclasses.replace(self.config, receiver_queue_size=queue_size)
            fresh = []
            for name, partition in targets:
                if name in self.children:
                    continue
                child = TopicConsumer(
                    self.client,
                    name,
                    config,
                    partition=partition,
                    queue=self.queue,
                    dead_letters=self.dead_letters,
                )
                self.children[name] = child
                fresh.append(child)
            results = await asyncio.gather(
                *(c.connect_first() for c in fresh), return_exceptions=True
            )
            failures = []
            for child, result in zip(fresh, results, strict=True):
                if isinstance(result, BaseException):
                    del self.children[child.topic_name]  # tried again next time
                    await child.close()
                    failures.append(result)
            if failures:
                raise failures[0]

    async def _matching_topics(self) -> list[str]:
        assert self.pattern is not None
        namespace = pattern_namespace(self.pattern)
        names = await self.client.lookup.topics_of_namespace(
            namespace.namespace_name, self.config.regex_subscription_mode.value
        )
        bases = sorted({str(TopicName.parse(n).partitioned_topic) for n in names})
        return [t for t in bases if self.pattern.fullmatch(t)]

    async def _rediscover(self) -> None:
        period = max(1, self.config.pattern_auto_discovery_period)
        while not self.closed:
            await asyncio.sleep(period)
            try:
                topics = await self._matching_topics()
                fresh = [t for t in topics if t not in self.topics]
                if fresh:
                    log.info("%r: new topics %s", self, fresh)
                    await self._add_topics(fresh)
                    self.topics += fresh  # only once subscribed: failures are retried
            except StripeMQError as exc:
                log.warning("%r: topic discovery failed: %s", self, exc)

    def _consumer_of(self, target: Message | MessageId) -> TopicConsumer:
        if isinstance(target, Message):
            consumer = target._consumer
            if isinstance(consumer, TopicConsumer) and consumer in self.children.values():
                return consumer
            raise InvalidMessageError(f"{target!r} was not received by {self!r}")
        topic = self._id_of(target).topic
        if topic is None:
            raise InvalidMessageError(
                f"message id {target} names no topic; pass the Message on a multi-topic consumer"
            )
        consumer = self.children.get(topic)
        if consumer is None:
            raise InvalidMessageError(f"message id {target} is from {topic}, not {self!r}")
        return consumer

    # ------------------------------------------------------------------ operations

    def redeliver_unacknowledged_messages(self) -> None:
        self._check_open()
        for child in self.children.values():
            child.redeliver_unacknowledged_messages()

    async def seek(self, target: MessageId | int) -> None:
        self._check_open()
        if isinstance(target, MessageId) and target not in (MessageId.earliest, MessageId.latest):
            await self._consumer_of(target).seek(target)
            return
        await asyncio.gather(*(c.seek(target) for c in self.children.values()))

    async def get_last_message_id(self) -> MessageId:
        raise NotAllowedError("get_last_message_id needs a single-topic consumer")

    async def unsubscribe(self) -> None:
        self._check_open()
        await asyncio.gather(*(c.unsubscribe() for c in self.children.values()))
        await self.close()

    async def close(self) -> None:
        if self.closed:
            return
        self._closed = True
        if self._discovery is not None:
            self._discovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._discovery
        await asyncio.gather(
            *(c.close() for c in self.children.values() if not c.closed), return_exceptions=True
        )
        self.queue.close()
        if self.dead_letters is not None:
            await self.dead_letters.close()
        self.client.forget(self)
