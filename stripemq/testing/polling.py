"""Waiting for a condition in tests: poll it until it holds or a deadline passes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def until(
    condition: Callable[[], Awaitable[bool]],
    what: str = "the condition holds",
    *,
    timeout: float = 10.0,
    logs: str = "",
    interval: float = 0.02,
) -> None:
    """Return once ``condition()`` is true; ``AssertionError`` naming ``what`` after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting until {what}\n{logs}".rstrip())
        await asyncio.sleep(interval)
