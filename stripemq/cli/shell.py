"""``stripemq shell``: inspect and exercise ledgers, like ``bookkeeper shell``.

Output goes to stdout (this is a command-line tool, not library code); each command is one
small coroutine on a ``BookKeeper`` client.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable

from stripemq.bookie.client import BookKeeper
from stripemq.bookie.cookie import delete_registered_cookie, registered_cookies
from stripemq.config import METADATA_ENV
from stripemq.errors import ConfigError, NotFoundError
from stripemq.metadata import create_metadata_store

ShellCommand = Callable[[BookKeeper, argparse.Namespace], Awaitable[None]]


def add_shell_parser(sub: argparse._SubParsersAction) -> None:
    shell = sub.add_parser("shell", help="inspect and test ledgers (like bookkeeper shell)")
    shell.add_argument(
        "--metadata",
        help=f"metadata service URL (zk://...); default: ${METADATA_ENV}",
    )
    shell.add_argument("--log-level", default="WARNING")
    commands = shell.add_subparsers(dest="shell_command", required=True)
    commands.add_parser("listbookies", help="writable and read-only bookies, with racks")
    commands.add_parser("listledgers", help="every ledger id")
    meta = commands.add_parser("ledgermetadata", help="one ledger's metadata as JSON")
    meta.add_argument("ledger_id", type=int)
    read = commands.add_parser("readledger", help="print a ledger's entries")
    read.add_argument("ledger_id", type=int)
    read.add_argument("--first", type=int, default=0)
    read.add_argument("--last", type=int, default=-1, help="default: the last entry")
    read.add_argument("--no-recovery", action="store_true", help="do not fence an open ledger")
    delete = commands.add_parser("deleteledger", help="delete a ledger (bookies GC it)")
    delete.add_argument("ledger_id", type=int)
    test = commands.add_parser("simpletest", help="write, read back and close a ledger")
    test.add_argument("-E", "--ensemble", type=int, default=3)
    test.add_argument("-Qw", "--write-quorum", type=int, default=2)
    test.add_argument("-Qa", "--ack-quorum", type=int, default=2)
    test.add_argument("-n", "--entries", type=int, default=1000)
    commands.add_parser(
        "cookie_list", help="bookies the cluster has a cookie for, with their directories"
    )
    cookie_delete = commands.add_parser(
        "cookie_delete",
        help="forget a bookie's cookie, so it can start again with empty directories",
    )
    cookie_delete.add_argument("bookie_id", help="host:port, as cookie_list shows it")
    cookie_delete.add_argument(
        "-f",
        "--force",
        action="store_true",
        help="even while the bookie is registered, and no error if it has no cookie",
    )


async def _list_bookies(bk: BookKeeper, _args: argparse.Namespace) -> None:
    for bookie in sorted((await bk.bookie_watcher.writable()).values(), key=lambda b: b.bookie_id):
        print(f"{bookie.bookie_id}\twritable\t{bookie.rack}")
    for bookie_id in sorted(await bk.bookie_watcher.readonly()):
        print(f"{bookie_id}\tread-only")


async def _list_ledgers(bk: BookKeeper, _args: argparse.Namespace) -> None:
    async for ledger_id in bk.ledger_manager.ledger_ids():
        print(ledger_id)


async def _ledger_metadata(bk: BookKeeper, args: argparse.Namespace) -> None:
    metadata, version = await bk.ledger_manager.read(args.ledger_id)
    doc = json.loads(metadata.encode())
    doc["version"] = version
    print(json.dumps(doc, indent=2))


async def _read_ledger(bk: BookKeeper, args: argparse.Namespace) -> None:
    handle = await bk.open_ledger(args.ledger_id, password=None, recovery=not args.no_recovery)
    last = handle.last_add_confirmed if args.last < 0 else args.last
    for entry in await handle.read_entries(args.first, last) if last >= args.first else []:
        print(f"{entry.entry_id}\t{entry.data!r}")


async def _delete_ledger(bk: BookKeeper, args: argparse.Namespace) -> None:
    await bk.delete_ledger(args.ledger_id)
    print(f"deleted ledger {args.ledger_id}")


async def _simple_test(bk: BookKeeper, args: argparse.Namespace) -> None:
    handle = await bk.create_ledger(args.ensemble, args.write_quorum, args.ack_quorum)
    started = time.perf_counter()
    futures = [handle.add_entry_async(f"entry {i}".encode()) for i in range(args.entries)]
    for future in futures:
        await future
    elapsed = time.perf_counter() - started
    await handle.close()
    reader = await bk.open_ledger(handle.ledger_id)
    entries = await reader.read_entries(0, reader.last_add_confirmed)
    if [e.data for e in entries] != [f"entry {i}".encode() for i in range(args.entries)]:
        raise SystemExit(f"ledger {handle.ledger_id}: entries read back differ")
    print(
        f"ledger {handle.ledger_id} on {list(handle.ensemble)}: wrote {args.entries} entries "
        f"in {elapsed:.2f}s ({args.entries / elapsed:.0f}/s), read them back, closed"
    )


async def _cookie_list(bk: BookKeeper, _args: argparse.Namespace) -> None:
    registered = set(await bk.bookie_watcher.all_bookies())
    for bookie_id, cookie in (await registered_cookies(bk.store)).items():
        state = "registered" if bookie_id in registered else "not-registered"
        dirs = ",".join((*cookie.journal_dirs, *cookie.ledger_dirs))
        print(f"{bookie_id}\t{state}\t{cookie.instance_id}\t{dirs}")


async def _cookie_delete(bk: BookKeeper, args: argparse.Namespace) -> None:
    bookie_id = args.bookie_id
    if not args.force and bookie_id in await bk.bookie_watcher.all_bookies():
        raise SystemExit(
            f"bookie {bookie_id} is registered (running): stop it first, or pass --force"
        )
    try:
        await delete_registered_cookie(bk.store, bookie_id)
    except NotFoundError:
        if not args.force:
            raise SystemExit(f"the cluster has no cookie for bookie {bookie_id}") from None
        print(f"the cluster has no cookie for bookie {bookie_id}: nothing to delete")
        return
    print(f"deleted the cookie of bookie {bookie_id}")


COMMANDS: dict[str, ShellCommand] = {
    "listbookies": _list_bookies,
    "listledgers": _list_ledgers,
    "ledgermetadata": _ledger_metadata,
    "readledger": _read_ledger,
    "deleteledger": _delete_ledger,
    "simpletest": _simple_test,
    "cookie_list": _cookie_list,
    "cookie_delete": _cookie_delete,
}


async def run_shell(args: argparse.Namespace) -> None:
    """Run one shell command against the metadata store the arguments name.

    Raises:
        ConfigError: no metadata store is named (by ``--metadata`` or the environment).
    """
    url = args.metadata or os.environ.get(METADATA_ENV)
    if not url:
        raise ConfigError(f"stripemq shell needs --metadata zk://... (or ${METADATA_ENV})")
    store = create_metadata_store(url)
    await store.start()
    try:
        async with BookKeeper(store) as bk:
            await COMMANDS[args.shell_command](bk, args)
    finally:
        await store.close()
        sys.stdout.flush()
