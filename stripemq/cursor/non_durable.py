"""A cursor kept only in memory: for readers (non-durable subscriptions).

It has the same surface as ``ManagedCursor`` for what a subscription needs, persists
nothing, and does not hold back trimming.
"""

from __future__ import annotations

from stripemq.cursor.ledger_chain import LedgerChain
from stripemq.cursor.position import Position
from stripemq.cursor.state import BatchAck, CursorState


class NonDurableCursor:
    def __init__(self, name: str, chain: LedgerChain, mark_delete: Position) -> None:
        self.name = name
        self.state = CursorState(name, chain, mark_delete)

    @property
    def mark_delete_position(self) -> Position:
        return self.state.mark_delete

    @property
    def read_position(self) -> Position:
        return self.state.read_position

    @property
    def backlog(self) -> int:
        return self.state.backlog

    def is_acked(self, position: Position) -> bool:
        return self.state.is_acked(position)

    def ack(self, positions: list[Position]) -> int:
        return self.state.ack(positions)

    def ack_batch(self, position: Position, indexes: list[int], batch_size: int) -> bool:
        return self.state.ack_batch(position, BatchAck(indexes, batch_size))

    def ack_cumulative(self, position: Position, batch: BatchAck | None = None) -> None:
        self.state.ack_cumulative(position, batch)

    def reset(self, position: Position) -> None:
        self.state.reset(position)

    async def close(self) -> None:
        """Nothing to persist."""
