"""A consumer's bookkeeping, sans-IO (time is passed in): grouped acks, acks of messages
inside batches, negative acks waiting for their redelivery delay, and the ack timeout."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from stripemq.client.message import MessageId
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.ack_set import words_of


@dataclass
class BatchAcks:
    """Which messages of one batch entry the application has acknowledged."""

    size: int
    unacked: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.unacked:
            self.unacked = [True] * self.size

    def ack(self, index: int) -> bool:
        """Mark ``index`` acked; true once the whole batch is."""
        if 0 <= index < self.size:
            self.unacked[index] = False
        return not any(self.unacked)

    def ack_up_to(self, index: int) -> bool:
        for i in range(min(index + 1, self.size)):
            self.unacked[i] = False
        return not any(self.unacked)


class AckGroupingTracker:
    """Collects acks and sends them together, every ``group_time_s`` or once
    ``max_size`` are waiting, as the official clients group them."""

    def __init__(self, *, group_time_s: float = 0.1, max_size: int = 1000) -> None:
        self.group_time_s = group_time_s
        self.max_size = max_size
        self._individual: dict[MessageId, MessageId] = {}  # entry or batch-message id
        self._partial: dict[tuple[int, int, int], tuple[MessageId, list[bool]]] = {}
        self._cumulative: MessageId | None = None
        self._last_cumulative: MessageId | None = None

    @property
    def immediate(self) -> bool:
        return self.group_time_s <= 0

    def __len__(self) -> int:
        return len(self._individual) + len(self._partial)

    @property
    def has_pending(self) -> bool:
        return bool(self._individual or self._partial or self._cumulative is not None)

    def add_individual(self, message_id: MessageId) -> None:
        """A whole entry acknowledged."""
        entry = message_id.entry_id_only()
        self._individual[entry] = entry
        self._partial.pop(entry.entry_key, None)

    def add_batch_index(self, message_id: MessageId, unacked: list[bool]) -> None:
        """Part of a batch acknowledged (sent with an ack set)."""
        self._partial[message_id.entry_key] = (message_id.entry_id_only(), list(unacked))

    def add_cumulative(self, message_id: MessageId) -> None:
        if self._cumulative is None or message_id > self._cumulative:
            self._cumulative = message_id

    def is_duplicate(self, message_id: MessageId) -> bool:
        """Whether an arriving message is one already acknowledged but not yet sent."""
        last = self._last_cumulative if self._cumulative is None else self._cumulative
        if last is not None and message_id.entry_id_only() <= last.entry_id_only():
            return True
        return message_id.entry_id_only() in self._individual

    def should_flush(self) -> bool:
        return self.immediate or len(self) >= self.max_size

    def flush(self, consumer_id: int) -> list[pb.CommandAck]:
        """The ACK commands for everything waiting, which is then forgotten."""
        commands: list[pb.CommandAck] = []
        if self._cumulative is not None:
            commands.append(
                pb.CommandAck(
                    consumer_id=consumer_id,
                    ack_type=pb.CommandAck.Cumulative,
                    message_id=[self._cumulative.entry_id_only().to_proto()],
                )
            )
            self._last_cumulative, self._cumulative = self._cumulative, None
        ids = [m.to_proto() for m in self._individual.values()]
        for entry, unacked in self._partial.values():
            data = entry.to_proto()
            data.batch_size = len(unacked)
            data.ack_set.extend(words_of(unacked))
            ids.append(data)
        self._individual.clear()
        self._partial.clear()
        if ids:
            commands.append(
                pb.CommandAck(
                    consumer_id=consumer_id, ack_type=pb.CommandAck.Individual, message_id=ids
                )
            )
        return commands

    def reset(self) -> None:
        """Forget what was waiting (after a seek, acks from before it mean nothing)."""
        self._individual.clear()
        self._partial.clear()
        self._cumulative = self._last_cumulative = None


class NegativeAckTracker:
    """Negatively acknowledged messages, each due for redelivery ``delay_s`` after."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self._due: dict[MessageId, float] = {}

    def __len__(self) -> int:
        return len(self._due)

    def add(self, message_id: MessageId, now: float) -> None:
        self._due[message_id.entry_id_only()] = now + self.delay_s

    def next_deadline(self) -> float | None:
        return min(self._due.values()) if self._due else None

    def pop_due(self, now: float) -> list[MessageId]:
        due = [m for m, at in self._due.items() if at <= now]
        for message_id in due:
            del self._due[message_id]
        return due

    def clear(self) -> None:
        self._due.clear()


class UnackedMessageTracker:
    """Messages handed to the application and not yet acknowledged: those older than the
    ack timeout are given back to the broker for redelivery."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._since: dict[MessageId, float] = {}  # entry id -> first handed out
        self._heap: list[tuple[float, int, MessageId]] = []
        self._counter = 0

    def __len__(self) -> int:
        return len(self._since)

    def add(self, message_id: MessageId, now: float) -> None:
        entry = message_id.entry_id_only()
        if entry in self._since:
            return
        self._since[entry] = now
        self._counter += 1
        heapq.heappush(self._heap, (now + self.timeout_s, self._counter, entry))

    def remove(self, message_id: MessageId) -> None:
        self._since.pop(message_id.entry_id_only(), None)

    def remove_up_to(self, message_id: MessageId) -> None:
        last = message_id.entry_id_only()
        for entry in [m for m in self._since if m <= last]:
            del self._since[entry]

    def remove_all(self, message_ids: Iterable[MessageId]) -> None:
        for message_id in message_ids:
            self.remove(message_id)

    def pop_expired(self, now: float) -> list[MessageId]:
        expired: list[MessageId] = []
        while self._heap and self._heap[0][0] <= now:
            deadline, _, entry = heapq.heappop(self._heap)
            since = self._since.get(entry)
            if since is not None and since + self.timeout_s == deadline:
                del self._since[entry]
                expired.append(entry)
        return expired

    def clear(self) -> None:
        self._since.clear()
        self._heap.clear()
