"""ZooKeeper settings (``stripemq zookeeper``). Names are stripemq's snake_case; where a
setting mirrors a ``zoo.cfg`` key, that key is its ``pulsar_name`` (the README's tables and
``--print-config`` show it). The Helm chart sets them as ``STRIPEMQ_<NAME>`` variables."""

from __future__ import annotations

from dataclasses import dataclass, field

from stripemq.config import setting
from stripemq.errors import ConfigError
from stripemq.zookeeper.java import DEFAULT_CLASSPATH
from stripemq.zookeeper.zoo_cfg import parse_servers

_PORTS = ("client_port", "peer_port", "leader_election_port")


@dataclass
class ZooKeeperConfig:
    """One ZooKeeper server; loaded with ``stripemq.config.load_config``."""

    data_dir: str = setting(
        "data/zookeeper",
        "Directory of the snapshots, zoo.cfg and myid (both rewritten at every start).",
        pulsar_name="dataDir",
        option="--data-dir",
    )
    data_log_dir: str | None = setting(
        None,
        "Directory of the transaction log, best on its own disk (unset: inside data_dir).",
        pulsar_name="dataLogDir",
    )
    client_port: int = setting(
        2181, "Port clients connect to.", pulsar_name="clientPort", option="--port"
    )
    client_port_address: str = setting(
        "127.0.0.1",
        "Address the client port (and the HTTP port) listens on; 0.0.0.0 for every interface.",
        pulsar_name="clientPortAddress",
    )
    servers: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "The ensemble's members in order, comma-separated: server id = position + "
            "1; an entry is host or host:peer_port:election_port, optionally followed by "
            ";client_port where that member's differs from client_port. Empty: one "
            "standalone server."
        },
    )
    server_id: int | None = setting(
        None,
        "This server's id, 1-based position in servers (the myid file). Unset: this host's "
        "entry in servers, else its StatefulSet ordinal + 1 (host stripemq-zookeeper-2 is 3).",
    )
    peer_port: int = setting(2888, "Port followers connect to the leader on (quorum traffic).")
    leader_election_port: int = setting(3888, "Port of leader election.")
    quorum_listen_on_all_ips: bool = setting(
        True,
        "Bind the peer and election ports on every interface, not only on this server's "
        "address in servers (needed where a pod's own name does not resolve to it yet).",
        pulsar_name="quorumListenOnAllIPs",
    )
    tick_time: int = setting(
        2000,
        "ZooKeeper's time unit in milliseconds (heartbeats, session timeouts).",
        pulsar_name="tickTime",
    )
    init_limit: int = setting(
        10,
        "Ticks a follower may take to connect and sync to the leader.",
        pulsar_name="initLimit",
    )
    sync_limit: int = setting(
        5,
        "Ticks a follower may lag behind the leader before it is dropped.",
        pulsar_name="syncLimit",
    )
    max_client_cnxns: int = setting(
        60,
        "Connections one client address may open (0: no limit).",
        pulsar_name="maxClientCnxns",
    )
    autopurge_snap_retain_count: int = setting(
        3,
        "Snapshots (and their transaction logs) the purge keeps; at least 3.",
        pulsar_name="autopurge.snapRetainCount",
    )
    autopurge_purge_interval: int = setting(
        1,
        "Hours between purges of old snapshots and logs (0: never).",
        pulsar_name="autopurge.purgeInterval",
    )
    heap_mb: int = setting(512, "JVM heap in MiB (-Xms and -Xmx).")
    java_opts: str = setting(
        "", "More JVM options, split as a shell would (e.g. -XX:+UseG1GC -Dkey=value)."
    )
    stats_http_port: int = setting(
        8000,
        "Port of the HTTP endpoint on client_port_address: Prometheus /metrics (from mntr) "
        "and the probes /heartbeat and /ready (0 picks a free port).",
    )
    classpath: str = setting(
        DEFAULT_CLASSPATH,
        "The JVM classpath: Debian's zookeeper package (conf dir and jar) and the log4j "
        "binding that sends ZooKeeper's log to stdout.",
    )
    java: str = setting("java", "The java executable: a path, or a name looked up on PATH.")

    def validate(self) -> None:
        """``ConfigError`` for a value ZooKeeper would refuse or misread."""
        for name in _PORTS:
            port = getattr(self, name)
            if not 0 < port < 65536:
                raise ConfigError(f"{name} must be a port between 1 and 65535, got {port}")
        if not 0 <= self.stats_http_port < 65536:
            raise ConfigError(
                f"stats_http_port must be between 0 and 65535, got {self.stats_http_port}"
            )
        for name in ("tick_time", "init_limit", "sync_limit", "heap_mb"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("max_client_cnxns", "autopurge_purge_interval"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.autopurge_snap_retain_count < 3:
            raise ConfigError(
                "autopurge_snap_retain_count must be at least 3 (ZooKeeper's minimum), got "
                f"{self.autopurge_snap_retain_count}"
            )
        for name in ("data_dir", "client_port_address", "classpath", "java"):
            if not getattr(self, name).strip():
                raise ConfigError(f"{name} must not be empty")
        if self.data_log_dir is not None and not self.data_log_dir.strip():
            raise ConfigError("data_log_dir must not be empty (leave it unset instead)")
        if self.server_id is not None and self.server_id < 1:
            raise ConfigError(f"server_id must be 1 or more, got {self.server_id}")
        members = parse_servers(self.servers, self.peer_port, self.leader_election_port)
        if self.server_id is not None and members and self.server_id > len(members):
            raise ConfigError(
                f"server_id {self.server_id} is out of range: servers lists {len(members)} "
                "members (ids 1 to that)"
            )
