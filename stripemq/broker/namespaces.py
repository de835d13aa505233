"""Tenants and namespaces as the broker needs them: existence, and the defaults made at
first start (tenant ``public``, namespace ``public/default``).

Tenants are Pulsar's ``TenantInfo`` JSON at ``/stripemq/tenants/<tenant>``; namespaces
their ``Policies`` JSON (``stripemq.broker.policies``) at
``/stripemq/policies/<tenant>/<namespace>``. Nothing is created on use: as in Pulsar, a
topic of a tenant or namespace that does not exist is refused (``NamespaceNotFoundError``)
before the broker writes anything for it (no ownership node, no managed ledger, no
partitioned-topic node).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stripemq.broker.ownership import DEFAULT_BUNDLES
from stripemq.broker.policies import InvalidPolicyError, Policies
from stripemq.errors import StripeMQError
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

TENANTS = "/stripemq/tenants"
POLICIES = "/stripemq/policies"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "public/default"


class NamespaceNotFoundError(StripeMQError):
    """A topic names a tenant or namespace that does not exist. Pulsar answers such a
    topic with ``TopicNotFound`` ("Tenant or namespace or topic does not exist"), which the
    clients report at once rather than retrying."""

    server_error = pb.TopicNotFound


@dataclass(frozen=True)
class TenantInfo:
    """Who administers a tenant and where its namespaces may live (Pulsar's TenantInfo)."""

    admin_roles: tuple[str, ...] = ()
    allowed_clusters: tuple[str, ...] = ()

    def to_json(self) -> dict[str, list[str]]:
        return {
            "adminRoles": list(self.admin_roles),
            "allowedClusters": list(self.allowed_clusters),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TenantInfo:
        """Pulsar's names; the first stored format (``admin_roles``...) is read too."""
        roles = doc.get("adminRoles", doc.get("admin_roles")) or ()
        clusters = doc.get("allowedClusters", doc.get("allowed_clusters")) or ()
        return cls(tuple(str(r) for r in roles), tuple(str(c) for c in clusters))


def tenant_path(tenant: str) -> str:
    return f"{TENANTS}/{tenant}"


async def create_tenant(store: MetadataStore, tenant: str, info: TenantInfo) -> None:
    """Create ``tenant``.

    Raises:
        NodeExistsError: the tenant exists.
    """
    await store.create(tenant_path(tenant), json.dumps(info.to_json()).encode())
    log.info("created tenant %s", tenant)


async def create_namespace(
    store: MetadataStore,
    namespace: str,
    bundles: int = DEFAULT_BUNDLES,
    clusters: tuple[str, ...] = (),
) -> None:
    """Create ``namespace`` (``tenant/name``) with default policies.

    Raises:
        NamespaceNotFoundError: its tenant does not exist.
        NodeExistsError: the namespace exists.
    """
    tenant = namespace.partition("/")[0]
    if not await tenant_exists(store, tenant):
        raise NamespaceNotFoundError(f"tenant {tenant} does not exist")
    policies = Policies(bundles=bundles, replication_clusters=clusters)
    await store.create(policies_path(namespace), json.dumps(policies.to_json()).encode())
    log.info("created namespace %s", namespace)


def policies_path(namespace: str) -> str:
    """Where ``tenant/name``'s policies live (the node whose existence is the namespace's)."""
    return f"{POLICIES}/{namespace}"


async def read_policies(store: MetadataStore, namespace: str) -> tuple[Policies, int]:
    """A namespace's policies and the version of their node (for a compare-and-set).

    Raises:
        NamespaceNotFoundError: the namespace does not exist.
        InvalidPolicyError: the stored document is not readable.
    """
    found = await store.get(policies_path(namespace))
    if found is None:
        raise NamespaceNotFoundError(f"namespace {namespace} does not exist")
    raw, stat = found
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise InvalidPolicyError(f"policies of {namespace} are not a JSON object")
    return Policies.from_json(doc), stat.version


async def write_policies(
    store: MetadataStore, namespace: str, policies: Policies, expected_version: int
) -> None:
    """Store a namespace's policies if nobody changed them since ``expected_version``.

    Raises:
        BadVersionError: they changed meanwhile (read again and retry).
        NotFoundError: the namespace was deleted meanwhile.
    """
    data = json.dumps(policies.to_json()).encode()
    await store.put(policies_path(namespace), data, expected_version)


async def tenant_exists(store: MetadataStore, tenant: str) -> bool:
    return await store.exists(f"{TENANTS}/{tenant}") is not None


async def namespace_exists(store: MetadataStore, namespace: str) -> bool:
    return await store.exists(f"{POLICIES}/{namespace}") is not None


async def check_namespace(store: MetadataStore, namespace: str) -> None:
    """Reads only; raises ``NamespaceNotFoundError`` unless ``namespace`` exists (naming
    the tenant when that is what is missing)."""
    if await namespace_exists(store, namespace):
        return
    tenant = namespace.partition("/")[0]
    if not await tenant_exists(store, tenant):
        raise NamespaceNotFoundError(f"tenant {tenant} does not exist (topic in {namespace})")
    raise NamespaceNotFoundError(f"namespace {namespace} does not exist")
