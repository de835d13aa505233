"""Reading a ledger's entries from its replicas, and the read-only handle.

One entry is read from the bookies of its write set in order; a read that has not answered
after ``speculative_read_timeout_ms`` is doubled up on the next replica, and an error or a
bad digest moves on at once. Bookies that failed recently are asked last. A range goes out
as batch reads spread over the ensemble, falling back to single reads for what a batch
does not bring.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stripemq.bookie.bookie_client import ReadResult
from stripemq.bookie.client.metadata import LedgerMetadata
from stripemq.errors import (
    BookieError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadError,
    ReadTimeoutError,
)
from stripemq.proto.entry import HEADER_SIZE, parse_header, verify_entry

if TYPE_CHECKING:
    from stripemq.bookie.client.bookkeeper import BookKeeper

log = logging.getLogger(__name__)

_FAILURE_MEMORY_S = 60.0
# A batch read asks one bookie for up to this many entries, and this many bytes, at once.
BATCH_ENTRIES = 256
BATCH_BYTES = 8 * 1024 * 1024
BATCHES_IN_FLIGHT = 6


@dataclass(frozen=True)
class LedgerEntry:
    ledger_id: int
    entry_id: int
    data: bytes
    ledger_length: int  # the ledger's length through this entry


def to_ledger_entry(raw: bytes) -> LedgerEntry:
    header = verify_entry(raw)
    return LedgerEntry(header.ledger_id, header.entry_id, raw[HEADER_SIZE:], header.length)


def discard_tasks(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel what still runs and retrieve the outcome of what finished: nothing left behind
    to be reported as "exception never retrieved"."""
    for task in tasks:
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()


class BookieHealth:
    """Remembers which bookies failed lately so reads ask healthy replicas first."""

    def __init__(self) -> None:
        self._failed_at: dict[str, float] = {}

    def record_failure(self, bookie: str) -> None:
        self._failed_at[bookie] = time.monotonic()

    def failed_recently(self, bookie: str) -> bool:
        return time.monotonic() - self._failed_at.get(bookie, -1e9) < _FAILURE_MEMORY_S

    def order(self, bookies: Sequence[str]) -> list[str]:
        return sorted(bookies, key=self.failed_recently)


class ReplicaReader:
    """Reads entries of one ledger given its metadata; shared by every handle kind."""

    def __init__(self, bk: BookKeeper, ledger_id: int) -> None:
        self.bk = bk
        self.ledger_id = ledger_id

    async def read_raw(self, metadata: LedgerMetadata, entry_id: int) -> bytes:
        """The entry's verified bytes from the first replica that has a good copy."""
        bookies = self.bk.health.order(metadata.write_set_bookies(entry_id))
        delay = self.bk.config.speculative_read_timeout_ms / 1000
        errors: list[BookieError] = []
        running: dict[asyncio.Task[bytes], str] = {}
        waiting = list(bookies)
        try:
            while waiting or running:
                if waiting and (not running or delay > 0):
                    bookie = waiting.pop(0)
                    running[asyncio.create_task(self._read_from(bookie, entry_id))] = bookie
                timeout = delay if waiting and delay > 0 else None
                done, _ = await asyncio.wait(
                    running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    bookie = running.pop(task)
                    exc = task.exception()
                    if exc is None:
                        discard_tasks(done)
                        return task.result()
                    if not isinstance(exc, BookieError):
                        raise exc
                    errors.append(exc)
                    if not isinstance(exc, (NoSuchEntryError, NoSuchLedgerError)):
                        self.bk.health.record_failure(bookie)
                        log.warning(
                            "read of %d:%d from %s failed: %s",
                            self.ledger_id,
                            entry_id,
                            bookie,
                            exc,
                        )
        finally:
            discard_tasks(running)
        if errors and all(isinstance(e, (NoSuchEntryError, NoSuchLedgerError)) for e in errors):
            raise NoSuchEntryError(f"entry {self.ledger_id}:{entry_id} is on none of {bookies}")
        if errors and all(isinstance(e, DigestMismatchError) for e in errors):
            raise DigestMismatchError(
                f"every copy of entry {self.ledger_id}:{entry_id} on {bookies} fails its checksum"
            )
        raise ReadError(
            f"cannot read entry {self.ledger_id}:{entry_id} from {bookies}: "
            + "; ".join(f"{type(e).__name__}: {e}" for e in errors)
        )

    async def _read_from(self, bookie: str, entry_id: int) -> bytes:
        client = await self.bk.clients.get(bookie)
        result = await client.read_entry(self.ledger_id, entry_id)
        self._check_identity(result, entry_id, bookie)
        return result.entry

    def _check_identity(self, result: ReadResult, entry_id: int, bookie: str) -> None:
        header = verify_entry(result.entry)
        if (header.ledger_id, header.entry_id) != (self.ledger_id, entry_id):
            raise DigestMismatchError(
                f"{bookie} answered {header.ledger_id}:{header.entry_id} "
                f"for {self.ledger_id}:{entry_id}"
            )

    async def read_range(self, metadata: LedgerMetadata, first: int, last: int) -> list[bytes]:
        """Entries ``first..last`` inclusive, returned in order.

        Each entry is asked of the first healthy bookie of its write set, so a striped
        ledger's reads spread over its ensemble; each bookie's share goes out in batch reads
        of up to ``BATCH_ENTRIES`` entries and ``BATCH_BYTES`` bytes, the bookies' batches
        interleaved. A bookie whose batch fails is recorded as failing (later reads ask it
        last), and what a batch did not bring is read entry by entry with the usual replica
        fail-over, at most ``max_concurrent_reads`` at a time.
        """
        if first > last:
            return []
        if first == last:
            return [await self.read_raw(metadata, first)]
        by_bookie: dict[str, list[int]] = {}
        for entry_id in range(first, last + 1):
            bookie = self.bk.health.order(metadata.write_set_bookies(entry_id))[0]
            by_bookie.setdefault(bookie, []).append(entry_id)
        per_bookie = [
            [(bookie, ids[i : i + BATCH_ENTRIES]) for i in range(0, len(ids), BATCH_ENTRIES)]
            for bookie, ids in by_bookie.items()
        ]
        chunks = [chunk for row in itertools.zip_longest(*per_bookie) for chunk in row if chunk]
        found: dict[int, bytes] = {}
        batches = asyncio.Semaphore(BATCHES_IN_FLIGHT)
        singles = asyncio.Semaphore(self.bk.config.max_concurrent_reads)

        async def chunk(bookie: str, ids: list[int]) -> None:
            async with batches:
                rest = await self._read_batches(bookie, ids, found)
            await asyncio.gather(*(self._read_single(metadata, e, found, singles) for e in rest))

        tasks = [asyncio.create_task(chunk(bookie, ids)) for bookie, ids in chunks]
        try:
            await asyncio.gather(*tasks)
        finally:
            discard_tasks(tasks)
        return [found[entry_id] for entry_id in range(first, last + 1)]

    async def _read_batches(
        self, bookie: str, ids: list[int], found: dict[int, bytes]
    ) -> list[int]:
        """Read ``ids`` from ``bookie`` in batches into ``found``; the ids it did not bring."""
        pending = ids
        while pending:
            try:
                client = await self.bk.clients.get(bookie)
                entries, _lac = await client.read_entries(self.ledger_id, pending, BATCH_BYTES)
                for entry_id, raw in zip(pending, entries, strict=False):
                    self._check_raw_identity(raw, entry_id, bookie)
            except (NoSuchEntryError, NoSuchLedgerError):
                break  # not (yet) on this replica: the others may have it
            except BookieError as exc:
                self.bk.health.record_failure(bookie)
                log.warning(
                    "batch read of %d entries of ledger %d from %s failed: %s",
                    len(pending),
                    self.ledger_id,
                    bookie,
                    exc,
                )
                break
            for entry_id, raw in zip(pending, entries, strict=False):
                found[entry_id] = raw
            pending = pending[len(entries) :]
        return pending

    async def _read_single(
        self,
        metadata: LedgerMetadata,
        entry_id: int,
        found: dict[int, bytes],
        window: asyncio.Semaphore,
    ) -> None:
        async with window:
            found[entry_id] = await self.read_raw(metadata, entry_id)

    def _check_raw_identity(self, raw: bytes, entry_id: int, bookie: str) -> None:
        header = parse_header(raw)
        if (header.ledger_id, header.entry_id) != (self.ledger_id, entry_id):
            raise DigestMismatchError(
                f"{bookie} answered {header.ledger_id}:{header.entry_id} "
                f"for {self.ledger_id}:{entry_id}"
            )

    async def read_lac(self, metadata: LedgerMetadata) -> int:
        """The highest LAC any bookie of the last fragment knows (each is a safe lower bound)."""
        ensemble = metadata.current_ensemble
        results = await asyncio.gather(
            *(self._lac_from(b) for b in ensemble), return_exceptions=True
        )
        lacs = [r for r in results if isinstance(r, int)]
        if not lacs:
            raise ReadError(f"no bookie of {list(ensemble)} answered for ledger {self.ledger_id}")
        return max(lacs)

    async def _lac_from(self, bookie: str) -> int:
        client = await self.bk.clients.get(bookie)
        try:
            return (await client.read_lac(self.ledger_id)).lac
        except NoSuchLedgerError:
            return -1
        except BookieError:
            self.bk.health.record_failure(bookie)
            raise

    async def long_poll(self, metadata: LedgerMetadata, entry_id: int, timeout_ms: int) -> int:
        """Wait until a bookie of ``entry_id``'s write set confirms it; the LAC learnt, or -1."""
        bookies = metadata.write_set_bookies(entry_id)

        async def poll(bookie: str) -> int:
            client = await self.bk.clients.get(bookie)
            result = await client.read_entry(
                self.ledger_id, entry_id, long_poll_timeout_ms=max(1, timeout_ms)
            )
            self._check_identity(result, entry_id, bookie)
            # Only the bookie's LAC says what is confirmed; holding the entry does not.
            return result.lac

        tasks = [asyncio.create_task(poll(b)) for b in bookies]
        best = -1
        try:
            for next_done in asyncio.as_completed(tasks):
                try:
                    best = max(best, await next_done)
                except (ReadTimeoutError, NoSuchEntryError, NoSuchLedgerError):
                    continue
                except BookieError as exc:
                    log.debug("long poll of %d:%d failed: %s", self.ledger_id, entry_id, exc)
                    continue
                if best >= entry_id:
                    return best
            return best
        finally:
            discard_tasks(tasks)


class ReadHandle:
    """What every handle can do: read confirmed entries. Subclasses own ``metadata`` and LAC."""

    def __init__(self, bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, version: int):
        self.bk = bk
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.version = version
        self._reader = ReplicaReader(bk, ledger_id)

    @property
    def last_add_confirmed(self) -> int:
        raise NotImplementedError

    @property
    def is_closed(self) -> bool:
        return self.metadata.is_closed

    def _check_readable(self, first: int, last: int) -> None:
        if first < 0 or last < first:
            raise ReadError(f"invalid entry range {first}..{last} of ledger {self.ledger_id}")
        lac = self.last_add_confirmed
        if last > lac:
            raise ReadError(
                f"entry {last} of ledger {self.ledger_id} is beyond its last confirmed entry {lac}"
            )

    async def read_entries(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` (inclusive), all confirmed; ``ReadError`` beyond the LAC."""
        return [to_ledger_entry(raw) for raw in await self.read_raw_entries(first, last)]

    async def read_entry(self, entry_id: int) -> LedgerEntry:
        return (await self.read_entries(entry_id, entry_id))[0]

    async def read_raw_entries(self, first: int, last: int) -> list[bytes]:
        """The entries as stored (header and digest included), for re-replication."""
        self._check_readable(first, last)
        return await self._reader.read_range(self.metadata, first, last)


class ReadOnlyLedgerHandle(ReadHandle):
    """A reader's handle: sees a closed ledger whole, or tails an open one by its LAC."""

    def __init__(self, bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, version: int):
        super().__init__(bk, ledger_id, metadata, version)
        self._lac = metadata.last_entry_id if metadata.is_closed else -1
        self._length_read = 0

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def length(self) -> int:
        """The ledger's length once closed; while open, its length through the highest entry
        read so far (each entry records it)."""
        return self.metadata.length if self.metadata.is_closed else self._length_read

    async def read_raw_entries(self, first: int, last: int) -> list[bytes]:
        """As for any handle; if the ledger is still open and a read fails, the writer may
        have moved those entries to a new ensemble: re-read the metadata and try once more."""
        try:
            entries = await super().read_raw_entries(first, last)
        except (NoSuchEntryError, ReadError):
            if self.metadata.is_closed:
                raise
            await self.refresh_metadata()
            entries = await super().read_raw_entries(first, last)
        self._length_read = max(self._length_read, parse_header(entries[-1]).length)
        return entries

    async def refresh_metadata(self) -> None:
        self.metadata, self.version = await self.bk.ledger_manager.read(self.ledger_id)
        if self.metadata.is_closed:
            self._lac = self.metadata.last_entry_id

    async def read_last_add_confirmed(self) -> int:
        """Ask the bookies (and the metadata, which may say the ledger got closed)."""
        if self.metadata.is_closed:
            return self._lac
        await self.refresh_metadata()
        if not self.metadata.is_closed:
            self._lac = max(self._lac, await self._reader.read_lac(self.metadata))
        return self._lac

    async def wait_for_entries_after(self, entry_id: int, timeout_s: float) -> int:
        """Tail: wait up to ``timeout_s`` until the LAC passes ``entry_id``; the LAC then."""
        if self._lac > entry_id or self.metadata.is_closed:
            return self._lac
        lac = await self._reader.long_poll(self.metadata, entry_id + 1, int(timeout_s * 1000))
        if lac > self._lac:
            self._lac = lac
        else:
            await self.refresh_metadata()  # the writer may have closed it or changed ensemble
        return self._lac

    async def close(self) -> None:
        """Nothing to release; present so every handle can be closed the same way."""
