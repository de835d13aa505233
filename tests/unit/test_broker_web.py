"""``stripemq.broker.web``: the application serves every resource, a trailing slash is the
same path (rewritten, not redirected, as Jersey serves it), and ``WebService`` binds its
port (0: a free one, reported back)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from stripemq.broker.admin.rest import AdminContext
from stripemq.broker.cluster_metadata import initialize_cluster_metadata
from stripemq.broker.config import BrokerConfig
from stripemq.broker.web import WebService, build_app
from stripemq.metadata import MetadataStore


def context(store: MetadataStore) -> AdminContext:
    return AdminContext(BrokerConfig(), "", lambda: None, lambda: store)


async def test_a_trailing_slash_is_the_same_path(store: MetadataStore) -> None:
    await initialize_cluster_metadata(store, "standalone")
    async with TestClient(TestServer(build_app(context(store)))) as client:
        plain = await client.get("/admin/v2/tenants", allow_redirects=False)
        slashed = await client.get("/admin/v2/tenants/", allow_redirects=False)
        assert (slashed.status, await slashed.json()) == (200, await plain.json())
        # A write keeps its method and body; the path's parameters are the stripped path's.
        info = {"adminRoles": [], "allowedClusters": ["standalone"]}
        assert (await client.put("/admin/v2/tenants/acme/", json=info)).status == 204
        response = await client.get("/admin/v2/tenants/acme//?x=1", allow_redirects=False)
        assert (response.status, await response.json()) == (200, info)
        # Still unknown without the slash: Pulsar's JSON 404.
        response = await client.get("/admin/v2/nothing/", allow_redirects=False)
        assert response.status == 404
        assert await response.json() == {"reason": "Not Found"}


async def test_the_web_service_reports_the_port_it_bound(store: MetadataStore) -> None:
    service = WebService(lambda url: context(store), "127.0.0.1", 0, "127.0.0.1")
    await service.start()
    try:
        assert service.port != 0
        assert service.ctx is not None and service.ctx.web_url == service.web_url
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{service.web_url}/admin/v2/brokers/ready") as response:
                assert response.status == 503  # no broker service behind it
    finally:
        await service.stop()


@pytest.mark.parametrize(
    "path", ["/metrics", "/admin/v2/clusters", "/lookup/v2/topic/persistent/a/b/c"]
)
async def test_every_resource_is_routed(store: MetadataStore, path: str) -> None:
    async with TestClient(TestServer(build_app(context(store)))) as client:
        response = await client.get(path, allow_redirects=False)
        assert response.status != 404, path
