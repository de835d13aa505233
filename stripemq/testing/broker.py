"""Run real broker processes for tests and benchmarks: start, wait until listening, kill."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stripemq.testing.polling import until
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

        async def listening() -> bool:
            code = self.exited_with()
            if code is not None:
                raise RuntimeError(f"broker exited with {code}; log:\n{self.tail_log()}")
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                return False
            writer.close()
            return True

        await until(listening, f"broker on port {self.port} listens", timeout=timeout)
