"""``/lookup/v2/topic/persistent/...`` over HTTP (``admin_app``): LookupData of the owner, a
bundle nobody owns assigned as the binary protocol's lookup assigns it (here, or a 307 to
the least-loaded broker with ``authoritative=true``), the topic's bundle by its namespace's
own bundle count, and refusals that write nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from admin_app import ME, App, admin_app

from stripemq.broker.ownership import BROKERS_ROOT, BrokerInfo, bundle_of
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName
from stripemq.testing.metadata import metadata_tree

LOOKUP = "/lookup/v2/topic/persistent/public/default"
REMOTE = BrokerInfo("10.0.0.2:6650", "pulsar://10.0.0.2:6650", "http://10.0.0.2:8080")


@pytest.fixture
async def app(store: MetadataStore) -> AsyncIterator[App]:
    async with admin_app(store) as served:
        yield served


def unowned(app: App, prefix: str) -> TopicName:
    """A topic of public/default whose bundle this broker does not own."""
    return next(
        name
        for name in (TopicName.parse(f"public/default/{prefix}{i}") for i in range(100))
        if bundle_of(name) not in app.service.ownership.owned
    )


async def test_lookup_answers_the_owners_urls(app: App) -> None:
    status, data = await app.call("GET", f"{LOOKUP}/mine")
    assert status == 200
    assert data == {
        "brokerUrl": ME.service_url,
        "brokerUrlTls": "",
        "httpUrl": app.ctx.web_url,
        "httpUrlTls": "",
        "nativeUrl": ME.service_url,
    }
    assert bundle_of(TopicName.parse("public/default/mine")) in app.service.ownership.owned
    far = unowned(app, "far")  # a bundle another broker owns: its URLs
    await app.store.create(bundle_of(far).path, REMOTE.encode(), ephemeral=True)
    status, data = await app.call("GET", f"{LOOKUP}/{far.local_name}")
    assert (status, data["brokerUrl"], data["httpUrl"]) == (200, REMOTE.service_url, REMOTE.web_url)


async def test_an_unowned_topic_is_redirected_to_the_least_loaded(app: App) -> None:
    await app.call("GET", f"{LOOKUP}/mine")  # this broker owns a bundle now
    await app.store.create(f"{BROKERS_ROOT}/{REMOTE.broker_id}", REMOTE.encode(0), ephemeral=True)
    path = f"{LOOKUP}/{unowned(app, 't').local_name}"
    response = await app.client.get(f"{path}?x=a%20b", allow_redirects=False)
    assert response.status == 307
    assert response.headers["Location"] == f"{REMOTE.web_url}{path}?x=a%20b&authoritative=true"
    status, data = await app.call("GET", f"{path}?authoritative=true")
    assert status == 200 and data["brokerUrl"] == ME.service_url


async def test_the_bundle_follows_the_namespaces_bundle_count(app: App) -> None:
    assert (await app.call("PUT", "/admin/v2/namespaces/public/eight", {"bundles": 8}))[0] == 204
    name = TopicName.parse("persistent://public/eight/b8")
    assert bundle_of(name, 8) != bundle_of(name)
    assert await app.call("GET", "/lookup/v2/topic/persistent/public/eight/b8/bundle") == (
        200,
        bundle_of(name, 8).name,
    )
    assert (await app.call("GET", "/lookup/v2/topic/persistent/public/eight/b8"))[0] == 200
    assert bundle_of(name, 8) in app.service.ownership.owned
    assert await app.call("GET", f"{LOOKUP}/mine/bundle") == (
        200,
        bundle_of(TopicName.parse("public/default/mine")).name,
    )


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/lookup/v2/topic/persistent/nobody/default/t", 404),
        ("/lookup/v2/topic/persistent/public/none/t", 404),
        ("/lookup/v2/topic/persistent/public/none/t/bundle", 404),
        ("/lookup/v2/topic/persistent/pub lic/default/t", 412),
    ],
)
async def test_refusals_write_nothing(app: App, path: str, status: int) -> None:
    before = await metadata_tree(app.store)
    answer = await app.call("GET", path)
    assert answer[0] == status and answer[1]["reason"]
    assert await metadata_tree(app.store) == before


async def test_lookup_answers_the_owners_tls_urls(app: App) -> None:
    secure = BrokerInfo(
        "10.0.0.3:6650",
        "pulsar://10.0.0.3:6650",
        "http://10.0.0.3:8080",
        "pulsar+ssl://10.0.0.3:6651",
        "https://10.0.0.3:8443",
    )
    far = unowned(app, "secure")
    await app.store.create(bundle_of(far).path, secure.encode(), ephemeral=True)
    status, data = await app.call("GET", f"{LOOKUP}/{far.local_name}")
    assert status == 200
    assert data == {
        "brokerUrl": secure.service_url,
        "brokerUrlTls": secure.service_url_tls,
        "httpUrl": secure.web_url,
        "httpUrlTls": secure.web_url_tls,
        "nativeUrl": secure.service_url,
    }
