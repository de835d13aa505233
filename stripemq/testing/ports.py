"""Free loopback ports for the processes tests and benchmarks start.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the same range
it uses for the source port of every outgoing connection; between closing the probe socket
and the child process binding it, any client connection on the machine may take it. Ports
are therefore drawn below the ephemeral range, walking forward from a per-process random
start so two test processes (and two calls in one process) do not pick the same one.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading

_LOWEST = 10_000
_DEFAULT_EPHEMERAL_START = 32_768
_lock = threading.Lock()
_candidates: itertools.cycle[int] | None = None


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_START


def _next_candidate() -> int:
    global _candidates
    with _lock:
        if _candidates is None:
            top = max(_ephemeral_start(), _LOWEST + 1_000)
            ports = list(range(_LOWEST, top))
            start = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "big")).randrange(
                len(ports)
            )
            _candidates = itertools.cycle(ports[start:] + ports[:start])
        return next(_candidates)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1, outside the ephemeral range, that is free right now."""
    for _ in range(10_000):
        port = _next_candidate()
        if _bindable(port):
            return port
    raise OSError("no free TCP port below the ephemeral range on 127.0.0.1")
