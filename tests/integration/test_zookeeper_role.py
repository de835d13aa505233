"""``stripemq zookeeper`` as real processes: one standalone server, then a three-server
ensemble on 127.0.0.1 that loses its leader."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from stripemq.metadata import create_metadata_store
from stripemq.metadata.api import MetadataStore
from stripemq.testing.polling import until
from stripemq.testing.ports import free_port
from stripemq.testing.process import ChildProcess
from stripemq.zookeeper.server import four_letter_word

pytestmark = pytest.mark.integration

# Small and quick: a tick of 500 ms keeps elections and session timeouts short.
FAST = {"heap_mb": 128, "tick_time": 500}


class ZooKeeperRole(ChildProcess):
    """``python -m stripemq zookeeper`` on free ports; killing it kills its JVM too."""

    def __init__(self, data_dir: Path, **settings: object) -> None:
        super().__init__(data_dir / "zookeeper-role.log")
        self.data_dir = data_dir
        self.port = free_port()
        self.http_port = free_port()
        self.settings = {**FAST, "stats_http_port": self.http_port, **settings}

    def command(self) -> list[str]:
        return self.stripemq_command(
            "zookeeper",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            settings=self.settings,
        )

    def kill_all(self) -> None:
        """SIGKILL the supervisor and ZooKeeper (its process group), as a pod dies."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    async def ask(self, word: str) -> str:
        try:
            return await four_letter_word("127.0.0.1", self.port, word)
        except OSError:
            return ""

    async def mode(self) -> str | None:
        for line in (await self.ask("srvr")).splitlines():
            if line.startswith("Mode:"):
                return line.partition(":")[2].strip()
        return None

    async def http(self, path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{self.http_port}{path}") as response:
                return response.status, await response.text()

    async def wait_ready(self, timeout: float = 30.0) -> None:
        async def ready() -> bool:
            if self.exited_with() is not None:
                raise AssertionError(f"stripemq zookeeper exited:\n{self.tail_log()}")
            try:
                return (await self.http("/ready"))[0] == 200
            except aiohttp.ClientError:
                return False

        await until(ready, "ZooKeeper is ready", timeout=timeout, logs=self.tail_log())


@pytest.fixture
def roles() -> Iterator[list[ZooKeeperRole]]:
    started: list[ZooKeeperRole] = []
    yield started
    for role in started:
        role.kill_all()


async def store_on(*roles: ZooKeeperRole) -> MetadataStore:
    hosts = ",".join(f"127.0.0.1:{role.port}" for role in roles)
    store = create_metadata_store(f"zk://{hosts}/role-test")
    await store.start()
    return store


async def test_one_server_serves_probes_metrics_and_stops_on_sigterm(
    tmp_path: Path, roles: list[ZooKeeperRole]
) -> None:
    zk = ZooKeeperRole(tmp_path / "zk")
    roles.append(zk)
    zk.spawn()
    await zk.wait_ready()
    assert (await zk.http("/heartbeat"))[0] == 200
    status, reason = await zk.http("/ready")
    assert (status, reason.strip()) == (200, "serving as standalone")

    store = await store_on(zk)
    try:
        await store.create("/hello", b"world")
        got = await store.get("/hello")
        assert got is not None and got[0] == b"world"
    finally:
        await store.close()

    status, metrics = await zk.http("/metrics")
    assert status == 200
    samples = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if line[:1] != "#")
    assert samples["zookeeper_up"] == "1"
    assert int(samples["znode_count"]) >= 3  # /zookeeper, /zookeeper/quota, ours
    assert "readlatency_count" in samples

    assert (tmp_path / "zk" / "myid").read_text() == "1\n"
    assert f"clientPort={zk.port}\n" in (tmp_path / "zk" / "zoo.cfg").read_text()
    assert zk.terminate() == 0
    log = zk.log_path.read_text()
    assert "QuorumPeerConfig" in log  # ZooKeeper's own log reached stdout
    assert "stopped" in log


async def test_bad_settings_and_a_crashing_jvm_exit_non_zero(
    tmp_path: Path, roles: list[ZooKeeperRole]
) -> None:
    bad = ZooKeeperRole(tmp_path / "bad", servers="a,b", server_id=3)
    roles.append(bad)
    bad.spawn()
    assert bad.proc is not None and bad.proc.wait(30) == 2
    errors = [line for line in bad.log_path.read_text().splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "server_id 3 is out of range" in errors[0]

    crash = ZooKeeperRole(tmp_path / "crash", java_opts="-XX:+NoSuchJvmOption")
    roles.append(crash)
    crash.spawn()
    assert crash.proc is not None and crash.proc.wait(30) not in (0, 2)
    log = crash.log_path.read_text()
    assert "exited on its own" in log and "NoSuchJvmOption" in log


async def test_three_servers_elect_a_leader_replicate_and_survive_its_loss(
    tmp_path: Path, roles: list[ZooKeeperRole]
) -> None:
    quorum_ports = [(free_port(), free_port()) for _ in range(3)]
    servers = ",".join(f"127.0.0.1:{peer}:{election}" for peer, election in quorum_ports)
    for server_id in (1, 2, 3):
        role = ZooKeeperRole(tmp_path / f"zk{server_id}", servers=servers, server_id=server_id)
        roles.append(role)
        role.spawn()
    for role in roles:
        await role.wait_ready()
    modes = [await role.mode() for role in roles]
    assert sorted(mode or "" for mode in modes) == ["follower", "follower", "leader"]
    for server_id, role in enumerate(roles, start=1):
        assert (role.data_dir / "myid").read_text() == f"{server_id}\n"

    leader = roles[modes.index("leader")]
    followers = [role for role in roles if role is not leader]
    writer, reader = await store_on(followers[0]), await store_on(followers[1])
    try:
        await writer.create("/replicated", b"on every member")

        async def replicated() -> bool:
            return await reader.get("/replicated") is not None

        await until(replicated, "the write is read on another member")
    finally:
        await writer.close()
        await reader.close()

    leader.kill_all()

    async def serving_quorum() -> bool:
        return sorted([await role.mode() or "" for role in followers]) == ["follower", "leader"]

    await until(serving_quorum, "the two survivors elect a new leader", timeout=20)
    store = await store_on(*followers)
    try:
        await store.put("/replicated", b"after the leader died")
        got = await store.get("/replicated")
        assert got is not None and got[0] == b"after the leader died"
    finally:
        await store.close()
    status, reason = await followers[0].http("/ready")
    assert status == 200, reason
