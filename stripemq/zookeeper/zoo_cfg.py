"""ZooKeeper's ``zoo.cfg`` and ``myid`` from stripemq settings, without I/O.

``servers`` lists the ensemble in order; the member at position *i* is ``server.<i+1>``. An
entry is ``host``, ``host:peer_port:election_port``, either optionally followed by
``;client_port`` (``[v6-address]`` in brackets). ZooKeeper 3.8 server lines carry the
member's client port: ``server.N=host:peer:election;client_port``; this server's own line
names its ``client_port_address`` too unless that is a wildcard, because ZooKeeper refuses a
line whose client address differs from ``clientPortAddress``.

This server's id (``myid``) is ``server_id`` when set. Otherwise it is the position + 1 of
the one entry whose host is this machine's host name (compared by first DNS label, so the
pod name ``stripemq-zookeeper-2`` matches ``stripemq-zookeeper-2.stripemq-zookeeper.ns.svc``),
else the StatefulSet ordinal at the end of the host name + 1. With no ``servers`` the server
runs standalone and its id is ``server_id`` or 1.

The rendered file is complete: no key is left to ZooKeeper's defaults that a deployment
cares about. The admin server (Jetty on 8080) is off; the four-letter words ``ruok``,
``srvr``, ``mntr``, ``conf``, ``stat`` and ``isro`` are allowed (probes and metrics use them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stripemq.errors import ConfigError

if TYPE_CHECKING:
    from stripemq.zookeeper.config import ZooKeeperConfig

FOUR_LETTER_WORDS = ("ruok", "srvr", "mntr", "conf", "stat", "isro")
_ORDINAL = re.compile(r"^.+-(\d+)$")
_WILDCARDS = {"0.0.0.0", "::", "[::]"}


@dataclass(frozen=True)
class Member:
    """One entry of ``servers``: ``server.<server_id>=host:peer_port:election_port``."""

    server_id: int
    host: str
    peer_port: int
    election_port: int
    client_port: int | None = None  # None: the same as this server's client_port

    def line(self, client_port: int, client_address: str | None = None) -> str:
        """The 3.8 ``server.N`` line; ``client_address`` only for this server's own line."""
        port = self.client_port if self.client_port is not None else client_port
        client = f"{client_address}:{port}" if client_address else str(port)
        return f"server.{self.server_id}={self.host}:{self.peer_port}:{self.election_port};{client}"


def _port(entry: str, text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"servers entry {entry!r}: {text!r} is not a port") from None
    if not 0 < port < 65536:
        raise ConfigError(f"servers entry {entry!r}: port {port} is out of range")
    return port


def parse_member(entry: str, server_id: int, peer_port: int, election_port: int) -> Member:
    """One ``servers`` entry as the member ``server_id``; ``ConfigError`` if malformed."""
    text = entry.strip()
    address, semicolon, client = text.partition(";")
    client_port = _port(entry, client.strip()) if semicolon else None
    ports: list[str] | None
    if address.startswith("["):  # [v6-address] or [v6-address]:peer:election
        close = address.find("]")
        if close < 0:
            raise ConfigError(f"servers entry {entry!r}: unclosed [")
        host, rest = address[: close + 1], address[close + 1 :]
        ports = rest[1:].split(":") if rest.startswith(":") else (None if rest else [])
    else:
        host, *ports = address.split(":")
    if ports is None or len(ports) not in (0, 2):
        raise ConfigError(f"servers entry {entry!r}: expected host or host:peer_port:election_port")
    if not host or host == "[]" or any(c.isspace() for c in host):
        raise ConfigError(f"servers entry {entry!r}: no host name")
    if ports:
        peer_port, election_port = _port(entry, ports[0]), _port(entry, ports[1])
    return Member(server_id, host, peer_port, election_port, client_port)


def parse_servers(servers: Sequence[str], peer_port: int, election_port: int) -> list[Member]:
    """The ensemble ``servers`` describes, ids from 1; ``ConfigError`` for a bad entry or two
    members on the same host and ports."""
    members = [
        parse_member(entry, index + 1, peer_port, election_port)
        for index, entry in enumerate(servers)
    ]
    seen: dict[tuple[str, int, int], int] = {}
    for member in members:
        key = (member.host.lower(), member.peer_port, member.election_port)
        if key in seen:
            raise ConfigError(
                f"servers: members {seen[key]} and {member.server_id} are the same "
                f"{member.host}:{member.peer_port}:{member.election_port}"
            )
        seen[key] = member.server_id
    return members


def _first_label(host: str) -> str:
    return host.split(".", 1)[0].lower()


def derive_server_id(config: ZooKeeperConfig, hostname: str) -> int:
    """This server's id (its ``myid``): ``server_id``, else from ``hostname`` (see the
    module's docstring). ``ConfigError`` when it cannot be found or is out of range."""
    members = parse_servers(config.servers, config.peer_port, config.leader_election_port)
    if config.server_id is not None:
        if members and not 1 <= config.server_id <= len(members):
            raise ConfigError(
                f"server_id {config.server_id} is out of range: servers lists "
                f"{len(members)} members"
            )
        return config.server_id
    if len(members) <= 1:
        return 1  # a single server: there is no other id it could have
    label = _first_label(hostname)
    named = [m.server_id for m in members if label and _first_label(m.host) == label]
    if len(named) == 1:
        return named[0]
    ordinal = _ORDINAL.match(label)
    if ordinal is not None and len(named) == 0:
        server_id = int(ordinal.group(1)) + 1
        if server_id > len(members):
            raise ConfigError(
                f"host {hostname!r} is StatefulSet ordinal {server_id - 1}, but servers lists "
                f"only {len(members)} members: list every replica in servers"
            )
        return server_id
    reason = "several entries" if named else "no entry"
    raise ConfigError(
        f"cannot derive server_id: {reason} of servers names host {hostname!r} and its name "
        "ends in no StatefulSet ordinal (-N); set server_id"
    )


def render_zoo_cfg(
    config: ZooKeeperConfig, server_id: int, data_dir: str, data_log_dir: str | None = None
) -> str:
    """The ``zoo.cfg`` text for server ``server_id`` (``derive_server_id``); ``data_dir`` and
    ``data_log_dir`` as the server will see them (absolute paths)."""
    members = parse_servers(config.servers, config.peer_port, config.leader_election_port)
    lines = [
        "# Written by `stripemq zookeeper` at every start from its settings: edit those.",
        f"tickTime={config.tick_time}",
        f"initLimit={config.init_limit}",
        f"syncLimit={config.sync_limit}",
        f"dataDir={data_dir}",
    ]
    if data_log_dir is not None:
        lines.append(f"dataLogDir={data_log_dir}")
    lines += [
        f"clientPort={config.client_port}",
        f"clientPortAddress={config.client_port_address}",
        f"maxClientCnxns={config.max_client_cnxns}",
        f"autopurge.snapRetainCount={config.autopurge_snap_retain_count}",
        f"autopurge.purgeInterval={config.autopurge_purge_interval}",
        "admin.enableServer=false",
        f"4lw.commands.whitelist={', '.join(FOUR_LETTER_WORDS)}",
    ]
    if members:
        lines.append(f"quorumListenOnAllIPs={str(config.quorum_listen_on_all_ips).lower()}")
        own_address = None
        if config.client_port_address not in _WILDCARDS:
            own_address = config.client_port_address
        for member in members:
            if member.server_id != server_id:
                lines.append(member.line(config.client_port))
                continue
            if member.client_port not in (None, config.client_port):
                raise ConfigError(
                    f"servers entry {member.server_id} (this server) gives client port "
                    f"{member.client_port}, but client_port is {config.client_port}"
                )
            lines.append(member.line(config.client_port, own_address))
    return "\n".join(lines) + "\n"


def render_myid(server_id: int) -> str:
    """The ``myid`` file: the server's id on one line."""
    return f"{server_id}\n"
