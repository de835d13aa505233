"""Bookie metrics with BookKeeper's names, and BookKeeper's HTTP probes: on a real
``BookieStorage`` and on an in-process ``BookieServer`` (memory metadata, ports 0)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import test_utils, web
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.metrics import QUANTILES, BookieMetrics, OpStats
from stripemq.bookie.server import BookieServer
from stripemq.bookie.storage.engine import AddOp, BookieStorage
from stripemq.errors import NoSuchLedgerError
from stripemq.proto.entry import EntryHeader, encode_entry

KEY = b"master-key"


def make_config(tmp_path: Path, **overrides: object) -> BookieConfig:
    settings: dict[str, object] = {
        "data_dir": str(tmp_path / "bookie"),
        "flush_interval_ms": 600_000,
        "bookie_port": 0,
        "stats_http_port": 0,
    }
    settings.update(overrides)
    return BookieConfig(**settings)  # type: ignore[arg-type]


def entry(ledger: int, entry_id: int) -> bytes:
    return encode_entry(ledger, entry_id, entry_id - 1, f"entry {entry_id}".encode())


def parse(text: bytes) -> dict[str, Metric]:
    return {family.name: family for family in text_string_to_metric_families(text.decode())}


def sample(families: dict[str, Metric], family: str, name: str, **labels: str) -> float:
    found = [
        s.value
        for s in families[family].samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


@pytest.fixture
async def metrics(tmp_path: Path) -> AsyncIterator[BookieMetrics]:
    """Metrics of a started storage (made before it starts: they time its journal syncs)."""
    metrics = BookieMetrics(BookieStorage(make_config(tmp_path)))
    await metrics.storage.start()
    yield metrics
    await metrics.storage.stop()


def test_op_stats_are_summaries_in_milliseconds_with_a_success_label() -> None:
    stats = OpStats("bookkeeper_server_ADD_ENTRY_REQUEST", "adds")
    for seconds in (0.001, 0.002, 0.003):
        stats.record(seconds)
    stats.record(0.5, success=False)
    family = stats.family()
    assert family.type == "summary"
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
    ok = (("success", "true"),)
    failed = (("success", "false"),)
    assert values[("bookkeeper_server_ADD_ENTRY_REQUEST_count", ok)] == 3
    assert values[("bookkeeper_server_ADD_ENTRY_REQUEST_sum", ok)] == pytest.approx(6.0)
    assert values[("bookkeeper_server_ADD_ENTRY_REQUEST_count", failed)] == 1
    median = values[("bookkeeper_server_ADD_ENTRY_REQUEST", (("quantile", "0.5"), *ok))]
    assert median == pytest.approx(2.0)
    top = values[("bookkeeper_server_ADD_ENTRY_REQUEST", (("quantile", "1.0"), *ok))]
    assert top == pytest.approx(3.0)
    quantiles = [s for s in family.samples if "quantile" in s.labels]
    assert len(quantiles) == 2 * len(QUANTILES)
    assert stats.count() == 3 and stats.count(success=False) == 1


def test_op_stats_without_operations_have_nan_quantiles() -> None:
    family = OpStats("bookie_journal_JOURNAL_SYNC", "syncs").family()
    quantiles = [s.value for s in family.samples if "quantile" in s.labels]
    assert quantiles and all(math.isnan(v) for v in quantiles)


async def test_storage_figures_have_bookkeepers_names(metrics: BookieMetrics) -> None:
    storage = metrics.storage
    results = await storage.add_entries([AddOp(entry(3, i), KEY) for i in range(4)])
    assert all(isinstance(r, EntryHeader) for r in results)
    metrics.added(0.002, 100)
    metrics.read(0.001, 40)
    metrics.read(0.001, None)
    families = parse(metrics.render())
    assert sample(families, "bookie_SERVER_STATUS", "bookie_SERVER_STATUS") == 1
    assert sample(families, "bookie_WRITE_BYTES", "bookie_WRITE_BYTES") == 100
    assert sample(families, "bookie_READ_BYTES", "bookie_READ_BYTES") == 40
    syncs = sample(
        families,
        "bookie_journal_JOURNAL_SYNC",
        "bookie_journal_JOURNAL_SYNC_count",
        success="true",
    )
    assert syncs >= 1 and syncs == storage.journal.fsync_count
    assert (
        sample(
            families,
            "bookkeeper_server_READ_ENTRY_REQUEST",
            "bookkeeper_server_READ_ENTRY_REQUEST_count",
            success="false",
        )
        == 1
    )
    assert sample(families, "bookie_write_cache_size", "bookie_write_cache_size") > 0
    assert "bookie_ledgers_count" in families
    assert "bookie_DELETED_LEDGER_TOTAL" in families
    assert "bookie_gc_reclaimed_bytes" in families  # a stripemq counter: ``_total``
    assert (
        families["bookie_gc_reclaimed_bytes"].samples[0].name == "bookie_gc_reclaimed_bytes_total"
    )

    storage.read_only = True
    families = parse(metrics.render())
    assert sample(families, "bookie_SERVER_STATUS", "bookie_SERVER_STATUS") == 0


async def test_disabled_statistics_show_nothing(tmp_path: Path) -> None:
    storage = BookieStorage(make_config(tmp_path))
    assert BookieMetrics(storage, enabled=False).render() == b""


async def test_probes_follow_the_bookies_life(metrics: BookieMetrics) -> None:
    app = web.Application()
    metrics.add_routes(app.router)
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        heartbeat = await client.get("/heartbeat")
        assert (heartbeat.status, await heartbeat.text()) == (200, "OK\n")
        assert (await client.get("/api/v1/bookie/is_ready")).status == 503  # not started
        metrics.running = True
        ready = await client.get("/api/v1/bookie/is_ready")
        assert (ready.status, await ready.text()) == (200, "OK")
        state = await (await client.get("/api/v1/bookie/state")).json()
        assert state == {
            "running": True,
            "readOnly": False,
            "shuttingDown": False,
            "availableForHighPriorityWrites": True,
        }
        metrics.shutting_down = True
        assert (await client.get("/api/v1/bookie/is_ready")).status == 503
        assert (await client.post("/heartbeat")).status == 405


async def test_a_bookie_server_counts_its_requests_and_serves_probes(tmp_path: Path) -> None:
    bookie = BookieServer(make_config(tmp_path, metadata_service_uri="memory://metrics"))
    await bookie.start()
    client = BookieClient(f"127.0.0.1:{bookie.config.bookie_port}", timeout=10.0)
    await client.connect()
    try:
        data = [entry(9, i) for i in range(5)]
        for item in data:
            await client.add_entry(KEY, item)
        assert (await client.read_entry(9, 0)).entry == data[0]
        with pytest.raises(NoSuchLedgerError):
            await client.read_entry(77, 0)
        base = f"http://127.0.0.1:{bookie.metrics.port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/metrics") as response:
                families = parse(await response.read())
            async with session.get(f"{base}/api/v1/bookie/is_ready") as response:
                assert response.status == 200
        add_count = "bookkeeper_server_ADD_ENTRY_REQUEST_count"
        assert (
            sample(families, "bookkeeper_server_ADD_ENTRY_REQUEST", add_count, success="true") == 5
        )
        assert sample(families, "bookie_WRITE_BYTES", "bookie_WRITE_BYTES") == sum(map(len, data))
        assert sample(families, "bookie_READ_BYTES", "bookie_READ_BYTES") == len(data[0])
        read_count = "bookkeeper_server_READ_ENTRY_count"
        assert sample(families, "bookkeeper_server_READ_ENTRY", read_count, success="true") == 1
        assert sample(families, "bookkeeper_server_READ_ENTRY", read_count, success="false") == 1
    finally:
        await client.close()
        await bookie.stop()
    assert not bookie.metrics.ready


async def test_a_bookie_embedded_without_http_opens_no_port(tmp_path: Path) -> None:
    bookie = BookieServer(
        make_config(tmp_path, metadata_service_uri="memory://embedded"), serve_http=False
    )
    await bookie.start()
    try:
        assert bookie.metrics.port == 0
        assert bookie.metrics.ready
    finally:
        await bookie.stop()


async def test_long_poll_reads_and_add_processing_have_their_own_figures(tmp_path: Path) -> None:
    bookie = BookieServer(make_config(tmp_path, metadata_service_uri="memory://long-poll"))
    await bookie.start()
    client = BookieClient(f"127.0.0.1:{bookie.config.bookie_port}", timeout=10.0)
    await client.connect()
    try:
        for entry_id in range(2):  # the second confirms the first (its LAC)
            await client.add_entry(KEY, entry(4, entry_id))
        # A tailing read of an entry that is there already, then a plain read.
        await client.read_entry(4, 0, long_poll_timeout_ms=1_000)
        await client.read_entry(4, 0)
        families = parse(bookie.metrics.render())

        def count(family: str) -> float:
            return sample(families, family, f"{family}_count", success="true")

        assert count("bookkeeper_server_READ_ENTRY_LONG_POLL_REQUEST") == 1
        assert count("bookkeeper_server_READ_ENTRY_REQUEST") == 1  # the plain read only
        assert count("bookkeeper_server_READ_ENTRY") == 1
        # The request's latency runs from its arrival, the processing's from storage.
        assert count("bookkeeper_server_ADD_ENTRY_REQUEST") == 2
        assert count("bookkeeper_server_ADD_ENTRY") == 2
        request, processing = "bookkeeper_server_ADD_ENTRY_REQUEST", "bookkeeper_server_ADD_ENTRY"
        request_ms = sample(families, request, f"{request}_sum", success="true")
        assert request_ms >= sample(families, processing, f"{processing}_sum", success="true")
    finally:
        await client.close()
        await bookie.stop()


def test_an_add_request_and_its_processing_are_recorded_apart(tmp_path: Path) -> None:
    metrics = BookieMetrics(BookieStorage(make_config(tmp_path)))
    metrics.added(0.001, 10)
    metrics.add_answered(0.004, True)
    families = parse(metrics.render())
    request = "bookkeeper_server_ADD_ENTRY_REQUEST"
    processing = "bookkeeper_server_ADD_ENTRY"
    assert sample(families, request, f"{request}_sum", success="true") == pytest.approx(4.0)
    assert sample(families, processing, f"{processing}_sum", success="true") == pytest.approx(1.0)
