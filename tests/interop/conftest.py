"""Fixtures of the interop tests, which drive the broker with the official ``pulsar-client``:
the integration tests' fresh ZooKeeper namespace, store and broker over real bookie
processes (from ``stripemq.testing.fixtures``); modules may override ``broker``. Modules
that want a real ``stripemq standalone`` child process share one per module
(``standalone``), and may take an official client of it (``client``; a module may
define its own)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from stripemq.testing.fixtures import broker, metadata_url, store
from stripemq.testing.standalone import StandaloneProcess

__all__ = ["broker", "client", "metadata_url", "standalone", "store"]


@pytest.fixture(scope="module")
def standalone(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StandaloneProcess]:
    """A ``stripemq standalone`` on free ports, for the tests of one module."""
    base = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    process = StandaloneProcess(Path(base) / "standalone")
    asyncio.run(process.start())
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    """The official ``pulsar-client`` connected to the module's standalone."""
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=10)
    try:
        yield client
    finally:
        client.close()
