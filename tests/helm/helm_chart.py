"""Rendering helm/stripemq offline (Helm's Go SDK through helm-python-sdk), for the chart tests.

``VALUE_SETS`` are the value sets every static check runs over: the defaults and the
variations a user is most likely to try.
"""

from __future__ import annotations

import re
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
    "storage-only": {"components": {"broker": False, "toolset": False}},
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
    """Template path -> rendered text (NOTES.txt included), as ``helm template`` (an install)
    makes them.

    Raises:
        helm_python.HelmError: the values are refused (schema or a ``fail`` in a template).
    """
    with helm_python.Chart.load(CHART) as chart:
        return chart.render(values or {}, name=release, namespace=namespace, is_install=True)


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


def config_maps(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """ConfigMap name -> its data."""
    return {doc["metadata"]["name"]: doc.get("data") or {} for doc in of_kind(docs, "ConfigMap")}


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, variables: dict[str, str]) -> str:
    """``$(VAR)`` references expanded as the kubelet does: a defined variable is replaced,
    ``$$`` is a literal ``$``, an undefined reference stays as written."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return variables.get(name, match.group(0))

    return _REFERENCE.sub(replace, text)


def environment(
    docs: list[dict[str, Any]], container: dict[str, Any], pod: dict[str, str]
) -> dict[str, str]:
    """The variables Kubernetes starts ``container`` with: its ``envFrom`` ConfigMaps'
    data, then its ``env`` in order (``$(VAR)`` expanded against what came before; a
    ``fieldRef`` to ``metadata.name`` or ``metadata.namespace`` taken from ``pod``, e.g.
    ``{"name": "stripemq-bookie-0", "namespace": "messaging"}``).

    Raises:
        KeyError: a referenced ConfigMap, key or pod field is not there.
        ValueError: a source this helper does not model (Secrets, resource fields).
    """
    maps = config_maps(docs)
    variables: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" not in source:
            raise ValueError(f"envFrom source not modelled: {source}")
        data = maps[source["configMapRef"]["name"]]
        prefix = source.get("prefix", "")
        variables.update({prefix + key: str(value) for key, value in data.items()})
    for item in container.get("env", []):
        if "value" in item or "valueFrom" not in item:
            variables[item["name"]] = expand(str(item.get("value", "")), variables)
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if not path.startswith("metadata."):
                raise ValueError(f"fieldRef not modelled: {path}")
            variables[item["name"]] = pod[path.removeprefix("metadata.")]
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            variables[item["name"]] = str(maps[ref["name"]][ref["key"]])
        else:
            raise ValueError(f"valueFrom not modelled: {source}")
    return variables
