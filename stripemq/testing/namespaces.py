"""Namespace helpers for tests: a fresh tenant and namespace, and a change to its policies
made as the admin API makes it (read, change, compare-and-set)."""

from __future__ import annotations

import uuid
from typing import Any

from stripemq.broker.namespaces import (
    TenantInfo,
    create_namespace,
    create_tenant,
    read_policies,
    write_policies,
)
from stripemq.metadata import MetadataStore


async def fresh_namespace(store: MetadataStore, cluster: str) -> str:
    """A new tenant's namespace ``<tenant>/ns``, replicated to ``cluster``."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    await create_tenant(store, tenant, TenantInfo(allowed_clusters=(cluster,)))
    await create_namespace(store, f"{tenant}/ns", clusters=(cluster,))
    return f"{tenant}/ns"


async def change_policies(store: MetadataStore, namespace: str, **changes: Any) -> None:
    """Change some of a namespace's policies (``Policies`` field names)."""
    policies, version = await read_policies(store, namespace)
    await write_policies(store, namespace, policies.with_(**changes), version)
