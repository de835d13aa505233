"""Publish order and receipts across ledger rollovers, with both clients.

The broker rolls its ledger over every few entries while a producer pipelines sends
(``send_async`` with a bounded queue that blocks when full): every message must be stored
once, in the order sent, and receipted in that order (a client that gets receipts out of
order reconnects and resends, which is how the broker once stored 24,500 messages for
20,000 sent). With batching on and off, deduplication on and off.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

import stripemq.client
from stripemq.broker.server import BrokerServer
from stripemq.broker.service import TopicPolicies
from stripemq.managed_ledger.config import ManagedLedgerConfig
from stripemq.metadata import MetadataStore
from stripemq.testing.broker import broker_on_bookies
from stripemq.testing.pipelined import send_all_then_read

pytestmark = pytest.mark.integration

MESSAGES = 1500
ROLL_EVERY = 5  # entries per ledger: a rollover every few sends
CLIENTS = {"official": pulsar, "stripemq": stripemq.client}


@pytest.fixture(params=[False, True], ids=["dedup-off", "dedup-on"])
async def rolling_broker(
    request: pytest.FixtureRequest, metadata_url: str, store: MetadataStore, tmp_path: Path
) -> AsyncIterator[BrokerServer]:
    config = ManagedLedgerConfig(
        max_entries_per_ledger=ROLL_EVERY, min_rollover_time_s=0, retention_time_s=-1
    )
    policies = TopicPolicies(deduplication=request.param)
    async with broker_on_bookies(
        metadata_url, store, tmp_path, ml_config=config, policies=policies
    ) as server:
        yield server


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_pipelined_sends_across_rollovers_are_stored_once_in_order(
    rolling_broker: BrokerServer, client: str, batching: bool
) -> None:
    topic = f"persistent://public/default/rolling-{uuid.uuid4().hex[:8]}"
    run = await asyncio.to_thread(
        send_all_then_read,
        CLIENTS[client],
        rolling_broker.service_url,
        topic,
        MESSAGES,
        batching_enabled=batching,
        batching_max_messages=10,
        batching_max_publish_delay_ms=1,
        max_pending_messages=500,
    )
    received = run.received
    assert len(run.failures) == 0
    assert received == list(range(MESSAGES)), (
        f"{len(received)} received for {MESSAGES} sent, "
        f"{sum(1 for a, b in itertools.pairwise(received) if b < a)} reorderings"
    )
