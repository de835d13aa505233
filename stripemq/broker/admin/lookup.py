"""``/lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}``: Pulsar's HTTP lookup.

Answers Pulsar's LookupData for the broker serving the topic: ``brokerUrl`` and
``nativeUrl`` (its ``pulsar://`` service URL), ``httpUrl`` (its web service), and the TLS
URLs empty. A topic whose bundle nobody owns is assigned as the binary protocol's LOOKUP
assigns it (``rest.serving_broker``): here when ``?authoritative=true`` or when this broker
is the least loaded, otherwise the request is redirected (307) to the least-loaded broker
with ``authoritative=true``, which takes it. An unknown tenant or namespace answers 404.
``.../bundle`` answers the topic's bundle range (``0x00000000_0x40000000``), by the
namespace's own bundle count.
"""

from __future__ import annotations

from aiohttp import web

from stripemq.broker.admin.rest import (
    AdminContext,
    ok_json,
    redirect_to,
    serving_broker,
    topic_of,
)
from stripemq.broker.ownership import BrokerInfo


def lookup_data(info: BrokerInfo) -> dict[str, str]:
    """Pulsar's LookupData JSON for a broker."""
    return {
        "brokerUrl": info.service_url,
        "brokerUrlTls": "",
        "httpUrl": info.web_url,
        "httpUrlTls": "",
        "nativeUrl": info.service_url,
    }


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    """Add this resource's routes to ``router``."""

    async def lookup(request: web.Request) -> web.Response:
        owner, picked = await serving_broker(ctx, request, topic_of(request))
        if picked and owner.web_url:
            raise redirect_to(owner.web_url, request, authoritative=True)
        return ok_json(lookup_data(owner))

    async def bundle(request: web.Request) -> web.Response:
        return web.Response(text=(await ctx.service.bundle_of(topic_of(request))).name)

    base = "/lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}"
    router.add_get(base, lookup)
    router.add_get(base + "/bundle", bundle)
