"""The asyncio API: ``Client`` here is the event-loop-native client; its producers,
consumers and readers have the official client's methods as coroutines.

    async with Client("pulsar://localhost:6650") as client:
        producer = await client.create_producer("my-topic")
        await producer.send(b"hello")
"""

from __future__ import annotations

from types import TracebackType

from stripemq.client.auth import AuthenticationToken
from stripemq.client.client import AsyncClient
from stripemq.client.consumer import ConsumerBase as Consumer
from stripemq.client.message import Message, MessageId
from stripemq.client.options import (
    BatchingType,
    BatchReceivePolicy,
    CompressionType,
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    KeySharedMode,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    Result,
)
from stripemq.client.producer import PartitionedProducer, Producer
from stripemq.client.reader import Reader


class Client(AsyncClient):
    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


__all__ = [
    "AuthenticationToken",
    "BatchReceivePolicy",
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "HashingScheme",
    "InitialPosition",
    "KeySharedMode",
    "Message",
    "MessageId",
    "PartitionedProducer",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
]
