"""Run real bookie processes for tests and benchmarks: start, wait until serving, kill."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from stripemq.bookie.bookie_client import BookieClient
from stripemq.errors import BookieError
from stripemq.testing.ports import free_port
from stripemq.testing.process import ChildProcess


class BookieProcess(ChildProcess):
    """``stripemq bookie`` as a child process with a fixed port and data directory."""

    def __init__(
        self,
        metadata_url: str,
        data_dir: Path,
        *,
        port: int | None = None,
        settings: dict[str, object] | None = None,
    ) -> None:
        super().__init__(Path(data_dir) / "bookie.log")
        self.metadata_url = metadata_url
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.metrics_port = free_port()
        self.settings = {"stats_http_port": self.metrics_port, **(settings or {})}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return self.stripemq_command(
            "bookie",
            "--metadata",
            self.metadata_url,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            settings=self.settings,
        )

    async def start(self, timeout: float = 30.0) -> None:
        """Start the process and wait until it answers ``GetInfo``."""
        self.spawn()
        await self.wait_serving(timeout)

    async def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        client = BookieClient(self.address, timeout=1.0)
        await client.connect()
        try:
            while True:
                code = self.exited_with()
                if code is not None:
                    raise RuntimeError(f"bookie exited with {code}; log:\n{self.tail_log()}")
                try:
                    await client.get_info()
                    return
                except BookieError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"bookie on {self.address} not serving; log:\n{self.tail_log()}"
                        ) from None
                    await asyncio.sleep(0.05)
        finally:
            await client.close()

    async def __aenter__(self) -> BookieProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.kill()
