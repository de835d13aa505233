"""The image the chart runs: what can be checked of the Dockerfile without a Docker engine."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from stripemq.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += stripped[:-1] + " " if stripped.endswith("\\") else stripped
        if not stripped.endswith("\\"):
            joined.append(pending)
            pending = ""
    result = []
    for text in joined:
        word, _, rest = text.partition(" ")
        result.append((word.upper(), rest.strip()))
    return result


def test_the_runtime_image_is_debian_slim_with_python_3_11_and_zookeeper() -> None:
    instructions = _instructions()
    stages = [args for word, args in instructions if word == "FROM"]
    assert stages and all(s.split()[0] == "python:3.11-slim-bookworm" for s in stages)
    runs = " ".join(args for word, args in instructions if word == "RUN")
    assert "apt-get install" in runs and " zookeeper" in runs
    assert "pip install" in runs and "/wheels/*.whl" in runs


def test_the_image_runs_as_the_user_the_chart_expects() -> None:
    users = [args for word, args in _instructions() if word == "USER"]
    assert users, "the image must not run as root"
    uid, _, gid = users[-1].partition(":")
    context = yaml.safe_load((ROOT / "helm/stripemq/values.yaml").read_text())["securityContext"]
    assert context["runAsNonRoot"] is True
    assert int(uid) == context["runAsUser"] != 0
    assert int(gid) == context["runAsGroup"] == context["fsGroup"]


def test_the_build_context_holds_what_the_build_copies() -> None:
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line]
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore  # everything else stays out of the context
    for word, args in _instructions():
        if word == "COPY" and not args.startswith("--from"):
            *sources, _destination = shlex.split(args)
            for source in sources:
                assert (ROOT / source).exists(), source
                assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"


def test_the_default_command_is_a_valid_standalone() -> None:
    (command,) = [args for word, args in _instructions() if word == "CMD"]
    argv = json.loads(command)
    assert argv[0] == "stripemq"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "standalone"
    assert "bind_address=0.0.0.0" in args.overrides
