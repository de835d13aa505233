"""Rate limits as token buckets (sans-IO: the caller passes the time or a clock).

A topic's publish rate and a topic's or subscription's dispatch rate are each a pair of
buckets, one counting messages and one counting bytes; either may be unlimited. A bucket
holds at most one period's worth of tokens (``rate`` per ``period_s``) and refills
continuously at ``rate / period_s`` per second.

Spending may run a bucket into debt: a producer's message is already read when it is
counted, and a batch entry may hold more messages than are left. What a debt costs is
time: ``delay()`` says how long until both buckets are out of debt, which is how long the
broker stops reading a producer's connection (Pulsar's ``disableCnxAutoRead``) or a
subscription waits before it dispatches again. Over any long stretch the rate spent is
therefore at most the rate set, plus one period's burst.

Nothing here sleeps or schedules: ``Subscription`` and ``ServerConnection`` do that with
what ``delay()`` and ``available_messages()`` answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]  # seconds, monotonic
# Below this a bucket counts as empty (and waits overshoot by it): float rounding never
# makes a bucket look full when it is not, nor a wait end a hair too soon.
_EPSILON = 1e-6


@dataclass(frozen=True)
class Rate:
    """``messages`` and ``bytes`` per ``period_s`` seconds (0 or less: unlimited)."""

    messages: int = -1
    bytes: int = -1
    period_s: float = 1.0

    def __post_init__(self) -> None:
        if self.period_s <= 0:
            raise ValueError(f"a rate period must be positive, not {self.period_s}")

    @property
    def limited(self) -> bool:
        return self.messages > 0 or self.bytes > 0


class TokenBucket:
    """``rate`` tokens per ``period_s``; holds at most ``rate``; may run into debt."""

    def __init__(self, rate: float, period_s: float, now: float) -> None:
        if rate <= 0 or period_s <= 0:
            raise ValueError(f"a token bucket needs a positive rate and period ({rate}/{period_s})")
        self.rate = float(rate)
        self.period_s = float(period_s)
        self._tokens = self.rate  # starts full: the first period's burst is allowed
        self._at = now

    @property
    def capacity(self) -> float:
        return self.rate

    @property
    def per_second(self) -> float:
        return self.rate / self.period_s

    def tokens(self, now: float) -> float:
        """Tokens left at ``now`` (negative: in debt)."""
        self._refill(now)
        return self._tokens

    def spend(self, amount: float, now: float) -> None:
        """Take ``amount`` tokens, into debt if need be."""
        self._refill(now)
        self._tokens -= amount

    def delay(self, now: float, at_least: float = _EPSILON) -> float:
        """Seconds until the bucket holds ``at_least`` tokens (0: it does now)."""
        short = at_least - self.tokens(now)
        return 0.0 if short <= 0 else short / self.per_second + _EPSILON

    def change(self, rate: float, period_s: float, now: float) -> None:
        """A new rate, effective at once; tokens above the new capacity are dropped."""
        if rate <= 0 or period_s <= 0:
            raise ValueError(f"a token bucket needs a positive rate and period ({rate}/{period_s})")
        self._refill(now)
        self.rate, self.period_s = float(rate), float(period_s)
        self._tokens = min(self._tokens, self.rate)

    def _refill(self, now: float) -> None:
        elapsed = now - self._at
        if elapsed > 0:
            self._tokens = min(self.capacity, self._tokens + elapsed * self.per_second)
            self._at = now


class RateLimiter:
    """A message bucket and a byte bucket over one ``Rate``; live-changeable."""

    def __init__(self, rate: Rate, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.rate = rate
        self._messages: TokenBucket | None = None
        self._bytes: TokenBucket | None = None
        self.update(rate)

    @property
    def limited(self) -> bool:
        return self.rate.limited

    def update(self, rate: Rate) -> None:
        """Apply a changed rate, keeping what was spent (a change never grants a burst)."""
        now = self.clock()
        self.rate = rate
        self._messages = _updated(self._messages, rate.messages, rate.period_s, now)
        self._bytes = _updated(self._bytes, rate.bytes, rate.period_s, now)

    def spend(self, messages: int, size: int) -> None:
        """Count ``messages`` messages of ``size`` bytes in all (sent or received)."""
        now = self.clock()
        if self._messages is not None:
            self._messages.spend(messages, now)
        if self._bytes is not None:
            self._bytes.spend(size, now)

    def delay(self) -> float:
        """Seconds until one more message may go: the message bucket holds a whole token
        and the byte bucket is out of debt (0: go on now)."""
        now = self.clock()
        waits = [0.0]
        if self._messages is not None:
            waits.append(self._messages.delay(now, at_least=1.0))
        if self._bytes is not None:
            waits.append(self._bytes.delay(now))
        return max(waits)

    def available_messages(self) -> int | None:
        """Messages that may go now: ``None`` if unlimited, 0 while either bucket is empty
        (a byte limit alone lets whatever is read go, and counts it after)."""
        now = self.clock()
        if self._bytes is not None and self._bytes.tokens(now) < _EPSILON:
            return 0
        if self._messages is None:
            return None if self._bytes is None else _UNBOUNDED
        return max(0, math.floor(self._messages.tokens(now)))


# Messages "available" under a byte limit only: the caller's own batch size bounds them.
_UNBOUNDED = 1 << 31


def _updated(
    bucket: TokenBucket | None, rate: int, period_s: float, now: float
) -> TokenBucket | None:
    if rate <= 0:
        return None
    if bucket is None:
        return TokenBucket(rate, period_s, now)
    bucket.change(rate, period_s, now)
    return bucket


def dispatch_budget(limiters: list[RateLimiter | None]) -> int | None:
    """Messages the tightest of ``limiters`` lets go now (``None``: no limit at all)."""
    budget: int | None = None
    for limiter in limiters:
        if limiter is None or not limiter.limited:
            continue
        available = limiter.available_messages()
        if available is not None:
            budget = available if budget is None else min(budget, available)
    return budget


def longest_delay(limiters: list[RateLimiter | None]) -> float:
    """Seconds until every one of ``limiters`` is out of debt."""
    return max((lim.delay() for lim in limiters if lim is not None), default=0.0)


def limiter_for(existing: RateLimiter | None, rate: Rate) -> RateLimiter | None:
    """A limiter for ``rate`` (``None`` if unlimited), reusing ``existing`` so that a
    changed rate keeps what was already spent."""
    if not rate.limited:
        return None
    if existing is None:
        return RateLimiter(rate)
    existing.update(rate)
    return existing
