"""A persistent topic on a managed ledger: its producers and its subscriptions.

Entries are stored as the producer sent them (metadata and payload, checksum included) and
delivered unchanged. Each subscription has a durable cursor and a dispatch loop that hands
entries to consumers as their permits allow.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from stripemq.broker.dispatch import (
    ConsumerSlot,
    Dispatcher,
    RoundRobinDispatcher,
    SingleActiveDispatcher,
)
from stripemq.broker.managed_ledger import InitialPosition, ManagedLedger
from stripemq.broker.topic_name import TopicName
from stripemq.cursor.managed_cursor import ManagedCursor
from stripemq.cursor.position import Position
from stripemq.errors import ManagedLedgerError, StripeMQError
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.frames import parse_entry

log = logging.getLogger(__name__)

READ_BATCH = 100
SubType = pb.CommandSubscribe.SubType


class BrokerError(StripeMQError):
    """A request the broker refuses; ``server_error`` is the protocol's code."""

    def __init__(self, server_error: int, message: str) -> None:
        super().__init__(message)
        self.server_error = server_error


class MessageSink(Protocol):
    """Where a consumer's messages go (its connection)."""

    def send_message(
        self, consumer_id: int, message_id: pb.MessageIdData, redelivery_count: int, entry: bytes
    ) -> None: ...


@dataclass
class Producer:
    producer_id: int
    name: str
    topic: PersistentTopic


@dataclass
class Consumer:
    """A subscribed consumer: its dispatch slot and where its messages go."""

    slot: ConsumerSlot
    sink: MessageSink
    subscription: Subscription


class Subscription:
    """A named cursor and the dispatch loop that feeds its consumers."""

    def __init__(self, topic: PersistentTopic, cursor: ManagedCursor, sub_type: int) -> None:
        self.topic = topic
        self.cursor = cursor
        self.name = cursor.name
        self.sub_type = sub_type
        self.dispatcher: Dispatcher = (
            RoundRobinDispatcher() if sub_type == SubType.Shared else SingleActiveDispatcher()
        )
        self.consumers: dict[int, Consumer] = {}
        self._redeliver: set[Position] = set()
        self._redelivery_counts: dict[Position, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher.exclusive and self.dispatcher.consumers:
            raise BrokerError(
                pb.ConsumerBusy, f"subscription {self.name} already has a consumer (Exclusive)"
            )
        if self.dispatcher.exclusive:
            self.cursor.state.rewind()  # a new exclusive consumer starts at the first unacked
        self.dispatcher.add_consumer(consumer.slot)
        self.consumers[consumer.slot.consumer_id] = consumer
        if self._task is None:
            self._task = asyncio.ensure_future(self._dispatch_loop())
        self._wake.set()

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.consumers.pop(consumer.slot.consumer_id, None) is None:
            return
        held = self.dispatcher.remove_consumer(consumer.slot)
        if not self.dispatcher.exclusive:  # an exclusive one's successor rewinds instead
            self._redeliver.update(p for p in held if not self.cursor.is_acked(p))
        self._wake.set()

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.slot.permits += permits
        self._wake.set()

    def ack(self, consumer: Consumer, ack: pb.CommandAck) -> None:
        positions = [Position(m.ledgerId, m.entryId) for m in ack.message_id]
        if ack.ack_type == pb.CommandAck.Cumulative:
            if len(positions) != 1:
                raise BrokerError(pb.NotAllowedError, "a cumulative ack names one message")
            if self.sub_type == SubType.Shared:
                raise BrokerError(pb.NotAllowedError, "cumulative ack on a Shared subscription")
            position = positions[0]
            self.cursor.ack_cumulative(position)
            consumer.slot.acknowledged([p for p in consumer.slot.pending if p <= position])
            return
        whole = []
        for message_id, position in zip(ack.message_id, positions, strict=True):
            if message_id.ack_set and message_id.HasField("batch_size"):
                remaining = _bits_of(message_id.ack_set, message_id.batch_size)
                done = [i for i, unacked in enumerate(remaining) if not unacked]
                if self.cursor.ack_batch(position, done, message_id.batch_size):
                    whole.append(position)
            else:
                whole.append(position)
        self.cursor.ack(whole)
        consumer.slot.acknowledged(whole)
        for position in whole:
            self._redelivery_counts.pop(position, None)

    def redeliver(self, consumer: Consumer, message_ids: Iterable[pb.MessageIdData]) -> None:
        """The consumer gives entries back (negative ack, ack timeout, or all of them)."""
        wanted = [Position(m.ledgerId, m.entryId) for m in message_ids]
        if not wanted:
            wanted = list(consumer.slot.pending)
        for position in wanted:
            if consumer.slot.pending.pop(position, None) is not None:
                self._redeliver.add(position)
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ------------------------------------------------------------------ dispatching

    async def _dispatch_loop(self) -> None:
        ml = self.topic.ml
        while True:
            if not self.dispatcher.has_permits():
                await self._wait_for_wake()
                continue
            try:
                if self._redeliver:
                    delivered = await self._redeliver_some()
                else:
                    delivered = await self._deliver_new()
            except ManagedLedgerError as exc:
                log.warning("subscription %s on %s: %s", self.name, self.topic.name, exc)
                await asyncio.sleep(0.5)
                continue
            if not delivered:
                if self._redeliver:
                    await self._wait_for_wake()  # no consumer can take them right now
                    continue
                after = Position(
                    self.cursor.read_position.ledger_id, self.cursor.read_position.entry_id - 1
                )
                await self._wait_for_entries_or_wake(ml, after)

    async def _deliver_new(self) -> bool:
        start = self.cursor.state.first_unacked_from(self.cursor.read_position)
        entries = await self.topic.ml.read_entries(start, READ_BATCH)
        sent = False
        for entry in entries:
            if self.cursor.is_acked(entry.position) or self.dispatcher.owner_of(entry.position):
                self.cursor.state.advance_read(entry.position)
                continue
            if not self._send(entry.position, entry.data, redelivery=False):
                break
            self.cursor.state.advance_read(entry.position)
            sent = True
        return sent

    async def _redeliver_some(self) -> bool:
        sent = False
        for position in sorted(self._redeliver)[:READ_BATCH]:
            if self.cursor.is_acked(position):
                self._redeliver.discard(position)
                continue
            [entry] = await self.topic.ml.read_entries(position, 1) or [None]
            if entry is None or entry.position != position:
                self._redeliver.discard(position)  # trimmed: acknowledged meanwhile
                continue
            if not self._send(position, entry.data, redelivery=True):
                break
            self._redeliver.discard(position)
            sent = True
        return sent

    def _send(self, position: Position, data: bytes, *, redelivery: bool) -> bool:
        metadata, _payload, problem = parse_entry(data)
        messages = 1
        key: bytes | None = None
        if metadata is not None:
            if metadata.HasField("num_messages_in_batch"):
                messages = max(1, metadata.num_messages_in_batch)
            key = metadata.ordering_key or metadata.partition_key.encode() or None
        elif problem:
            log.warning("entry %s of %s is unreadable (%s)", position, self.topic.name, problem)
        slot = self.dispatcher.pick(position, messages, key)
        if slot is None:
            return False
        consumer = self.consumers[slot.consumer_id]
        if redelivery:
            self._redelivery_counts[position] = self._redelivery_counts.get(position, 0) + 1
        slot.take(position, messages)
        message_id = pb.MessageIdData(
            ledgerId=position.ledger_id,
            entryId=position.entry_id,
            partition=self.topic.topic_name.partition_index,
        )
        bits = self.cursor.state.ack_set(position)
        if bits is not None:
            message_id.ack_set.extend(_words_of(bits.tolist()))
        consumer.sink.send_message(
            slot.consumer_id, message_id, self._redelivery_counts.get(position, 0), data
        )
        return True

    async def _wait_for_wake(self) -> None:
        await self._wake.wait()
        self._wake.clear()

    async def _wait_for_entries_or_wake(self, ml: ManagedLedger, after: Position) -> None:
        entries = asyncio.ensure_future(ml.wait_for_entries(after))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({entries, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (entries, woken):
                task.cancel()
            self._wake.clear()


def _bits_of(words: Iterable[int], size: int) -> list[bool]:
    """Pulsar's ack set (a Java BitSet as longs) as ``size`` booleans, bit 0 first."""
    bits: list[bool] = []
    for word in words:
        word &= (1 << 64) - 1
        bits.extend(bool(word >> i & 1) for i in range(64))
    return (bits + [False] * size)[:size]


def _words_of(bits: list[int]) -> list[int]:
    """Booleans as signed 64-bit words, bit 0 of word 0 first (Java's BitSet.toLongArray)."""
    words = []
    for start in range(0, len(bits), 64):
        word = sum(1 << i for i, bit in enumerate(bits[start : start + 64]) if bit)
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
    return words


class PersistentTopic:
    """A topic this broker serves: its managed ledger, producers and subscriptions."""

    def __init__(self, topic_name: TopicName, ml: ManagedLedger) -> None:
        self.topic_name = topic_name
        self.name = str(topic_name)
        self.ml = ml
        self.producers: dict[tuple[int, int], Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self._producer_names = itertools.count()

    async def publish(self, entry: bytes) -> Position:
        return await self.ml.add_entry(entry)

    async def subscribe(self, name: str, sub_type: int, initial: InitialPosition) -> Subscription:
        subscription = self.subscriptions.get(name)
        if subscription is None:
            cursor = await self.ml.open_cursor(name, initial)
            subscription = self.subscriptions.get(name)  # opened meanwhile by another
            if subscription is None:
                subscription = Subscription(self, cursor, sub_type)
                self.subscriptions[name] = subscription
        elif subscription.sub_type != sub_type and subscription.consumers:
            raise BrokerError(
                pb.ConsumerBusy,
                f"subscription {name} is {SubType.Name(subscription.sub_type)}, "
                f"not {SubType.Name(sub_type)}",
            )
        else:
            subscription.sub_type = sub_type
        return subscription

    async def unsubscribe(self, name: str) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            await subscription.close()
        await self.ml.delete_cursor(name)

    async def close(self) -> None:
        for subscription in self.subscriptions.values():
            await subscription.close()
        await self.ml.close()
