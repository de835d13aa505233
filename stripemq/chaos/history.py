"""What a chaos run did and saw, as plain records (sans-IO).

The workload appends a ``SendRecord`` for every message it tried to publish and a
``Delivery`` for every message a consumer received; the fault injector appends a
``FaultEvent`` for every fault. The checker and the report read nothing else, so a run can be
judged again, or a hand-made history tested, without a cluster.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The subscriptions a run keeps on every topic, one per mode, by the names records use.
SUBSCRIPTION_MODES = ("exclusive", "failover", "shared", "key_shared")


class Outcome(enum.Enum):
    """How a send ended, as the producer saw it."""

    ACKED = "acked"  # the broker acknowledged it: it must be stored
    FAILED = "failed"  # the broker refused it: it should not be stored (may be, harmlessly)
    UNKNOWN = "unknown"  # timed out or the producer went away: either way is correct


@dataclass(frozen=True, slots=True)
class MessageKey:
    """Which message a payload is: its producer, its key and its place in that key's order."""

    producer: str
    key: str
    seq: int


@dataclass(slots=True)
class SendRecord:
    """One attempt to publish ``(producer, key, seq)`` to ``topic``."""

    topic: str
    producer: str
    key: str
    seq: int
    dedup: bool  # whether the topic deduplicates (then it must be stored exactly once)
    sent_ms: int
    outcome: Outcome = Outcome.UNKNOWN
    done_ms: int | None = None  # when the outcome was known
    error: str | None = None

    @property
    def message(self) -> MessageKey:
        return MessageKey(self.producer, self.key, self.seq)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message as one consumer of one subscription received it (redeliveries included)."""

    topic: str
    subscription: str  # "exclusive", "failover", "shared" or "key_shared"
    consumer: str
    producer: str
    key: str
    seq: int
    sent_ms: int  # from the payload: send-to-receive latency is received_ms - sent_ms
    received_ms: int
    redelivery_count: int = 0

    @property
    def message(self) -> MessageKey:
        return MessageKey(self.producer, self.key, self.seq)


@dataclass(slots=True)
class FaultEvent:
    """One injected fault: what, on which process, from when until it was healed."""

    kind: str  # a ``FaultKind`` value
    target: str  # e.g. "bookie-2", "broker-1", "broker-0/bookie-3"
    start_ms: int
    end_ms: int | None = None  # None while active, and for faults nothing heals
    detail: str = ""
    took_effect: bool = True  # False: it could not be injected, or changed nothing


@dataclass
class History:
    """Everything one run recorded, in the order it happened."""

    sends: list[SendRecord] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    faults: list[FaultEvent] = field(default_factory=list)
    # The stored log of each topic as read back from the start after the run:
    # topic -> messages in the order the topic holds them.
    read_back: dict[str, list[MessageKey]] = field(default_factory=dict)

    def write_jsonl(self, path: Path) -> None:
        """One JSON object per line, each with a ``type`` field, for inspection or replay."""
        with open(path, "w", encoding="utf-8") as out:
            for line in self._lines():
                out.write(json.dumps(line, separators=(",", ":")) + "\n")

    def _lines(self) -> Iterator[dict[str, Any]]:
        for send in self.sends:
            yield {"type": "send", **asdict(send), "outcome": send.outcome.value}
        for delivery in self.deliveries:
            yield {"type": "delivery", **asdict(delivery)}
        for fault in self.faults:
            yield {"type": "fault", **asdict(fault)}
        for topic, messages in self.read_back.items():
            for m in messages:
                yield {"type": "stored", "topic": topic, **asdict(m)}

    @classmethod
    def read_jsonl(cls, path: Path) -> History:
        with open(path, encoding="utf-8") as lines:
            return cls.from_lines(json.loads(line) for line in lines)

    @classmethod
    def from_lines(cls, lines: Iterable[dict[str, Any]]) -> History:
        history = cls()
        for line in lines:
            kind = line.pop("type")
            if kind == "send":
                line["outcome"] = Outcome(line["outcome"])
                history.sends.append(SendRecord(**line))
            elif kind == "delivery":
                history.deliveries.append(Delivery(**line))
            elif kind == "fault":
                history.faults.append(FaultEvent(**line))
            elif kind == "stored":
                topic = line.pop("topic")
                history.read_back.setdefault(topic, []).append(MessageKey(**line))
            else:
                raise ValueError(f"unknown history line type {kind!r}")
        return history
