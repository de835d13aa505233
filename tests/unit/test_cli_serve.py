"""What every server process does around its service: start, serve until a signal, stop."""

from __future__ import annotations

import asyncio
import gc
import os
import signal

from stripemq.cli.main import _serve_until_signalled


class _RecordingService:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.frozen_while_serving = 0

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.frozen_while_serving = gc.get_freeze_count()
        self.events.append("stop")


async def test_a_server_freezes_its_start_up_heap_and_stops_on_sigterm() -> None:
    service = _RecordingService()
    cleaned: list[bool] = []

    async def cleanup() -> None:
        cleaned.append(True)

    asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
    try:
        await asyncio.wait_for(_serve_until_signalled(service, cleanup), 10)
    finally:
        gc.unfreeze()
    assert service.events == ["start", "stop"] and cleaned == [True]
    # The objects start-up built are out of the full collections' walk.
    assert service.frozen_while_serving > 1000
