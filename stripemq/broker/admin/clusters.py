"""``/admin/v2/clusters``: Pulsar's clusters resource.

- ``GET /admin/v2/clusters``: the cluster names (a JSON list; ``global`` is left out).
- ``GET /admin/v2/clusters/{cluster}``: its ``ClusterData`` (``serviceUrl``,
  ``brokerServiceUrl``, ...); 404 if unknown.
- ``PUT`` creates it (409 if it exists, 412 for a bad name), ``POST`` replaces its data
  (404 if unknown), ``DELETE`` removes it (404 if unknown; as in Pulsar, tenants that list
  it in ``allowedClusters`` do not keep it). Writes answer 204; a body that is not JSON
  400, a body of the wrong shape 400 (Pulsar's "Bad request parameter").
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from stripemq.broker.admin.rest import (
    AdminContext,
    RestError,
    conflict,
    name_in_path,
    no_content,
    ok_json,
    read_json,
)
from stripemq.broker.cluster_metadata import (
    ClusterData,
    create_cluster,
    delete_cluster,
    list_clusters,
    read_cluster,
    update_cluster,
)
from stripemq.errors import NodeExistsError

BASE = "/admin/v2/clusters"


def parse_cluster_data(body: object) -> ClusterData:
    """A ``ClusterData`` request body (sans-IO); ``RestError`` 400 when it is not one."""
    if not isinstance(body, Mapping):
        raise RestError(400, "cluster data is required (a JSON object)")
    try:
        return ClusterData.from_json(body)
    except ValueError as exc:
        raise RestError(400, f"invalid cluster data: {exc}") from None


def cluster_name(request: web.Request) -> str:
    """The ``{cluster}`` of the path; 412 unless it is a valid name."""
    return name_in_path(request, "cluster")


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    """Add the clusters resource's routes to ``router``."""

    async def get_clusters(request: web.Request) -> web.Response:
        return ok_json(await list_clusters(ctx.store))

    async def get_cluster(request: web.Request) -> web.Response:
        data, _ = await read_cluster(ctx.store, cluster_name(request))
        return ok_json(data.to_json())

    async def create(request: web.Request) -> web.Response:
        cluster = cluster_name(request)
        data = parse_cluster_data(await read_json(request, required=False))
        try:
            await create_cluster(ctx.store, cluster, data)
        except NodeExistsError:
            raise conflict("Cluster already exists") from None
        return no_content()

    async def update(request: web.Request) -> web.Response:
        cluster = cluster_name(request)
        data = parse_cluster_data(await read_json(request, required=False))
        await update_cluster(ctx.store, cluster, data)
        return no_content()

    async def delete(request: web.Request) -> web.Response:
        await delete_cluster(ctx.store, cluster_name(request))
        return no_content()

    router.add_get(BASE, get_clusters)
    router.add_get(f"{BASE}/{{cluster}}", get_cluster)
    router.add_put(f"{BASE}/{{cluster}}", create)
    router.add_post(f"{BASE}/{{cluster}}", update)
    router.add_delete(f"{BASE}/{{cluster}}", delete)
