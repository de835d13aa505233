"""``LocalBookieClient``: the standalone broker's client of the bookie in its own process.

It answers the calls a ledger handle makes of a ``BookieClient`` from the bookie's
``BookieRequestHandler`` directly, without gRPC and loopback sockets: no encoding, no
copies, no poller thread. Nothing else changes: every add is journaled and fsynced before
its future resolves, and reads are verified as they are over the network. Adds made in one
turn of the event loop go to storage together, as one journal append.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Awaitable
from typing import TypeVar

from stripemq.bookie.bookie_client import LacInfo, ReadResult
from stripemq.bookie.client.config import ClientConfig
from stripemq.bookie.handler import AddResult, BookieRequestHandler
from stripemq.bookie.storage.engine import AddOp
from stripemq.errors import BookieError, BookieTimeoutError, BookieUnavailableError
from stripemq.proto import bookie_pb2 as pb
from stripemq.proto.entry import EntryHeader, verify_entry

log = logging.getLogger(__name__)

T = TypeVar("T")

_QueuedAdd = tuple[AddOp, asyncio.Future[tuple[int, int]]]


class LocalBookieClient:
    """``BookieClient``'s calls, served in this process by ``handler``'s bookie."""

    def __init__(
        self, address: str, handler: BookieRequestHandler, config: ClientConfig | None = None
    ) -> None:
        """``config``: the ledger client's timeouts, which bound local calls as they bound
        remote ones (a hung disk fails adds instead of holding them for ever)."""
        config = config or ClientConfig()
        self.address = address
        self.handler = handler
        self.timeout = config.read_entry_timeout_s
        self.add_timeout = config.add_entry_timeout_s
        self._queue: list[_QueuedAdd] = []
        self._flush_scheduled = False
        self._storing: set[asyncio.Task[None]] = set()  # batches in storage
        self._closed = False

    async def connect(self) -> None:
        """Nothing to connect: present so the pool treats every client alike."""

    async def close(self) -> None:
        """Refuse further calls, fail what is queued, and wait for the adds handed to
        storage (each ends, at the latest, at its timeout)."""
        self._closed = True
        error = BookieUnavailableError(f"client of {self.address} closed")
        queued, self._queue = self._queue, []
        for _, future in queued:
            if not future.done():
                future.set_exception(copy.copy(error))
        if self._storing:  # each answers its callers by its timeout at the latest
            await asyncio.wait(set(self._storing), timeout=self.add_timeout)

    def _check_open(self) -> None:
        if self._closed:
            raise BookieUnavailableError(f"client of {self.address} is closed")

    # ------------------------------------------------------------------ adds

    def add_entry(
        self, master_key: bytes, entry: bytes, *, recovery_add: bool = False
    ) -> asyncio.Future[tuple[int, int]]:
        """Queue an add; the future gives ``(ledger_id, entry_id)`` once durable."""
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, int]] = loop.create_future()
        self._queue.append((AddOp(entry, master_key, recovery_add), future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        """Hand one loop turn's adds to storage as one batch, timed against the add
        timeout. A batch past its timeout fails its callers but still finishes in storage
        (its journal record is on the way), as one sent to a remote bookie would."""
        self._flush_scheduled = False
        batch, self._queue = self._queue, []
        if not batch:
            return
        loop = asyncio.get_running_loop()
        late = loop.call_later(self.add_timeout, self._time_out, batch)
        # Held in _storing until done.
        work = loop.create_task(self._store(batch, late, time.perf_counter()))
        self._storing.add(work)
        work.add_done_callback(self._storing.discard)

    async def _store(
        self, batch: list[_QueuedAdd], late: asyncio.TimerHandle, started: float
    ) -> None:
        """Store ``batch`` and answer its callers in the same step that hears storage
        finish (a done callback would cost the broker one more loop turn per batch)."""
        try:
            results = await self.handler.add([op for op, _ in batch])  # answers every op
        except asyncio.CancelledError:
            self._answer(batch, [BookieUnavailableError("add cancelled")] * len(batch))
            raise
        finally:
            late.cancel()
        took = time.perf_counter() - started
        self.handler.answered((isinstance(r, EntryHeader) for r in results), took)
        self._answer(batch, results)

    def _time_out(self, batch: list[_QueuedAdd]) -> None:
        late = BookieTimeoutError(
            f"bookie {self.address} did not store an add within {self.add_timeout}s"
        )
        for _, future in batch:
            if not future.done():
                future.set_exception(copy.copy(late))

    @staticmethod
    def _answer(batch: list[_QueuedAdd], results: list[AddResult]) -> None:
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue  # timed out (or the caller gave up)
            if isinstance(result, BookieError):
                future.set_exception(copy.copy(result))  # each caller its own traceback
            else:
                future.set_result((result.ledger_id, result.entry_id))

    # ------------------------------------------------------------------ other calls

    async def read_entry(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes = b"",
        long_poll_timeout_ms: int = 0,
    ) -> ReadResult:
        """One entry (``-1``: the last one held), verified as a remote read is."""
        self._check_open()
        # A long poll may legitimately take longer than an ordinary call.
        within_s = max(self.timeout, long_poll_timeout_ms / 1000 + 5)
        entry, state = await self._counted(
            "read",
            within_s,
            self.handler.read_entry(
                ledger_id,
                entry_id,
                fence=fence,
                master_key=master_key,
                long_poll_timeout_ms=long_poll_timeout_ms,
            ),
        )
        verify_entry(entry)
        return ReadResult(entry, state.lac, state.fenced)

    async def read_entries(
        self, ledger_id: int, entry_ids: list[int], max_bytes: int = 0
    ) -> tuple[list[bytes], int]:
        """The first of ``entry_ids`` that fit in ``max_bytes`` (at least one), each
        verified, and the bookie's LAC."""
        self._check_open()
        entries, state = await self._counted(
            "read", self.timeout, self.handler.read_entries(ledger_id, entry_ids, max_bytes)
        )
        for entry in entries:
            verify_entry(entry)
        return entries, state.lac

    async def read_lac(self, ledger_id: int) -> LacInfo:
        self._check_open()
        state = await self._counted("read_lac", self.timeout, self.handler.ledger_state(ledger_id))
        return LacInfo(state.lac, state.last_entry_id, state.fenced)

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        self._check_open()
        await self._counted(
            "write_lac", self.timeout, self.handler.write_lac(ledger_id, master_key, lac)
        )

    async def get_info(self) -> pb.GetInfoResponse:
        self._check_open()
        return await self._counted("get_info", self.timeout, self.handler.info())

    async def _counted(self, operation: str, within_s: float, work: Awaitable[T]) -> T:
        """Await ``work`` for at most ``within_s``; failures are typed and counted as the
        gRPC service does, and a call past its time fails as a remote one would."""
        try:
            async with asyncio.timeout(within_s):
                return await work
        except TimeoutError:
            raise BookieTimeoutError(
                f"bookie {self.address} did not answer a {operation} within {within_s}s"
            ) from None
        except BookieError as error:
            self.handler.count_error(operation, error)
            raise
        except Exception as exc:
            log.exception("unexpected failure in %s", operation)
            internal = BookieError(f"internal error: {exc}")
            self.handler.count_error(operation, internal)
            raise internal from exc
