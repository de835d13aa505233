"""Rendering helm/stripemq offline (Helm's Go SDK through helm-python-sdk), for the chart tests.

``VALUE_SETS`` are the value sets every static check runs over: the defaults and the
variations a user is most likely to try.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import yaml

CHART = Path(__file__).resolve().parents[2] / "helm" / "stripemq"
RELEASE = "stripemq"
NAMESPACE = "messaging"

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "replicas": {
        "zookeeper": {"replicaCount": 5},
        "bookkeeper": {"replicaCount": 6},
        "broker": {"replicaCount": 2},
        "autorecovery": {"replicaCount": 2},
    },
    "no-persistence": {"volumes": {"persistence": False}, "affinity": {"anti_affinity": False}},
    "no-autorecovery-no-toolset": {"components": {"autorecovery": False, "toolset": False}},
    "config-data": {
        "metadataPrefix": "/stripemq-a",
        "clusterName": "east",
        "broker": {
            "configData": {
                "managedLedgerDefaultEnsembleSize": 3,
                "managed_ledger_default_write_quorum": "3",
                "managed_ledger_default_ack_quorum": 2,
                "broker_deduplication_enabled": True,
            }
        },
        "bookkeeper": {"configData": {"journal_max_group_wait_ms": 1, "journalSyncData": "true"}},
        "autorecovery": {"configData": {"lost_bookie_recovery_delay_s": 30}},
    },
    "external-zookeeper": {
        "components": {"zookeeper": False},
        "pulsar_metadata": {"userProvidedZookeepers": "zk-a.example:2181,zk-b.example:2181"},
    },
}


def render(
    values: dict[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included), as ``helm template`` makes them.

    Raises:
        helm_python.HelmError: the values are refused (schema or a ``fail`` in a template).
    """
    with helm_python.Chart.load(CHART) as chart:
        return chart.render(values or {}, name=release, namespace=namespace)


def documents(values: dict[str, Any] | None = None, **options: str) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders for ``values``."""
    docs = []
    for path, text in sorted(render(values, **options).items()):
        if path.endswith(".txt"):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


WORKLOAD_KINDS = ("StatefulSet", "Deployment", "Job")


def pod_templates(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, its pod template) for every StatefulSet, Deployment and Job."""
    for doc in docs:
        if doc["kind"] in WORKLOAD_KINDS:
            yield doc, doc["spec"]["template"]


def containers(pod_template: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's init containers, then its containers."""
    spec = pod_template["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]
