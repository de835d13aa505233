"""``stripemq.retry.poll``: a condition checked until it holds or the time is up."""

from __future__ import annotations

from stripemq.retry import poll


async def test_poll_returns_true_once_the_condition_holds() -> None:
    calls = []

    def third_time() -> bool:
        calls.append(1)
        return len(calls) >= 3

    assert await poll(third_time, within_s=5.0, interval=0.001)
    assert len(calls) == 3


async def test_poll_takes_a_coroutine_function() -> None:
    async def holds() -> bool:
        return True

    assert await poll(holds, within_s=0.0)


async def test_poll_returns_false_when_the_time_is_up() -> None:
    calls = []

    def never() -> bool:
        calls.append(1)
        return False

    assert not await poll(never, within_s=0.05, interval=0.01)
    assert len(calls) >= 2  # checked again until the deadline, once more after it
