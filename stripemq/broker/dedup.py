"""Message deduplication: a resent message (same producer name, an old sequence id) is
acknowledged without being stored again, even after the broker restarts.

The highest sequence id stored for each producer is kept in the properties of a cursor
(``names.DEDUPLICATION_CURSOR``, ``pulsar.dedup``) on the topic's managed ledger, moved
forward every ``SNAPSHOT_EVERY`` entries; on opening, the entries after it are read again to
catch up.
"""

from __future__ import annotations

import enum
import logging

from stripemq.broker.names import DEDUPLICATION_CURSOR
from stripemq.managed_ledger.cursor.managed_cursor import ManagedCursor
from stripemq.managed_ledger.managed_ledger import ManagedLedger
from stripemq.managed_ledger.position import Position
from stripemq.proto.frames import entry_metadata
from stripemq.proto.initial_position import InitialPosition

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 1000
READ_BATCH = 500


class DupStatus(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"  # stored before: acknowledge it again
    IN_FLIGHT = "in_flight"  # the earlier copy is still being written: let the client retry


class Deduplication:
    """Highest sequence ids per producer name: handed to the ledger, and stored."""

    def __init__(self, ml: ManagedLedger) -> None:
        self.ml = ml
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self._cursor: ManagedCursor | None = None
        self._since_snapshot = 0

    async def start(self) -> None:
        """Load the last snapshot and read what was stored after it."""
        self._cursor = await self.ml.open_cursor(DEDUPLICATION_CURSOR, InitialPosition.Earliest)
        self.persisted = {name: int(seq) for name, seq in self._cursor.properties.items()}
        position = self._cursor.read_position
        replayed = 0
        while True:
            entries = await self.ml.read_entries(position, READ_BATCH)
            if not entries:
                break
            for entry in entries:
                metadata = entry_metadata(entry.data)
                if metadata is not None:
                    highest = max(metadata.sequence_id, metadata.highest_sequence_id)
                    name = metadata.producer_name
                    self.persisted[name] = max(self.persisted.get(name, -1), highest)
                replayed += 1
            position = self.ml.chain.next_valid(entries[-1].position)
        self.pushed = dict(self.persisted)
        log.info(
            "deduplication on %s: %d producers, %d entries read after the snapshot",
            self.ml.name,
            len(self.persisted),
            replayed,
        )

    def last_sequence_id(self, producer_name: str) -> int:
        return self.pushed.get(producer_name, -1)

    def check(self, producer_name: str, sequence_id: int, highest_sequence_id: int) -> DupStatus:
        """Whether a SEND is new; if so it counts as handed to the ledger from now."""
        highest = max(sequence_id, highest_sequence_id)
        if sequence_id <= self.persisted.get(producer_name, -1):
            return DupStatus.DUPLICATE
        if sequence_id <= self.pushed.get(producer_name, -1):
            return DupStatus.IN_FLIGHT
        self.pushed[producer_name] = highest
        return DupStatus.NEW

    def failed(self, producer_name: str, sequence_id: int) -> None:
        """The append failed: the sequence ids from this one on may be sent again."""
        pushed = min(self.pushed.get(producer_name, -1), sequence_id - 1)
        self.pushed[producer_name] = max(pushed, self.persisted.get(producer_name, -1))

    def forget_unstored(self) -> None:
        """Every append in flight has completed, some failed: sequence ids handed to the
        ledger but not stored may come again."""
        self.pushed = dict(self.persisted)

    def stored(self, producer_name: str, highest_sequence_id: int, position: Position) -> None:
        self.persisted[producer_name] = max(
            self.persisted.get(producer_name, -1), highest_sequence_id
        )
        self._since_snapshot += 1
        if self._cursor is not None and self._since_snapshot >= SNAPSHOT_EVERY:
            self._since_snapshot = 0
            self._cursor.ack_cumulative(position, properties=dict(self.persisted))
