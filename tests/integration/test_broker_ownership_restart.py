"""A broker killed and started again on the same address before its ZooKeeper session
expired: the bundles it takes again must stay its own when the old session expires.

Before, the new life found the old life's ownership node, took it for its own and served
the bundle; when the old session expired the node vanished, another broker took the bundle
too, and consumers left on the first broker never got another message (found by
``stripemq chaos``)."""

from __future__ import annotations

import pytest

from stripemq.broker.ownership import BROKERS_ROOT, BrokerInfo, Ownership, bundle_of
from stripemq.metadata import create_metadata_store
from stripemq.proto.topic_name import TopicName

pytestmark = pytest.mark.integration

ME = BrokerInfo("127.0.0.1:6650", "pulsar://127.0.0.1:6650", "http://127.0.0.1:8080")


async def test_ownership_outlives_the_session_of_the_brokers_earlier_life(
    metadata_url: str,
) -> None:
    bundle = bundle_of(TopicName.parse("public/default/restarted"))
    old_session = create_metadata_store(metadata_url, session_timeout=2.0)
    new_session = create_metadata_store(metadata_url, session_timeout=2.0)
    await old_session.start()
    await new_session.start()
    try:
        earlier = Ownership(old_session, ME)
        await earlier.register()
        await earlier.try_acquire(bundle)
        later = Ownership(new_session, ME)  # restarted while the old session lives on
        await later.register()
        assert await later.try_acquire(bundle) == ME.service_url
        await old_session.close()  # the old session ends, and its ephemeral nodes with it
        for path in (bundle.path, f"{BROKERS_ROOT}/{ME.broker_id}"):
            assert await new_session.get(path) is not None, f"{path} went with the old session"
        assert await later.owner_of(bundle) == ME.service_url
    finally:
        await new_session.close()
