"""A bookie's registration outlives a lost ZooKeeper session (real ZooKeeper)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from stripemq.bookie.registration import BookieRegistration
from stripemq.metadata import MetadataStore, create_metadata_store

pytestmark = pytest.mark.integration


async def test_registration_comes_back_after_session_expiry(zookeeper_server) -> None:  # type: ignore[no-untyped-def]
    url = zookeeper_server.url(f"/reg-{uuid.uuid4().hex[:8]}")
    stores: list[MetadataStore] = []

    async def factory() -> MetadataStore:
        store = create_metadata_store(url, session_timeout=4.0)
        await store.start()
        stores.append(store)
        return store

    observer = create_metadata_store(url)
    await observer.start()
    registration = BookieRegistration(factory, "127.0.0.1:3999", {"rack": "r1"})
    try:
        await registration.start()
        path = "/ledgers/available/127.0.0.1:3999"
        data, _ = await observer.get(path)  # type: ignore[misc]
        assert json.loads(data)["rack"] == "r1"

        await registration.set_read_only(True)
        assert await observer.exists(path) is None
        assert await observer.exists("/ledgers/available/readonly/127.0.0.1:3999") is not None
        await registration.set_read_only(False)

        await stores[0].expire_session()  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while len(stores) < 2 or await observer.exists(path) is None:
            assert loop.time() < deadline, "bookie did not re-register after session loss"
            await asyncio.sleep(0.05)
        assert registration.store is stores[1]
    finally:
        await registration.stop()
        assert await observer.exists("/ledgers/available/127.0.0.1:3999") is None
        await observer.close()
