"""Run real bookie processes for tests and benchmarks: start, wait until serving, kill."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from stripemq.bookie.bookie_client import BookieClient
from stripemq.errors import BookieError
from stripemq.testing.ports import free_port


class BookieProcess:
    """``stripemq bookie`` as a child process with a fixed port and data directory."""

    def __init__(
        self,
        metadata_url: str,
        data_dir: Path,
        *,
        port: int | None = None,
        settings: dict[str, object] | None = None,
    ) -> None:
        self.metadata_url = metadata_url
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.metrics_port = free_port()
        self.settings = {"stats_http_port": self.metrics_port, **(settings or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / "bookie.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "stripemq",
            "bookie",
            "--metadata",
            self.metadata_url,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        for key, value in self.settings.items():
            cmd += ["-c", f"{key}={value}"]
        return cmd

    def spawn(self) -> None:
        """Start the process without waiting for it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                self.command(), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
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
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(
                        f"bookie exited with {self.proc.returncode}; log:\n{self.tail_log()}"
                    )
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

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoint, no unregistration."""
        self._signal(signal.SIGKILL)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for the clean shutdown; returns the exit code."""
        return self._signal(signal.SIGTERM, timeout)

    def _signal(self, sig: int, timeout: float = 30.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    async def __aenter__(self) -> BookieProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.kill()
