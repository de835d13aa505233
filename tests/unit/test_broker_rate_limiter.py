"""Token buckets and rate limiters, on a fake clock: bursts, refills, debts, live changes."""

from __future__ import annotations

import pytest

from stripemq.broker.rate_limiter import (
    Rate,
    RateLimiter,
    TokenBucket,
    dispatch_budget,
    limiter_for,
    longest_delay,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_a_bucket_starts_full_and_refills_at_its_rate_up_to_its_capacity() -> None:
    bucket = TokenBucket(10, 1.0, now=0.0)
    assert bucket.tokens(0.0) == 10
    bucket.spend(10, 0.0)
    assert bucket.tokens(0.0) == 0
    assert bucket.tokens(0.5) == pytest.approx(5)
    assert bucket.tokens(100.0) == 10  # never more than one period's worth


def test_a_bucket_over_a_longer_period_refills_more_slowly() -> None:
    bucket = TokenBucket(10, 5.0, now=0.0)  # 10 per 5 s: 2 per second
    bucket.spend(10, 0.0)
    assert bucket.tokens(1.0) == pytest.approx(2)
    assert bucket.delay(1.0, at_least=10) == pytest.approx(4, abs=1e-3)


def test_a_debt_is_paid_in_time() -> None:
    bucket = TokenBucket(10, 1.0, now=0.0)
    bucket.spend(25, 0.0)  # 15 in debt
    assert bucket.tokens(0.0) == -15
    assert bucket.delay(0.0) == pytest.approx(1.5, abs=1e-3)
    assert bucket.delay(1.6) == 0


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0, 1.0, now=0.0)
    with pytest.raises(ValueError):
        Rate(10, -1, period_s=0)


def test_an_unlimited_rate_never_waits() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Rate(), clock)
    assert not limiter.limited
    limiter.spend(1_000_000, 1 << 40)
    assert limiter.delay() == 0
    assert limiter.available_messages() is None
    assert limiter_for(None, Rate(0, 0)) is None


def test_the_message_bucket_bounds_what_may_go_now_and_when_more_may() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Rate(messages=50), clock)
    assert limiter.available_messages() == 50
    limiter.spend(50, 0)
    assert limiter.available_messages() == 0
    assert limiter.delay() == pytest.approx(1 / 50, abs=1e-4)  # one message's worth
    clock.advance(0.1)
    assert limiter.available_messages() == 5
    assert limiter.delay() == 0


def test_a_byte_limit_alone_stops_everything_while_it_is_in_debt() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Rate(bytes=1000), clock)
    available = limiter.available_messages()
    assert available is not None and available > 0  # any number, the bytes are counted after
    limiter.spend(3, 3000)  # 2000 bytes in debt: two seconds
    assert limiter.available_messages() == 0
    assert limiter.delay() == pytest.approx(2, abs=1e-3)
    clock.advance(2.01)
    assert limiter.available_messages()


def test_both_limits_count_and_the_later_one_decides_the_wait() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Rate(messages=100, bytes=1000), clock)
    limiter.spend(10, 4000)  # bytes: 3 s of debt; messages: plenty left
    assert limiter.delay() == pytest.approx(3, abs=1e-3)
    assert limiter.available_messages() == 0


def test_over_a_long_run_the_rate_spent_is_the_rate_set() -> None:
    """A producer that sends whenever it is let through gets ``rate`` per second, plus
    the first period's burst."""
    clock = FakeClock()
    limiter = RateLimiter(Rate(messages=50), clock)
    sent = 0
    start = clock.now
    while clock.now - start < 10:
        limiter.spend(1, 100)
        sent += 1
        clock.advance(limiter.delay())
    assert 50 * 10 <= sent <= 50 * 10 + 50 + 1


def test_a_changed_rate_applies_at_once_and_grants_no_new_burst() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Rate(messages=100), clock)
    limiter.spend(100, 0)
    same = limiter_for(limiter, Rate(messages=10))
    assert same is limiter
    assert limiter.available_messages() == 0  # the spent tokens stay spent
    clock.advance(0.5)
    assert limiter.available_messages() == 5  # refilled at the new rate
    limiter.update(Rate(messages=1000))
    assert limiter.available_messages() == 5  # a raise does not refill by itself
    assert limiter_for(limiter, Rate()) is None  # lifted


def test_a_lower_capacity_drops_the_tokens_above_it() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Rate(messages=100), clock)
    limiter.update(Rate(messages=10))
    assert limiter.available_messages() == 10


def test_the_dispatch_budget_is_the_tightest_of_the_limiters() -> None:
    clock = FakeClock()
    topic = RateLimiter(Rate(messages=30), clock)
    subscription = RateLimiter(Rate(messages=20), clock)
    assert dispatch_budget([None, None]) is None
    assert dispatch_budget([topic, None]) == 30
    assert dispatch_budget([topic, subscription]) == 20
    subscription.spend(20, 0)
    assert dispatch_budget([topic, subscription]) == 0
    assert longest_delay([topic, subscription]) == pytest.approx(1 / 20, abs=1e-4)
    assert longest_delay([None]) == 0
