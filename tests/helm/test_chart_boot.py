"""The boot test of helm/stripemq: the rendered containers' commands, args and environment,
run as local processes (``local_pods``), start the real system.

The chart is rendered with one ZooKeeper, three bookies, two brokers, one auto-recovery pod
and the toolset; every pod runs what its containers say (init containers first, all pods at
once), and the test waits for the init Job to exit 0 and for every pod's own readiness
probe. Then, with the toolset's environment as ``kubectl exec`` would give it: ``stripemq
client produce|consume`` through the brokers, ``stripemq admin`` (clusters, namespaces,
brokers), ``/metrics`` on every pod Prometheus is told to scrape, and the official
``pulsar-client`` against the broker service URL.

Persistence is off (emptyDir volumes): the local pod directories are just as ephemeral, and
it is the set ``VALUE_SETS["no-persistence"]`` the static checks use. With persistence on the
same volumeMounts name volumeClaimTemplates instead, and the translator maps them the same
way; ``test_persistent_volumes_map_like_empty_dirs`` checks that without starting anything.

The fast tests at the end check the translator itself (Kubernetes' ``$(VAR)`` rules, the
name and port mapping, what it refuses).
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pulsar
import pytest
from helm_chart import NAMESPACE, documents, of_kind, pod_templates
from local_pods import LOCALHOST, LocalCluster, TranslationError, expand, http_get, translate

from stripemq.testing.polling import until_blocking

VALUES: dict[str, Any] = {
    "zookeeper": {"replicaCount": 1},
    "bookkeeper": {"replicaCount": 3},
    "broker": {"replicaCount": 2},
    "autorecovery": {"replicaCount": 1},
    "components": {"toolset": True},
    "volumes": {"persistence": False},
    "affinity": {"anti_affinity": False},
}
BOOT_TIMEOUT_S = 60.0
TOPIC = "persistent://public/default/chart-boot"
MESSAGES = [f"boot-{i}" for i in range(5)]


def pod_of(cluster: LocalCluster, component: str) -> list[str]:
    return [pod.name for pod in cluster.pods if pod.labels.get("component") == component]


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """The chart's pods, running and ready; every process is killed at the end."""
    local = translate(
        documents(VALUES), namespace=NAMESPACE, root=tmp_path_factory.mktemp("chart-boot")
    )
    # Clients of the bookies first (a bookie stops at once only when nothing reads from it).
    request.addfinalizer(partial(local.stop, first=["stripemq-broker", "stripemq-recovery"]))
    with local.logs_on_failure():
        local.start()
        local.wait_ready(BOOT_TIMEOUT_S)
    yield local


@pytest.mark.integration
def test_rendered_chart_boots_and_serves(cluster: LocalCluster) -> None:
    with cluster.logs_on_failure():
        (toolset,) = pod_of(cluster, "toolset")
        (job,) = pod_of(cluster, "pulsar-init")
        brokers = [cluster.pod(name) for name in pod_of(cluster, "broker")]
        assert len(brokers) == 2 and len(pod_of(cluster, "bookie")) == 3
        assert cluster.pod(job).containers[0].exit_code() == 0
        cluster_name = brokers[0].containers[0].kube_env["STRIPEMQ_CLUSTER_NAME"]

        # The data the servers keep lies on their volumes, not in a container's own layer.
        for pod in cluster.pods:
            for container in pod.containers:
                assert container.outside_volumes == [], (pod.name, container.name)

        # Liveness: every probe answers once the pods are up.
        probes = [(p, c.liveness) for p in cluster.pods for c in p.containers if c.liveness]
        assert len(probes) == 7  # ZooKeeper, bookies, auto-recovery, brokers
        for pod, probe in probes:
            until_blocking(
                partial(lambda probe: http_get(probe.port, probe.path)[0] == 200, probe),
                f"{pod.name} answers its liveness probe {probe.path}",
            )

        def run(*command: str) -> str:
            done = cluster.exec(toolset, ["stripemq", *command])
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            return done.stdout

        # Produce and consume through the brokers, as the toolset would.
        produce = ["client", "produce", TOPIC]
        run(*produce, *itertools.chain.from_iterable(("-m", m) for m in MESSAGES))
        out = run(
            *("client", "consume", TOPIC, "-s", "boot", "-p", "Earliest"),
            *("-n", str(len(MESSAGES)), "--timeout", "30"),
        )
        assert re.findall(r"^content: (.*)$", out, re.MULTILINE) == MESSAGES

        # Admin through the brokers' Service.
        assert cluster_name in run("admin", "clusters", "list").split()
        assert "public/default" in run("admin", "namespaces", "list", "public").split()
        listed = set(run("admin", "brokers", "list", cluster_name).split())
        assert listed == {f"{LOCALHOST}:{b.local_port('http')}" for b in brokers}

        # Metrics where Prometheus is told to scrape.
        scraped = [p for p in cluster.pods if p.annotations.get("prometheus.io/scrape") == "true"]
        assert sorted(p.labels["component"] for p in scraped) == sorted(
            ["zookeeper", "bookie", "bookie", "bookie", "recovery", "broker", "broker"]
        )
        for pod in scraped:
            port = pod.local_port(int(pod.annotations["prometheus.io/port"]))
            status, body = http_get(port, pod.annotations.get("prometheus.io/path", "/metrics"))
            assert status == 200 and "# TYPE" in body, (pod.name, status, body[:500])

        # The official client, against the broker service URL the toolset is given.
        url = cluster.pod(toolset).containers[0].env["STRIPEMQ_SERVICE_URL"]
        client = pulsar.Client(url, operation_timeout_seconds=30)
        try:
            topic = f"{TOPIC}-pulsar-client"
            consumer = client.subscribe(topic, "official")
            producer = client.create_producer(topic)
            for message in MESSAGES:
                producer.send(message.encode())
            got = [consumer.receive(timeout_millis=30_000) for _ in MESSAGES]
            assert [m.data().decode() for m in got] == MESSAGES
            for message in got:
                consumer.acknowledge(message)
        finally:
            client.close()


# ---------------------------------------------------------------- the translator itself


def counting_ports() -> Any:
    ports = itertools.count(41000)
    return lambda: next(ports)


def translated(docs: list[dict[str, Any]], root: Path = Path("/nowhere")) -> LocalCluster:
    return translate(docs, namespace=NAMESPACE, root=root, allocate_port=counting_ports())


@pytest.fixture(scope="module")
def boot_documents() -> list[dict[str, Any]]:
    return documents(VALUES)


def test_expansion_follows_kubernetes() -> None:
    env = {"A": "one", "B": "$(A)"}.get
    assert expand("$(A).x", env) == "one.x"
    assert expand("$(B)", env) == "$(A)"  # values are not expanded twice
    assert expand("$(MISSING)-$(A)", env) == "$(MISSING)-one"
    assert expand("$$(A) $$ $x $( $", env) == "$(A) $ $x $( $"


def test_names_ports_and_paths_map_to_this_machine(boot_documents: list[dict[str, Any]]) -> None:
    cluster = translated(boot_documents)
    zookeeper = cluster.pod("stripemq-zookeeper-0")
    metadata = f"zk://{LOCALHOST}:{zookeeper.local_port('client')}"
    bookie = cluster.pod("stripemq-bookie-2").container("bookie")
    assert bookie.kube_env["STRIPEMQ_METADATA_SERVICE_URI"] == (
        f"zk://stripemq-zookeeper-0.stripemq-zookeeper.{NAMESPACE}.svc.cluster.local:2181"
    )
    assert bookie.env["STRIPEMQ_METADATA_SERVICE_URI"] == metadata
    assert bookie.env["STRIPEMQ_BOOKIE_PORT"] == str(
        cluster.pod("stripemq-bookie-2").local_port(3181)
    )
    assert bookie.env["STRIPEMQ_JOURNAL_DIRECTORY"] == "/nowhere/stripemq-bookie-2/volumes/journal"
    assert zookeeper.container("zookeeper").env["POD_NAME"] == "stripemq-zookeeper-0"
    broker1 = cluster.pod("stripemq-broker-1").container("broker")
    assert broker1.kube_env["STRIPEMQ_ADVERTISED_ADDRESS"] == (
        f"stripemq-broker-1.stripemq-broker-headless.{NAMESPACE}.svc.cluster.local"
    )
    assert broker1.env["STRIPEMQ_ADVERTISED_ADDRESS"] == LOCALHOST
    broker0 = cluster.pod("stripemq-broker-0")
    toolset = cluster.pod("stripemq-toolset-0").containers[0]
    assert toolset.argv == []  # sleep infinity: not started
    assert toolset.env["STRIPEMQ_SERVICE_URL"] == f"pulsar://{LOCALHOST}:{broker0.local_port(6650)}"
    job = cluster.pod("stripemq-pulsar-init-0")
    assert job.init_containers[0].argv[-1] == metadata
    assert f"http://{LOCALHOST}:{broker0.local_port('http')}" in job.containers[0].argv


def test_persistent_volumes_map_like_empty_dirs() -> None:
    values = copy.deepcopy(VALUES)
    values["volumes"]["persistence"] = True
    docs = documents(values)
    claims = {
        doc["metadata"]["name"]: [
            c["metadata"]["name"] for c in doc["spec"]["volumeClaimTemplates"]
        ]
        for doc in of_kind(docs, "StatefulSet")
        if "volumeClaimTemplates" in doc["spec"]
    }
    assert claims == {"stripemq-bookie": ["journal", "ledgers"], "stripemq-zookeeper": ["data"]}
    persistent, ephemeral = translated(docs), translated(documents(VALUES))
    for name in ("stripemq-bookie-0", "stripemq-zookeeper-0"):
        main = persistent.pod(name).containers[0]
        assert main.mounts == ephemeral.pod(name).containers[0].mounts
        assert main.env == ephemeral.pod(name).containers[0].env
        assert main.outside_volumes == []


def with_env(docs: list[dict[str, Any]], workload: str, name: str, value: str) -> Any:
    docs = copy.deepcopy(docs)
    for doc in docs:
        if doc["kind"] in ("StatefulSet", "Deployment") and doc["metadata"]["name"] == workload:
            doc["spec"]["template"]["spec"]["containers"][0]["env"].append(
                {"name": name, "value": value}
            )
    return docs


@pytest.mark.parametrize(
    ("name", "value", "complaint"),
    [
        (
            "STRIPEMQ_X",
            f"zk://stripemq-zookeeper-3.stripemq-zookeeper.{NAMESPACE}.svc.cluster.local:2181",
            "names no host",
        ),
        ("STRIPEMQ_X", f"stripemq-zookeeper-3.stripemq-zookeeper.{NAMESPACE}", "looks like"),
        ("STRIPEMQ_X", "http://stripemq-proxy:80", "names no host"),
        ("STRIPEMQ_X", "http://stripemq-broker:9999", "has no port 9999"),
        ("STRIPEMQ_X", "stripemq-broker-1.stripemq-broker-headless:8000", "no containerPort"),
        ("STRIPEMQ_OTHER_PORT", "9000", "no containerPort"),
        (
            "STRIPEMQ_X",
            "stripemq-broker-0.stripemq-broker-headless,stripemq-broker-1.stripemq-broker-headless",
            "without ports",
        ),
    ],
)
def test_unmapped_cluster_names_fail_loudly(
    boot_documents: list[dict[str, Any]], name: str, value: str, complaint: str
) -> None:
    with pytest.raises(TranslationError, match=complaint):
        translated(with_env(boot_documents, "stripemq-broker", name, value))


def test_a_service_with_a_cluster_ip_is_refused(boot_documents: list[dict[str, Any]]) -> None:
    docs = copy.deepcopy(boot_documents)
    assert any("clusterIP" not in service["spec"] for service in of_kind(docs, "Service"))
    translated(docs)  # the chart's pods take no service links: nothing to guess
    for _, template in pod_templates(docs):
        template["spec"]["enableServiceLinks"] = True
    with pytest.raises(TranslationError, match="service-link"):
        translated(docs)
