"""The one retry helper: exponential back-off with a cap and an optional overall deadline,
and polling a condition until it holds or a deadline passes."""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Awaitable, Callable


class Backoff:
    """Delays between attempts: ``initial``, then times ``multiplier``, never above ``maximum``.

    With ``deadline`` (seconds from creation) ``expired`` turns true once it has passed, so a
    caller can stop retrying with its own, specific error. With ``jitter`` each delay is
    drawn between half of it and all of it, so writers that collided do not collide again.
    """

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 10.0,
        multiplier: float = 2.0,
        deadline: float | None = None,
        jitter: bool = False,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
        self._delay = initial
        self._give_up_at = None if deadline is None else time.monotonic() + deadline

    @property
    def expired(self) -> bool:
        return self._give_up_at is not None and time.monotonic() >= self._give_up_at

    def next_delay(self) -> float:
        """The delay before the next attempt (then the one after grows)."""
        delay = self._delay
        self._delay = min(self._delay * self.multiplier, self.maximum)
        if self.jitter:
            delay *= random.uniform(0.5, 1.0)
        if self._give_up_at is not None:
            delay = max(0.0, min(delay, self._give_up_at - time.monotonic()))
        return delay

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_delay())

    def reset(self) -> None:
        self._delay = self.initial


async def poll(
    condition: Callable[[], Awaitable[bool] | bool], *, within_s: float, interval: float = 0.02
) -> bool:
    """Check ``condition()`` (a plain or a coroutine function) every ``interval`` seconds
    until it is true (``True``) or ``within_s`` seconds have passed (``False``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return True
        if loop.time() > deadline:
            return False
        await asyncio.sleep(interval)
