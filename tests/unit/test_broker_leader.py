"""Leader broker election on a memory:// store: a leadership taken over between a
broker's read of the leader node and its wait is noticed."""

from __future__ import annotations

import asyncio
import json

import pytest

from stripemq.broker.leader import LEADER_PATH, LeaderBroker, LeaderElection
from stripemq.metadata import MetadataStore
from stripemq.testing.polling import until


async def test_a_takeover_right_after_the_read_is_not_missed(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node is deleted and made again by another broker just after this one read it
    (seeing itself as leader): the watch events of both come before the wait."""
    other = json.dumps({"serviceUrl": "http://other:8080", "brokerId": "other"}).encode()
    real_get = store.get
    taken_over = False
    reads = 0

    async def get_then_lose_it(path: str) -> object:
        nonlocal taken_over, reads
        found = await real_get(path)
        reads += path == LEADER_PATH
        if path == LEADER_PATH and not taken_over and found is not None:
            taken_over = True
            await store.delete(LEADER_PATH)
            await store.create(LEADER_PATH, other)
            await asyncio.sleep(0.05)  # the watch events are delivered
        return found

    monkeypatch.setattr(store, "get", get_then_lose_it)
    election = LeaderElection(store, LeaderBroker("http://me:8080", "me"))
    election.start()
    await until(lambda: taken_over, "the leader node is taken over")
    # It read the node again (rather than wait on a node it thinks is its own).
    await until(lambda: reads >= 2 and not election.is_leader, "the broker sees the takeover")
    await election.stop(release=False)
