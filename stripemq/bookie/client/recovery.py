"""Open-with-recovery: fence a ledger, find its true end, make that end durable, close it.

1. Mark the metadata IN_RECOVERY (a writer's next ensemble change then fails).
2. Fence on the bookies of the last fragment, reading each one's last entry and LAC. Enough
   must answer that every write set has ``Qw - Qa + 1`` answers: then no add the old writer
   could still complete would escape the fence.
3. From the highest LAC seen, read forward, fencing again with every read. An entry any
   replica has is part of the ledger; once ``Qw - Qa + 1`` fenced replicas of an entry say
   "no such entry" it can never reach ``Qa``, so the ledger ends just before it. (An unfenced
   bookie's "no" proves nothing: the old writer's add could land there right after.)
4. Re-add what was found beyond the LAC, unchanged, to a full write quorum.
5. Close at the last entry. Two recoveries racing both fence and read the same bookies; the
   second to close adopts what the first wrote, so every client agrees on one last entry.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from stripemq.bookie.client.ledger_handle import LedgerHandle
from stripemq.bookie.client.metadata import LedgerMetadata, LedgerState
from stripemq.bookie.client.reader import discard_tasks
from stripemq.errors import (
    BookieError,
    DigestMismatchError,
    LedgerRecoveryError,
    MetadataVersionError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from stripemq.proto.entry import verify_entry

if TYPE_CHECKING:
    from stripemq.bookie.client.bookkeeper import BookKeeper

log = logging.getLogger(__name__)

_ABSENT = (NoSuchEntryError, NoSuchLedgerError)


class LedgerRecovery:
    """One recovery of one ledger; ``run()`` returns the closed metadata and its version."""

    def __init__(
        self, bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, version: int
    ) -> None:
        self.bk = bk
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.version = version
        self.master_key = metadata.master_key

    async def run(self) -> tuple[LedgerMetadata, int]:
        if self.metadata.is_closed:
            return self.metadata, self.version
        await self._mark_in_recovery()
        if self.metadata.is_closed:
            return self.metadata, self.version
        lac, lac_length = await self._fence()
        handle = LedgerHandle(
            self.bk,
            self.ledger_id,
            self.metadata,
            self.version,
            self.master_key,
            last_add_confirmed=lac,
            length=lac_length,
            recovery=True,
        )
        await handle.connect()
        entry_id = lac + 1
        last_length = lac_length
        re_adds: list[asyncio.Future[int]] = []
        try:
            while True:
                raw = await self._recovery_read(self.metadata, entry_id)
                if raw is None:
                    break
                last_length = verify_entry(raw).length
                re_adds.append(handle.recovery_add_async(raw))
                entry_id += 1
            await asyncio.gather(*re_adds)
        except BookieError as exc:
            for future in re_adds:  # their outcome is reported below, now or later
                future.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise LedgerRecoveryError(
                f"ledger {self.ledger_id}: re-adding entries after {lac} failed: {exc}"
            ) from exc
        last = entry_id - 1
        await handle.seal(last, last_length if last >= 0 else 0)
        if handle.metadata.last_entry_id != last:
            log.info(
                "ledger %d: another recovery closed it at %d (this one found %d)",
                self.ledger_id,
                handle.metadata.last_entry_id,
                last,
            )
        else:
            log.info("ledger %d recovered: last entry %d", self.ledger_id, last)
        return handle.metadata, handle.version

    async def _mark_in_recovery(self) -> None:
        while self.metadata.state is LedgerState.OPEN:
            try:
                updated = self.metadata.in_recovery()
                self.version = await self.bk.ledger_manager.write(
                    self.ledger_id, updated, self.version
                )
                self.metadata = updated
            except MetadataVersionError:
                self.metadata, self.version = await self.bk.ledger_manager.read(self.ledger_id)

    async def _fence(self) -> tuple[int, int]:
        """Fence the last fragment's bookies; the highest LAC seen and the length there."""
        ensemble = self.metadata.current_ensemble
        answers = await asyncio.gather(
            *(self._fence_one(b) for b in ensemble), return_exceptions=True
        )
        answered: set[int] = set()
        lac = -1
        for slot, answer in enumerate(answers):
            if isinstance(answer, BaseException):
                log.warning(
                    "ledger %d: fencing %s failed: %s", self.ledger_id, ensemble[slot], answer
                )
                continue
            answered.add(slot)
            lac = max(lac, answer)
        self._check_coverage(answered, "fencing")
        # A fragment starts right after the writer's LAC at the time it changed ensemble, so
        # everything before the last fragment is confirmed on its own fragment already.
        lac = max(lac, max(self.metadata.ensembles) - 1)
        length = 0
        if lac >= 0:
            raw = await self._recovery_read(self.metadata, lac)
            if raw is None:
                raise LedgerRecoveryError(
                    f"ledger {self.ledger_id}: entry {lac} is confirmed but no replica has it"
                )
            length = verify_entry(raw).length
        return lac, length

    async def _fence_one(self, bookie: str) -> int:
        client = await self.bk.clients.get(bookie)
        try:
            result = await client.read_entry(
                self.ledger_id, -1, fence=True, master_key=self.master_key
            )
        except _ABSENT:
            return -1  # fenced, and holds no entry
        except DigestMismatchError:
            # Fenced all the same; only its last entry is damaged. Its LAC still counts.
            return (await client.read_lac(self.ledger_id)).lac
        return max(result.lac, verify_entry(result.entry).lac)

    def _check_coverage(self, answered: set[int], what: str) -> None:
        """Every write set needs ``Qw - Qa + 1`` answers to rule out a hidden ack quorum."""
        md = self.metadata
        needed = md.write_quorum_size - md.ack_quorum_size + 1
        for first in range(md.ensemble_size):
            write_set = md.write_set(first)
            if len(answered & set(write_set)) < needed:
                raise LedgerRecoveryError(
                    f"ledger {self.ledger_id}: {what} reached too few bookies of "
                    f"{list(md.current_ensemble)} (answered slots {sorted(answered)})"
                )

    async def _recovery_read(self, metadata: LedgerMetadata, entry_id: int) -> bytes | None:
        """The entry from any replica, ``None`` if enough replicas lack it to prove it was
        never confirmed; ``LedgerRecoveryError`` if the answers cannot decide."""
        bookies = metadata.write_set_bookies(entry_id)
        needed_absent = metadata.write_quorum_size - metadata.ack_quorum_size + 1
        tasks = [asyncio.create_task(self._read_one(b, entry_id)) for b in bookies]
        absent = 0
        errors: list[str] = []
        try:
            for next_done in asyncio.as_completed(tasks):
                try:
                    return await next_done
                except _ABSENT:
                    absent += 1
                    if absent >= needed_absent:
                        return None
                except BookieError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            discard_tasks(tasks)
        raise LedgerRecoveryError(
            f"ledger {self.ledger_id}: cannot tell whether entry {entry_id} exists "
            f"({absent} of {bookies} lack it; errors: {'; '.join(errors)})"
        )

    async def _read_one(self, bookie: str, entry_id: int) -> bytes:
        client = await self.bk.clients.get(bookie)
        result = await client.read_entry(
            self.ledger_id, entry_id, fence=True, master_key=self.master_key
        )
        header = verify_entry(result.entry)
        if (header.ledger_id, header.entry_id) != (self.ledger_id, entry_id):
            raise BookieError(f"{bookie} answered the wrong entry for {entry_id}")
        return result.entry
