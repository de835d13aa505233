"""The HTTP endpoint of ``stripemq autorecovery`` (what the Helm chart probes and scrapes):
real processes on real ZooKeeper answer ``/heartbeat`` and serve ``/metrics`` that
``prometheus_client`` parses, with the gauge saying which of them is the auditor."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from stripemq.bookie.autorecovery import current_auditor
from stripemq.metadata import MetadataStore
from stripemq.testing.autorecovery import AutoRecoveryProcess
from stripemq.testing.polling import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def get(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}{path}") as response:
            return response.status, await response.text()


async def scrape(port: int) -> dict[str, Metric]:
    status, text = await get(port, "/metrics")
    assert status == 200
    return {family.name: family for family in text_string_to_metric_families(text)}


async def elected_gauge(port: int) -> float:
    (sample,) = (await scrape(port))["auditor_elected"].samples
    return sample.value


async def heartbeat_ok(proc: AutoRecoveryProcess) -> bool:
    if proc.exited_with() is not None:
        raise RuntimeError(f"autorecovery exited; log:\n{proc.tail_log()}")
    try:
        return await get(proc.http_port, "/heartbeat") == (200, "OK\n")
    except aiohttp.ClientConnectionError:
        return False  # not listening yet: it opens the port once its components run


async def test_probes_and_metrics_of_autorecovery_processes(
    tmp_path: Path, metadata_url: str, store: MetadataStore
) -> None:
    settings: dict[str, object] = {"zk_timeout_ms": 3000}
    first = AutoRecoveryProcess(metadata_url, tmp_path, name="first", settings=settings)
    second = AutoRecoveryProcess(metadata_url, tmp_path, name="second", settings=settings)
    try:
        await asyncio.gather(first.start(), second.start())
        for proc in (first, second):
            await until(functools.partial(heartbeat_ok, proc), f"{proc.instance_id} answers")

        auditor = await current_auditor(store)
        assert auditor in ("first", "second")
        leader, follower = (first, second) if auditor == "first" else (second, first)
        await until(lambda: _gauge_is(leader, 1), "the auditor's gauge says so")
        families = await scrape(follower.http_port)
        assert families["auditor_elected"].type == "gauge"
        assert families["auditor_elected"].samples[0].value == 0
        # BookKeeper's summaries, with their success label, are there before any work.
        rereplicate = families["replication_worker_rereplicate"]
        assert rereplicate.type == "summary"
        assert {s.labels.get("success") for s in rereplicate.samples} == {"true", "false"}
        assert "auditor_AUDIT_BOOKIES_TIME" in families

        # A clean stop leaves the election at once: the other process takes over.
        assert await asyncio.to_thread(leader.terminate) == 0
        await until(lambda: _gauge_is(follower, 1), "the other process becomes the auditor")
        with pytest.raises(aiohttp.ClientConnectionError):
            await get(leader.http_port, "/heartbeat")  # its endpoint went with it
    finally:
        for proc in (first, second):
            proc.kill()


async def _gauge_is(proc: AutoRecoveryProcess, expected: float) -> bool:
    return await elected_gauge(proc.http_port) == expected
