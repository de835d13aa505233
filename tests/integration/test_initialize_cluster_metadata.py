"""``stripemq initialize-cluster-metadata`` (a child process) against a real ZooKeeper:
Pulsar's flags and URL forms, what it writes, and that running it again changes nothing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from stripemq.broker.cluster_metadata import cluster_path
from stripemq.broker.namespaces import policies_path, tenant_path
from stripemq.metadata import MetadataStore

pytestmark = pytest.mark.integration


async def initialize(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "stripemq", "initialize-cluster-metadata", *args]
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=120, check=False
    )


async def read_json(store: MetadataStore, path: str) -> dict[str, object]:
    found = await store.get(path)
    assert found is not None, f"{path} was not written"
    doc = json.loads(found[0])
    assert isinstance(doc, dict)
    return doc


async def test_writes_the_cluster_tenant_and_namespace_once(
    metadata_url: str, store: MetadataStore
) -> None:
    pulsar_form = metadata_url.replace("zk://", "zk:", 1)  # as Pulsar's docs write it
    done = await initialize(
        "--cluster",
        "east",
        "--metadata-store",
        pulsar_form,
        "--configuration-metadata-store",
        pulsar_form,
        "--web-service-url",
        "http://east-1:8080",
        "--broker-service-url",
        "pulsar://east-1:6650",
        "--web-service-url-tls",
        "https://east-1:8443",
    )
    assert done.returncode == 0, done.stderr
    assert "east" in done.stdout
    assert await read_json(store, cluster_path("east")) == {
        "serviceUrl": "http://east-1:8080",
        "serviceUrlTls": "https://east-1:8443",
        "brokerServiceUrl": "pulsar://east-1:6650",
        "brokerServiceUrlTls": "",
    }
    for name in ("public", "pulsar"):  # Pulsar's default and system tenants
        tenant = await read_json(store, tenant_path(name))
        assert tenant["allowedClusters"] == ["east"]
    for name in ("public/default", "pulsar/system"):
        policies = await read_json(store, policies_path(name))
        assert policies["replication_clusters"] == ["east"]
    versions = [await version(store, path) for path in _paths()]

    # Again, with Pulsar's short flags, the deprecated --zookeeper and other URLs: nothing
    # changes and it succeeds.
    again = await initialize(
        "-c", "east", "-zk", metadata_url, "-uw", "http://other:8080", "-ub", "pulsar://o:6650"
    )
    assert again.returncode == 0, again.stderr
    assert "nothing changed" in again.stdout
    assert [await version(store, path) for path in _paths()] == versions
    data = await read_json(store, cluster_path("east"))
    assert data["serviceUrl"] == "http://east-1:8080"


async def version(store: MetadataStore, path: str) -> int:
    found = await store.get(path)
    assert found is not None
    return found[1].version


def _paths() -> list[str]:
    return [
        cluster_path("east"),
        tenant_path("public"),
        tenant_path("pulsar"),
        policies_path("public/default"),
        policies_path("pulsar/system"),
    ]


async def test_a_second_cluster_joins_the_same_store(
    metadata_url: str, store: MetadataStore
) -> None:
    for cluster in ("east", "west"):
        done = await initialize("-c", cluster, "-md", metadata_url, "-uw", f"http://{cluster}")
        assert done.returncode == 0, done.stderr
    assert sorted(await store.children("/stripemq/clusters")) == ["east", "west"]
    assert (await read_json(store, cluster_path("west")))["serviceUrl"] == "http://west"
    # As Pulsar's createTenantIfAbsent/createNamespaceIfAbsent: the second cluster joins.
    for name in ("public", "pulsar"):
        assert (await read_json(store, tenant_path(name)))["allowedClusters"] == ["east", "west"]
    for name in ("public/default", "pulsar/system"):
        policies = await read_json(store, policies_path(name))
        assert policies["replication_clusters"] == ["east", "west"]


async def test_pulsars_other_flags_are_accepted(metadata_url: str, store: MetadataStore) -> None:
    done = await initialize(
        "-c", "flags", "-md", metadata_url, "-uw", "http://f:8080", "-bn", "8",
        "--bookkeeper-metadata-service-uri", "zk+null://h/ledgers",
        "-pu", "pulsar://proxy:6650", "-pp", "SNI", "-te", "--auth-plugin", "x",
        "--auth-parameters", "y",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (await read_json(store, policies_path("public/default")))["bundles"]["numBundles"] == 8
    docs = await initialize("-g", "-c", "flags")
    assert docs.returncode == 0 and "--web-service-url" in docs.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["-c", "east"],  # no store
        ["-c", "east", "-md", "zk:h:2181", "-cms", "zk:elsewhere:2181"],  # two stores
        ["-c", "bad name", "-md", "zk:h:2181"],
        ["-md", "zk:h:2181"],  # no cluster (argparse)
    ],
)
async def test_bad_arguments_exit_2_and_write_nothing(args: list[str]) -> None:
    done = await initialize(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip()
