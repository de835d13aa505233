"""Run real ``stripemq autorecovery`` processes for tests: start, wait until they take part in
the auditor election, kill."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from stripemq.bookie.autorecovery.auditor import election_candidates
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.testing.ports import free_port
from stripemq.testing.process import ChildProcess


class AutoRecoveryProcess(ChildProcess):
    """``stripemq autorecovery`` as a child process, named by a unique ``instance_id``.

    After SIGKILL its election node and locks stay until its metadata session expires.
    Its HTTP endpoint (``/metrics``, ``/heartbeat``) is on 127.0.0.1:``http_port``.
    """

    def __init__(
        self,
        metadata_url: str,
        log_dir: Path,
        *,
        name: str | None = None,
        settings: dict[str, object] | None = None,
    ) -> None:
        self.instance_id = name or f"autorecovery-{uuid.uuid4().hex[:6]}"
        super().__init__(Path(log_dir) / f"{self.instance_id}.log")
        self.metadata_url = metadata_url
        settings = {"stats_http_port": free_port(), **(settings or {})}
        self.http_port = int(str(settings["stats_http_port"]))  # 0: the process picks one
        self.settings = {"instance_id": self.instance_id, **settings}

    def command(self) -> list[str]:
        return self.stripemq_command(
            "autorecovery", "--metadata", self.metadata_url, settings=self.settings
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
                code = self.exited_with()
                if code is not None:
                    raise RuntimeError(f"autorecovery exited with {code}; log:\n{self.tail_log()}")
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
