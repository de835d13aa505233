"""``stripemq.retry``: a condition polled until it holds or the time is up, and back-off."""

from __future__ import annotations

from stripemq.retry import Backoff, poll


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


def test_backoff_grows_to_its_cap_and_jitter_stays_within_half_of_each_delay() -> None:
    plain = Backoff(0.01, 0.05)
    assert [round(plain.next_delay(), 3) for _ in range(5)] == [0.01, 0.02, 0.04, 0.05, 0.05]
    jittered = Backoff(0.01, 0.05, jitter=True)
    delays = [jittered.next_delay() for _ in range(200)]
    assert all(0.005 <= d <= 0.05 for d in delays)
    assert len({round(d, 6) for d in delays[3:]}) > 1  # drawn, not fixed
