"""``stripemq.broker.ownership``: bundles split by the namespace's bundle count, which
bundle a topic is in, and the registered brokers (the least loaded picked)."""

from __future__ import annotations

from stripemq.broker.ownership import (
    BROKERS_ROOT,
    FULL_RANGE,
    BrokerInfo,
    Ownership,
    bundle_of,
    find_broker,
    instance_of,
    registered_brokers,
)
from stripemq.metadata import MetadataStore
from stripemq.proto.topic_name import TopicName

A = BrokerInfo("a:6650", "pulsar://a:6650", "http://a:8080")
B = BrokerInfo("b:6650", "pulsar://b:6650", "http://b:8080")


def test_bundles_split_by_the_count() -> None:
    names = [TopicName.parse(f"public/default/t{i}") for i in range(200)]
    for count in (1, 4, 8, 16):
        bundles = {bundle_of(name, count) for name in names}
        assert len(bundles) <= count
        for bundle in bundles:
            assert (bundle.end - bundle.start) in (FULL_RANGE // count, FULL_RANGE - bundle.start)
        for name in names:
            assert bundle_of(name, count).contains(name)
            others = {bundle_of(n, count) for n in names} - {bundle_of(name, count)}
            assert not any(other.contains(name) for other in others)
    assert bundle_of(names[0], 1).name == "0x00000000_0xffffffff"
    assert not bundle_of(names[0]).contains(TopicName.parse("other/ns/t0"))


async def test_registered_brokers_and_the_least_loaded(store: MetadataStore) -> None:
    ownership = Ownership(store, A)
    await ownership.register()
    await store.create(f"{BROKERS_ROOT}/{B.broker_id}", B.encode(bundles=0), ephemeral=True)
    await store.create(f"{BROKERS_ROOT}/junk", b"not json", ephemeral=True)
    await ownership.try_acquire(bundle_of(TopicName.parse("public/default/x")))
    registered = {r.info.broker_id: r.bundles for r in await registered_brokers(store)}
    assert registered == {"a:6650": 1, "b:6650": 0}
    assert await ownership.least_loaded_broker() == B.service_url
    assert await find_broker(store, B.service_url) == B
    assert await find_broker(store, "pulsar://nobody:6650") is None


async def test_a_restarted_broker_replaces_the_nodes_of_its_earlier_life(
    store: MetadataStore,
) -> None:
    """Nodes left by the same broker's earlier life (same id, other instance) are created
    again under the new one; another broker's are left alone."""
    mine = bundle_of(TopicName.parse("public/default/x"))
    theirs = bundle_of(TopicName.parse("public/default/y"), 1)
    earlier = Ownership(store, A)
    await earlier.register()
    assert await earlier.try_acquire(mine) == A.service_url
    other = Ownership(store, B)
    assert await other.try_acquire(theirs) == B.service_url
    before = await store.get(theirs.path)

    later = Ownership(store, A)  # the same broker, restarted
    await later.register()
    assert await later.try_acquire(mine) == A.service_url
    assert mine in later.owned
    for path in (mine.path, f"{BROKERS_ROOT}/{A.broker_id}"):
        found = await store.get(path)
        assert found is not None and instance_of(found[0]) == later.instance
        assert found[1].ephemeral
    assert await later.try_acquire(theirs) == B.service_url
    assert await store.get(theirs.path) == before


def test_registrations_carry_the_tls_urls_and_older_ones_still_read() -> None:
    secure = BrokerInfo(
        "s:6650", "pulsar://s:6650", "http://s:8080", "pulsar+ssl://s:6651", "https://s:8443"
    )
    assert BrokerInfo.decode(secure.encode(bundles=3)) == secure
    # Written before brokers had TLS URLs: none.
    older = b'{"broker_id": "a:6650", "service_url": "pulsar://a:6650", "web_url": "http://a:8080"}'
    assert BrokerInfo.decode(older) == A
    assert A.service_url_tls == "" and A.web_url_tls == ""


async def test_lookups_answer_the_owner_with_all_its_urls(store: MetadataStore) -> None:
    secure = BrokerInfo(
        "s:6650", "pulsar://s:6650", "http://s:8080", "pulsar+ssl://s:6651", "https://s:8443"
    )
    mine = Ownership(store, A)
    await mine.register()
    theirs = Ownership(store, secure)
    await theirs.register()
    bundle = bundle_of(TopicName.parse("public/default/x"))
    assert await theirs.acquire(bundle) == secure
    assert await mine.acquire(bundle) == secure  # taken: its owner, read back from the node
    assert await mine.owner_info(bundle) == secure
    other = bundle_of(TopicName.parse("public/default/y"), 1)
    assert await mine.acquire(other) == A
    assert await mine.least_loaded() == A  # one bundle each: by service URL
    assert await theirs.least_loaded() == A
