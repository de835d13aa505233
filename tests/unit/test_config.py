"""The shared config loader, its settings docs, and the bookie's disk-usage policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stripemq.bookie.autorecovery import AutoRecoveryConfig
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.disk import DiskUsage, DiskUsagePolicy
from stripemq.config import (
    SettingDoc,
    describe,
    format_value,
    load_config,
    parse_overrides,
    render_settings,
    setting,
    settings_table,
    toml_value,
)
from stripemq.errors import ConfigError


def test_defaults_file_then_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "bookie.toml"
    conf.write_text('bookie_port = 4000\njournal_sync_data = false\nrack = "r1"\n')
    config = load_config(
        BookieConfig, conf, parse_overrides(["bookie_port=5000", "journal_max_group_wait_ms=1.5"])
    )
    assert config.bookie_port == 5000
    assert config.journal_sync_data is False
    assert config.rack == "r1"
    assert config.journal_max_group_wait_ms == 1.5
    assert config.max_entry_size == 5 * 1024 * 1024 + 10 * 1024  # Pulsar's nettyMaxFrameSizeBytes
    assert config.bookie_id == "127.0.0.1:5000"
    assert config.journal_dir.endswith("/journal")


def test_an_advertised_host_alone_gets_the_bookie_port() -> None:
    """BookKeeper's advertisedAddress is a host; the chart gives the pod's DNS name."""
    pod = "stripemq-bookie-0.stripemq-bookie.ns.svc.cluster.local"
    config = load_config(BookieConfig, None, {"advertised_address": pod, "bookie_port": "3181"})
    assert config.bookie_id == f"{pod}:3181"
    config = load_config(BookieConfig, None, {"advertised_address": "bk-1:3999"})
    assert config.bookie_id == "bk-1:3999"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"bookie_prot": "1"}, "unknown setting 'bookie_prot'"),
        ({"bookie_port": "many"}, "bookie_port"),
        ({"journal_sync_data": "maybe"}, "not a boolean"),
        ({"disk_usage_threshold": "0.5", "disk_usage_lwm_threshold": "0.9"}, "lwm"),
        ({"max_entry_size": "0"}, "max_entry_size"),
        ({"binary_add_port": "-2"}, "binary_add_port"),
    ],
)
def test_bad_settings_are_refused(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(BookieConfig, None, overrides)


def test_brokers_write_binary_adds_unless_told_otherwise() -> None:
    """Pulsar's bookkeeperUseV2WireProtocol reaches the broker's ledger client."""
    from stripemq.broker.config import BrokerConfig

    assert load_config(BrokerConfig, None, {}).bookkeeper_client_config().use_v2_wire_protocol
    off = load_config(BrokerConfig, None, {"bookkeeper_use_v2_wire_protocol": "false"})
    assert off.bookkeeper_client_config().use_v2_wire_protocol is False


def test_bad_files_and_pairs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(BookieConfig, tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("bookie_port = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(BookieConfig, broken)
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["no-equals-sign"])


def test_disk_policy_has_hysteresis() -> None:
    policy = DiskUsagePolicy(threshold=0.95, low_water_mark=0.90)
    assert policy.read_only_after(False, 0.94) is False
    assert policy.read_only_after(False, 0.95) is True
    assert policy.read_only_after(True, 0.92) is True  # between the marks: stay read-only
    assert policy.read_only_after(True, 0.89) is False
    assert DiskUsage(total_bytes=100, free_bytes=25).fraction == 0.75


def test_autorecovery_inside_a_bookie_reads_its_own_file(tmp_path: Path) -> None:
    conf = tmp_path / "autorecovery.toml"
    conf.write_text("replication_workers = 3\nlost_bookie_recovery_delay_s = 30\n")
    bookie = load_config(
        BookieConfig,
        None,
        {
            "metadata_service_uri": "zk://127.0.0.1:2181/x",
            "autorecovery_enabled": True,
            "autorecovery_conf": str(conf),
            "bookie_port": 3999,
        },
    )
    config = AutoRecoveryConfig.for_bookie(bookie)
    assert config.replication_workers == 3 and config.lost_bookie_recovery_delay_s == 30
    assert config.metadata_service_uri == "zk://127.0.0.1:2181/x"
    assert config.participant_id == bookie.bookie_id
    conf.write_text("no_such_setting = 1\n")
    with pytest.raises(ConfigError):
        AutoRecoveryConfig.for_bookie(bookie)


def test_environment_variables_sit_between_the_file_and_the_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from stripemq.broker.config import BrokerConfig

    conf = tmp_path / "broker.toml"
    conf.write_text("broker_service_port = 7000\nkeep_alive_interval_seconds = 5\n")
    environ = {"STRIPEMQ_BROKER_SERVICE_PORT": "7100", "STRIPEMQ_NOT_A_SETTING": "x"}
    config = load_config(BrokerConfig, conf, {"keep_alive_interval_seconds": "9"}, environ)
    assert config.broker_service_port == 7100  # the environment beats the file
    assert config.keep_alive_interval_seconds == 9  # a flag beats both


@dataclass
class _Toy:
    port: int = setting(6650, "Port  of the\n  thing.", pulsar_name="toyPort", option="--port")
    host: str | None = setting(None, "Host | or unset.")
    names: list[str] = field(default_factory=list, metadata={"doc": "Names."})
    ratio: float = 0.5  # no doc


def test_setting_keeps_its_doc_in_the_field_metadata() -> None:
    (port, host, names, ratio) = describe(_Toy)
    assert port == SettingDoc("port", "int", 6650, "Port of the thing.", "toyPort", "--port")
    assert (host.type, host.default, host.doc, host.option) == (
        "str | None",
        None,
        "Host | or unset.",
        None,
    )
    assert (names.type, names.default, names.doc) == ("list[str]", [], "Names.")
    assert (ratio.doc, ratio.pulsar_name) == ("", None)
    with pytest.raises(ValueError, match="doc"):
        setting(1, "  ")


def test_values_are_shown_as_toml() -> None:
    assert [toml_value(v) for v in (True, 3, 0.25, 'a"b', ["x", "y"])] == [
        "true",
        "3",
        "0.25",
        '"a\\"b"',
        '["x", "y"]',
    ]
    assert format_value(None) == "unset"
    with pytest.raises(TypeError):
        toml_value(b"bytes")


def test_settings_table_is_one_row_per_field_with_pipes_escaped() -> None:
    lines = settings_table(_Toy).splitlines()
    assert lines[0] == "| setting | type | default | Pulsar name | meaning |"
    assert lines[2] == "| `port` (`--port`) | `int` | `6650` | `toyPort` | Port of the thing. |"
    assert lines[3] == "| `host` | `str \\| None` | — |  | Host \\| or unset. |"
    assert len(lines) == 2 + 4


def test_rendered_settings_are_a_settings_file(tmp_path: Path) -> None:
    config = load_config(BookieConfig, None, {"bookie_port": "4000", "rack": "r1"})
    text = render_settings(config)
    assert (
        "# (int; default 3181; Pulsar name bookiePort; option --port)\nbookie_port = 4000" in text
    )
    assert "# advertised_address = unset" in text  # None has no TOML literal: commented out
    conf = tmp_path / "bookie.toml"
    conf.write_text(text)
    assert load_config(BookieConfig, conf, environ={}) == config
    commented = render_settings(config, commented=True, skip={"rack"})
    assert "\nbookie_port" not in commented and "# bookie_port = 4000" in commented
    assert "rack =" not in commented


def test_the_largest_entry_a_broker_stores_can_be_delivered() -> None:
    """An entry of the managed ledger's limit, in a MESSAGE with the largest ids and a
    redelivery count, fits the frame a consumer takes (maxMessageSize + padding)."""
    from stripemq.broker.config import BrokerConfig
    from stripemq.proto import pulsar_api_pb2 as pb
    from stripemq.proto.frames import FRAME_PADDING, encode_payload_command

    config = BrokerConfig()
    largest = config.managed_ledger_config().max_entry_bytes
    assert largest > config.max_message_size  # a chunk with its metadata is stored
    top = (1 << 64) - 1
    command = pb.CommandMessage(
        consumer_id=top,
        message_id=pb.MessageIdData(ledgerId=top, entryId=top, partition=(1 << 31) - 1),
        redelivery_count=(1 << 32) - 1,
        consumer_epoch=top,
    )
    frame = encode_payload_command(command, b"x" * largest)
    assert len(frame) - 4 <= config.max_message_size + FRAME_PADDING
