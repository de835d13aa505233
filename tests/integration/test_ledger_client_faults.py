"""Ledger client under injected faults (real ZooKeeper, real bookie processes): fence
misses, unconfirmed entries visible to tailing readers, a seal that fails.

Latency and transient failures are injected by wrapping the ``BookieClient`` objects that a
``BookKeeper``'s pool hands out; the bookies themselves are unmodified.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.client import BookKeeper, ClientConfig, LedgerState
from stripemq.errors import BookieUnavailableError, LedgerFencedError, MetadataError
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.proto.entry import verify_entry
from stripemq.testing.cluster import BookieCluster

pytestmark = pytest.mark.integration

CFG = ClientConfig(
    add_entry_timeout_s=20.0,
    read_entry_timeout_s=10.0,
    explicit_lac_interval_ms=0,
    speculative_read_timeout_ms=0,
)


def payload(i: int) -> bytes:
    return f"entry-{i:06d}-".encode() * 3


class ProxyClient:
    """A ``BookieClient`` with hooks: hold adds of some entries, fail fences, slow reads."""

    def __init__(self, real: BookieClient) -> None:
        self.real = real
        self.hold_adds: dict[int, asyncio.Event] = {}
        self.fence_failures = 0
        self.read_delay: dict[int, float] = {}
        self.fail_adds: Callable[[int], bool] = lambda _e: False
        self.tasks: set[asyncio.Task[None]] = set()
        self.acked: set[int] = set()  # entries this bookie acknowledged
        self._acked_changed = asyncio.Event()

    async def until_acked(self, entry_id: int, timeout: float = 10.0) -> None:
        """Wait until this bookie has acknowledged ``entry_id``."""
        async with asyncio.timeout(timeout):
            while entry_id not in self.acked:
                self._acked_changed.clear()
                await self._acked_changed.wait()

    def _record(self, entry_id: int, future: asyncio.Future[tuple[int, int]]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.acked.add(entry_id)
            self._acked_changed.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def add_entry(
        self, master_key: bytes, entry: bytes, *, recovery_add: bool = False
    ) -> asyncio.Future[tuple[int, int]]:
        entry_id = verify_entry(entry).entry_id
        gate = self.hold_adds.get(entry_id)
        if gate is None and not self.fail_adds(entry_id):
            future = self.real.add_entry(master_key, entry, recovery_add=recovery_add)
            future.add_done_callback(lambda f: self._record(entry_id, f))
            return future
        loop = asyncio.get_running_loop()
        out: asyncio.Future[tuple[int, int]] = loop.create_future()

        async def later() -> None:
            try:
                if gate is None:
                    await asyncio.sleep(0.05)
                    raise BookieUnavailableError(f"injected add failure of entry {entry_id}")
                await gate.wait()
                result = await self.real.add_entry(master_key, entry, recovery_add=recovery_add)
                out.set_result(result)
            except BaseException as exc:
                if not out.done():
                    out.set_exception(exc)

        task = asyncio.create_task(later())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return out

    async def read_entry(self, ledger_id: int, entry_id: int, **kw: Any) -> Any:
        if kw.get("fence") and self.fence_failures > 0:
            self.fence_failures -= 1
            raise BookieUnavailableError(f"{self.real.address}: injected fence timeout")
        delay = self.read_delay.get(entry_id)
        if delay:
            await asyncio.sleep(delay)
        return await self.real.read_entry(ledger_id, entry_id, **kw)


async def proxied(bk: BookKeeper, addresses: list[str]) -> dict[str, ProxyClient]:
    """Put a proxy in front of every bookie in ``bk``'s pool."""
    proxies = {}
    for address in addresses:
        real = BookieClient(
            address,
            timeout=bk.config.read_entry_timeout_s,
            add_timeout=bk.config.add_entry_timeout_s,
        )
        await real.connect()
        proxy = ProxyClient(real)
        bk.clients._clients[address] = proxy  # type: ignore[assignment]
        proxies[address] = proxy
    return proxies


async def test_recovery_reads_fence_so_a_missed_fence_cannot_lose_a_confirmed_entry(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    """E=Qw=3, Qa=2. C misses the fence (a transient timeout), then answers the recovery read
    of entry 5 "no such entry", as does A. Had that read not fenced C, the old writer's add of
    5 could reach C afterwards (B + C = Qa) and confirm an entry the closed ledger lacks."""
    cluster = BookieCluster(metadata_url, tmp_path / "bookies", 3)
    await cluster.__aenter__()
    other_store = create_metadata_store(metadata_url)
    await other_store.start()
    writer_bk = BookKeeper(store, CFG)
    recovering_bk = BookKeeper(other_store, CFG)
    await writer_bk.start()
    await recovering_bk.start()
    try:
        addresses = [b.address for b in cluster.bookies]
        w = await proxied(writer_bk, addresses)
        r = await proxied(recovering_bk, addresses)
        handle = await writer_bk.create_ledger(3, 3, 2)
        for i in range(5):
            assert await handle.add_entry(payload(i)) == i
        a, b, c = handle.ensemble
        gate_a, gate_c = asyncio.Event(), asyncio.Event()
        w[a].hold_adds[5] = gate_a  # slow network to A and C for entry 5
        w[c].hold_adds[5] = gate_c
        fut = handle.add_entry_async(payload(5))
        fut.add_done_callback(lambda f: f.exception())
        await w[b].until_acked(5)  # B has acked entry 5 (1 of 2)
        assert not fut.done()

        r[c].fence_failures = 1  # C's fence times out; A, B still cover every write set
        r[b].read_delay[5] = 1.0  # B's copy of entry 5 answers last
        reader = await recovering_bk.open_ledger(handle.ledger_id)
        closed_at = reader.metadata.last_entry_id
        assert reader.metadata.state is LedgerState.CLOSED

        gate_c.set()  # the old writer's add reaches C now
        try:
            confirmed = await asyncio.wait_for(fut, 10)
        except LedgerFencedError:
            confirmed = None
        gate_a.set()
        await asyncio.gather(*w[a].tasks, return_exceptions=True)  # A's add lands, or fails

        # An entry the writer was told is durable must be in the ledger.
        assert confirmed is None or confirmed <= closed_at, (
            f"writer confirmed entry {confirmed}, recovery closed the ledger at {closed_at}"
        )
    finally:
        await writer_bk.close()
        await recovering_bk.close()
        await other_store.close()
        cluster.kill_all()


async def test_a_zero_timeout_tail_poll_never_reports_an_unconfirmed_entry(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    """A bookie may hold entry e+1 before it is confirmed; a tail poll with no time to wait
    must still take only the bookie's LAC as the reader's LAC, never "it holds the entry"."""
    cluster = BookieCluster(metadata_url, tmp_path / "bookies", 3)
    await cluster.__aenter__()
    bk = BookKeeper(store, CFG)
    await bk.start()
    try:
        w = await proxied(bk, [b.address for b in cluster.bookies])
        handle = await bk.create_ledger(3, 3, 2)
        for i in range(5):
            await handle.add_entry(payload(i))
        a, b, c = handle.ensemble
        w[a].hold_adds[5] = asyncio.Event()
        w[c].hold_adds[5] = asyncio.Event()
        fut = handle.add_entry_async(payload(5))  # reaches B only: not confirmed
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        await w[b].until_acked(5)
        assert handle.last_add_confirmed == 4

        reader = await bk.open_ledger(handle.ledger_id, recovery=False)
        lac = await reader.wait_for_entries_after(reader.last_add_confirmed, 0)
        assert lac <= handle.last_add_confirmed, (
            f"reader LAC {lac} is beyond the writer's LAC {handle.last_add_confirmed}"
        )
    finally:
        await bk.close()
        cluster.kill_all()


async def test_close_retries_after_a_failed_seal(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    """The first close() fails in the metadata store (a ZooKeeper connection loss surfaces as
    MetadataError); a retried close() must seal the ledger, not return early."""

    cluster = BookieCluster(metadata_url, tmp_path / "bookies", 3)
    await cluster.__aenter__()
    bk = BookKeeper(store, CFG)
    await bk.start()
    try:
        handle = await bk.create_ledger(3, 2, 2)
        for i in range(3):
            await handle.add_entry(payload(i))
        real_write = bk.ledger_manager.write
        calls = 0

        async def flaky_write(*args: Any, **kw: Any) -> int:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise MetadataError("connection to ZooKeeper lost; the write may or may not ...")
            return await real_write(*args, **kw)

        bk.ledger_manager.write = flaky_write  # type: ignore[method-assign]
        with pytest.raises(MetadataError):
            await handle.close()
        await handle.close()  # the retry
        metadata, _ = await bk.ledger_manager.read(handle.ledger_id)
        assert metadata.state is LedgerState.CLOSED and metadata.last_entry_id == 2
    finally:
        await bk.close()
        cluster.kill_all()
