"""A cluster's first metadata: its ``ClusterData``, tenant ``public`` and namespace
``public/default`` (Pulsar's ``initialize-cluster-metadata``).

Idempotent and safe to race: what exists is left as it is, so every broker runs it at
start, ``stripemq initialize-cluster-metadata`` runs it by hand, and a cluster whose
operators changed the defaults keeps their changes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stripemq.broker.namespaces import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    TenantInfo,
    create_namespace,
    create_tenant,
)
from stripemq.broker.ownership import BrokerInfo
from stripemq.errors import NodeExistsError
from stripemq.metadata import MetadataStore

log = logging.getLogger(__name__)

CLUSTERS = "/stripemq/clusters"


@dataclass(frozen=True)
class ClusterData:
    """Where a cluster is served (Pulsar's ClusterData; the TLS URLs stay empty)."""

    service_url: str = ""
    service_url_tls: str = ""
    broker_service_url: str = ""
    broker_service_url_tls: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "serviceUrl": self.service_url,
            "serviceUrlTls": self.service_url_tls,
            "brokerServiceUrl": self.broker_service_url,
            "brokerServiceUrlTls": self.broker_service_url_tls,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ClusterData:
        def text(key: str) -> str:
            value = doc.get(key) or ""
            if not isinstance(value, str):
                raise ValueError(f"{key} must be a string, not {value!r}")
            return value

        return cls(
            text("serviceUrl"),
            text("serviceUrlTls"),
            text("brokerServiceUrl"),
            text("brokerServiceUrlTls"),
        )


def cluster_path(cluster: str) -> str:
    return f"{CLUSTERS}/{cluster}"


async def initialize_cluster_metadata(
    store: MetadataStore, cluster: str, broker: BrokerInfo | None = None
) -> list[str]:
    """Make the cluster, ``public`` and ``public/default`` unless they exist; returns what
    was made. ``broker`` gives the cluster's URLs (the first broker's)."""
    made = []
    data = ClusterData(
        service_url=broker.web_url if broker else "",
        broker_service_url=broker.service_url if broker else "",
    )
    try:
        await store.create(cluster_path(cluster), json.dumps(data.to_json()).encode())
        made.append(f"cluster {cluster}")
    except NodeExistsError:
        pass
    try:
        await create_tenant(store, DEFAULT_TENANT, TenantInfo(allowed_clusters=(cluster,)))
        made.append(f"tenant {DEFAULT_TENANT}")
    except NodeExistsError:
        pass
    try:
        await create_namespace(store, DEFAULT_NAMESPACE, clusters=(cluster,))
        made.append(f"namespace {DEFAULT_NAMESPACE}")
    except NodeExistsError:
        pass
    if made:
        log.info("initialized cluster metadata: %s", ", ".join(made))
    return made
