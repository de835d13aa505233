"""``stripemq`` entry point: ``standalone``, ``broker``, ``bookie``, ``autorecovery``,
``zookeeper``, ``shell``, ``client``, ``admin``, ``spark``, ``initialize-cluster-metadata``,
``wait``, ``chaos`` and ``tokens``.

A role with settings (``ROLE_CONFIGS``) takes ``--conf FILE``, ``-c KEY=VALUE`` and
``--print-config``, plus one option per setting declared with ``option=`` in its settings
dataclass (``--port``, ``--metadata``, ...): the option's help is the setting's doc.

Each role's modules are imported only when that role runs (or when the whole parser is
built, for ``--help``): a command parses its own options only, so a ``stripemq bookie``
process never imports the broker, the client or the tools (a second and more off every
bookie's start), and ``stripemq admin`` imports none of them.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from stripemq.standalone import Standalone

log = logging.getLogger("stripemq.cli")

T = TypeVar("T")


ROLES = ("standalone", "broker", "bookie", "autorecovery", "zookeeper")
"""The long-running roles, each with a settings dataclass of its own."""

ROLE_HELP = {
    "standalone": "embedded metadata store, one bookie and one broker in one process",
    "broker": "run a broker (Pulsar protocol on 6650)",
    "bookie": "run a bookie (storage node)",
    "autorecovery": "run auto-recovery (auditor candidate and replication workers)",
    "zookeeper": "run one ZooKeeper server (Debian's package) from stripemq settings",
}


def role_config(role: str) -> type[Any]:
    """``role``'s settings dataclass, importing only that role's modules (a bookie process
    need not import the broker)."""
    if role == "standalone":
        from stripemq.standalone import StandaloneConfig

        return StandaloneConfig
    if role == "broker":
        from stripemq.broker.config import BrokerConfig

        return BrokerConfig
    if role == "bookie":
        from stripemq.bookie.config import BookieConfig

        return BookieConfig
    if role == "autorecovery":
        from stripemq.bookie.autorecovery import AutoRecoveryConfig

        return AutoRecoveryConfig
    if role == "zookeeper":
        from stripemq.zookeeper.config import ZooKeeperConfig

        return ZooKeeperConfig
    raise KeyError(role)


def role_configs() -> dict[str, type[Any]]:
    """The settings dataclass of each role that has settings (``--print-config``, the
    README's settings tables through scripts/gen_settings_docs.py)."""
    return {role: role_config(role) for role in ROLES}


def __getattr__(name: str) -> Any:
    """``ROLE_CONFIGS``, made on first use (importing this module stays cheap)."""
    if name == "ROLE_CONFIGS":
        return role_configs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _option_dest(name: str) -> str:
    return f"setting_{name}"


def _add_common(parser: argparse.ArgumentParser, settings: type) -> None:
    """The options of a role with settings: one per setting that names an option, then
    ``--conf``, ``-c``, ``--print-config`` and ``--log-level``."""
    from stripemq.config import describe, format_value

    for item in describe(settings):
        if item.option:
            about = f"default {format_value(item.default)}"
            if item.option.lstrip("-").replace("-", "_") != item.name:
                about = f"setting {item.name}, {about}"
            parser.add_argument(
                item.option,
                dest=_option_dest(item.name),
                metavar=item.name.upper(),
                help=f"{item.doc} ({about})".replace("%", "%%"),
            )
    parser.add_argument("--conf", help="TOML file of settings")
    parser.add_argument(
        "-c",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print every setting with its help, type, default and the value these options "
        "give it (a TOML settings file), then exit without starting anything",
    )
    parser.add_argument("--log-level", default="INFO")


def _option_values(args: argparse.Namespace, settings: type) -> dict[str, object]:
    """The settings given by their own command-line options (``--port 6651``)."""
    from stripemq.config import describe

    values: dict[str, object] = {}
    for item in describe(settings):
        value = getattr(args, _option_dest(item.name), None) if item.option else None
        if value is not None:
            values[item.name] = value
    return values


def _load(args: argparse.Namespace, settings: type[T]) -> T:
    """``settings`` from its defaults, ``--conf``, ``STRIPEMQ_*``, its options and ``-c``."""
    from stripemq.config import load_config, parse_overrides

    overrides = _option_values(args, settings)
    overrides.update(parse_overrides(args.overrides))
    return load_config(settings, args.conf, overrides)


def _add_role_parser(sub: Any, role: str) -> None:
    """``stripemq <role>``: the role's settings as options, plus ``-c``, ``--conf`` and the
    rest of the common options."""
    parser = sub.add_parser(role, help=ROLE_HELP[role])
    _add_common(parser, role_config(role))
    if role == "autorecovery":
        once = parser.add_mutually_exclusive_group()
        once.add_argument(
            "--disable",
            action="store_true",
            help="switch auto-recovery off cluster-wide, then exit",
        )
        once.add_argument("--enable", action="store_true", help="switch it back on, then exit")
        once.add_argument(
            "--status",
            action="store_true",
            help="print the auditor and the under-replicated ledgers as JSON, then exit",
        )


TOOLS = {
    "shell": "shell",
    "client": "client",
    "admin": "admin",
    "initialize-cluster-metadata": "initialize",
    "spark": "spark",
    "wait": "wait",
    "chaos": "chaos",
    "tokens": "tokens",
}
"""Each tool command and its module, ``stripemq.cli.<module>``, which has
``add_<module>_parser``."""


def _add_tool_parser(sub: Any, command: str) -> None:
    module = TOOLS[command]
    add_parser = getattr(importlib.import_module(f"stripemq.cli.{module}"), f"add_{module}_parser")
    add_parser(sub)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` just that one command (what a bookie or a
    ``stripemq client`` run parses, so it imports no other command's modules)."""
    parser = argparse.ArgumentParser(prog="stripemq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for role in ROLES:
        if only in (None, role):
            _add_role_parser(sub, role)
    for command in TOOLS:
        if only in (None, command):
            _add_tool_parser(sub, command)
    return parser


class _Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def _serve_until_signalled(
    server: _Service,
    cleanup: Callable[[], Awaitable[None]] | None = None,
) -> None:
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    _freeze_start_up_heap()
    await stop.wait()
    log.info("signal received; shutting down cleanly")
    await server.stop()
    if cleanup is not None:
        await cleanup()


def _freeze_start_up_heap() -> None:
    """Keep what start-up built out of the garbage collector's full collections.

    Modules, protobuf descriptors, settings and servers (about 70,000 objects) live as long as
    the process, yet every full collection would walk them all while the event loop waits:
    50 ms or more on a busy 2-core machine, which is a latency spike for every message in
    flight. ``gc.freeze`` moves them to the permanent generation, so a full collection walks
    only what was allocated since.
    """
    gc.collect()
    gc.freeze()
    log.debug("froze %d start-up objects out of full collections", gc.get_freeze_count())


def _ignore_file_size_signal() -> None:
    """A write past a file size limit then fails with EFBIG, which the bookie handles as a
    full disk, instead of SIGXFSZ killing the process (the JVM ignores it too)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


async def _run_bookie(args: argparse.Namespace) -> None:
    from stripemq.bookie.config import BookieConfig
    from stripemq.bookie.server import BookieServer

    _ignore_file_size_signal()
    await _serve_until_signalled(BookieServer(_load(args, BookieConfig)))


async def _run_autorecovery(args: argparse.Namespace) -> None:
    import json

    from stripemq.bookie.autorecovery import (
        AutoRecoveryConfig,
        AutoRecoveryService,
        UnderReplicationManager,
        current_auditor,
    )
    from stripemq.errors import ConfigError
    from stripemq.metadata import create_metadata_store

    config = _load(args, AutoRecoveryConfig)
    if not (args.disable or args.enable or args.status):
        service = AutoRecoveryService(config.metadata_service_uri, config, serve_http=True)
        await _serve_until_signalled(service)
        return
    if config.metadata_service_uri.startswith("memory://"):
        # This process's own empty store: --status would say "nothing under-replicated".
        raise ConfigError(
            "--status, --enable and --disable act on a cluster's metadata store: give "
            "--metadata zk://... (or STRIPEMQ_METADATA_SERVICE_URI)"
        )
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


async def _run_zookeeper(args: argparse.Namespace) -> None:
    from stripemq.zookeeper.config import ZooKeeperConfig
    from stripemq.zookeeper.server import ZooKeeperSupervisor

    code = await ZooKeeperSupervisor(_load(args, ZooKeeperConfig)).run()
    if code:
        sys.exit(code)


def _standalone(args: argparse.Namespace) -> Standalone:
    from stripemq.config import load_config, parse_overrides
    from stripemq.standalone import Standalone, StandaloneConfig

    # The standalone's own settings come from its options only: a settings file, STRIPEMQ_*
    # variables and -c hold bookie and broker settings (data_dir there is the bookie's).
    config = load_config(StandaloneConfig, None, _option_values(args, StandaloneConfig), {})
    return Standalone(config, args.conf, parse_overrides(args.overrides))


async def _run_standalone(args: argparse.Namespace) -> None:
    _ignore_file_size_signal()
    await _serve_until_signalled(_standalone(args))


async def _run_shell(args: argparse.Namespace) -> None:
    from stripemq.cli.shell import run_shell

    await run_shell(args)


async def _run_broker(args: argparse.Namespace) -> None:
    from stripemq.broker.app import BrokerApp
    from stripemq.broker.config import BrokerConfig

    await _serve_until_signalled(BrokerApp(_load(args, BrokerConfig)))


def config_text(args: argparse.Namespace) -> str:
    """What ``stripemq <role> --print-config`` prints: the role's settings, after its
    defaults, ``--conf``, ``STRIPEMQ_*`` variables and options, as a commented TOML file."""
    from stripemq.config import describe, render_settings

    role = args.command
    head = (
        f"# stripemq {role} settings: defaults, then --conf, STRIPEMQ_* variables and options.\n"
        "# Each setting: its help, then (type; default; Pulsar name; option), then its value.\n"
    )
    if role != "standalone":
        return f"{head}\n{render_settings(_load(args, role_config(role)))}"
    from stripemq.bookie.config import BookieConfig
    from stripemq.broker.config import BrokerConfig

    standalone = _standalone(args)
    bookie, broker = standalone.bookie_config, standalone.broker_config
    shared = sorted(
        {item.name for item in describe(BookieConfig)}
        & {item.name for item in describe(BrokerConfig)}
    )
    return (
        f"{head}\n"
        "# The standalone's own settings: command-line options only, not settings-file keys.\n\n"
        f"{render_settings(standalone.config, commented=True)}\n"
        "# Bookie settings (settings file, STRIPEMQ_* and -c, as for every setting below).\n"
        "# Settings shown commented out follow the options above.\n\n"
        f"{render_settings(bookie, comment_out=standalone.derived_bookie_settings())}\n"
        f"# Broker settings ({', '.join(shared)}: above, given to both roles).\n\n"
        f"{render_settings(broker, skip=shared, comment_out=standalone.derived_broker_settings())}"
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["admin"]:  # before any role's modules are imported
        from stripemq.cli.admin import main as admin_main

        sys.exit(admin_main(argv[1:]))
    if argv[:1] == ["spark"]:  # likewise: PySpark starts only if the job runs
        from stripemq.cli.spark import main as spark_main

        sys.exit(spark_main(argv[1:]))
    if argv[:1] == ["chaos"]:  # its own cluster, its own event loop
        from stripemq.cli.chaos import main as chaos_main

        sys.exit(chaos_main(argv[1:]))
    if argv[:1] == ["tokens"]:  # keys and tokens only: no role's modules
        from stripemq.cli.tokens import main as tokens_main

        sys.exit(tokens_main(argv[1:]))
    if argv[:1] and (argv[0] in ROLES or argv[0] in TOOLS):  # that command's modules only
        args = build_parser(only=argv[0]).parse_args(argv)
    else:
        args = build_parser().parse_args(argv)
    if args.command == "client":  # blocking, with its own event loop thread
        from stripemq.cli.client import run_client

        logging.basicConfig(level=args.log_level.upper())
        sys.exit(run_client(args))
    if args.command == "admin":  # (reached only when the fast path above was bypassed)
        from stripemq.cli.admin import run_admin

        sys.exit(run_admin(args))
    if args.command == "spark":  # blocking, Spark's own threads
        from stripemq.cli.spark import run_spark

        sys.exit(run_spark(args))
    if args.command == "chaos":
        from stripemq.cli.chaos import run_chaos_command

        sys.exit(run_chaos_command(args))
    if args.command == "tokens":
        from stripemq.cli.tokens import run_tokens

        sys.exit(run_tokens(args))
    if args.command == "wait":
        from stripemq.cli.wait import run_wait

        logging.basicConfig(level=args.log_level.upper())
        sys.exit(run_wait(args))
    if args.command == "initialize-cluster-metadata":
        from stripemq.cli.initialize import run_initialize

        logging.basicConfig(level=args.log_level.upper())
        sys.exit(run_initialize(args))
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    import asyncio

    from stripemq.errors import StripeMQError

    if getattr(args, "print_config", False):
        try:
            sys.stdout.write(config_text(args))
        except StripeMQError as exc:
            log.error("%s", exc)
            sys.exit(2)
        return
    runners = {
        "standalone": _run_standalone,
        "broker": _run_broker,
        "bookie": _run_bookie,
        "autorecovery": _run_autorecovery,
        "zookeeper": _run_zookeeper,
        "shell": _run_shell,
    }
    try:
        asyncio.run(runners[args.command](args))
    except StripeMQError as exc:
        log.error("%s", exc)
        sys.exit(2)
    except OSError as exc:
        log.error("%s", exc)
        sys.exit(1)
