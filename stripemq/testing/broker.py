"""Run real broker processes for tests and benchmarks: start, wait until listening, kill."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

from stripemq.bookie.client import BookKeeper, ClientConfig
from stripemq.broker.ownership import bundle_of
from stripemq.broker.server import BrokerServer
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.ports import free_port
from stripemq.testing.process import ChildProcess


class BrokerProcess(ChildProcess):
    """``stripemq broker`` as a child process on its own port."""

    def __init__(
        self,
        metadata_url: str,
        log_dir: Path,
        *,
        port: int | None = None,
        settings: dict[str, object] | None = None,
    ) -> None:
        self.port = port or free_port()
        super().__init__(Path(log_dir) / f"broker-{self.port}.log")
        self.metadata_url = metadata_url
        self.settings = {"web_service_port": free_port(), **(settings or {})}

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        """Its admin REST API, lookups and metrics."""
        return f"http://127.0.0.1:{self.settings['web_service_port']}"

    def command(self) -> list[str]:
        return self.stripemq_command(
            "broker",
            "--metadata",
            self.metadata_url,
            "--port",
            str(self.port),
            settings=self.settings,
        )

    async def start(self, timeout: float = 30.0) -> None:
        """Start the process and wait until it accepts connections."""
        self.spawn()
        await self.wait_listening(self.port, "broker", timeout)


@contextlib.asynccontextmanager
async def broker_pair_on_bookies(
    metadata_url: str, base: Path, settings: dict[str, Any], bookies: int = 3
) -> AsyncIterator[tuple[BrokerProcess, BrokerProcess]]:
    """Two broker processes with ``settings`` over ``bookies`` bookie processes; the
    brokers are SIGKILLed on the way out."""
    async with BookieCluster(metadata_url, base / "bookies", bookies):
        pair = (
            BrokerProcess(metadata_url, base, settings=settings),
            BrokerProcess(metadata_url, base, settings=settings),
        )
        try:
            await asyncio.gather(*(b.start() for b in pair))
            yield pair
        finally:
            for broker in pair:
                broker.kill()


@contextlib.asynccontextmanager
async def broker_on_bookies(
    metadata_url: str,
    store: MetadataStore,
    base: Path,
    bookies: int = 2,
    **server_options: Any,
) -> AsyncIterator[BrokerServer]:
    """An in-process broker (on a free port) over ``bookies`` real bookie processes."""
    async with (
        BookieCluster(metadata_url, base / "bookies", bookies),
        serving_broker(store, **server_options) as server,
    ):
        yield server


@contextlib.asynccontextmanager
async def serving_broker(
    store: MetadataStore, **server_options: Any
) -> AsyncIterator[BrokerServer]:
    """An in-process broker (on a free port) over the bookies already registered."""
    bk = BookKeeper(store, ClientConfig(explicit_lac_interval_ms=100))
    await bk.start()
    server = BrokerServer(store, bk, port=0, **server_options)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await bk.close()


def cluster_service_url(brokers: Iterable[BrokerProcess]) -> str:
    """A service URL naming every broker (clients try the next when one is down)."""
    return "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in brokers)


async def owner_url(store: MetadataStore, topic: str) -> str | None:
    """The service URL of the broker owning ``topic``'s bundle, if any owns it."""
    found = await store.get(bundle_of(TopicName.parse(topic)).path)
    return None if found is None else json.loads(found[0])["service_url"]


def owner_killer(
    store: MetadataStore,
    topic: str,
    brokers: Iterable[BrokerProcess],
    loop: asyncio.AbstractEventLoop,
) -> tuple[Callable[[], None], list[BrokerProcess]]:
    """A function that SIGKILLs the broker owning ``topic`` (to call from a client's thread
    while ``loop`` runs), and the list in which it records whom it killed."""
    killed: list[BrokerProcess] = []
    candidates = list(brokers)

    def kill_owner() -> None:
        owner = asyncio.run_coroutine_threadsafe(owner_url(store, topic), loop).result(10)
        victim = next(b for b in candidates if b.service_url == owner)
        victim.kill()
        killed.append(victim)

    return kill_owner, killed
