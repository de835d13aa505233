"""Settings are documented once: every process setting has its doc next to its field, the
README's settings tables are generated from those docs, and ``stripemq <role>
--print-config`` prints every setting with its default."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from stripemq.bookie.client.config import ClientConfig
from stripemq.broker.config import BrokerConfig, DelayedDeliveryConfig
from stripemq.cli.main import ROLE_CONFIGS, main
from stripemq.config import describe, format_value, load_config
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.managed_ledger.cursor.config import CursorConfig

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "python scripts/gen_settings_docs.py"

INTERNAL_CONFIGS = [ManagedLedgerConfig, CursorConfig, ClientConfig, DelayedDeliveryConfig]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_settings_docs", ROOT / "scripts" / "gen_settings_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_settings_tables_are_generated_from_the_dataclasses() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    wanted = _generator().generated_readme(readme)
    stale = [
        role
        for role in ROLE_CONFIGS
        if _section(readme, role) != _section(wanted, role)  # name the stale tables
    ]
    assert readme == wanted, (
        f"README.md's settings tables {stale} differ from the settings dataclasses; "
        f"regenerate them with: {REGENERATE}"
    )


def test_chart_settings_list_is_generated_from_the_dataclasses() -> None:
    """helm/stripemq/files/settings.json (what the chart accepts in configData) is current."""
    generator = _generator()
    current = generator.CHART_SETTINGS.read_text(encoding="utf-8")
    assert current == generator.chart_settings(), (
        f"{generator.CHART_SETTINGS.relative_to(ROOT)} differs from the settings dataclasses; "
        f"regenerate it with: {REGENERATE}"
    )
    assert set(json.loads(current)) == set(generator.CHART_ROLES) <= set(ROLE_CONFIGS)


def _section(text: str, role: str) -> str:
    start, end = f"<!-- settings:{role} -->", f"<!-- /settings:{role} -->"
    return text[text.index(start) : text.index(end)]


def test_every_role_has_its_table_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for role, cls in ROLE_CONFIGS.items():
        table = _section(readme, role)
        assert all(f"| `{item.name}`" in table for item in describe(cls)), role


@pytest.mark.parametrize(
    "cls", [*ROLE_CONFIGS.values(), *INTERNAL_CONFIGS], ids=lambda cls: cls.__name__
)
def test_every_setting_has_a_doc(cls: type) -> None:
    undocumented = [item.name for item in describe(cls) if not item.doc.strip()]
    assert undocumented == [], f"{cls.__name__}: give these a setting(default, doc)"


def test_settings_classes_are_named_one_way() -> None:
    """A role's settings are a ``<Thing>Config`` dataclass."""
    for cls in [*ROLE_CONFIGS.values(), *INTERNAL_CONFIGS]:
        assert dataclasses.is_dataclass(cls) and cls.__name__.endswith("Config"), cls


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("STRIPEMQ_"):
            monkeypatch.delenv(name)


def _print_config(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    main([*argv, "--print-config"])  # returns: nothing is started
    return capsys.readouterr().out


@pytest.mark.parametrize("role", ["broker", "bookie", "autorecovery", "zookeeper"])
@pytest.mark.usefixtures("clean_environment")
def test_print_config_lists_every_setting_with_its_default(
    role: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cls = ROLE_CONFIGS[role]
    text = _print_config(capsys, role)
    values = tomllib.loads(text)
    for item in describe(cls):
        assert f"\n# ({item.type}; default {format_value(item.default)}" in text, item.name
        if item.default is None:
            assert f"\n# {item.name} = unset\n" in text
            assert item.name not in values
        else:
            assert values[item.name] == item.default, item.name
        assert item.doc.split()[0] in text
    # The output is a settings file that gives back the same settings.
    conf = tmp_path / f"{role}.toml"
    conf.write_text(text)
    assert load_config(cls, conf, environ={}) == cls()


@pytest.mark.usefixtures("clean_environment")
def test_print_config_shows_the_values_options_and_files_give(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text("keep_alive_interval_seconds = 5\n")
    argv = ["broker", "--conf", str(conf), "--port", "7000", "-c", "max_message_size=2048"]
    values = tomllib.loads(_print_config(capsys, *argv))
    assert values["broker_service_port"] == 7000
    assert values["max_message_size"] == 2048
    assert values["keep_alive_interval_seconds"] == 5
    assert values["metadata_service_uri"] == "memory://"


@pytest.mark.usefixtures("clean_environment")
def test_standalone_print_config_shows_its_options_then_both_roles(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    argv = ["standalone", "--data-dir", str(data), "--broker-port", "7001"]
    text = _print_config(capsys, *argv, "-c", "journal_sync_data=false")
    for cls in ROLE_CONFIGS.values():
        if cls not in (ROLE_CONFIGS["autorecovery"], ROLE_CONFIGS["zookeeper"]):
            assert all(f"{item.name} = " in text for item in describe(cls)), cls
    values: dict[str, Any] = tomllib.loads(text)  # the standalone's options are comments
    assert "broker_port" not in values and f'# data_dir = "{data}"' in text
    # What the options decide is shown, commented out: a file must not pin it.
    assert "# broker_service_port = 7001" in text and "broker_service_port" not in values
    assert "# bookie_port = 3181" in text and "bookie_port" not in values
    assert f'# data_dir = "{data / "bookie"}"' in text and "data_dir" not in values
    assert f'# metadata_service_uri = "local://{data / "metadata"}"' in text
    assert values["managed_ledger_default_ensemble_size"] == 1
    assert values["journal_sync_data"] is False
    assert not data.exists()  # nothing was started


@pytest.mark.usefixtures("clean_environment")
def test_a_printed_standalone_config_leaves_the_options_in_charge(tmp_path: Path) -> None:
    from stripemq.cli.main import build_parser, config_text
    from stripemq.standalone import Standalone, StandaloneConfig

    printed = tmp_path / "printed.toml"
    printed.write_text(config_text(build_parser().parse_args(["standalone"])))
    # Even a file that names them cannot move what the standalone's options decide.
    pinned = tmp_path / "pinned.toml"
    pinned.write_text(printed.read_text() + "\nbookie_port = 1\nbroker_service_port = 2\n")
    for conf in (printed, pinned):
        config = StandaloneConfig(
            data_dir=str(tmp_path / "x"), broker_port=7000, web_port=7080, bookie_port=4000
        )
        standalone = Standalone(config, str(conf), {"journal_sync_data": "false"})
        assert standalone.bookie_config.bookie_port == 4000
        assert standalone.bookie_config.data_dir == str(tmp_path / "x" / "bookie")
        assert standalone.broker_config.broker_service_port == 7000
        assert standalone.broker_config.web_service_port == 7080
        assert standalone.broker_config.metadata_service_uri.endswith(
            str(tmp_path / "x" / "metadata")
        )
        assert standalone.bookie_config.journal_sync_data is False  # -c still applies


@pytest.mark.usefixtures("clean_environment")
def test_print_config_refuses_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bookie", "--print-config", "-c", "bookie_prot=1"])
    assert exited.value.code == 2


def test_print_config_from_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stripemq", "broker", "--print-config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("STRIPEMQ_")},
            "PYTHONPATH": str(ROOT),
        },
    )
    assert done.returncode == 0, done.stderr
    values = tomllib.loads(done.stdout)
    assert values == {
        item.name: item.default for item in describe(BrokerConfig) if item.default is not None
    }
