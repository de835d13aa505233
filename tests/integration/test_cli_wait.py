"""``stripemq wait``: what init containers run before a component starts (real ZooKeeper)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from stripemq.bookie.registration import BookieRegistration
from stripemq.broker.cluster_metadata import ClusterData, create_cluster
from stripemq.cli.wait import METADATA_ENV, WaitConditions, unmet, wait_for
from stripemq.metadata import MetadataStore, create_metadata_store

pytestmark = pytest.mark.integration


async def _store(url: str) -> MetadataStore:
    store = create_metadata_store(url)
    await store.start()
    return store


async def test_unmet_names_each_missing_condition_until_all_hold(zookeeper_server) -> None:  # type: ignore[no-untyped-def]
    url = zookeeper_server.url(f"/wait-{uuid.uuid4().hex[:8]}")
    conditions = WaitConditions(url, cluster="east", bookies=2)
    assert await unmet(conditions) == "cluster 'east' has no metadata yet"

    admin = await _store(url)
    registrations = [
        BookieRegistration(lambda: _store(url), f"127.0.0.1:{3300 + i}", {}) for i in range(2)
    ]
    try:
        await create_cluster(admin, "east", ClusterData())
        assert await unmet(conditions) == "0 of 2 writable bookies registered"
        await registrations[0].start()
        await registrations[1].start(read_only=True)  # a read-only bookie does not count
        assert await unmet(conditions) == "1 of 2 writable bookies registered"
        await registrations[1].set_read_only(False)
        assert await unmet(conditions) is None
        assert await wait_for(conditions, give_up_after=5, interval=0.1)
    finally:
        for registration in registrations:
            await registration.stop()
        await admin.close()


async def test_an_unreachable_store_is_waited_for_not_an_error(capsys) -> None:  # type: ignore[no-untyped-def]
    assert not await wait_for(WaitConditions("zk://127.0.0.1:1"), give_up_after=0.5, interval=0.1)
    out = capsys.readouterr().out
    assert "waiting: metadata store zk://127.0.0.1:1 not reachable" in out
    assert "gave up after 0.5s" in out


def _wait(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stripemq", "wait", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_the_command_takes_the_store_from_the_environment(zookeeper_server) -> None:  # type: ignore[no-untyped-def]
    url = zookeeper_server.url(f"/wait-{uuid.uuid4().hex[:8]}")
    done = _wait("--interval", "0.1", env={METADATA_ENV: url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "ready"

    gave_up = _wait(
        "--cluster", "nowhere", "--timeout", "0.5", "--interval", "0.2", env={METADATA_ENV: url}
    )
    assert gave_up.returncode == 1
    assert "waiting: cluster 'nowhere' has no metadata yet" in gave_up.stdout
    assert "gave up after 0.5s" in gave_up.stdout

    env = {k: v for k, v in os.environ.items() if k != METADATA_ENV}
    refused = subprocess.run(
        [sys.executable, "-m", "stripemq", "wait"], capture_output=True, text=True, env=env
    )
    assert refused.returncode == 2
    assert "--metadata" in refused.stderr
    assert _wait("--metadata", url, "--bookies", "-1").returncode == 2
