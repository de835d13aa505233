"""A bookie dies under pipelined sends with deduplication on: nothing acknowledged is
lost, nothing stored twice.

With two bookies and ensembles of two, killing one fails the topic's ledger (no bookie to
replace it) and every append after it; new ledgers cannot be made until it is back. The
broker fails those appends in order, refuses new ones until all are done, disconnects the
producers and forgets the sequence ids it did not store; the producer resends. Had any
later message been stored before the resends, deduplication would have taken the resends
for duplicates and acknowledged them without storing them.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pulsar
import pytest

from stripemq.bookie.client.ledger_handle import LedgerHandle
from stripemq.broker.service import TopicPolicies
from stripemq.errors import BookieError
from stripemq.metadata import MetadataStore
from stripemq.testing.broker import serving_broker
from stripemq.testing.cluster import BookieCluster
from stripemq.testing.pipelined import send_all_then_read
from stripemq.testing.polling import until

pytestmark = pytest.mark.integration

DEDUP = TopicPolicies(deduplication=True)

MESSAGES = 3000
KILL_AFTER = 300  # entries stored before a bookie dies
OUTAGE_S = 2.0


def produce_then_read(url: str, topic: str) -> tuple[list[int], list[object]]:
    run = send_all_then_read(
        pulsar, url, topic, MESSAGES, batching_enabled=False, max_pending_messages=200
    )
    return run.received, run.failures


async def test_a_bookie_lost_under_pipelined_sends_loses_and_duplicates_nothing(
    metadata_url: str, store: MetadataStore, tmp_path: Path
) -> None:
    async with (
        BookieCluster(metadata_url, tmp_path / "bookies", 2) as cluster,
        serving_broker(store, policies=DEDUP) as server,
    ):
        topic = f"persistent://public/default/outage-{uuid.uuid4().hex[:8]}"
        producing = asyncio.ensure_future(
            asyncio.to_thread(produce_then_read, server.service_url, topic)
        )
        assert server.service is not None
        service = server.service

        def stored() -> int:
            opened = service.topics.get(topic)
            return opened.ml.entries_added if opened is not None else 0

        await until(lambda: stored() >= KILL_AFTER or producing.done(), "sends under way")
        assert not producing.done()
        victim = cluster.bookies[0]
        victim.kill()
        await asyncio.sleep(OUTAGE_S)  # the outage; nothing is asserted about it
        await victim.start()
        received, failed = await asyncio.wait_for(producing, 120)
    assert failed == []  # the client resent what failed, and every send succeeded
    assert received == list(range(MESSAGES))


async def test_a_ledger_that_fails_while_a_new_one_works_loses_and_duplicates_nothing(
    metadata_url: str, store: MetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harder case: the topic's ledger fails (every pending add with it) while the next
    ledger works at once, so sends that arrive meanwhile would be stored ahead of the
    resends of the failed ones."""
    failed_ledgers: set[int] = set()
    real = LedgerHandle.add_entry_async

    def add_entry_async(self: LedgerHandle, data: bytes) -> asyncio.Future[int]:
        future = real(self, data)
        topic_ledger = self.metadata.custom_metadata.get("component") == "managed-ledger"
        if topic_ledger and not failed_ledgers and self.last_add_pushed >= KILL_AFTER:
            # The handle gives up, as when an ensemble change fails: every pending add
            # fails with it, and it takes no more.
            failed_ledgers.add(self.ledger_id)
            self._fail_handle(BookieError("injected: ensemble change failed"))
        return future

    monkeypatch.setattr(LedgerHandle, "add_entry_async", add_entry_async)
    async with (
        BookieCluster(metadata_url, tmp_path / "bookies", 2),
        serving_broker(store, policies=DEDUP) as server,
    ):
        topic = f"persistent://public/default/failing-{uuid.uuid4().hex[:8]}"
        received, failed = await asyncio.wait_for(
            asyncio.to_thread(produce_then_read, server.service_url, topic), 120
        )
    assert failed_ledgers  # the failure happened
    assert failed == []
    assert received == list(range(MESSAGES))
