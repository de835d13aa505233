"""Tenants and namespaces as the broker needs them: existence, and the defaults made at
first start (tenant ``public``, namespace ``public/default``).

Nothing is created on use: as in Pulsar, a topic of a tenant or namespace that does not
exist is refused (``NamespaceNotFoundError``) before the broker writes anything for it
(no ownership node, no managed ledger, no partitioned-topic node). Tenants live at
``/stripemq/tenants/<tenant>``, namespaces at ``/stripemq/policies/<tenant>/<namespace>``
(their policies, JSON).
"""

from __future__ import annotations

import json
import logging

from stripemq.broker.ownership import DEFAULT_BUNDLES
from stripemq.errors import NodeExistsError, StripeMQError
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


async def create_tenant(store: MetadataStore, tenant: str, clusters: list[str]) -> None:
    """Create ``tenant``, allowed on ``clusters``.

    Raises:
        NodeExistsError: the tenant exists.
    """
    doc = {"admin_roles": [], "allowed_clusters": clusters}
    await store.create(f"{TENANTS}/{tenant}", json.dumps(doc).encode())
    log.info("created tenant %s", tenant)


async def create_namespace(
    store: MetadataStore, namespace: str, bundles: int = DEFAULT_BUNDLES
) -> None:
    """Create ``namespace`` (``tenant/name``) with default policies.

    Raises:
        NamespaceNotFoundError: its tenant does not exist.
        NodeExistsError: the namespace exists.
    """
    tenant = namespace.partition("/")[0]
    if not await tenant_exists(store, tenant):
        raise NamespaceNotFoundError(f"tenant {tenant} does not exist")
    await store.create(f"{POLICIES}/{namespace}", json.dumps({"bundles": bundles}).encode())
    log.info("created namespace %s", namespace)


async def ensure_defaults(store: MetadataStore, cluster: str = "standalone") -> None:
    """Create ``public`` and ``public/default`` unless they exist (any broker may race)."""
    try:
        await create_tenant(store, DEFAULT_TENANT, [cluster])
    except NodeExistsError:
        pass
    try:
        await create_namespace(store, DEFAULT_NAMESPACE)
    except NodeExistsError:
        pass


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
