"""``stripemq.clock``: the one wall clock, and that no module keeps a clock helper of its own."""

from __future__ import annotations

import re
import time
from pathlib import Path

import stripemq
from stripemq.clock import now_ms
from stripemq.testing.polling import next_millisecond

ROOT = Path(stripemq.__file__).parent


def test_now_ms_is_integer_wall_clock_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    now = now_ms()
    after = time.time_ns() // 1_000_000
    assert isinstance(now, int)
    assert before <= now <= after


def test_next_millisecond_waits_for_the_clock_to_tick() -> None:
    start = now_ms()
    tick = next_millisecond()
    assert tick > start and now_ms() >= tick


# A millisecond wall clock computed in place, or a helper of a module's own for it.
OWN_CLOCK = re.compile(
    r"time\.time\(\)\s*\*\s*1000|time\.time_ns\(\)\s*//\s*1_?000_?000\b|def _?now_ms\("
)


def test_every_module_reads_the_wall_clock_through_clock_now_ms() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(ROOT.rglob("*.py"))
        if path.name != "clock.py" or path.parent != ROOT
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if OWN_CLOCK.search(line)
    ]
    assert offenders == []
