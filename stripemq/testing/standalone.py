"""``stripemq standalone`` for tests and benchmarks: as a child process, or in this process
(when a test must reach inside it)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from stripemq.broker.app import BrokerApp
from stripemq.broker.config import BrokerConfig
from stripemq.config import load_config
from stripemq.standalone import Standalone, StandaloneConfig
from stripemq.testing.ports import free_port
from stripemq.testing.process import ChildProcess


class StandaloneProcess(ChildProcess):
    """One standalone (embedded metadata, one bookie, one broker) on free ports."""

    def __init__(self, data_dir: Path, settings: dict[str, object] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.settings = dict(settings or {})
        super().__init__(self.data_dir.parent / f"{self.data_dir.name}.log")
        self.port = free_port()
        self.bookie_port = free_port()
        self.web_port = free_port()  # admin, broker and bookie metrics, bookie probes

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        """Its admin REST API, lookups and metrics."""
        return f"http://127.0.0.1:{self.web_port}"

    def command(self) -> list[str]:
        return self.stripemq_command(
            "standalone",
            "--data-dir",
            str(self.data_dir),
            "--broker-port",
            str(self.port),
            "--bookie-port",
            str(self.bookie_port),
            "--web-port",
            str(self.web_port),
            settings=self.settings,
        )

    async def start(self, timeout: float = 60.0) -> None:
        """Start and wait until the broker accepts connections."""
        self.spawn()
        await self.wait_listening(self.port, "standalone", timeout)


@contextlib.asynccontextmanager
async def running_standalone(
    base: Path, settings: dict[str, object] | None = None
) -> AsyncIterator[str]:
    """A standalone under ``base`` (with ``settings``) for the block; yields its service URL."""
    process = StandaloneProcess(base / "data", settings)
    await process.start()
    try:
        yield process.service_url
    finally:
        process.terminate()


@contextlib.asynccontextmanager
async def in_process_standalone(
    base: Path, overrides: dict[str, object] | None = None
) -> AsyncIterator[Standalone]:
    """A started ``Standalone`` in this process, on free ports, its data under ``base``;
    stopped on the way out. ``overrides`` are bookie and broker settings."""
    config = StandaloneConfig(
        str(base / "data"),
        broker_port=free_port(),
        web_port=free_port(),
        bookie_port=free_port(),
    )
    node = Standalone(config, overrides=overrides)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


@contextlib.asynccontextmanager
async def second_broker(
    node: Standalone, settings: dict[str, object] | None = None
) -> AsyncIterator[BrokerApp]:
    """Another broker (with ``settings``, free ports) beside a started in-process
    standalone, on its metadata store and its bookie (ledgers of one copy); stopped on the
    way out. Topics move between the two by bundle ownership."""
    assert node.store is not None and node.bookie is not None and node.local_bookie is not None
    overrides: dict[str, object] = {
        "broker_service_port": 0,
        "web_service_port": 0,
        "managed_ledger_default_ensemble_size": 1,
        "managed_ledger_default_write_quorum": 1,
        "managed_ledger_default_ack_quorum": 1,
        **(settings or {}),
    }
    config = load_config(BrokerConfig, None, overrides, environ={})
    broker = BrokerApp(
        config, store=node.store, local_bookies={node.bookie.bookie_id: node.local_bookie}
    )
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()
