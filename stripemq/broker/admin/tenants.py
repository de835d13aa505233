"""``/admin/v2/tenants``: Pulsar's tenants resource.

- ``GET /admin/v2/tenants``: the tenant names.
- ``PUT /admin/v2/tenants/{tenant}`` with ``{"adminRoles": [...], "allowedClusters": [...]}``
  creates it: 412 for a bad name, for no cluster ("Clusters can not be empty") or an
  unknown one ("Clusters [...] do not exist"), 409 if it exists.
- ``GET`` answers its ``TenantInfo`` (404 if unknown); ``POST`` replaces it (404 if
  unknown). As in Pulsar, dropping a cluster from ``allowedClusters`` is not refused for
  the namespaces that replicate to it (Pulsar only checks V1 namespaces, which are named
  after their cluster; stripemq has none).
- ``DELETE`` removes it: 409 "The tenant still has active namespaces" while it has some;
  with ``?force=true`` its namespaces are deleted first, each as ``DELETE
  /admin/v2/namespaces/{tenant}/{ns}?force=true`` deletes it (their topics with them).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from stripemq.broker.admin.namespaces import delete_namespace_fully
from stripemq.broker.admin.rest import (
    AdminContext,
    RestError,
    conflict,
    flag,
    name_in_path,
    no_content,
    ok_json,
    precondition_failed,
    read_json,
)
from stripemq.broker.cluster_metadata import GLOBAL_CLUSTER, list_clusters
from stripemq.broker.namespaces import (
    TenantInfo,
    create_tenant,
    delete_tenant,
    list_namespaces,
    list_tenants,
    read_tenant,
    update_tenant,
)
from stripemq.errors import NodeExistsError
from stripemq.metadata import MetadataStore

BASE = "/admin/v2/tenants"


def parse_tenant_info(body: object) -> TenantInfo:
    """A ``TenantInfo`` request body (sans-IO): lists of strings under Pulsar's names.

    Raises ``RestError`` 400 for a body of the wrong shape, 412 for no cluster."""
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        raise RestError(400, "tenant info must be a JSON object")
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("adminRoles", "allowedClusters"):
        value = body.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RestError(400, f"{key} must be a list of strings, not {value!r}")
        lists[key] = tuple(dict.fromkeys(value))  # a set in Pulsar; first order kept
    clusters = lists["allowedClusters"]
    if not clusters or any(not c.strip() for c in clusters):
        raise precondition_failed("Clusters can not be empty")
    return TenantInfo(admin_roles=lists["adminRoles"], allowed_clusters=clusters)


async def check_clusters_exist(store: MetadataStore, info: TenantInfo) -> None:
    """412 naming the clusters of ``info`` that do not exist (``global`` always does)."""
    known = set(await list_clusters(store)) | {GLOBAL_CLUSTER}
    missing = [c for c in info.allowed_clusters if c not in known]
    if missing:
        raise precondition_failed(f"Clusters [{', '.join(missing)}] do not exist")


def tenant_name(request: web.Request) -> str:
    """The ``{tenant}`` of the path; 412 unless it is a valid name."""
    return name_in_path(request, "tenant")


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    """Add the tenants resource's routes to ``router``."""

    async def get_tenants(request: web.Request) -> web.Response:
        return ok_json(await list_tenants(ctx.store))

    async def get_tenant(request: web.Request) -> web.Response:
        info, _ = await read_tenant(ctx.store, tenant_name(request))
        return ok_json(info.to_json())

    async def create(request: web.Request) -> web.Response:
        tenant = tenant_name(request)
        info = parse_tenant_info(await read_json(request, required=False))
        await check_clusters_exist(ctx.store, info)
        try:
            await create_tenant(ctx.store, tenant, info)
        except NodeExistsError:
            raise conflict("Tenant already exists") from None
        return no_content()

    async def update(request: web.Request) -> web.Response:
        tenant = tenant_name(request)
        info = parse_tenant_info(await read_json(request, required=False))
        await check_clusters_exist(ctx.store, info)
        await update_tenant(ctx.store, tenant, info)
        return no_content()

    async def delete(request: web.Request) -> web.Response:
        tenant = tenant_name(request)
        if flag(request, "force"):
            for namespace in await list_namespaces(ctx.store, tenant):
                await delete_namespace_fully(ctx, namespace, force=True)
        await delete_tenant(ctx.store, tenant)
        return no_content()

    router.add_get(BASE, get_tenants)
    router.add_get(f"{BASE}/{{tenant}}", get_tenant)
    router.add_put(f"{BASE}/{{tenant}}", create)
    router.add_post(f"{BASE}/{{tenant}}", update)
    router.add_delete(f"{BASE}/{{tenant}}", delete)
