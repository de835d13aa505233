"""Fixtures of the unit tests that need a metadata store: memory:// and real ZooKeeper."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from stripemq.metadata import MetadataStore, create_metadata_store

StoreFactory = Callable[[], Awaitable[MetadataStore]]


@pytest.fixture(params=["memory", "zookeeper"])
async def new_store(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    """Opens stores on one namespace of its own; each store is its own session."""
    unique = uuid.uuid4().hex[:8]
    if request.param == "memory":
        url = f"memory://{unique}"
    else:
        url = request.getfixturevalue("zookeeper_server").url(f"/{unique}")
    stores: list[MetadataStore] = []

    async def factory() -> MetadataStore:
        store = create_metadata_store(url, session_timeout=4.0)
        await store.start()
        stores.append(store)
        return store

    yield factory
    for store in stores:
        await store.close()


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    """One memory:// store of its own (a module may define its own ``store``)."""
    s = create_metadata_store(f"memory://{uuid.uuid4().hex[:8]}")
    await s.start()
    yield s
    await s.close()
