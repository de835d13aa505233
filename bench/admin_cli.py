"""How fast ``stripemq admin`` answers: each command run as its own process, as a user runs it.

One ``stripemq standalone`` on free 127.0.0.1 ports in a temp dir. For each command
(``tenants list``, ``namespaces policies public/default``, ``topics stats`` of a topic made
for the run), ``--runs`` timed runs of ``python -m stripemq admin --admin-url URL <command>``
as a child process, wall time from spawn to exit, after ``--warmup`` untimed runs; each
must exit 0. The children cache bytecode under a temp ``PYTHONPYCACHEPREFIX`` (as an
installed package does; the repository is not written), so the figure is the start-up of
an installed ``stripemq``; one row repeats ``tenants list`` without a bytecode cache
(``PYTHONDONTWRITEBYTECODE=1``, every module compiled on every run).

The physical reference is the interpreter itself: ``python_startup_p50_ms`` is the same
run's median wall time of ``python -c pass`` (what any Python command costs before it does
anything), and ``request_p50_ms`` the median time of the same HTTP request made in this
process (what the broker takes to answer). ``pulsar-admin`` starts a JVM per call (seconds).

Prints progress to stderr and one JSON object on the last line of stdout:
``{"bench": "admin_cli", "results": [{"command": "tenants list", "p50_ms": ..., "p99_ms":
...}, ...], ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stripemq.cli.admin_http import AdminClient
from stripemq.testing.bench import percentile, progress
from stripemq.testing.standalone import StandaloneProcess

REPO = Path(__file__).resolve().parent.parent


def timed_runs(command: list[str], env: dict[str, str], runs: int, warmup: int) -> list[float]:
    """Wall milliseconds of ``runs`` runs of ``command`` (after ``warmup`` untimed ones)."""
    times = []
    for index in range(warmup + runs):
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, timeout=120, check=False)
        elapsed = (time.perf_counter() - started) * 1000
        if done.returncode != 0:
            raise RuntimeError(f"{command} exited {done.returncode}: {done.stderr.decode()}")
        if index >= warmup:
            times.append(elapsed)
    return times


def row(name: str, times: list[float], **extra: object) -> dict[str, object]:
    return {
        "command": name,
        "runs": len(times),
        "p50_ms": round(percentile(times, 0.50), 1),
        "p99_ms": round(percentile(times, 0.99), 1),
        "min_ms": round(min(times), 1),
        **extra,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="timed runs per command")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="stripemq-bench-admin-") as tmp:
        base = Path(tmp)
        standalone = StandaloneProcess(base / "data")
        progress("starting a standalone ...")
        await standalone.start()
        try:
            url = standalone.web_url
            client = AdminClient(url)
            await asyncio.to_thread(
                client.put, "/admin/v2/persistent/public/default/bench-admin-cli"
            )
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
            env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
            admin = [sys.executable, "-m", "stripemq", "admin", "--admin-url", url]

            progress("interpreter start-up (python -c pass) ...")
            startup = timed_runs([sys.executable, "-c", "pass"], env, args.runs, args.warmup)
            requests = []
            for _ in range(args.runs):
                started = time.perf_counter()
                await asyncio.to_thread(client.get, "/admin/v2/tenants")
                requests.append((time.perf_counter() - started) * 1000)
            reference = {
                "python_startup_p50_ms": round(percentile(startup, 0.5), 1),
                "request_p50_ms": round(percentile(requests, 0.5), 1),
            }
            results = []
            for name, words in (
                ("tenants list", ["tenants", "list"]),
                ("namespaces policies", ["namespaces", "policies", "public/default"]),
                ("topics stats", ["topics", "stats", "bench-admin-cli"]),
            ):
                progress(f"{args.runs} runs of stripemq admin {' '.join(words)} ...")
                times = await asyncio.to_thread(
                    timed_runs, [*admin, *words], env, args.runs, args.warmup
                )
                results.append(row(name, times, bytecode_cache=True, **reference))
                progress(f"  p50 {results[-1]['p50_ms']} ms, p99 {results[-1]['p99_ms']} ms")
            progress("tenants list without a bytecode cache ...")
            # An empty cache that is never written: every module compiled on every run.
            cold_env = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
            cold_env["PYTHONPYCACHEPREFIX"] = str(base / "empty-pycache")
            times = await asyncio.to_thread(
                timed_runs, [*admin, "tenants", "list"], cold_env, args.runs, 0
            )
            results.append(row("tenants list", times, bytecode_cache=False, **reference))
        finally:
            standalone.terminate()
    print(
        json.dumps(
            {
                "bench": "admin_cli",
                "target": "standalone",
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
