"""A cluster's first metadata, as Pulsar's ``initialize-cluster-metadata`` writes it: its
``ClusterData``, tenants ``public`` and ``pulsar`` allowed on it, namespaces
``public/default`` and ``pulsar/system`` replicated to it.

Idempotent and safe to race: what exists is kept, only joined by this cluster where it is
missing (Pulsar's ``createTenantIfAbsent``/``createNamespaceIfAbsent``: a second cluster
initialized on the same store is added to the existing tenants' ``allowedClusters`` and to
the namespaces' ``replication_clusters``). Every broker runs it at start,
``stripemq initialize-cluster-metadata`` runs it by hand, and operators' other changes to
the defaults stay.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from stripemq.broker.namespaces import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    NamespaceNotFoundError,
    TenantInfo,
    create_namespace,
    create_tenant,
    encode_doc,
    read_doc,
    read_policies,
    read_tenant,
    update_tenant,
    write_policies,
)
from stripemq.broker.ownership import DEFAULT_BUNDLES, BrokerInfo
from stripemq.broker.policies import Policies
from stripemq.errors import BadVersionError, NodeExistsError, NotFoundError
from stripemq.metadata import MetadataStore

log = logging.getLogger(__name__)
D = TypeVar("D")  # a metadata document: TenantInfo, Policies

CLUSTERS = "/stripemq/clusters"
# Pulsar's system tenant and namespace (NamespaceName.SYSTEM_NAMESPACE).
SYSTEM_TENANT = "pulsar"
SYSTEM_NAMESPACE = "pulsar/system"
# Compare-and-set attempts when joining a cluster to a tenant or namespace being changed.
MAX_JOIN_ATTEMPTS = 10


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
    store: MetadataStore,
    cluster: str,
    broker: BrokerInfo | None = None,
    *,
    cluster_data: ClusterData | None = None,
    default_bundles: int = DEFAULT_BUNDLES,
) -> list[str]:
    """Make the cluster, the tenants and the namespaces (or join the cluster to them);
    returns what was made or changed. The cluster's URLs are ``cluster_data`` when given
    (the command's ``--web-service-url`` ...), else ``broker``'s (the first broker's);
    ``public/default`` is split in ``default_bundles`` when it is made."""
    done = []
    data = cluster_data or ClusterData(
        service_url=broker.web_url if broker else "",
        service_url_tls=broker.web_url_tls if broker else "",
        broker_service_url=broker.service_url if broker else "",
        broker_service_url_tls=broker.service_url_tls if broker else "",
    )
    try:
        await create_cluster(store, cluster, data)
        done.append(f"cluster {cluster}")
    except NodeExistsError:
        pass
    for tenant in (DEFAULT_TENANT, SYSTEM_TENANT):
        done += await _tenant_with_cluster(store, tenant, cluster)
    for namespace, bundles in ((DEFAULT_NAMESPACE, default_bundles), (SYSTEM_NAMESPACE, None)):
        done += await _namespace_with_cluster(store, namespace, cluster, bundles)
    if done:
        log.info("initialized cluster metadata: %s", ", ".join(done))
    return done


async def _tenant_with_cluster(store: MetadataStore, tenant: str, cluster: str) -> list[str]:
    """The tenant, made allowed on ``cluster``, or ``cluster`` added to it."""

    def joined(info: TenantInfo) -> TenantInfo | None:
        if cluster in info.allowed_clusters:
            return None
        return TenantInfo(info.admin_roles, (*info.allowed_clusters, cluster))

    return await _with_cluster(
        f"tenant {tenant}",
        cluster,
        lambda: read_tenant(store, tenant),
        lambda: create_tenant(store, tenant, TenantInfo(allowed_clusters=(cluster,))),
        joined,
        lambda info, version: update_tenant(store, tenant, info, version),
    )


async def _namespace_with_cluster(
    store: MetadataStore, namespace: str, cluster: str, bundles: int | None
) -> list[str]:
    """The namespace, made replicated to ``cluster``, or ``cluster`` added to its
    replication clusters."""

    def joined(policies: Policies) -> Policies | None:
        if cluster in policies.replication_clusters:
            return None
        return policies.with_(replication_clusters=(*policies.replication_clusters, cluster))

    return await _with_cluster(
        f"namespace {namespace}",
        cluster,
        lambda: read_policies(store, namespace),
        lambda: create_namespace(store, namespace, bundles or DEFAULT_BUNDLES, (cluster,)),
        joined,
        lambda policies, version: write_policies(store, namespace, policies, version),
    )


async def _with_cluster(
    what: str,
    cluster: str,
    read: Callable[[], Awaitable[tuple[D, int]]],
    create: Callable[[], Awaitable[None]],
    joined: Callable[[D], D | None],
    write: Callable[[D, int], Awaitable[None]],
) -> list[str]:
    """Make ``what`` if it does not exist, else write it back ``joined`` by the cluster (by
    compare-and-set: read again when another writer got there first); what was done."""
    for _ in range(MAX_JOIN_ATTEMPTS):
        try:
            document, version = await read()
        except NamespaceNotFoundError:  # the tenant's (TenantNotFoundError) too
            try:
                await create()
                return [what]
            except NodeExistsError:
                continue  # made meanwhile: join it
        changed = joined(document)
        if changed is None:
            return []
        try:
            await write(changed, version)
            return [f"cluster {cluster} added to {what}"]
        except (BadVersionError, NotFoundError, NamespaceNotFoundError):
            continue
    raise BadVersionError(f"{what} kept changing: cluster {cluster} not added to it")


# --------------------------------------------------------------------------- administration
# The admin API's clusters resource. ``global`` is not listed. As in Pulsar, a cluster is
# deleted whether or not tenants list it (Pulsar refuses only while V1 namespaces, named
# after their cluster, live in it, and stripemq has none).

GLOBAL_CLUSTER = "global"


class ClusterNotFoundError(NotFoundError):
    """The cluster does not exist (the admin API answers 404)."""


async def list_clusters(store: MetadataStore) -> list[str]:
    """Every cluster, sorted (``global`` left out)."""
    return sorted(c for c in await store.children(CLUSTERS) if c != GLOBAL_CLUSTER)


async def cluster_exists(store: MetadataStore, cluster: str) -> bool:
    return await store.exists(cluster_path(cluster)) is not None


async def read_cluster(store: MetadataStore, cluster: str) -> tuple[ClusterData, int]:
    """A cluster's data and the version of its node.

    Raises:
        ClusterNotFoundError: it does not exist.
    """
    found = await read_doc(store, cluster_path(cluster))
    if found is None:
        raise ClusterNotFoundError("Cluster does not exist")
    doc, version = found
    try:
        data = ClusterData.from_json(doc if doc is not None else {})
    except ValueError:
        data = None
    if doc is None or data is None:
        log.warning("cluster %s: unreadable data, read as empty", cluster)
        data = ClusterData()
    return data, version


async def create_cluster(store: MetadataStore, cluster: str, data: ClusterData) -> None:
    """Raises ``NodeExistsError`` if the cluster exists."""
    await store.create(cluster_path(cluster), encode_doc(data.to_json()))
    log.info("created cluster %s", cluster)


async def update_cluster(store: MetadataStore, cluster: str, data: ClusterData) -> None:
    """Replace a cluster's data.

    Raises:
        ClusterNotFoundError: it does not exist.
    """
    _, version = await read_cluster(store, cluster)
    try:
        await store.put(cluster_path(cluster), encode_doc(data.to_json()), version)
    except NotFoundError:
        raise ClusterNotFoundError("Cluster does not exist") from None
    log.info("updated cluster %s", cluster)


async def delete_cluster(store: MetadataStore, cluster: str) -> None:
    """Delete a cluster.

    Raises:
        ClusterNotFoundError: it does not exist.
    """
    try:
        await store.delete(cluster_path(cluster))
    except NotFoundError:
        raise ClusterNotFoundError("Cluster does not exist") from None
    log.info("deleted cluster %s", cluster)
