"""Dependencies point one way (README.md, Layout): proto <- metadata <- bookie <-
managed_ledger <- broker, the client depends only on proto, and spark never on the broker
or the client. Read from the import
statements of every module, so a new import against the grain fails here, not in review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import stripemq

ROOT = Path(stripemq.__file__).parent

# Modules every layer may use: the errors, the retry helper, the clock, the config loader,
# the lifecycle state machines and the small HTTP endpoints' site.
COMMON = {"errors", "retry", "clock", "config", "lifecycle", "http_site"}

ALLOWED: dict[str, set[str]] = {
    "errors": {"proto"},
    "retry": set(),
    "clock": set(),
    "lifecycle": set(),
    "config": {"errors"},
    "proto": {"errors", "proto"},
    "metadata": COMMON | {"proto", "metadata"},
    "bookie": COMMON | {"proto", "metadata", "bookie"},
    "managed_ledger": COMMON | {"proto", "metadata", "bookie", "managed_ledger"},
    "client": COMMON | {"proto", "client"},
    "spark": COMMON | {"proto", "metadata", "bookie", "managed_ledger", "spark"},
    # The ZooKeeper role runs Debian's server: nothing of stripemq's data path.
    "zookeeper": COMMON | {"zookeeper"},
}


def stripemq_imports(path: Path) -> set[str]:
    """The top-level stripemq subpackages or modules a file imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "stripemq":
                names = [f"stripemq.{alias.name}" for alias in node.names]
            else:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "stripemq" and len(parts) > 1:
                found.add(parts[1])
    return found


def layer_files(layer: str) -> list[Path]:
    package = ROOT / layer
    if package.is_dir():
        return sorted(p for p in package.rglob("*.py") if "_pb2" not in p.name)
    return [ROOT / f"{layer}.py"]


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_what_lies_below_it(layer: str) -> None:
    files = layer_files(layer)
    assert files and all(p.exists() for p in files), layer
    wrong = {
        str(path.relative_to(ROOT)): sorted(stripemq_imports(path) - ALLOWED[layer])
        for path in files
        if stripemq_imports(path) - ALLOWED[layer]
    }
    assert wrong == {}


def test_the_check_sees_imports_against_the_grain(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import stripemq.broker.topic\n"
        "from stripemq.client import Client\n"
        "from stripemq import managed_ledger\n"
        "from . import sibling\n"
    )
    assert stripemq_imports(module) == {"broker", "client", "managed_ledger"}
