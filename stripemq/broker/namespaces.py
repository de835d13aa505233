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
from urllib.parse import unquote

from stripemq.broker.ownership import DEFAULT_BUNDLES, OWNERSHIP_ROOT
from stripemq.broker.partitions import ROOT as PARTITIONED_TOPICS
from stripemq.broker.policies import InvalidPolicyError, Policies
from stripemq.broker.schema.registry import namespace_schemas_path
from stripemq.errors import NotEmptyError, NotFoundError, StripeMQError
from stripemq.managed_ledger.ledger_list import child_name, managed_ledger_path
from stripemq.metadata import ANY_VERSION, DeleteOp, MetadataStore, Op
from stripemq.metadata.partitioned_topics import partition_count
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.topic_name import TopicName, is_valid_name

log = logging.getLogger(__name__)

# Topics' own policies (``topic_policies``, which imports this module: its root is here too).
TOPIC_POLICIES = "/stripemq/topic-policies"

TENANTS = "/stripemq/tenants"
POLICIES = "/stripemq/policies"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "public/default"


__all__ = ["is_valid_name"]  # re-exported: the admin resources check names with it


def encode_doc(doc: Mapping[str, Any]) -> bytes:
    """A metadata node's JSON document, as every writer here stores it."""
    return json.dumps(doc).encode()


async def read_doc(store: MetadataStore, path: str) -> tuple[dict[str, Any] | None, int] | None:
    """A node's JSON object and its version; ``None`` if the node does not exist, and
    ``(None, version)`` if it holds something else (not JSON, or not an object)."""
    found = await store.get(path)
    if found is None:
        return None
    raw, stat = found
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        doc = None
    return (doc if isinstance(doc, dict) else None), stat.version


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
    await store.create(tenant_path(tenant), encode_doc(info.to_json()))
    log.info("created tenant %s", tenant)


async def create_namespace(
    store: MetadataStore,
    namespace: str,
    bundles: int = DEFAULT_BUNDLES,
    clusters: tuple[str, ...] = (),
    *,
    policies: Policies | None = None,
) -> None:
    """Create ``namespace`` (``tenant/name``) with ``policies`` (default: the defaults,
    split in ``bundles``, replicated to ``clusters``).

    Raises:
        TenantNotFoundError: its tenant does not exist.
        NodeExistsError: the namespace exists.
    """
    tenant = namespace.partition("/")[0]
    if not await tenant_exists(store, tenant):
        raise TenantNotFoundError("Tenant does not exist")
    if policies is None:
        policies = Policies(bundles=bundles, replication_clusters=clusters)
    await store.create(policies_path(namespace), encode_doc(policies.to_json()))
    log.info("created namespace %s (%d bundles)", namespace, policies.bundles)


def policies_path(namespace: str) -> str:
    """Where ``tenant/name``'s policies live (the node whose existence is the namespace's)."""
    return f"{POLICIES}/{namespace}"


async def read_policies(store: MetadataStore, namespace: str) -> tuple[Policies, int]:
    """A namespace's policies and the version of their node (for a compare-and-set).

    Raises:
        NamespaceNotFoundError: the namespace does not exist.
        InvalidPolicyError: the stored document is not readable.
    """
    found = await read_doc(store, policies_path(namespace))
    if found is None:
        raise NamespaceNotFoundError("Namespace does not exist")
    doc, version = found
    if doc is None:
        raise InvalidPolicyError(f"policies of {namespace} are not a JSON object")
    return Policies.from_json(doc), version


async def write_policies(
    store: MetadataStore, namespace: str, policies: Policies, expected_version: int
) -> None:
    """Store a namespace's policies if nobody changed them since ``expected_version``.

    Raises:
        BadVersionError: they changed meanwhile (read again and retry).
        NotFoundError: the namespace was deleted meanwhile.
    """
    await store.put(policies_path(namespace), encode_doc(policies.to_json()), expected_version)


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


# --------------------------------------------------------------------------- administration
# What the admin API (``stripemq.broker.admin``) does to tenants and namespaces, with
# Pulsar's rules: a tenant goes only once it has no namespace, a namespace only once it
# has no topic. Deletions are one ``multi`` (the emptiness of the containers is checked by
# the store in the same transaction), so a topic made meanwhile fails the deletion whole.


class TenantNotFoundError(NamespaceNotFoundError):
    """The tenant does not exist (the admin API answers 404)."""


class TenantNotEmptyError(NotEmptyError):
    """The tenant still has namespaces (409)."""


class NamespaceNotEmptyError(NotEmptyError):
    """The namespace still has topics or partitioned topics (409)."""


async def list_tenants(store: MetadataStore) -> list[str]:
    """Every tenant, sorted."""
    return sorted(await store.children(TENANTS))


async def read_tenant(store: MetadataStore, tenant: str) -> tuple[TenantInfo, int]:
    """A tenant's info and the version of its node.

    Raises:
        TenantNotFoundError: it does not exist.
    """
    found = await read_doc(store, tenant_path(tenant))
    if found is None:
        raise TenantNotFoundError("Tenant does not exist")
    doc, version = found
    if doc is None:
        log.warning("tenant %s: unreadable info, read as empty", tenant)
        doc = {}
    return TenantInfo.from_json(doc), version


async def update_tenant(
    store: MetadataStore, tenant: str, info: TenantInfo, expected_version: int = ANY_VERSION
) -> None:
    """Replace a tenant's info (compare-and-set when ``expected_version`` is given).

    Raises:
        TenantNotFoundError: it does not exist.
        BadVersionError: it changed since ``expected_version``.
    """
    if expected_version == ANY_VERSION:
        expected_version = (await read_tenant(store, tenant))[1]
    try:
        await store.put(tenant_path(tenant), encode_doc(info.to_json()), expected_version)
    except NotFoundError:
        raise TenantNotFoundError("Tenant does not exist") from None
    log.info("updated tenant %s", tenant)


async def list_namespaces(store: MetadataStore, tenant: str) -> list[str]:
    """A tenant's namespaces as ``tenant/name``, sorted.

    Raises:
        TenantNotFoundError: the tenant does not exist.
    """
    if not await tenant_exists(store, tenant):
        raise TenantNotFoundError("Tenant does not exist")
    return [f"{tenant}/{name}" for name in sorted(await store.children(f"{POLICIES}/{tenant}"))]


async def delete_tenant(store: MetadataStore, tenant: str) -> None:
    """Delete a tenant that has no namespace left.

    Raises:
        TenantNotFoundError: it does not exist.
        TenantNotEmptyError: it still has namespaces (nothing is deleted).
    """
    if not await tenant_exists(store, tenant):
        raise TenantNotFoundError("Tenant does not exist")
    container = f"{POLICIES}/{tenant}"
    if await store.children(container):
        raise TenantNotEmptyError("The tenant still has active namespaces")
    ops: list[Op] = [DeleteOp(container)] if await store.exists(container) is not None else []
    ops.append(DeleteOp(tenant_path(tenant)))
    try:
        await store.multi(ops)
    except NotEmptyError:  # a namespace was made meanwhile
        raise TenantNotEmptyError("The tenant still has active namespaces") from None
    except NotFoundError:
        raise TenantNotFoundError("Tenant does not exist") from None
    for leftover in (
        managed_ledger_path(tenant),
        f"{PARTITIONED_TOPICS}/{tenant}",
        f"{OWNERSHIP_ROOT}/{tenant}",
        namespace_schemas_path(tenant),  # the tenant's container of schemas
        f"{TOPIC_POLICIES}/{tenant}",
    ):
        await _delete_if_empty(store, leftover)
    log.info("deleted tenant %s", tenant)


async def stored_topics(store: MetadataStore, namespace: str) -> tuple[list[str], list[str]]:
    """The local names of a namespace's persistent topics (managed ledgers, partitions
    included) and of its partitioned topics, as stored."""
    tenant, _, local = namespace.partition("/")
    ledgers = await store.children(managed_ledger_path(f"{namespace}/persistent"))
    partitioned = await store.children(f"{PARTITIONED_TOPICS}/{tenant}/{local}/persistent")
    return (
        sorted(unquote(child_name(child)) for child in ledgers),
        sorted(unquote(child) for child in partitioned),
    )


async def count_topics(store: MetadataStore, namespace: str) -> int:
    """Topics a namespace holds as maxTopicsPerNamespace counts them: each partition of a
    partitioned topic (created yet or not) and each other topic."""
    ledgers, partitioned = await stored_topics(store, namespace)
    names = set(ledgers)
    for local in partitioned:
        topic = TopicName.parse(f"persistent://{namespace}/{local}")
        count = await partition_count(store, topic)
        names.update(topic.partition(i).local_name for i in range(count))
    return len(names)


async def delete_namespace(store: MetadataStore, namespace: str) -> None:
    """Delete a namespace that has no topic and no partitioned topic left (its bundles are
    to be unloaded first: their ownership nodes are not touched here).

    Raises:
        NamespaceNotFoundError: it does not exist.
        NamespaceNotEmptyError: it still has topics (nothing is deleted).
    """
    if not await namespace_exists(store, namespace):
        raise NamespaceNotFoundError("Namespace does not exist")
    topics, partitioned = await stored_topics(store, namespace)
    if topics or partitioned:
        raise NamespaceNotEmptyError("Cannot delete non empty namespace")
    tenant, _, local = namespace.partition("/")
    containers = [
        managed_ledger_path(f"{namespace}/persistent"),
        managed_ledger_path(namespace),
        f"{PARTITIONED_TOPICS}/{tenant}/{local}/persistent",
        f"{PARTITIONED_TOPICS}/{tenant}/{local}",
    ]
    ops: list[Op] = [DeleteOp(path) for path in containers if await store.exists(path) is not None]
    ops.append(DeleteOp(policies_path(namespace)))
    try:
        await store.multi(ops)
    except NotEmptyError:  # a topic was made meanwhile
        raise NamespaceNotEmptyError("Cannot delete non empty namespace") from None
    except NotFoundError:
        if not await namespace_exists(store, namespace):
            raise NamespaceNotFoundError("Namespace does not exist") from None
        raise
    await _delete_if_empty(store, f"{OWNERSHIP_ROOT}/{namespace}")
    # Schemas outlive their topics only by being uploaded for topics never made.
    await store.delete_recursive(namespace_schemas_path(namespace))
    await store.delete_recursive(f"{TOPIC_POLICIES}/{namespace}")
    log.info("deleted namespace %s", namespace)


async def _delete_if_empty(store: MetadataStore, path: str) -> None:
    """Tidy a container node nobody needs any more (kept if something is under it)."""
    try:
        await store.delete(path)
    except (NotFoundError, NotEmptyError):
        pass
