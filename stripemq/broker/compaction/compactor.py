"""Two-phase compaction of one managed ledger into a new compacted ledger (Pulsar's
``TwoPhaseCompactor``).

What is compacted is the previous compacted ledger, then the topic's entries after its
horizon, up to the topic's last entry when compaction began (the new horizon). Phase one
reads it all to learn each key's latest message; phase two reads it again and writes what
``rules`` keeps to a new ledger, striped as the topic's own ledgers are. A failed run
deletes the ledger it was writing and leaves the previous one in place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from stripemq.bookie.client.bookkeeper import delete_ledger_quietly
from stripemq.broker.compaction.compacted_ledger import CompactedLedger, encode_kept
from stripemq.broker.compaction.rules import LatestByKey, compact_entry, read_messages
from stripemq.managed_ledger.managed_ledger import Entry, ManagedLedger
from stripemq.managed_ledger.position import Position

log = logging.getLogger(__name__)

__all__ = ["CompactionResult", "TwoPhaseCompactor"]

READ_CHUNK = 100  # entries per read, of either source
WRITES_IN_FLIGHT = 64  # adds to the new ledger awaited together


@dataclass(frozen=True)
class CompactionResult:
    """A run's compacted ledger (not yet recorded on the cursor) and what it left out."""

    compacted: CompactedLedger
    removed: int  # messages compaction left out
    removed_events: int  # Pulsar's removed event count (``LatestByKey``)


class TwoPhaseCompactor:
    """Compacts ``ml`` (whose compaction cursor holds the entries being read)."""

    def __init__(self, ml: ManagedLedger, *, retain_null_key: bool = False) -> None:
        self.ml = ml
        self.retain_null_key = retain_null_key

    async def compact(self, previous: CompactedLedger | None, end: Position) -> CompactionResult:
        """A compacted ledger of everything up to ``end`` (a confirmed position)."""
        latest = LatestByKey(retain_null_key=self.retain_null_key)
        async for entry in self._source(previous, end):
            latest.add(entry.position, read_messages(entry.data))
        log.debug(
            "%s: phase one read %d messages, %d keys",
            self.ml.name,
            latest.messages_read,
            len(latest),
        )
        config = self.ml.config
        handle = await self.ml.bk.create_ledger(
            config.ensemble_size,
            config.write_quorum_size,
            config.ack_quorum_size,
            password=config.password,
            custom_metadata={"component": "compacted-ledger", "managed-ledger": self.ml.name},
        )
        removed = 0
        try:
            pending: list[asyncio.Future[int]] = []
            async for entry in self._source(previous, end):
                kept = compact_entry(
                    entry.position,
                    entry.data,
                    read_messages(entry.data),
                    latest,
                    retain_null_key=self.retain_null_key,
                )
                removed += kept.removed
                if kept.data is not None:
                    pending.append(handle.add_entry_async(encode_kept(entry.position, kept.data)))
                if len(pending) >= WRITES_IN_FLIGHT:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
            await handle.close()
            reader = await self.ml.bk.open_ledger(
                handle.ledger_id, password=config.password, recovery=False
            )
            compacted = await CompactedLedger.open(reader, end)
        except BaseException:
            await self._discard(handle.ledger_id)
            raise
        return CompactionResult(compacted, removed, latest.removed_events)

    async def _source(
        self, previous: CompactedLedger | None, end: Position
    ) -> AsyncIterator[Entry]:
        """The previous compacted ledger's entries, then the topic's after its horizon,
        through ``end``."""
        if previous is not None:
            for first in range(0, previous.entries, READ_CHUNK):
                last = min(previous.entries - 1, first + READ_CHUNK - 1)
                for entry in await previous.read_range(first, last):
                    yield entry
            position = previous.horizon.next()
        else:
            position = self.ml.chain.first_position()
        while position <= end:
            entries = await self.ml.read_entries(position, READ_CHUNK)
            for entry in entries:
                if entry.position > end:
                    return
                yield entry
            if not entries:
                return
            position = entries[-1].position.next()

    async def _discard(self, ledger_id: int) -> None:
        await delete_ledger_quietly(self.ml.bk, ledger_id, f"compacted ledger of {self.ml.name}")
