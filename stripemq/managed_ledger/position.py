"""A position in a managed ledger: a ledger id and an entry id within it."""

from __future__ import annotations

from dataclasses import dataclass

ENTRY_BITS = 64
ENTRY_MASK = (1 << ENTRY_BITS) - 1


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """``ledger_id:entry_id``; ordered by ledger, then entry (ledger ids only grow)."""

    ledger_id: int
    entry_id: int

    def __post_init__(self) -> None:
        if not 0 <= self.entry_id <= ENTRY_MASK and self.entry_id != -1:
            raise ValueError(f"entry id {self.entry_id} out of range")
        if self.ledger_id < -1:
            raise ValueError(f"ledger id {self.ledger_id} out of range")

    def next(self) -> Position:
        """The next entry of the same ledger."""
        return Position(self.ledger_id, self.entry_id + 1)

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """``"12:7"`` → ``Position(12, 7)``; ``ValueError`` otherwise."""
        ledger, sep, entry = text.partition(":")
        if not sep:
            raise ValueError(f"position {text!r} is not ledger:entry")
        return cls(int(ledger), int(entry))


def position_key(position: Position) -> int:
    """One integer that sorts like the position (for compact sorted containers)."""
    if position.ledger_id < 0 or position.entry_id < 0:
        raise ValueError(f"position {position} has no key")
    return (position.ledger_id << ENTRY_BITS) | position.entry_id


def key_position(key: int) -> Position:
    return Position(key >> ENTRY_BITS, key & ENTRY_MASK)
