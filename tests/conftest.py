"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stripemq.testing.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper server for the session; each test should use its own chroot."""
    with ZooKeeperServer() as server:
        yield server
