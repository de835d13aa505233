"""A bookie's registration outlives a lost ZooKeeper session (real ZooKeeper)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from stripemq.bookie.registration import BookieRegistration
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.testing.polling import until

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

        # The node shows up a moment before the registration adopts its new store.
        async def re_registered() -> bool:
            return (
                len(stores) >= 2
                and registration.store is stores[1]
                and await observer.exists(path) is not None
            )

        await until(re_registered, "the bookie re-registers after session loss", timeout=20)
    finally:
        await registration.stop()
        assert await observer.exists("/ledgers/available/127.0.0.1:3999") is None
        await observer.close()


async def test_stop_during_re_registration_leaves_no_node(zookeeper_server) -> None:  # type: ignore[no-untyped-def]
    """A bookie stopped while it re-registers takes down the node its new session made."""
    url = zookeeper_server.url(f"/reg-{uuid.uuid4().hex[:8]}")
    stores: list[MetadataStore] = []
    created = asyncio.Event()

    async def factory() -> MetadataStore:
        store = create_metadata_store(url, session_timeout=4.0)
        await store.start()
        stores.append(store)
        if len(stores) == 2:
            real_create = store.create

            async def create_then_hang(*args, **kwargs):  # type: ignore[no-untyped-def]
                await real_create(*args, **kwargs)
                created.set()
                await asyncio.Event().wait()  # stop() cancels us here

            store.create = create_then_hang  # type: ignore[method-assign]
        return store

    observer = create_metadata_store(url)
    await observer.start()
    registration = BookieRegistration(factory, "127.0.0.1:3998", {"rack": "r1"})
    path = "/ledgers/available/127.0.0.1:3998"
    try:
        await registration.start()
        await stores[0].expire_session()  # type: ignore[attr-defined]
        await asyncio.wait_for(created.wait(), 20)
        assert await observer.exists(path) is not None
        await registration.stop()
        assert await observer.exists(path) is None
    finally:
        await observer.close()
