"""``/admin/v2/namespaces`` over HTTP (aiohttp's test server) on a memory:// store, with a
real ``BrokerService`` over an in-memory ledger client (``ledger_fakes``) and, where a
bundle belongs to another broker, a stand-in for that broker's admin API that records
what it is asked. Every endpoint: namespaces, topics, unload, clear-backlog and each
policy; every refusal writes nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from admin_app import ME, admin_app
from aiohttp import web
from aiohttp.test_utils import TestClient

from stripemq.broker.admin.namespaces import parse_bundle, policy_bundles, retention_fits_quota
from stripemq.broker.admin.rest import RestError
from stripemq.broker.namespaces import (
    TenantInfo,
    create_tenant,
    namespace_exists,
    read_policies,
)
from stripemq.broker.ownership import FULL_RANGE, BrokerInfo, Bundle, bundle_of
from stripemq.broker.partitions import create_partitioned_topic
from stripemq.broker.policies import BacklogQuota, Policies, RetentionPolicies
from stripemq.broker.service import BrokerService
from stripemq.errors import BrokerError
from stripemq.metadata import MetadataStore
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.initial_position import InitialPosition
from stripemq.proto.topic_name import TopicName
from stripemq.testing.metadata import metadata_tree

NS = "/admin/v2/namespaces"
DEFAULT = f"{NS}/public/default"


@dataclass
class Remote:
    """Another broker's admin API as far as these tests need it: what it was asked."""

    url: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    subscriptions: list[str] = field(default_factory=lambda: ["s1", "s2"])
    info: BrokerInfo = field(
        default_factory=lambda: BrokerInfo("remote:6650", "pulsar://remote:6650")
    )

    async def handle(self, request: web.Request) -> web.Response:
        self.calls.append((request.method, request.path))
        if request.path.endswith("/subscriptions"):
            return web.json_response(self.subscriptions)
        return web.Response(status=204)

    async def own(self, store: MetadataStore, bundle: Bundle) -> None:
        info = BrokerInfo(self.info.broker_id, self.info.service_url, self.url)
        await store.create(bundle.path, info.encode(), ephemeral=True)


@dataclass
class Admin:
    client: TestClient
    service: BrokerService
    store: MetadataStore
    remote: Remote

    async def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Any:
        """(status, decoded body or None)."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        response = await self.client.request(method, path, data=data)
        text = await response.read()
        return response.status, (json.loads(text) if text else None)

    async def topic_with_backlog(
        self, name: str, subs: tuple[str, ...] = ("s1",), n: int = 3
    ) -> Any:
        topic = await self.service.get_topic(TopicName.parse(name))
        for sub in subs:
            await topic.subscribe(sub, pb.CommandSubscribe.Shared, InitialPosition.Earliest)
        for i in range(n):
            await topic.ml.add_entry(f"m{i}".encode())
        return topic


@pytest.fixture
async def admin(store: MetadataStore) -> AsyncIterator[Admin]:
    remote = Remote()
    async with admin_app(store, remote=remote.handle) as app:
        remote.url = app.remote_url
        yield Admin(app.client, app.service, store, remote)


# --------------------------------------------------------------------------- namespaces


async def test_list_create_get_delete(admin: Admin) -> None:
    assert await admin.call("GET", f"{NS}/public") == (200, ["public/default"])
    assert (await admin.call("PUT", f"{NS}/public/orders"))[0] == 204
    assert await admin.call("GET", f"{NS}/public") == (200, ["public/default", "public/orders"])
    status, policies = await admin.call("GET", f"{NS}/public/orders")
    assert status == 200
    assert policies["bundles"]["numBundles"] == 4
    assert len(policies["bundles"]["boundaries"]) == 5
    assert policies["replication_clusters"] == ["standalone"]
    assert policies["retention_policies"] is None
    assert (await admin.call("DELETE", f"{NS}/public/orders"))[0] == 204
    assert (await admin.call("GET", f"{NS}/public/orders"))[0] == 404
    assert not await namespace_exists(admin.store, "public/orders")


@pytest.mark.parametrize(
    ("body", "bundles"),
    [
        ({"bundles": {"numBundles": 8}}, 8),
        ({"bundles": {"boundaries": None, "numBundles": 2}}, 2),
        ({"bundles": {"boundaries": ["0x00000000", "0x7fffffff", "0xffffffff"]}}, 2),
        # What Java's admin client sends for createNamespace(ns): a default Policies.
        ({"bundles": None, "replication_clusters": [], "backlog_quota_map": {}, "x": 1}, 4),
        ({"bundles": {"numBundles": 0}}, 4),
    ],
)
async def test_create_with_policies(admin: Admin, body: object, bundles: int) -> None:
    assert (await admin.call("PUT", f"{NS}/public/b", body))[0] == 204
    policies, _ = await read_policies(admin.store, "public/b")
    assert policies.bundles == bundles
    assert policies.replication_clusters == ("standalone",)


async def test_create_with_a_policy_in_the_body_keeps_it(admin: Admin) -> None:
    body = {"retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}}
    assert (await admin.call("PUT", f"{NS}/public/kept", body))[0] == 204
    assert await admin.call("GET", f"{NS}/public/kept/retention") == (
        200,
        {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10},
    )


@pytest.mark.parametrize(
    ("path", "body", "raw", "status"),
    [
        (f"{NS}/public/default", None, None, 409),
        (f"{NS}/nobody/ns", None, None, 404),
        (f"{NS}/public/bad%20name", None, None, 412),
        (f"{NS}/bad*tenant/ns", None, None, 412),
        (f"{NS}/public/fresh", None, b"{oops", 400),
        (f"{NS}/public/fresh", [1], None, 400),
        (f"{NS}/public/fresh", {"bundles": {"numBundles": -1}}, None, 412),
        (f"{NS}/public/fresh", {"bundles": {"numBundles": 100000}}, None, 412),
        (f"{NS}/public/fresh", {"message_ttl_in_seconds": -5}, None, 412),
        (f"{NS}/public/fresh", {"subscription_expiration_time_minutes": -1}, None, 412),
        (f"{NS}/public/fresh", {"replication_clusters": ["elsewhere"]}, None, 403),
        # Fields of the wrong type: 412, not a 500 nor a 403 for clusters "s", "t", ...
        (f"{NS}/public/fresh", {"replication_clusters": 5}, None, 412),
        (f"{NS}/public/fresh", {"replication_clusters": "standalone"}, None, 412),
        (f"{NS}/public/fresh", {"backlog_quota_map": [1]}, None, 412),
        (f"{NS}/public/fresh", {"publishMaxMessageRate": [1]}, None, 412),
        (f"{NS}/public/fresh", {"clusterDispatchRate": 7}, None, 412),
    ],
)
async def test_bad_creations_are_refused(
    admin: Admin, path: str, body: object, raw: bytes | None, status: int
) -> None:
    before = await metadata_tree(admin.store)
    got, answer = await admin.call("PUT", path, body, raw)
    assert got == status
    assert answer["reason"]
    assert await metadata_tree(admin.store) == before


async def test_a_namespace_of_a_tenant_that_does_not_allow_the_cluster_is_refused(
    admin: Admin,
) -> None:
    await admin.call("PUT", "/admin/v2/clusters/east", {})
    await create_tenant(admin.store, "eastern", TenantInfo(allowed_clusters=("east",)))
    before = await metadata_tree(admin.store)
    status, answer = await admin.call("PUT", f"{NS}/eastern/ns")
    assert status == 403
    assert "not in the list of allowed clusters" in answer["reason"]
    assert await metadata_tree(admin.store) == before


async def test_unknown_names_are_not_found_and_bad_ones_refused(admin: Admin) -> None:
    assert (await admin.call("GET", f"{NS}/nobody"))[0] == 404
    assert (await admin.call("GET", f"{NS}/bad*name"))[0] == 412
    for method in ("GET", "DELETE"):
        assert (await admin.call(method, f"{NS}/public/none"))[0] == 404
    assert await admin.call("GET", f"{NS}/public/none/topics") == (
        404,
        {"reason": "Namespace does not exist"},
    )
    assert (await admin.call("PUT", f"{NS}/public/none/unload"))[0] == 404
    assert (await admin.call("POST", f"{NS}/public/none/clearBacklog"))[0] == 404


async def test_a_namespace_with_topics_is_not_deleted(admin: Admin) -> None:
    await admin.call("PUT", f"{NS}/public/busy")
    await admin.service.get_topic(TopicName.parse("persistent://public/busy/t"))
    before = await metadata_tree(admin.store, "/stripemq/policies")
    status, answer = await admin.call("DELETE", f"{NS}/public/busy")
    assert status == 409
    assert answer == {"reason": "Cannot delete non empty namespace"}
    assert await metadata_tree(admin.store, "/stripemq/policies") == before
    assert admin.service.topics  # still served


async def test_a_namespace_with_a_partitioned_topic_is_not_deleted(admin: Admin) -> None:
    await admin.call("PUT", f"{NS}/public/parts")
    await create_partitioned_topic(admin.store, TopicName.parse("public/parts/p"), 2)
    assert (await admin.call("DELETE", f"{NS}/public/parts"))[0] == 409
    assert await namespace_exists(admin.store, "public/parts")


async def test_force_deletes_the_topics_first(admin: Admin) -> None:
    await admin.call("PUT", f"{NS}/public/forced")
    await admin.topic_with_backlog("persistent://public/forced/plain")
    await create_partitioned_topic(admin.store, TopicName.parse("public/forced/p"), 2)
    await admin.service.get_topic(TopicName.parse("persistent://public/forced/p-partition-0"))
    assert (await admin.call("DELETE", f"{NS}/public/forced?force=true"))[0] == 204
    assert not await namespace_exists(admin.store, "public/forced")
    assert admin.service.topics == {}
    assert "forced" not in await admin.store.children("/stripemq/managed-ledgers/public")
    assert await admin.store.exists("/stripemq/partitioned-topics/public/forced") is None


async def test_deleting_a_namespace_unloads_its_bundles(admin: Admin) -> None:
    await admin.call("PUT", f"{NS}/public/gone")
    bundle = Bundle("public/gone", 0, FULL_RANGE // 4)
    assert await admin.service.ownership.try_acquire(bundle) == ME.service_url
    assert (await admin.call("DELETE", f"{NS}/public/gone"))[0] == 204
    assert admin.service.ownership.owned == set()
    assert await admin.store.exists("/stripemq/ownership/public/gone") is None


# --------------------------------------------------------------------------- topics


async def test_topics_lists_topics_and_every_partition(admin: Admin) -> None:
    await admin.call("PUT", f"{NS}/public/listed")
    assert await admin.call("GET", f"{NS}/public/listed/topics") == (200, [])
    await admin.service.get_topic(TopicName.parse("persistent://public/listed/plain"))
    await admin.service.get_topic(TopicName.parse("persistent://public/listed/a%2Fb c"))
    await create_partitioned_topic(admin.store, TopicName.parse("public/listed/p"), 3)
    await admin.service.get_topic(TopicName.parse("persistent://public/listed/p-partition-1"))
    status, topics = await admin.call("GET", f"{NS}/public/listed/topics")
    assert status == 200
    assert topics == [
        "persistent://public/listed/a%2Fb c",
        "persistent://public/listed/p-partition-0",
        "persistent://public/listed/p-partition-1",
        "persistent://public/listed/p-partition-2",
        "persistent://public/listed/plain",
    ]


# --------------------------------------------------------------------------- unload


async def test_unload_releases_the_bundles_served_here(admin: Admin) -> None:
    name = TopicName.parse("persistent://public/default/served")
    await admin.service.get_topic(name)
    assert bundle_of(name) in admin.service.ownership.owned
    assert (await admin.call("PUT", f"{DEFAULT}/unload"))[0] == 204
    assert admin.service.ownership.owned == set()
    assert admin.service.topics == {}
    assert await admin.store.children("/stripemq/ownership/public/default") == []


async def test_unload_asks_the_owner_of_a_bundle_served_elsewhere(admin: Admin) -> None:
    here = TopicName.parse("persistent://public/default/here")
    await admin.service.get_topic(here)
    mine = bundle_of(here)
    theirs = next(b for b in policy_bundles("public/default", Policies()) if b != mine)
    await admin.remote.own(admin.store, theirs)
    assert (await admin.call("PUT", f"{DEFAULT}/unload"))[0] == 204
    assert admin.remote.calls == [("PUT", f"{DEFAULT}/{theirs.name}/unload")]
    assert admin.service.ownership.owned == set()


async def test_unloading_one_bundle(admin: Admin) -> None:
    here = TopicName.parse("persistent://public/default/one")
    await admin.service.get_topic(here)
    mine = bundle_of(here)
    others = [b for b in policy_bundles("public/default", Policies()) if b != mine]
    # Nobody owns it: nothing to do.
    assert (await admin.call("PUT", f"{DEFAULT}/{others[0].name}/unload"))[0] == 204
    # Another broker owns it: 307 to that broker, same path.
    await admin.remote.own(admin.store, others[1])
    response = await admin.client.put(f"{DEFAULT}/{others[1].name}/unload", allow_redirects=False)
    assert response.status == 307
    assert response.headers["Location"] == f"{admin.remote.url}{DEFAULT}/{others[1].name}/unload"
    # Served here: unloaded.
    assert (await admin.call("PUT", f"{DEFAULT}/{mine.name}/unload"))[0] == 204
    assert mine not in admin.service.ownership.owned
    assert admin.service.topics == {}


@pytest.mark.parametrize(
    "bundle", ["nonsense", "0x0_", "0x10_0x05", "0x00000000_0x00000010", "0xzz_0x10"]
)
async def test_a_bundle_that_is_not_the_namespaces_is_refused(admin: Admin, bundle: str) -> None:
    before = await metadata_tree(admin.store)
    status, answer = await admin.call("PUT", f"{DEFAULT}/{bundle}/unload")
    assert status == 412
    assert answer["reason"]
    assert await metadata_tree(admin.store) == before


def test_bundle_names_read_back() -> None:
    for bundle in policy_bundles("t/ns", Policies(bundles=8)):
        assert parse_bundle("t/ns", bundle.name) == bundle
    with pytest.raises(RestError):
        parse_bundle("t/ns", "0x1")


# --------------------------------------------------------------------------- clear backlog


async def test_clear_backlog_empties_every_subscription_here(admin: Admin) -> None:
    a = await admin.topic_with_backlog("persistent://public/default/a", ("s1", "s2"))
    b = await admin.topic_with_backlog("persistent://public/default/b", ("s1",))
    assert a.ml.cursors["s1"].backlog == 3
    assert (await admin.call("POST", f"{DEFAULT}/clearBacklog"))[0] == 204
    for topic in (a, b):
        assert all(c.backlog == 0 for c in topic.ml.cursors.values())


async def test_clear_backlog_of_one_subscription(admin: Admin) -> None:
    a = await admin.topic_with_backlog("persistent://public/default/a", ("s1", "s2"))
    b = await admin.topic_with_backlog("persistent://public/default/b", ("s2",))
    assert (await admin.call("POST", f"{DEFAULT}/clearBacklog/s1"))[0] == 204
    assert a.ml.cursors["s1"].backlog == 0
    assert a.ml.cursors["s2"].backlog == 3
    assert b.ml.cursors["s2"].backlog == 3


async def test_clear_backlog_of_a_topic_not_loaded_in_a_bundle_served_here(admin: Admin) -> None:
    name = TopicName.parse("persistent://public/default/reloaded")
    topic = await admin.topic_with_backlog(str(name), ("s1",))
    await admin.service.unload_topic(name)  # the bundle stays ours, the topic is closed
    assert str(name) not in admin.service.topics
    assert (await admin.call("POST", f"{DEFAULT}/clearBacklog"))[0] == 204
    topic = await admin.service.get_topic(name)
    assert topic.ml.cursors["s1"].backlog == 0


async def test_clear_backlog_asks_the_owner_of_bundles_served_elsewhere(admin: Admin) -> None:
    name = TopicName.parse("persistent://public/default/far away")
    await admin.topic_with_backlog(str(name))
    await admin.service.unload(bundle_of(name))
    await admin.remote.own(admin.store, bundle_of(name))
    assert (await admin.call("POST", f"{DEFAULT}/clearBacklog"))[0] == 204
    bundle_path = f"{DEFAULT}/{bundle_of(name).name}"
    assert admin.remote.calls == [("POST", f"{bundle_path}/clearBacklog")]
    admin.remote.calls.clear()
    assert (await admin.call("POST", f"{DEFAULT}/clearBacklog/s9"))[0] == 204
    assert admin.remote.calls == [("POST", f"{bundle_path}/clearBacklog/s9")]


async def test_clear_backlog_leaves_bundles_nobody_serves_alone(admin: Admin) -> None:
    """As in Pulsar: nothing of such a bundle is loaded, and it is not taken for this."""
    name = TopicName.parse("persistent://public/default/idle")
    topic = await admin.topic_with_backlog(str(name))
    await admin.service.unload(bundle_of(name))
    before = await metadata_tree(admin.store)
    assert (await admin.call("POST", f"{DEFAULT}/clearBacklog"))[0] == 204
    assert (await admin.call("POST", f"{DEFAULT}/{bundle_of(name).name}/clearBacklog"))[0] == 204
    assert await metadata_tree(admin.store) == before  # no bundle taken, no cursor moved
    assert str(name) not in admin.service.topics
    assert topic.ml.cursors["s1"].backlog == 3


async def test_unsubscribe_deletes_the_subscription_from_every_topic(admin: Admin) -> None:
    a = await admin.topic_with_backlog("persistent://public/default/a", ("audit", "keep"))
    b = await admin.topic_with_backlog("persistent://public/default/b", ("audit",))
    c = await admin.topic_with_backlog("persistent://public/default/c", ("keep",))
    assert (await admin.call("POST", f"{DEFAULT}/unsubscribe/audit"))[0] == 204
    assert a.subscription_names() == ["keep"]
    assert b.subscription_names() == []
    assert c.subscription_names() == ["keep"]
    assert "audit" not in a.ml.cursors and "audit" not in b.ml.cursors


async def test_unsubscribe_of_one_bundle_and_of_bundles_served_elsewhere(admin: Admin) -> None:
    topics = [
        await admin.topic_with_backlog(f"persistent://public/default/u{i}", ("audit",))
        for i in range(8)
    ]
    bundle = bundle_of(topics[0].topic_name)
    assert (await admin.call("POST", f"{DEFAULT}/{bundle.name}/unsubscribe/audit"))[0] == 204
    for topic in topics:
        gone = bundle_of(topic.topic_name) == bundle
        assert topic.subscription_names() == ([] if gone else ["audit"]), topic.name
    far = TopicName.parse("persistent://public/default/far")
    await admin.topic_with_backlog(str(far), ("audit",))
    await admin.service.unload(bundle_of(far))
    await admin.remote.own(admin.store, bundle_of(far))
    assert (await admin.call("POST", f"{DEFAULT}/unsubscribe/audit"))[0] == 204
    assert ("POST", f"{DEFAULT}/{bundle_of(far).name}/unsubscribe/audit") in admin.remote.calls


async def test_unsubscribe_refuses_a_subscription_with_consumers(admin: Admin) -> None:
    topic = await admin.topic_with_backlog("persistent://public/default/busy", ("audit",))
    subscription = await topic.subscription("audit")
    assert subscription is not None
    subscription.consumers[1] = cast(Any, object())  # a connected consumer, as far as it goes
    status, answer = await admin.call("POST", f"{DEFAULT}/unsubscribe/audit")
    assert status == 412 and "consumers" in answer["reason"]
    subscription.consumers.clear()
    assert "audit" in topic.subscription_names()


async def test_bundles_follow_the_namespaces_bundle_count(admin: Admin) -> None:
    """A namespace of 8 bundles is served in 8 bundles: its ownership, unload, lookup of a
    topic's bundle and clear-backlog all use the same split."""
    assert (await admin.call("PUT", f"{NS}/public/eight", {"bundles": {"numBundles": 8}}))[0] == 204
    name = TopicName.parse("persistent://public/eight/b8")
    eighth = bundle_of(name, 8)
    assert eighth != bundle_of(name)  # the default split (4) would name another range
    topic = await admin.topic_with_backlog(str(name))
    assert await admin.store.get(eighth.path) is not None  # the bundle taken is an 8th
    assert (await admin.call("PUT", f"{NS}/public/eight/{bundle_of(name).name}/unload"))[0] == 412
    assert str(name) in admin.service.topics
    assert (await admin.call("POST", f"{NS}/public/eight/{eighth.name}/clearBacklog"))[0] == 204
    assert topic.ml.cursors["s1"].backlog == 0
    assert (await admin.call("PUT", f"{NS}/public/eight/{eighth.name}/unload"))[0] == 204
    assert str(name) not in admin.service.topics
    assert await admin.store.get(eighth.path) is None


async def test_clear_backlog_of_one_bundle(admin: Admin) -> None:
    topics = [await admin.topic_with_backlog(f"persistent://public/default/t{i}") for i in range(8)]
    bundle = bundle_of(topics[0].topic_name)
    path = f"{DEFAULT}/{bundle.name}/clearBacklog"
    assert (await admin.call("POST", path))[0] == 204
    for topic in topics:
        expected = 0 if bundle_of(topic.topic_name) == bundle else 3
        assert topic.ml.cursors["s1"].backlog == expected, topic.name
    assert (await admin.call("POST", f"{path}/s1"))[0] == 204


# --------------------------------------------------------------------------- policies

CLUSTER_RATE = {
    "dispatchThrottlingRateInMsg": 100,
    "dispatchThrottlingRateInByte": 1024,
    "ratePeriodInSecond": 1,
    "relativeToPublishRate": False,
}
# path, a body, what GET answers after POSTing it, where the stored document keeps it.
POLICIES = [
    (
        "retention",
        {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
        {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
        "retention_policies",
    ),
    ("messageTTL", 3600, 3600, "message_ttl_in_seconds"),
    ("subscriptionExpirationTime", 90, 90, "subscription_expiration_time_minutes"),
    (
        "backlogQuota",
        {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"},
        {"limit": 1024, "limitSize": 1024, "limitTime": -1, "policy": "producer_exception"},
        "backlog_quota_map",
    ),
    ("deduplication", True, True, "deduplicationEnabled"),
    ("deduplication", False, False, "deduplicationEnabled"),
    (
        "publishRate",
        {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1000},
        {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1000},
        "publishMaxMessageRate",
    ),
    ("dispatchRate", CLUSTER_RATE, CLUSTER_RATE, "clusterDispatchRate"),
    ("subscriptionDispatchRate", CLUSTER_RATE, CLUSTER_RATE, "subscriptionDispatchRate"),
    (
        "autoTopicCreation",
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3},
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3},
        "autoTopicCreationOverride",
    ),
    (
        "autoTopicCreation",
        {"allowAutoTopicCreation": False},
        {"allowAutoTopicCreation": False, "topicType": "non-partitioned"},
        "autoTopicCreationOverride",
    ),
]


@pytest.mark.parametrize(("path", "body", "answer", "key"), POLICIES)
async def test_each_policy_is_set_read_and_removed(
    admin: Admin, path: str, body: object, answer: object, key: str
) -> None:
    url = f"{DEFAULT}/{path}"
    assert await admin.call("GET", url) == (204, None)
    assert (await admin.call("POST", url, body))[0] == 204
    assert await admin.call("GET", url) == (200, answer)
    _, document = await admin.call("GET", DEFAULT)
    assert document[key] not in (None, {})
    assert (await admin.call("DELETE", url))[0] == 204
    assert await admin.call("GET", url) == (204, None)
    _, document = await admin.call("GET", DEFAULT)
    assert document[key] in (None, {})


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 10}),
        ("retention", {"retentionTimeInMinutes": -2, "retentionSizeInMB": 10}),
        ("retention", {"retentionTimeInMinutes": "1h", "retentionSizeInMB": 10}),
        ("retention", [60, 10]),
        ("messageTTL", -1),
        ("messageTTL", "3600"),
        ("messageTTL", 1 << 40),
        ("messageTTL", True),
        ("backlogQuota", {"limitSize": 10, "policy": "drop_everything"}),
        ("backlogQuota", {"limitSize": -5, "policy": "producer_exception"}),
        ("deduplication", "yes"),
        ("deduplication", 1),
        ("publishRate", {"publishThrottlingRateInMsg": "fast"}),
        ("dispatchRate", {"dispatchThrottlingRateInMsg": 1, "ratePeriodInSecond": 0}),
        ("subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": -7}),
        ("autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "partitioned"}),
        ("autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "sharded"}),
        (
            "autoTopicCreation",
            {
                "allowAutoTopicCreation": True,
                "topicType": "non-partitioned",
                "defaultNumPartitions": 2,
            },
        ),
    ],
)
async def test_a_bad_policy_is_refused_and_nothing_changes(
    admin: Admin, path: str, body: object
) -> None:
    before = await metadata_tree(admin.store)
    status, answer = await admin.call("POST", f"{DEFAULT}/{path}", body)
    assert status == 412, answer
    assert answer["reason"]
    assert await metadata_tree(admin.store) == before


POLICY_PATHS = sorted({p[0] for p in POLICIES})


@pytest.mark.parametrize("path", POLICY_PATHS)
async def test_policy_requests_without_a_namespace_or_a_body(admin: Admin, path: str) -> None:
    before = await metadata_tree(admin.store)
    for method in ("GET", "POST", "DELETE"):
        assert (await admin.call(method, f"{NS}/public/none/{path}", 1))[0] == 404, method
        assert (await admin.call(method, f"{NS}/public/bad*ns/{path}", 1))[0] == 412, method
    assert (await admin.call("POST", f"{DEFAULT}/{path}", raw=b"{not json"))[0] == 400
    assert (await admin.call("POST", f"{DEFAULT}/{path}"))[0] == 412  # no body
    assert await metadata_tree(admin.store) == before


async def test_backlog_quotas_by_type(admin: Admin) -> None:
    url = f"{DEFAULT}/backlogQuota"
    size = {"limitSize": 2048, "policy": "producer_request_hold"}
    age = {"limitTime": 30, "policy": "consumer_backlog_eviction"}
    assert (await admin.call("POST", url, size))[0] == 204  # no type: destination_storage
    assert (await admin.call("POST", f"{url}?backlogQuotaType=message_age", age))[0] == 204
    status, quotas = await admin.call("GET", f"{DEFAULT}/backlogQuotaMap")
    assert status == 200
    assert quotas["destination_storage"]["limitSize"] == 2048
    assert quotas["message_age"] == {
        "limit": -1,
        "limitSize": -1,
        "limitTime": 30,
        "policy": "consumer_backlog_eviction",
    }
    assert (await admin.call("DELETE", f"{url}?backlogQuotaType=message_age"))[0] == 204
    _, quotas = await admin.call("GET", f"{DEFAULT}/backlogQuotaMap")
    assert set(quotas) == {"destination_storage"}
    before = await metadata_tree(admin.store)
    assert (await admin.call("POST", f"{url}?backlogQuotaType=weight", size))[0] == 412
    assert (await admin.call("DELETE", f"{url}?backlogQuotaType=weight"))[0] == 412
    assert await metadata_tree(admin.store) == before
    assert await admin.call("GET", f"{NS}/public/default/backlogQuotaMap") == (
        200,
        {"destination_storage": quotas["destination_storage"]},
    )


async def test_a_backlog_quota_above_retention_is_refused_either_way(admin: Admin) -> None:
    retention = {"retentionTimeInMinutes": 10, "retentionSizeInMB": 1}
    assert (await admin.call("POST", f"{DEFAULT}/retention", retention))[0] == 204
    before = await metadata_tree(admin.store)
    too_big = {"limitSize": 2 * 1024 * 1024, "policy": "producer_exception"}
    status, answer = await admin.call("POST", f"{DEFAULT}/backlogQuota", too_big)
    assert status == 412
    assert "Backlog Quota exceeds configured retention quota" in answer["reason"]
    too_long = {"limitTime": 3600, "policy": "producer_exception"}
    assert (await admin.call("POST", f"{DEFAULT}/backlogQuota", too_long))[0] == 412
    assert await metadata_tree(admin.store) == before
    fits = {"limitSize": 512 * 1024, "policy": "producer_exception"}
    assert (await admin.call("POST", f"{DEFAULT}/backlogQuota", fits))[0] == 204

    before = await metadata_tree(admin.store)
    smaller = {"retentionTimeInMinutes": 10, "retentionSizeInMB": 0}
    assert (await admin.call("POST", f"{DEFAULT}/retention", smaller))[0] == 412
    tight = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 0}
    assert (await admin.call("POST", f"{DEFAULT}/retention", tight))[0] == 412
    status, answer = await admin.call(
        "POST", f"{DEFAULT}/backlogQuota?backlogQuotaType=destination_storage", too_big
    )
    assert status == 412
    assert await metadata_tree(admin.store) == before
    below = {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1}
    assert (await admin.call("POST", f"{DEFAULT}/retention", below))[0] == 204


def test_retention_must_exceed_the_quota() -> None:
    quota = BacklogQuota(limit_size=1024 * 1024, limit_time=600)
    assert retention_fits_quota(quota, None)
    assert retention_fits_quota(None, RetentionPolicies(1, 1))
    assert retention_fits_quota(quota, RetentionPolicies(0, 0))
    assert retention_fits_quota(quota, RetentionPolicies(-1, -1))
    assert retention_fits_quota(quota, RetentionPolicies(11, 2))
    assert not retention_fits_quota(quota, RetentionPolicies(11, 1))
    assert not retention_fits_quota(quota, RetentionPolicies(10, 2))
    assert retention_fits_quota(quota, RetentionPolicies(-1, 2))


async def test_rates_are_kept_for_this_brokers_cluster(admin: Admin) -> None:
    rate = {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1}
    assert (await admin.call("POST", f"{DEFAULT}/publishRate", rate))[0] == 204
    _, document = await admin.call("GET", DEFAULT)
    assert document["publishMaxMessageRate"] == {"standalone": rate}


async def test_concurrent_policy_changes_all_land(admin: Admin) -> None:
    """Each change is a compare-and-set, retried when another one got there first."""
    changes = [
        ("messageTTL", 60),
        ("deduplication", True),
        ("retention", {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5}),
        ("publishRate", {"publishThrottlingRateInMsg": 1, "publishThrottlingRateInByte": 1}),
        ("dispatchRate", CLUSTER_RATE),
        ("subscriptionDispatchRate", CLUSTER_RATE),
        ("autoTopicCreation", {"allowAutoTopicCreation": False}),
        ("backlogQuota", {"limitSize": 100, "policy": "producer_exception"}),
    ]
    results = await asyncio.gather(
        *(admin.call("POST", f"{DEFAULT}/{path}", body) for path, body in changes)
    )
    assert [status for status, _ in results] == [204] * len(changes)
    for path, _ in changes:
        assert (await admin.call("GET", f"{DEFAULT}/{path}"))[0] == 200, path


async def test_many_concurrent_grants_all_land(admin: Admin) -> None:
    """Sixty writers of one document: each retries (backing off, with jitter) until it
    lands, rather than giving up with a 409 after a few collisions."""
    roles = [f"role-{i}" for i in range(60)]
    results = await asyncio.gather(
        *(admin.call("POST", f"{DEFAULT}/permissions/{role}", ["produce"]) for role in roles)
    )
    assert [status for status, _ in results] == [204] * len(roles)
    status, permissions = await admin.call("GET", f"{DEFAULT}/permissions")
    assert status == 200 and set(roles) <= set(permissions)


async def test_the_compaction_threshold_is_put_read_and_removed(admin: Admin) -> None:
    url = f"{DEFAULT}/compactionThreshold"
    assert await admin.call("GET", url) == (204, None)
    assert (await admin.call("PUT", url, 1048576))[0] == 204
    assert await admin.call("GET", url) == (200, 1048576)
    status, body = await admin.call("PUT", url, -1)
    assert (status, body["reason"]) == (412, "compactionThreshold must be 0 or more")
    _, document = await admin.call("GET", DEFAULT)
    assert document["compaction_threshold"] == 1048576
    assert (await admin.call("DELETE", url))[0] == 204
    assert await admin.call("GET", url) == (204, None)


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("maxProducersPerTopic", "max_producers_per_topic"),
        ("maxConsumersPerTopic", "max_consumers_per_topic"),
        ("maxConsumersPerSubscription", "max_consumers_per_subscription"),
        ("maxUnackedMessagesPerConsumer", "max_unacked_messages_per_consumer"),
        ("maxUnackedMessagesPerSubscription", "max_unacked_messages_per_subscription"),
        ("maxSubscriptionsPerTopic", "max_subscriptions_per_topic"),
    ],
)
async def test_each_limit_is_set_read_and_removed(admin: Admin, path: str, field: str) -> None:
    url = f"{DEFAULT}/{path}"
    assert await admin.call("GET", url) == (204, None)
    _, document = await admin.call("GET", DEFAULT)
    assert document[field] is None
    assert (await admin.call("POST", url, 7))[0] == 204
    assert await admin.call("GET", url) == (200, 7)
    _, document = await admin.call("GET", DEFAULT)
    assert document[field] == 7
    status, body = await admin.call("POST", url, -1)
    assert (status, body["reason"]) == (412, f"{path} must be 0 or more")
    assert (await admin.call("POST", url, True))[0] == 412
    assert (await admin.call("DELETE", url))[0] == 204
    assert await admin.call("GET", url) == (204, None)


async def test_persistence_is_set_read_and_removed(admin: Admin) -> None:
    """Pulsar's ``PersistencePolicies`` body; out of the broker's bounds (5 by default)
    or out of order is a 400 with Pulsar's reason, and nothing is stored."""
    url = f"{DEFAULT}/persistence"
    body = {
        "bookkeeperEnsemble": 3,
        "bookkeeperWriteQuorum": 2,
        "bookkeeperAckQuorum": 2,
        "managedLedgerMaxMarkDeleteRate": 1.5,
    }
    assert await admin.call("GET", url) == (204, None)
    assert (await admin.call("POST", url, body))[0] == 204
    assert await admin.call("GET", url) == (200, body)
    _, document = await admin.call("GET", DEFAULT)
    assert document["persistence"] == body
    status, refused = await admin.call("POST", url, {**body, "bookkeeperEnsemble": 6})
    assert (status, refused["reason"]) == (400, "Bookkeeper-Ensemble must be <= 5 and > 0.")
    status, refused = await admin.call("POST", url, {**body, "bookkeeperAckQuorum": 3})
    assert (status, refused["reason"]) == (
        400,
        "Bookkeeper Ensemble (3) >= WriteQuorum (2) >= AckQuorum (3)",
    )
    assert await admin.call("GET", url) == (200, body)
    assert (await admin.call("DELETE", url))[0] == 204
    assert await admin.call("GET", url) == (204, None)


async def test_delayed_delivery_is_set_read_and_removed(admin: Admin) -> None:
    url = f"{DEFAULT}/delayedDelivery"
    body = {"tickTime": 500, "active": False, "maxDeliveryDelayInMillis": 60_000}
    assert await admin.call("GET", url) == (204, None)
    assert (await admin.call("POST", url, body))[0] == 204
    assert await admin.call("GET", url) == (200, body)
    _, document = await admin.call("GET", DEFAULT)
    assert document["delayed_delivery_policies"] == body
    status, refused = await admin.call("POST", url, {**body, "tickTime": -1})
    assert status == 412 and "tickTime" in refused["reason"]
    assert (await admin.call("DELETE", url))[0] == 204
    assert await admin.call("GET", url) == (204, None)


async def test_subscription_types_enabled_are_set_read_and_removed(admin: Admin) -> None:
    url = f"{DEFAULT}/subscriptionTypesEnabled"
    assert await admin.call("GET", url) == (200, [])  # unset: the broker's apply
    assert (await admin.call("POST", url, ["shared", "Key_Shared", "Shared"]))[0] == 204
    assert await admin.call("GET", url) == (200, ["Shared", "Key_Shared"])
    _, document = await admin.call("GET", DEFAULT)
    assert document["subscription_types_enabled"] == ["Shared", "Key_Shared"]
    assert (await admin.call("POST", url, ["Broadcast"]))[0] == 412
    assert (await admin.call("POST", url, "Shared"))[0] == 412
    assert (await admin.call("DELETE", url))[0] == 204
    assert await admin.call("GET", url) == (200, [])


async def test_encryption_required_is_set_and_read(admin: Admin) -> None:
    url = f"{DEFAULT}/encryptionRequired"
    assert await admin.call("GET", url) == (200, False)
    assert (await admin.call("POST", url, True))[0] == 204
    assert await admin.call("GET", url) == (200, True)
    _, document = await admin.call("GET", DEFAULT)
    assert document["encryption_required"] is True
    assert (await admin.call("POST", url, "yes"))[0] == 412
    assert (await admin.call("POST", url, False))[0] == 204
    assert await admin.call("GET", url) == (200, False)


async def test_max_topics_per_namespace_counts_partitions(admin: Admin) -> None:
    """As Pulsar counts them: each partition is a topic; one past the limit is refused
    412 over REST and NotAllowed to a client that would create it."""
    url = f"{DEFAULT}/maxTopicsPerNamespace"
    topics = "/admin/v2/persistent/public/default"
    reason = "Exceed maximum number of topics in namespace."
    assert await admin.call("GET", url) == (204, None)
    assert (await admin.call("POST", url, 4))[0] == 204
    assert await admin.call("GET", url) == (200, 4)
    _, document = await admin.call("GET", DEFAULT)
    assert document["max_topics_per_namespace"] == 4
    assert (await admin.call("PUT", f"{topics}/parts/partitions", 3))[0] == 204
    assert (await admin.call("PUT", f"{topics}/single"))[0] == 204
    status, refused = await admin.call("PUT", f"{topics}/one-more")
    assert (status, refused["reason"]) == (412, reason)
    status, refused = await admin.call("PUT", f"{topics}/more-parts/partitions", 1)
    assert (status, refused["reason"]) == (412, reason)
    with pytest.raises(BrokerError) as auto:
        await admin.service.get_topic(TopicName.parse("public/default/auto-created"))
    assert auto.value.server_error == pb.NotAllowedError
    await admin.service.get_topic(TopicName.parse("public/default/parts-partition-2"))  # counted
    assert (await admin.call("POST", url, -1))[0] == 412
    assert (await admin.call("DELETE", url))[0] == 204  # the broker's: no limit
    assert (await admin.call("PUT", f"{topics}/one-more"))[0] == 204
