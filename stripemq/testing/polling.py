"""Waiting for a condition in tests: poll it until it holds or a deadline passes."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from stripemq.clock import now_ms
from stripemq.retry import poll


async def until(
    condition: Callable[[], Awaitable[bool] | bool],
    what: str = "the condition holds",
    *,
    timeout: float = 10.0,
    logs: str = "",
    interval: float = 0.02,
) -> None:
    """Return once ``condition()`` (a plain or a coroutine function) is true;
    ``AssertionError`` naming ``what`` after ``timeout``."""
    if not await poll(condition, within_s=timeout, interval=interval):
        raise AssertionError(f"timed out waiting until {what}\n{logs}".rstrip())


def until_blocking(
    condition: Callable[[], bool],
    what: str = "the condition holds",
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
) -> None:
    """``until`` for threads without an event loop (blocking clients)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(interval)


def next_millisecond() -> int:
    """Wait until the wall clock's millisecond changes (so that what is stamped next gets
    a later millisecond than what was stamped before); returns the new one."""
    start = now_ms()
    while (now := now_ms()) == start:
        time.sleep(0.0001)
    return now
