"""pytest fixtures for tests that run against real processes: a fresh ZooKeeper namespace, a
metadata store on it, and a broker (in the test's process) over real bookie processes.

A conftest makes them available by importing them (``from stripemq.testing.fixtures import
broker, metadata_url, store``); a test module may override any of them. They need the
``zookeeper_server`` fixture (one real ZooKeeper for the session), which the suite's root
conftest provides. Only tests import this module: it needs pytest.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from stripemq.broker.server import BrokerServer
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.testing.bookie import BookieProcess
from stripemq.testing.broker import broker_on_bookies
from stripemq.testing.zookeeper import ZooKeeperServer


@pytest.fixture
def metadata_url(zookeeper_server: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """A ZooKeeper URL with a chroot of its own (named after the test module)."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    return zookeeper_server.url(f"/{module}-{uuid.uuid4().hex[:8]}")


BookieFactory = Callable[..., BookieProcess]


@pytest.fixture
def make_bookie(tmp_path: Path, metadata_url: str) -> Iterator[BookieFactory]:
    """Makes bookie processes (not started) on ``metadata_url``: ``make_bookie(name,
    **settings)``; every one is killed at the end of the test."""
    started: list[BookieProcess] = []

    def factory(name: str = "b0", **settings: object) -> BookieProcess:
        proc = BookieProcess(metadata_url, tmp_path / name, settings=settings)
        started.append(proc)
        return proc

    yield factory
    for proc in started:
        proc.kill()


@pytest.fixture
async def store(metadata_url: str) -> AsyncIterator[MetadataStore]:
    s = create_metadata_store(metadata_url)
    await s.start()
    yield s
    await s.close()


@pytest.fixture
async def broker(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[BrokerServer]:
    """A broker with default settings over two bookie processes."""
    async with broker_on_bookies(metadata_url, store, tmp_path) as server:
        yield server
