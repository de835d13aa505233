"""The seeded fault schedule (sans-IO): which fault, on which process, when, for how long.

The same seed and shape give the same schedule, so ``--seed`` replays a run's decisions
(timings on a busy machine still vary). The schedule keeps the faults inside what the cluster
promises to survive, so any loss it finds is a bug and not bad luck:

- at most one bookie out of service at a time (killed, paused, disk full, partitioned from a
  broker, or lost), so E=3 of the 4 stay writable;
- at most one broker out of service at a time;
- damage to stored data (a bit flip, a truncation, a lost bookie) only ever hits one bookie,
  the *victim*, so every entry keeps Qa-1 = 1 intact copy elsewhere. When the victim is lost,
  its replacement (a new bookie with a new id) becomes the next victim.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable
from dataclasses import dataclass


class FaultKind(enum.Enum):
    """The faults ``stripemq chaos`` injects; the value is how reports name them."""

    BOOKIE_KILL = "bookie_kill"  # SIGKILL, restarted on the same port and data after a while
    BOOKIE_PAUSE = "bookie_pause"  # SIGSTOP, then SIGCONT before its session expires
    BOOKIE_DISK_FULL = "bookie_disk_full"  # its writes fail as on a full disk, for a while
    BOOKIE_LOST = "bookie_lost"  # SIGKILL and its disks wiped: gone; a new bookie joins
    ENTRY_LOG_BIT_FLIP = "entry_log_bit_flip"  # one bit of one replica's entry log
    ENTRY_LOG_TRUNCATE = "entry_log_truncate"  # the tail of one replica's entry log cut off
    BROKER_KILL = "broker_kill"  # SIGKILL, restarted on the same ports after a while
    BROKER_PAUSE = "broker_pause"  # SIGSTOP, then SIGCONT before its session expires
    BROKER_SESSION_EXPIRY = "broker_session_expiry"  # SIGSTOP past its ZooKeeper session
    PARTITION = "partition"  # a broker and one bookie cannot reach each other, for a while

    @property
    def on_bookie(self) -> bool:
        """Whether it takes a bookie out of service while it lasts."""
        return self in _BOOKIE_OUTAGES

    @property
    def on_broker(self) -> bool:
        """Whether it takes a broker out of service while it lasts."""
        return self in _BROKER_OUTAGES

    @property
    def damages_data(self) -> bool:
        return self in _DAMAGE


_BOOKIE_OUTAGES = frozenset(
    {
        FaultKind.BOOKIE_KILL,
        FaultKind.BOOKIE_PAUSE,
        FaultKind.BOOKIE_DISK_FULL,
        FaultKind.BOOKIE_LOST,
        FaultKind.PARTITION,
    }
)
_BROKER_OUTAGES = frozenset(
    {FaultKind.BROKER_KILL, FaultKind.BROKER_PAUSE, FaultKind.BROKER_SESSION_EXPIRY}
)
_DAMAGE = frozenset(
    {FaultKind.BOOKIE_LOST, FaultKind.ENTRY_LOG_BIT_FLIP, FaultKind.ENTRY_LOG_TRUNCATE}
)

# How often each kind is drawn, relative to the others.
DEFAULT_WEIGHTS: dict[FaultKind, float] = {
    FaultKind.BOOKIE_KILL: 3,
    FaultKind.BOOKIE_PAUSE: 2,
    FaultKind.BOOKIE_DISK_FULL: 1.5,
    FaultKind.BOOKIE_LOST: 0.5,
    FaultKind.ENTRY_LOG_BIT_FLIP: 1.5,
    FaultKind.ENTRY_LOG_TRUNCATE: 1,
    FaultKind.BROKER_KILL: 2,
    FaultKind.BROKER_PAUSE: 1.5,
    FaultKind.BROKER_SESSION_EXPIRY: 1,
    FaultKind.PARTITION: 2,
}


@dataclass(frozen=True)
class ScheduleShape:
    """The cluster a schedule is for, and how long faults of each kind last."""

    bookies: int = 4
    brokers: int = 2
    session_timeout_s: float = 4.0  # the brokers' ZooKeeper session timeout
    kill_downtime_s: tuple[float, float] = (0.5, 3.0)
    pause_s: tuple[float, float] = (0.5, 2.0)  # kept below the session timeout
    disk_full_s: tuple[float, float] = (2.0, 5.0)
    partition_s: tuple[float, float] = (2.0, 6.0)
    # A lost bookie's ledgers are re-replicated before another one may be lost.
    lost_bookie_gap_s: float = 20.0


@dataclass(frozen=True)
class PlannedFault:
    """One fault: ``kind`` on ``target`` from ``at_s`` (since the faults start) for
    ``duration_s`` (0 for faults that happen at once). A partition's target is
    ``"broker-i/bookie-j"``; a lost bookie's ``replacement`` is the bookie that joins."""

    at_s: float
    kind: FaultKind
    target: str
    duration_s: float = 0.0
    replacement: str | None = None

    @property
    def end_s(self) -> float:
        return self.at_s + self.duration_s


def bookie_name(index: int) -> str:
    return f"bookie-{index}"


def broker_name(index: int) -> str:
    return f"broker-{index}"


def parse_kinds(text: str) -> list[FaultKind]:
    """``"bookie_kill,partition"`` -> kinds; raises ``ValueError`` naming the bad one."""
    kinds = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        try:
            kinds.append(FaultKind(word))
        except ValueError:
            names = ", ".join(k.value for k in FaultKind)
            raise ValueError(f"unknown fault kind {word!r}; kinds are: {names}") from None
    if not kinds:
        raise ValueError("no fault kind given")
    return kinds


class _Planner:
    """Draws faults one after another, tracking what is out of service and what is damaged."""

    def __init__(self, rng: random.Random, shape: ScheduleShape) -> None:
        self.rng = rng
        self.shape = shape
        self.bookies = [bookie_name(i) for i in range(shape.bookies)]
        self.next_bookie = shape.bookies
        self.brokers = [broker_name(i) for i in range(shape.brokers)]
        self.victim = rng.choice(self.bookies)
        self.bookie_busy_until = 0.0
        self.broker_busy_until = 0.0
        self.next_loss_at = 0.0

    def admissible(self, kind: FaultKind, at: float) -> bool:
        if kind.on_bookie and at < self.bookie_busy_until:
            return False
        if kind.on_broker and at < self.broker_busy_until:
            return False
        if kind is FaultKind.PARTITION and at < self.broker_busy_until:
            return False  # the broker it cuts off must be up to notice
        return not (kind is FaultKind.BOOKIE_LOST and at < self.next_loss_at)

    def plan(self, kind: FaultKind, at: float) -> PlannedFault:
        shape, rng = self.shape, self.rng
        span = {
            FaultKind.BOOKIE_KILL: shape.kill_downtime_s,
            FaultKind.BROKER_KILL: shape.kill_downtime_s,
            FaultKind.BOOKIE_PAUSE: shape.pause_s,
            FaultKind.BROKER_PAUSE: shape.pause_s,
            FaultKind.BOOKIE_DISK_FULL: shape.disk_full_s,
            FaultKind.PARTITION: shape.partition_s,
        }.get(kind)
        duration = round(rng.uniform(*span), 2) if span else 0.0
        if kind in (FaultKind.BOOKIE_PAUSE, FaultKind.BROKER_PAUSE):
            # A pause ends well inside the session, or it would be a session expiry.
            duration = min(duration, round(shape.session_timeout_s * 0.75, 2))
        if kind is FaultKind.BROKER_SESSION_EXPIRY:
            duration = round(shape.session_timeout_s + rng.uniform(1.0, 2.0), 2)
        replacement = None
        if kind.damages_data:
            target = self.victim
            if kind is FaultKind.BOOKIE_LOST:
                replacement = bookie_name(self.next_bookie)
                self.next_bookie += 1
                self.bookies = [b for b in self.bookies if b != target] + [replacement]
                self.victim = replacement
                self.next_loss_at = at + shape.lost_bookie_gap_s
        elif kind.on_bookie and kind is not FaultKind.PARTITION:
            target = rng.choice(self.bookies)
        elif kind is FaultKind.PARTITION:
            target = f"{rng.choice(self.brokers)}/{rng.choice(self.bookies)}"
        else:
            target = rng.choice(self.brokers)
        # A bookie comes back some seconds after it is started again; leave room for that.
        if kind.on_bookie:
            self.bookie_busy_until = at + duration + 1.0
        if kind.on_broker or kind is FaultKind.PARTITION:
            self.broker_busy_until = max(self.broker_busy_until, at + duration + 1.0)
        return PlannedFault(round(at, 2), kind, target, duration, replacement)


def make_schedule(
    seed: int,
    duration_s: float,
    faults: int,
    *,
    shape: ScheduleShape | None = None,
    kinds: Iterable[FaultKind] | None = None,
) -> list[PlannedFault]:
    """``faults`` faults spread over ``duration_s`` seconds, the same for the same arguments.

    Starts are evenly spread with jitter; each draws a kind by weight among the kinds allowed
    at that moment. When none is (everything busy), the start moves to when one is.
    """
    if faults < 0 or duration_s <= 0:
        raise ValueError("need faults >= 0 and a positive duration")
    shape = shape or ScheduleShape()
    allowed = list(kinds) if kinds is not None else list(FaultKind)
    if not allowed:
        raise ValueError("no fault kind allowed")
    rng = random.Random(seed)
    planner = _Planner(rng, shape)
    step = duration_s / max(faults, 1)
    planned: list[PlannedFault] = []
    for i in range(faults):
        at = max(i * step + rng.uniform(0, step * 0.8), planned[-1].at_s if planned else 0.0)
        while True:
            options = [k for k in allowed if planner.admissible(k, at)]
            if options:
                break
            busy = (planner.bookie_busy_until, planner.broker_busy_until, planner.next_loss_at)
            at = min(t for t in busy if t > at)
        kind = rng.choices(options, weights=[DEFAULT_WEIGHTS[k] for k in options])[0]
        planned.append(planner.plan(kind, at))
    return planned
