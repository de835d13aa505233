"""A command imports its own modules only: a bookie started by the hundred in a cluster (or
a test suite) should not pay for the broker, the client or the tools' parsers at every
start, nor ``stripemq client`` for the broker."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

TOOLS = ("stripemq.cli.admin", "stripemq.cli.client", "stripemq.cli.shell", "stripemq.cli.spark")
FOREIGN = {
    "bookie": (*TOOLS, "stripemq.broker", "stripemq.client", "stripemq.standalone"),
    "broker": (*TOOLS, "stripemq.client", "stripemq.standalone", "stripemq.spark"),
    "zookeeper": (*TOOLS, "stripemq.broker", "stripemq.bookie", "stripemq.client"),
}


def run_probe(probe: str, command: str) -> tuple[str, list[str]]:
    """Runs ``probe`` for ``command`` in a fresh interpreter: its stdout, and the modules it
    had imported (the JSON list on stderr's last line)."""
    run = subprocess.run(
        [sys.executable, "-c", probe, command], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr  # --help exits 0 too
    return run.stdout, json.loads(run.stderr.strip().splitlines()[-1])


# Runs a role's command as far as its runner, which it hands to a stand-in asyncio.run (the
# runner's own imports, inside the coroutine, are the role's), then --print-config.
PROBE = """
import asyncio, json, sys
from stripemq.cli.main import main
asyncio.run = lambda runner: runner.close()
main([sys.argv[1]])
main([sys.argv[1], "--print-config"])
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize("role", sorted(FOREIGN))
def test_a_role_imports_no_other_roles_or_tools_modules(role: str) -> None:
    stdout, modules = run_probe(PROBE, role)
    assert stdout.startswith(f"# stripemq {role} settings"), stdout[:200]
    leaked = [m for m in modules if m.startswith(FOREIGN[role])]
    assert leaked == [], f"stripemq {role} imported {leaked}"


# Parses ``<command> --help``, which exits, and lists the modules on the way out.
TOOL_PROBE = """
import atexit, json, sys
from stripemq.cli.main import build_parser
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
build_parser(only=sys.argv[1]).parse_args([sys.argv[1], "--help"])
"""
TOOL_FOREIGN = {
    "client": ("stripemq.broker", "stripemq.bookie", "stripemq.standalone", "stripemq.cli.admin"),
    "shell": ("stripemq.broker", "stripemq.client", "stripemq.standalone", "stripemq.cli.admin"),
    "wait": ("stripemq.broker", "stripemq.bookie", "stripemq.client", "stripemq.standalone"),
}


@pytest.mark.parametrize("command", sorted(TOOL_FOREIGN))
def test_a_tool_parses_its_own_options_only(command: str) -> None:
    stdout, modules = run_probe(TOOL_PROBE, command)
    assert f"usage: stripemq {command}" in stdout
    leaked = [m for m in modules if m.startswith(TOOL_FOREIGN[command])]
    assert leaked == [], f"stripemq {command} imported {leaked}"


def test_the_whole_parser_still_lists_every_command() -> None:
    from stripemq.cli.main import ROLES, build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(ROLES) <= set(commands)
    assert {"admin", "client", "shell", "spark", "chaos", "tokens", "wait"} <= set(commands)
    assert parser.parse_args(["autorecovery", "--status"]).status is True
