"""Tenants and namespaces as the broker needs them: existence, and the defaults made at
first start (tenant ``public``, namespace ``public/default``). The admin API manages them."""

from __future__ import annotations

import json

from stripemq.errors import NodeExistsError
from stripemq.metadata import MetadataStore

TENANTS = "/stripemq/tenants"
POLICIES = "/stripemq/policies"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "public/default"


async def ensure_defaults(store: MetadataStore, cluster: str = "standalone") -> None:
    """Create ``public`` and ``public/default`` unless they exist (any broker may race)."""
    for path, doc in (
        (f"{TENANTS}/{DEFAULT_TENANT}", {"admin_roles": [], "allowed_clusters": [cluster]}),
        (f"{POLICIES}/{DEFAULT_NAMESPACE}", {"bundles": 4}),
    ):
        try:
            await store.create(path, json.dumps(doc).encode())
        except NodeExistsError:
            pass


async def namespace_exists(store: MetadataStore, namespace: str) -> bool:
    return await store.exists(f"{POLICIES}/{namespace}") is not None
