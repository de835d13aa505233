"""A long-running role's process imports its own modules only: a bookie started by the
hundred in a cluster (or a test suite) should not pay for the broker, the client or the
tools' parsers at every start."""

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
    run = subprocess.run(
        [sys.executable, "-c", PROBE, role], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"# stripemq {role} settings"), run.stdout[:200]
    modules = json.loads(run.stderr.strip().splitlines()[-1])
    leaked = [m for m in modules if m.startswith(FOREIGN[role])]
    assert leaked == [], f"stripemq {role} imported {leaked}"


def test_the_whole_parser_still_lists_every_command() -> None:
    from stripemq.cli.main import ROLES, build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(ROLES) <= set(commands)
    assert {"admin", "client", "shell", "spark", "chaos", "tokens", "wait"} <= set(commands)
    assert parser.parse_args(["autorecovery", "--status"]).status is True
