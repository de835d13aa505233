"""What every cursor shows of its state, durable or not."""

from __future__ import annotations

from stripemq.managed_ledger.cursor.state import CursorState
from stripemq.managed_ledger.position import Position


class CursorView:
    """Read access to a cursor's ``CursorState``."""

    name: str
    state: CursorState

    @property
    def mark_delete_position(self) -> Position:
        return self.state.mark_delete

    @property
    def read_position(self) -> Position:
        return self.state.read_position

    @property
    def backlog(self) -> int:
        return self.state.backlog

    @property
    def properties(self) -> dict[str, int]:
        return self.state.properties

    def is_acked(self, position: Position) -> bool:
        return self.state.is_acked(position)
