"""``stripemq`` entry point: ``standalone``, ``broker``, ``bookie``, ``autorecovery``,
``shell`` and ``client`` (more roles come with their issues)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from stripemq.bookie.autorecovery import (
    AutoRecoveryConfig,
    AutoRecoveryService,
    UnderReplicationManager,
    current_auditor,
)
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.server import BookieServer
from stripemq.broker.app import BrokerApp
from stripemq.broker.config import BrokerConfig
from stripemq.cli.client import add_client_parser, run_client
from stripemq.cli.shell import add_shell_parser, run_shell
from stripemq.config import load_config, parse_overrides
from stripemq.errors import StripeMQError
from stripemq.metadata import create_metadata_store
from stripemq.standalone import Standalone, StandalonePorts

log = logging.getLogger("stripemq.cli")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", help="TOML file of settings")
    parser.add_argument(
        "-c",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stripemq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    standalone = sub.add_parser(
        "standalone", help="embedded metadata store, one bookie and one broker in one process"
    )
    standalone.add_argument("--data-dir", default="data/standalone", type=os.path.abspath)
    standalone.add_argument("--broker-port", type=int, default=6650)
    standalone.add_argument("--web-port", type=int, default=8080)
    standalone.add_argument("--bookie-port", type=int, default=3181)
    _add_common(standalone)

    broker = sub.add_parser("broker", help="run a broker (Pulsar protocol on 6650)")
    broker.add_argument("--metadata", help="metadata service URL, e.g. zk://127.0.0.1:2181/")
    broker.add_argument("--port", type=int, help="Pulsar protocol port (default 6650)")
    broker.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    broker.add_argument("--advertised-address", help="host clients are told to connect to")
    _add_common(broker)

    bookie = sub.add_parser("bookie", help="run a bookie (storage node)")
    bookie.add_argument("--metadata", help="metadata service URL, e.g. zk://127.0.0.1:2181/")
    bookie.add_argument("--port", type=int, help="gRPC port (default 3181)")
    bookie.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    bookie.add_argument("--data-dir", help="journal and ledger storage directory")
    bookie.add_argument("--rack", help="rack label used by rack-aware placement")
    _add_common(bookie)

    autorecovery = sub.add_parser(
        "autorecovery", help="run auto-recovery (auditor candidate and replication workers)"
    )
    autorecovery.add_argument("--metadata", help="metadata service URL, e.g. zk://127.0.0.1:2181/")
    once = autorecovery.add_mutually_exclusive_group()
    once.add_argument(
        "--disable", action="store_true", help="switch auto-recovery off cluster-wide, then exit"
    )
    once.add_argument("--enable", action="store_true", help="switch it back on, then exit")
    once.add_argument(
        "--status",
        action="store_true",
        help="print the auditor and the under-replicated ledgers as JSON, then exit",
    )
    _add_common(autorecovery)

    add_shell_parser(sub)
    add_client_parser(sub)
    return parser


def _bookie_config(args: argparse.Namespace) -> BookieConfig:
    overrides: dict[str, object] = {}
    for option, setting in (
        ("metadata", "metadata_service_uri"),
        ("port", "bookie_port"),
        ("host", "bookie_host"),
        ("data_dir", "data_dir"),
        ("rack", "rack"),
    ):
        value = getattr(args, option, None)
        if value is not None:
            overrides[setting] = value
    overrides.update(parse_overrides(args.overrides))
    return load_config(BookieConfig, args.conf, overrides)


class _Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def _serve_until_signalled(
    server: _Service,
    cleanup: Callable[[], Awaitable[None]] | None = None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    await stop.wait()
    log.info("signal received; shutting down cleanly")
    await server.stop()
    if cleanup is not None:
        await cleanup()


async def _run_bookie(args: argparse.Namespace) -> None:
    await _serve_until_signalled(BookieServer(_bookie_config(args)))


def _autorecovery_config(args: argparse.Namespace) -> AutoRecoveryConfig:
    overrides: dict[str, object] = {}
    if args.metadata is not None:
        overrides["metadata_service_uri"] = args.metadata
    overrides.update(parse_overrides(args.overrides))
    return load_config(AutoRecoveryConfig, args.conf, overrides)


async def _run_autorecovery(args: argparse.Namespace) -> None:
    config = _autorecovery_config(args)
    if not (args.disable or args.enable or args.status):
        await _serve_until_signalled(AutoRecoveryService(config.metadata_service_uri, config))
        return
    store = create_metadata_store(config.metadata_service_uri)
    await store.start()
    try:
        queue = UnderReplicationManager(store)
        if args.disable:
            await queue.disable()
        elif args.enable:
            await queue.enable()
        ledgers = [
            {
                "ledger_id": record.ledger_id,
                "lost_bookies": sorted(record.lost_bookies),
                "locked_by": await queue.lock_owner(record.ledger_id),
            }
            for record in await queue.list()
        ]
        status = {
            "enabled": await queue.is_enabled(),
            "auditor": await current_auditor(store),
            "under_replicated": ledgers,
        }
        print(json.dumps(status, indent=2))
    finally:
        await store.close()


async def _run_standalone(args: argparse.Namespace) -> None:
    ports = StandalonePorts(broker=args.broker_port, web=args.web_port, bookie=args.bookie_port)
    standalone = Standalone(Path(args.data_dir), ports, args.conf, parse_overrides(args.overrides))
    await _serve_until_signalled(standalone)


async def _run_broker(args: argparse.Namespace) -> None:
    overrides: dict[str, object] = {}
    for option, setting in (
        ("metadata", "metadata_service_uri"),
        ("port", "broker_service_port"),
        ("host", "bind_address"),
        ("advertised_address", "advertised_address"),
    ):
        value = getattr(args, option, None)
        if value is not None:
            overrides[setting] = value
    overrides.update(parse_overrides(args.overrides))
    await _serve_until_signalled(BrokerApp(load_config(BrokerConfig, args.conf, overrides)))


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "client":  # blocking, with its own event loop thread
        logging.basicConfig(level=args.log_level.upper())
        sys.exit(run_client(args))
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    runners = {
        "standalone": _run_standalone,
        "broker": _run_broker,
        "bookie": _run_bookie,
        "autorecovery": _run_autorecovery,
        "shell": run_shell,
    }
    try:
        asyncio.run(runners[args.command](args))
    except StripeMQError as exc:
        log.error("%s", exc)
        sys.exit(2)
    except OSError as exc:
        log.error("%s", exc)
        sys.exit(1)
