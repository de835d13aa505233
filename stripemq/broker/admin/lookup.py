"""``/lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}``: Pulsar's HTTP lookup.

Answers Pulsar's LookupData for the broker serving the topic: ``brokerUrl`` and
``nativeUrl`` (its ``pulsar://`` service URL), ``httpUrl`` (its web service), and
``brokerUrlTls`` and ``httpUrlTls`` (its ``pulsar+ssl://`` and ``https://`` URLs; empty for
a broker without TLS listeners). A topic whose bundle nobody owns is assigned as the binary
protocol's LOOKUP assigns it (``rest.serving_broker``): here when ``?authoritative=true`` or
when this broker is the least loaded, otherwise the request is redirected (307) to the
least-loaded broker with ``authoritative=true`` (to its ``https://`` URL when the request
came over HTTPS and it has one), which takes it. An unknown tenant or namespace answers 404.
``.../bundle`` answers the topic's bundle range (``0x00000000_0x40000000``), by the
namespace's own bundle count.
"""

from __future__ import annotations

from dataclasses import replace

from aiohttp import web

from stripemq.broker.admin.rest import (
    AdminContext,
    ok_json,
    redirect_to_broker,
    serving_broker,
    topic_of,
)
from stripemq.broker.ownership import BrokerInfo


def lookup_data(info: BrokerInfo) -> dict[str, str]:
    """Pulsar's LookupData JSON for a broker."""
    return {
        "brokerUrl": info.service_url,
        "brokerUrlTls": info.service_url_tls,
        "httpUrl": info.web_url,
        "httpUrlTls": info.web_url_tls,
        "nativeUrl": info.service_url,
    }


def add_routes(router: web.UrlDispatcher, ctx: AdminContext) -> None:
    """Add this resource's routes to ``router``."""

    async def lookup(request: web.Request) -> web.Response:
        owner, picked = await serving_broker(ctx, request, topic_of(request))
        if picked and owner.web_url:
            raise redirect_to_broker(owner, request, authoritative=True)
        me = ctx.service.me
        if owner.service_url == me.service_url:  # with this broker's TLS URLs
            owner = replace(owner, service_url_tls=me.service_url_tls, web_url_tls=me.web_url_tls)
        return ok_json(lookup_data(owner))

    async def bundle(request: web.Request) -> web.Response:
        return web.Response(text=(await ctx.service.bundle_of(topic_of(request))).name)

    base = "/lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}"
    router.add_get(base, lookup)
    router.add_get(base + "/bundle", bundle)
