"""Run real ``stripemq autorecovery`` processes for tests: start, wait until they take part in
the auditor election, kill."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from stripemq.bookie.autorecovery.auditor import election_candidates
from stripemq.metadata import MetadataStore, create_metadata_store


class AutoRecoveryProcess:
    """``stripemq autorecovery`` as a child process, named by a unique ``instance_id``."""

    def __init__(
        self,
        metadata_url: str,
        log_dir: Path,
        *,
        name: str | None = None,
        settings: dict[str, object] | None = None,
    ) -> None:
        self.metadata_url = metadata_url
        self.instance_id = name or f"autorecovery-{uuid.uuid4().hex[:6]}"
        self.settings = {"instance_id": self.instance_id, **(settings or {})}
        self.log_path = Path(log_dir) / f"{self.instance_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "stripemq", "autorecovery", "--metadata", self.metadata_url]
        for key, value in self.settings.items():
            cmd += ["-c", f"{key}={value}"]
        return cmd

    def spawn(self) -> None:
        """Start the process without waiting for it."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                self.command(), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def start(self, timeout: float = 30.0) -> None:
        """Start the process and wait until it is an auditor candidate (it is then running)."""
        self.spawn()
        await self.wait_candidate(timeout)

    async def wait_candidate(self, timeout: float = 30.0) -> None:
        store: MetadataStore = create_metadata_store(self.metadata_url)
        await store.start()
        try:
            deadline = time.monotonic() + timeout
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(
                        f"autorecovery exited with {self.proc.returncode}; log:\n{self.tail_log()}"
                    )
                ids = [pid for _, pid in await election_candidates(store)]
                if self.instance_id in ids:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.instance_id} did not join the election; log:\n{self.tail_log()}"
                    )
                await asyncio.sleep(0.05)
        finally:
            await store.close()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: its election node and locks stay until its ZooKeeper session expires."""
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

    def tail_log(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
