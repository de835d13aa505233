"""ZooKeeper role settings: validation, zoo.cfg and myid rendering, server id derivation,
and the JVM command line (all sans-IO, driven directly)."""

from __future__ import annotations

import dataclasses

import pytest

from stripemq.config import load_config
from stripemq.errors import ConfigError
from stripemq.zookeeper.config import ZooKeeperConfig
from stripemq.zookeeper.java import (
    DEFAULT_CLASSPATH,
    QUORUM_MAIN,
    classpath,
    find_java,
    java_command,
    missing_classpath_entries,
)
from stripemq.zookeeper.zoo_cfg import (
    Member,
    derive_server_id,
    parse_member,
    parse_servers,
    render_myid,
    render_zoo_cfg,
)

ENSEMBLE = [
    "stripemq-zookeeper-0.stripemq-zookeeper.default.svc.cluster.local",
    "stripemq-zookeeper-1.stripemq-zookeeper.default.svc.cluster.local",
    "stripemq-zookeeper-2.stripemq-zookeeper.default.svc.cluster.local",
]


def cfg_keys(text: str) -> dict[str, str]:
    """zoo.cfg text as a mapping (ZooKeeper reads it as Java properties)."""
    pairs = (line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")
    return {key: value for key, value in pairs}


def config(**settings: object) -> ZooKeeperConfig:
    return load_config(ZooKeeperConfig, overrides=settings, environ={})


# ---------------------------------------------------------------------- settings


def test_defaults_are_a_valid_standalone_server() -> None:
    zk = config()
    assert zk.servers == [] and zk.server_id is None
    assert (zk.client_port, zk.peer_port, zk.leader_election_port) == (2181, 2888, 3888)
    assert zk.classpath == DEFAULT_CLASSPATH
    assert zk.classpath.startswith("/etc/zookeeper/conf:/usr/share/java/zookeeper.jar")


def test_environment_variables_set_the_ensemble_as_the_chart_does() -> None:
    environ = {
        "STRIPEMQ_SERVERS": ",".join(ENSEMBLE),
        "STRIPEMQ_CLIENT_PORT_ADDRESS": "0.0.0.0",
        "STRIPEMQ_HEAP_MB": "256",
    }
    zk = load_config(ZooKeeperConfig, environ=environ)
    assert zk.servers == ENSEMBLE
    assert zk.client_port_address == "0.0.0.0" and zk.heap_mb == 256


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"client_port": "0"}, "client_port must be a port"),
        ({"peer_port": "70000"}, "peer_port must be a port"),
        ({"leader_election_port": "-1"}, "leader_election_port must be a port"),
        ({"stats_http_port": "65536"}, "stats_http_port"),
        ({"tick_time": "0"}, "tick_time must be positive"),
        ({"init_limit": "0"}, "init_limit must be positive"),
        ({"sync_limit": "-2"}, "sync_limit must be positive"),
        ({"heap_mb": "0"}, "heap_mb must be positive"),
        ({"max_client_cnxns": "-1"}, "max_client_cnxns must not be negative"),
        ({"autopurge_purge_interval": "-1"}, "autopurge_purge_interval"),
        ({"autopurge_snap_retain_count": "2"}, "at least 3"),
        ({"data_dir": " "}, "data_dir must not be empty"),
        ({"server_id": "0"}, "server_id must be 1 or more"),
        ({"servers": "a,b,c", "server_id": "4"}, "server_id 4 is out of range"),
        ({"servers": "a:1:2:3"}, "expected host or host:peer_port:election_port"),
        ({"servers": "a:x:3888"}, "'x' is not a port"),
        ({"servers": "a:2888:99999"}, "port 99999 is out of range"),
        ({"servers": "a,a"}, "members 1 and 2 are the same"),
        ({"servers": ":2888:3888"}, "no host name"),
        ({"servers": "a;x"}, "'x' is not a port"),
    ],
)
def test_bad_settings_are_one_clear_error(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(**settings)


def test_a_zero_stats_port_picks_a_free_one_and_is_valid() -> None:
    assert config(stats_http_port="0").stats_http_port == 0


# ---------------------------------------------------------------------- servers


def test_server_entries_take_the_default_ports_or_their_own() -> None:
    assert parse_servers(["a", "b:2889:3889;2182"], 2888, 3888) == [
        Member(1, "a", 2888, 3888),
        Member(2, "b", 2889, 3889, client_port=2182),
    ]
    assert parse_member("[::1]:2888:3888", 3, 1, 2) == Member(3, "[::1]", 2888, 3888)
    assert parse_member("[fe80::1]", 1, 5, 6) == Member(1, "[fe80::1]", 5, 6)
    with pytest.raises(ConfigError, match="unclosed"):
        parse_member("[::1:2888:3888", 1, 5, 6)
    with pytest.raises(ConfigError):
        parse_member("[::1]x", 1, 5, 6)


@pytest.mark.parametrize(
    ("hostname", "expected"),
    [
        ("stripemq-zookeeper-0", 1),
        ("stripemq-zookeeper-2", 3),
        ("stripemq-zookeeper-1.stripemq-zookeeper.default.svc.cluster.local", 2),
    ],
)
def test_server_id_from_the_pods_entry_in_servers(hostname: str, expected: int) -> None:
    assert derive_server_id(config(servers=",".join(ENSEMBLE)), hostname) == expected


def test_server_id_from_the_statefulset_ordinal_when_servers_names_no_host() -> None:
    zk = config(servers="10.0.0.1,10.0.0.2,10.0.0.3")
    assert derive_server_id(zk, "stripemq-zookeeper-2") == 3
    assert derive_server_id(zk, "zk-0") == 1


def test_the_hosts_own_entry_wins_over_its_ordinal() -> None:
    """A bare-metal host named like a pod but listed elsewhere gets its listed position."""
    zk = config(servers="zk-7,zk-3")
    assert derive_server_id(zk, "zk-3") == 2


def test_an_explicit_server_id_wins() -> None:
    zk = config(servers=",".join(ENSEMBLE), server_id="2")
    assert derive_server_id(zk, "stripemq-zookeeper-0") == 2


@pytest.mark.parametrize(
    ("servers", "hostname", "message"),
    [
        (
            "10.0.0.1,10.0.0.2,10.0.0.3",
            "stripemq-zookeeper-3",
            "ordinal 3, but servers lists only 3",
        ),
        ("10.0.0.1,10.0.0.2", "my-laptop", "no entry of servers names host 'my-laptop'"),
        ("10.0.0.1,10.0.0.2", "laptop-x", "no entry"),
        ("zk:2888:3888,zk:2889:3889", "zk", "several entries"),
    ],
)
def test_server_id_that_cannot_be_derived_is_a_clear_error(
    servers: str, hostname: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        derive_server_id(config(servers=servers), hostname)


def test_a_standalone_server_is_id_1_unless_told_otherwise() -> None:
    assert derive_server_id(config(), "anything") == 1
    # One member (the chart with zookeeper.replicaCount=1), whatever the host is called.
    assert derive_server_id(config(servers="127.0.0.1:2888:3888"), "my-laptop") == 1
    assert derive_server_id(config(server_id="7"), "anything") == 7


# ---------------------------------------------------------------------- zoo.cfg


def test_standalone_zoo_cfg() -> None:
    zk = config(tick_time="500", max_client_cnxns="0", client_port="21810")
    text = render_zoo_cfg(zk, 1, "/var/zk")
    assert text.startswith("# Written by `stripemq zookeeper`")
    assert cfg_keys(text) == {
        "tickTime": "500",
        "initLimit": "10",
        "syncLimit": "5",
        "dataDir": "/var/zk",
        "clientPort": "21810",
        "clientPortAddress": "127.0.0.1",
        "maxClientCnxns": "0",
        "autopurge.snapRetainCount": "3",
        "autopurge.purgeInterval": "1",
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "ruok, srvr, mntr, conf, stat, isro",
    }
    assert render_myid(1) == "1\n"


def test_ensemble_zoo_cfg_has_a_3_8_server_line_per_member() -> None:
    zk = config(servers=",".join(ENSEMBLE), client_port_address="0.0.0.0")
    keys = cfg_keys(render_zoo_cfg(zk, 2, "/data", "/log"))
    assert keys["dataLogDir"] == "/log"
    assert keys["quorumListenOnAllIPs"] == "true"
    assert [keys[f"server.{n}"] for n in (1, 2, 3)] == [
        f"{host}:2888:3888;2181" for host in ENSEMBLE
    ]
    assert "server.4" not in keys


def test_own_server_line_names_a_specific_client_address() -> None:
    """ZooKeeper refuses an own line whose client address differs from clientPortAddress."""
    zk = config(
        servers="127.0.0.1:2001:3001;2101,127.0.0.1:2002:3002;2102",
        client_port="2102",
        quorum_listen_on_all_ips="false",
    )
    keys = cfg_keys(render_zoo_cfg(zk, 2, "/data"))
    assert keys["server.1"] == "127.0.0.1:2001:3001;2101"
    assert keys["server.2"] == "127.0.0.1:2002:3002;127.0.0.1:2102"
    assert keys["quorumListenOnAllIPs"] == "false"
    with pytest.raises(ConfigError, match="gives client port 2101, but client_port is 2102"):
        render_zoo_cfg(zk, 1, "/data")


def test_the_rendering_is_the_same_every_time() -> None:
    zk = config(servers=",".join(ENSEMBLE))
    assert render_zoo_cfg(zk, 1, "/d") == render_zoo_cfg(dataclasses.replace(zk), 1, "/d")


# ---------------------------------------------------------------------- the JVM


def test_java_command_runs_quorum_peer_main_with_console_logging() -> None:
    command = java_command(
        "/usr/bin/java",
        "/conf:/zk.jar",
        "/data/zoo.cfg",
        heap_mb=256,
        log_dir="/data",
        java_opts="-XX:+UseG1GC '-Dsome.key=a b'",
    )
    assert command[0] == "/usr/bin/java"
    assert command[-4:] == ["-cp", "/conf:/zk.jar", QUORUM_MAIN, "/data/zoo.cfg"]
    assert {"-Xms256m", "-Xmx256m", "-Dzookeeper.admin.enableServer=false"} <= set(command)
    assert "-Dzookeeper.root.logger=INFO,CONSOLE" in command
    assert command.index("-Dsome.key=a b") > command.index("-Dzookeeper.root.logger=INFO,CONSOLE")
    assert "-XX:+UseG1GC" in command


def test_classpath_and_java_discovery() -> None:
    assert classpath("/c", "/z.jar").split(":")[:2] == ["/c", "/z.jar"]
    assert missing_classpath_entries("/nonexistent/x.jar:/:/nonexistent/dir/*") == [
        "/nonexistent/x.jar",
        "/nonexistent/dir/*",
    ]
    assert find_java("no-such-java-here") is None
    assert find_java("/nonexistent/bin/java") is None
