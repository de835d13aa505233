"""The wall clock, in one place.

``now_ms()`` is what every timestamp that leaves the process is stamped with: publish and
delivery times, a cursor's last activity, a ledger's creation and closing times, the
creation and modification times of metadata nodes. It is milliseconds since the Unix epoch
in whole integers (from ``time.time_ns``, so no float rounding), comparable across hosts as
far as their clocks agree.

Durations, timeouts and deadlines inside one process are not wall-clock times: they use
``time.monotonic()`` directly, which no clock adjustment moves.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000
