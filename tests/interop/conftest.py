"""Fixtures of the interop tests, which drive the broker with the official ``pulsar-client``:
the integration tests' fresh ZooKeeper namespace, store and broker over real bookie
processes (from ``stripemq.testing.fixtures``); modules may override ``broker``. Modules
that want a real ``stripemq standalone`` child process share one per module
(``standalone``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from stripemq.testing.fixtures import broker, metadata_url, store
from stripemq.testing.standalone import StandaloneProcess

__all__ = ["broker", "metadata_url", "standalone", "store"]


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
