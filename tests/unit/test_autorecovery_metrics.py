"""Auto-recovery metrics (BookKeeper's auditor and replication-worker names) and the HTTP
endpoint: the stats classes driven directly, then counted by a real auditor and worker
re-replicating a ledger between in-process bookies on memory:// metadata."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from stripemq.bookie.autorecovery import AutoRecoveryConfig, AutoRecoveryService
from stripemq.bookie.autorecovery.metrics import (
    AuditorStats,
    AutoRecoveryMetrics,
    ReplicationStats,
)
from stripemq.bookie.client import BookKeeper, LedgerManager
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.server import BookieServer
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.proto.entry import HEADER_SIZE
from stripemq.testing.polling import until
from stripemq.testing.prometheus import families as parse
from stripemq.testing.prometheus import value

pytestmark = pytest.mark.timeout(60)


def test_auditor_stats_have_bookkeepers_names() -> None:
    metrics = AutoRecoveryMetrics()
    stats = metrics.auditor
    assert value(parse(metrics.render()), "auditor_elected") == 0
    stats.elected = True
    stats.election_attempts = 2
    stats.bookie_audits_delayed = 3
    stats.delayed_bookie_audits_cancelled = 1
    for fragments, bookies in ((1, 3), (2, 4), (3, 5)):
        stats.ledger_checked(fragments, bookies)
    stats.audited(0.25, under_replicated=2, total_size=4096)
    stats.audited(0.5, under_replicated=0, total_size=0)  # nothing lost: no distribution
    stats.audit_failed(0.125)

    families = parse(metrics.render())
    assert value(families, "auditor_elected") == 1
    assert families["auditor_elected"].type == "gauge"
    assert value(families, "auditor_election_attempts") == 2
    assert value(families, "auditor_NUM_LEDGERS_CHECKED") == 3
    assert value(families, "auditor_NUM_BOOKIE_AUDITS_DELAYED") == 3
    assert value(families, "auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED") == 1
    audits = "auditor_AUDIT_BOOKIES_TIME"
    assert families[audits].type == "summary"
    assert value(families, f"{audits}_count", success="true") == 2
    assert value(families, f"{audits}_sum", success="true") == pytest.approx(750.0)  # ms
    assert value(families, f"{audits}_count", success="false") == 1
    found = "auditor_NUM_UNDER_REPLICATED_LEDGERS"
    assert value(families, f"{found}_count", success="true") == 1
    assert value(families, f"{found}_sum", success="true") == 2
    size = "auditor_UNDER_REPLICATED_LEDGERS_TOTAL_SIZE"
    assert value(families, f"{size}_sum", success="true") == 4096
    assert value(families, "auditor_NUM_FRAGMENTS_PER_LEDGER_sum", success="true") == 6
    median = value(families, "auditor_NUM_BOOKIES_PER_LEDGER", success="true", quantile="0.5")
    assert median == 4


def test_replication_stats_have_bookkeepers_names() -> None:
    metrics = AutoRecoveryMetrics()
    stats = metrics.replication
    stats.entry_read(0.002, 100)
    stats.entry_read(0.004, 50)
    stats.entry_read(0.010, None)  # no replica answered
    stats.entry_written(0.003, 100)
    stats.entry_written(0.006, None)
    stats.rereplicate.record(1.5)
    stats.rereplicate.record(0.5, success=False)
    stats.ledgers_replicated += 1
    stats.deferred_lock_releases += 1

    families = parse(metrics.render())
    prefix = "replication_worker_"
    assert value(families, f"{prefix}NUM_ENTRIES_READ") == 2
    assert value(families, f"{prefix}NUM_BYTES_READ") == 150
    assert value(families, f"{prefix}NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION") == 1
    assert value(families, f"{prefix}NUM_ENTRIES_WRITTEN") == 1
    assert value(families, f"{prefix}NUM_BYTES_WRITTEN") == 100
    assert value(families, f"{prefix}NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED") == 1
    assert value(families, f"{prefix}NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER") == 1
    reads = f"{prefix}READ_DATA_LATENCY"
    assert value(families, f"{reads}_count", success="true") == 2
    assert value(families, f"{reads}_sum", success="true") == pytest.approx(6.0)
    assert value(families, f"{reads}_count", success="false") == 1
    assert value(families, f"{prefix}WRITE_DATA_LATENCY_count", success="false") == 1
    assert value(families, f"{prefix}rereplicate_sum", success="true") == pytest.approx(1500.0)
    assert value(families, f"{prefix}rereplicate_count", success="false") == 1


def test_disabled_statistics_show_nothing() -> None:
    metrics = AutoRecoveryMetrics(enabled=False)
    metrics.auditor.elected = True
    assert metrics.render() == b""


def test_components_made_alone_count_into_stats_of_their_own() -> None:
    assert AuditorStats().elected is False
    assert ReplicationStats().entries_written == 0


async def test_heartbeat_follows_the_service_and_metrics_are_served() -> None:
    metrics = AutoRecoveryMetrics()
    port = await metrics.serve("127.0.0.1", 0)
    assert port == metrics.port != 0
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/heartbeat") as response:
                assert response.status == 503  # not running yet
            metrics.running = True
            async with session.get(f"{base}/heartbeat") as response:
                assert (response.status, await response.text()) == (200, "OK\n")
            async with session.get(f"{base}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain")
                families = parse(await response.read())
            assert value(families, "auditor_elected") == 0
            assert "replication_worker_rereplicate" in families
    finally:
        await metrics.close()
    assert metrics.port == port  # the last bound port stays readable


async def test_a_port_in_use_fails_the_start_and_leaves_nothing_running() -> None:
    taken = AutoRecoveryMetrics()
    port = await taken.serve("127.0.0.1", 0)
    url = f"memory://{uuid.uuid4().hex[:8]}"
    service = AutoRecoveryService(
        url, AutoRecoveryConfig(instance_id="busy", stats_http_port=port), serve_http=True
    )
    try:
        with pytest.raises(OSError):
            await service.start()
        assert service.store is None and service.auditor is None
        assert not service.metrics.running
    finally:
        await taken.close()


def test_the_port_must_be_a_port() -> None:
    from stripemq.errors import ConfigError

    with pytest.raises(ConfigError, match="stats_http_port"):
        AutoRecoveryConfig(stats_http_port=70000).validate()


# ---------------------------------------------------------------------- counted for real


@pytest.fixture
async def shared_store() -> AsyncIterator[MetadataStore]:
    store = create_metadata_store(f"memory://{uuid.uuid4().hex[:8]}")
    await store.start()
    yield store
    await store.close()


def bookie_config(base: Path, **settings: object) -> BookieConfig:
    defaults: dict[str, object] = {
        "data_dir": str(base),
        "bookie_port": 0,
        "enable_statistics": False,
        "flush_interval_ms": 600_000,
    }
    return BookieConfig(**{**defaults, **settings})  # type: ignore[arg-type]


async def test_auditor_and_worker_count_a_re_replication(
    tmp_path: Path, shared_store: MetadataStore
) -> None:
    bookies = [
        BookieServer(bookie_config(tmp_path / f"b{i}"), shared_store, serve_http=False)
        for i in range(3)
    ]
    for bookie in bookies:
        await bookie.start()
    running = list(bookies)
    service: AutoRecoveryService | None = None
    try:
        payloads = [f"entry {i}".encode() * (i + 1) for i in range(6)]
        async with BookKeeper(shared_store) as bk:
            handle = await bk.create_ledger(2, 2, 2)
            for payload in payloads:
                await handle.add_entry(payload)
            await handle.close()
        lm = LedgerManager(shared_store)
        metadata, _ = await lm.read(handle.ledger_id)
        lost = metadata.ensembles[0][0]
        gone = next(b for b in bookies if b.bookie_id == lost)
        running.remove(gone)
        await gone.stop()  # it unregisters: the auditor sees it lost

        service = AutoRecoveryService(
            shared_store, AutoRecoveryConfig(instance_id="counted", replication_workers=1)
        )
        await service.start()
        assert service.metrics.port == 0  # not asked to serve HTTP

        async def replaced() -> bool:
            current, _ = await lm.read(handle.ledger_id)
            return lost not in current.bookies()

        await until(replaced, "the lost bookie's replica is copied")
        await until(lambda: _rereplicated(service), "the worker finishes its attempt")
        families = parse(service.metrics.render())
    finally:
        if service is not None:
            await service.stop()
        for bookie in running:
            await bookie.stop()

    assert value(families, "auditor_elected") == 1
    assert value(families, "auditor_NUM_LEDGERS_CHECKED") >= 1
    assert value(families, "auditor_NUM_UNDER_REPLICATED_LEDGERS_sum", success="true") == 1
    size = "auditor_UNDER_REPLICATED_LEDGERS_TOTAL_SIZE_sum"
    assert value(families, size, success="true") == metadata.length
    entries, raw_bytes = len(payloads), sum(HEADER_SIZE + len(p) for p in payloads)
    assert value(families, "replication_worker_NUM_ENTRIES_READ") == entries
    assert value(families, "replication_worker_NUM_BYTES_READ") == raw_bytes
    assert value(families, "replication_worker_NUM_ENTRIES_WRITTEN") == entries
    assert value(families, "replication_worker_NUM_BYTES_WRITTEN") == raw_bytes
    assert value(families, "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED") == 1
    writes = "replication_worker_WRITE_DATA_LATENCY_count"
    assert value(families, writes, success="true") == entries
    assert value(families, "replication_worker_rereplicate_count", success="true") == 1
    assert not service.metrics.running  # stopped


def _rereplicated(service: AutoRecoveryService) -> bool:
    return service.metrics.replication.rereplicate.count() >= 1


async def test_a_bookie_shows_its_auto_recoverys_metrics_on_its_own_endpoint(
    tmp_path: Path,
) -> None:
    bookie = BookieServer(
        bookie_config(
            tmp_path / "bookie",
            metadata_service_uri=f"memory://{uuid.uuid4().hex[:8]}",
            enable_statistics=True,
            autorecovery_enabled=True,
        ),
        serve_http=False,
    )
    await bookie.start()
    try:
        assert bookie.autorecovery is not None
        assert not bookie.autorecovery.serve_http
        assert bookie.autorecovery.metrics.port == 0
        auditor = bookie.autorecovery.auditor
        assert auditor is not None
        await until(lambda: auditor.is_auditor, "the bookie's auto-recovery is the auditor")
        families = parse(bookie.metrics.render())
        assert value(families, "auditor_elected") == 1
        assert "bookie_SERVER_STATUS" in families
    finally:
        await bookie.stop()
