"""Fixtures of the integration tests: a fresh ZooKeeper namespace and a store on it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from stripemq.metadata import MetadataStore, create_metadata_store


@pytest.fixture
def metadata_url(zookeeper_server, request: pytest.FixtureRequest) -> str:  # type: ignore[no-untyped-def]
    """A ZooKeeper URL with a chroot of its own (named after the test module)."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    return zookeeper_server.url(f"/{module}-{uuid.uuid4().hex[:8]}")


@pytest.fixture
async def store(metadata_url: str) -> AsyncIterator[MetadataStore]:
    s = create_metadata_store(metadata_url)
    await s.start()
    yield s
    await s.close()
