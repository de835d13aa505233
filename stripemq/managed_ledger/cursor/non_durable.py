"""A cursor kept only in memory: for readers (non-durable subscriptions).

It has the same surface as ``ManagedCursor`` for what a subscription needs, persists
nothing, and does not hold back trimming.
"""

from __future__ import annotations

from stripemq.managed_ledger.cursor.state import BatchAck, CursorState
from stripemq.managed_ledger.cursor.view import CursorView
from stripemq.managed_ledger.ledger_chain import LedgerChain
from stripemq.managed_ledger.position import Position


class NonDurableCursor(CursorView):
    def __init__(self, name: str, chain: LedgerChain, mark_delete: Position) -> None:
        self.name = name
        self.state = CursorState(name, chain, mark_delete)

    def ack(self, positions: list[Position]) -> int:
        return self.state.ack(positions)

    def ack_range(self, first: Position, last: Position) -> None:
        self.state.ack_range(first, last)

    def ack_batch(self, position: Position, indexes: list[int], batch_size: int) -> bool:
        return self.state.ack_batch(position, BatchAck(indexes, batch_size))

    def ack_cumulative(self, position: Position, batch: BatchAck | None = None) -> None:
        self.state.ack_cumulative(position, batch)

    def reset(self, position: Position) -> None:
        self.state.reset(position)

    async def close(self) -> None:
        """Nothing to persist."""
