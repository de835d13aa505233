"""``stripemq wait``: block until the metadata store, a cluster's metadata and enough
bookies are there; what Kubernetes init containers run before a component starts.

Pulsar's chart loops over ``zookeeper-shell`` and ``bookkeeper shell listbookies`` for the
same purpose; one command with explicit conditions says what a pod is waiting for in its
log. Each unmet condition is printed (once per change) so ``kubectl logs -c <init>`` shows
why a pod is not starting. Exit 0 once every condition holds, 1 on ``--timeout``, 2 on bad
arguments. Output goes to stdout (a command-line tool, not library code).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass

from stripemq.config import METADATA_ENV

__all__ = ["METADATA_ENV", "WaitConditions", "add_wait_parser", "run_wait", "unmet", "wait_for"]


@dataclass(frozen=True)
class WaitConditions:
    """What ``stripemq wait`` waits for."""

    metadata_url: str
    cluster: str | None = None  # the cluster's node exists (initialize-cluster-metadata ran)
    bookies: int = 0  # at least this many writable bookies are registered


def add_wait_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "wait",
        help="wait until the metadata store, a cluster's metadata and N bookies are there "
        "(for init containers)",
        description=__doc__.split("\n\n")[0],
        allow_abbrev=False,
    )
    parser.add_argument(
        "--metadata",
        default=os.environ.get(METADATA_ENV),
        help=f"metadata store URL, zk://host:2181[,host:2181][/chroot] (default: ${METADATA_ENV})",
    )
    parser.add_argument("--cluster", help="also wait for this cluster's metadata")
    parser.add_argument(
        "--bookies", type=int, default=0, help="also wait for this many writable bookies"
    )
    parser.add_argument(
        "--timeout", type=float, default=0.0, help="give up after this many seconds (0: never)"
    )
    parser.add_argument(
        "--interval", type=float, default=2.0, help="seconds between checks (default 2)"
    )
    parser.add_argument("--log-level", default="ERROR")


async def unmet(conditions: WaitConditions, connect_timeout: float = 5.0) -> str | None:
    """The first condition that does not hold yet, in words; None when all hold.

    A store that cannot be reached within ``connect_timeout`` seconds is an unmet
    condition, not an error.
    """
    from stripemq.bookie.registration import AVAILABLE, READONLY
    from stripemq.broker.cluster_metadata import cluster_exists
    from stripemq.errors import StripeMQError
    from stripemq.metadata import create_metadata_store

    url = conditions.metadata_url
    # A short connect deadline (ZooKeeper only): the caller checks again soon anyway.
    if url.startswith("zk://"):
        store = create_metadata_store(url, connect_timeout=connect_timeout)
    else:
        store = create_metadata_store(url)
    try:
        await store.start()
    except (StripeMQError, OSError) as exc:
        with contextlib.suppress(Exception):
            await store.close()
        return f"metadata store {conditions.metadata_url} not reachable: {exc}"
    try:
        if conditions.cluster and not await cluster_exists(store, conditions.cluster):
            return f"cluster {conditions.cluster!r} has no metadata yet"
        if conditions.bookies > 0:
            readonly = READONLY.rsplit("/", 1)[-1]
            writable = [b for b in await store.children(AVAILABLE) if b != readonly]
            if len(writable) < conditions.bookies:
                return f"{len(writable)} of {conditions.bookies} writable bookies registered"
        return None
    except (StripeMQError, OSError) as exc:
        return f"metadata store {conditions.metadata_url} failed: {exc}"
    finally:
        with contextlib.suppress(Exception):
            await store.close()


async def wait_for(conditions: WaitConditions, give_up_after: float, interval: float) -> bool:
    """Check until every condition holds (True) or ``give_up_after`` seconds pass (False;
    0: never)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + give_up_after if give_up_after > 0 else None
    last: str | None = ""
    while True:
        reason = await unmet(conditions, connect_timeout=min(5.0, max(1.0, 2 * interval)))
        if reason is None:
            print("ready", flush=True)
            return True
        if reason != last:
            print(f"waiting: {reason}", flush=True)
            last = reason
        if deadline is not None and loop.time() + interval > deadline:
            print(f"gave up after {give_up_after:g}s: {reason}", flush=True)
            return False
        await asyncio.sleep(interval)


def run_wait(args: argparse.Namespace) -> int:
    """The command: parse, wait, return the exit code."""
    if not args.metadata:
        sys.stderr.write(f"stripemq wait: error: --metadata (or ${METADATA_ENV}) is required\n")
        return 2
    if args.bookies < 0 or args.timeout < 0 or args.interval <= 0:
        sys.stderr.write(
            "stripemq wait: error: --bookies and --timeout must not be negative, "
            "--interval must be positive\n"
        )
        return 2
    conditions = WaitConditions(args.metadata, args.cluster, args.bookies)
    return 0 if asyncio.run(wait_for(conditions, args.timeout, args.interval)) else 1
