"""Nothing is acknowledged before the journal's fdatasync returns.

A gate stands in for the journal's sync function (``JournalWriter.sync_file``): while it is
closed a sync blocks inside it, on the journal thread. With the gate closed and the journal
provably blocked in it holding the record, no bookie add, no ledger add and no SEND_RECEIPT
completes; once the gate opens, each does. The storage, the bookie server and the broker run
in this process (``Standalone``) so the gate can be held.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stripemq.bookie.client import BookKeeper
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.storage.engine import AddOp, BookieStorage
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.entry import EntryHeader, encode_entry
from stripemq.proto.frames import encode_entry as encode_message
from stripemq.proto.frames import encode_payload_command
from stripemq.standalone import Standalone
from stripemq.testing.journal_gate import blocked_holding, installed_gate
from stripemq.testing.raw_connection import RawConnection
from stripemq.testing.standalone import in_process_standalone

pytestmark = pytest.mark.integration

# ---------------------------------------------------------------------------- storage level


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[BookieStorage]:
    engine = BookieStorage(BookieConfig(data_dir=str(tmp_path / "bookie")))
    await engine.start()
    yield engine
    await engine.stop()


async def test_a_bookie_add_completes_only_after_the_journal_sync_returns(
    storage: BookieStorage,
) -> None:
    gate = installed_gate(storage.journal)
    data = f"held {uuid.uuid4().hex}".encode()
    gate.close()
    try:
        add = asyncio.create_task(
            storage.add_entries([AddOp(encode_entry(3, 0, -1, data), b"key")])
        )
        await blocked_holding(gate, storage.journal, data)
        returned = gate.syncs_returned
        assert not add.done()
        assert storage.entries_added == 0
    finally:
        gate.open()
    [result] = await asyncio.wait_for(add, 10)
    assert isinstance(result, EntryHeader) and (result.ledger_id, result.entry_id) == (3, 0)
    assert gate.syncs_returned > returned
    assert storage.entries_added == 1


# ---------------------------------------------------------------------------- in-process standalone


@pytest.fixture
async def standalone(tmp_path: Path) -> AsyncIterator[Standalone]:
    async with in_process_standalone(tmp_path, {"stats_http_port": 0}) as node:
        yield node


def bookie_storage(node: Standalone) -> BookieStorage:
    assert node.bookie is not None
    return node.bookie.storage


async def test_a_ledger_add_completes_only_after_the_journal_sync_returns(
    standalone: Standalone,
) -> None:
    assert standalone.store is not None
    storage = bookie_storage(standalone)
    async with BookKeeper(standalone.store) as bk:
        ledger = await bk.create_ledger(1, 1, 1)
        gate = installed_gate(storage.journal)
        data = f"ledger add {uuid.uuid4().hex}".encode()
        gate.close()
        try:
            add = ledger.add_entry_async(data)
            await blocked_holding(gate, storage.journal, data)
            assert not add.done()
            assert ledger.last_add_confirmed == -1
            assert storage.entries_added == 0
        finally:
            gate.open()
        assert await asyncio.wait_for(add, 10) == 0
        assert ledger.last_add_confirmed == 0
        assert gate.syncs_returned >= 1
        await ledger.close()


async def test_no_send_receipt_goes_out_until_the_journal_sync_returns(
    standalone: Standalone,
) -> None:
    storage = bookie_storage(standalone)
    topic = f"persistent://public/default/gated-{uuid.uuid4().hex[:8]}"
    conn = await RawConnection.open(standalone.broker_config.broker_service_port)
    try:
        conn.command(pb.CommandConnect(client_version="gate", protocol_version=20))
        await conn.wait_for(pb.BaseCommand.CONNECTED)
        conn.command(pb.CommandLookupTopic(topic=topic, request_id=1))
        lookup = await conn.wait_for(pb.BaseCommand.LOOKUP_RESPONSE)
        assert lookup.command.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Connect
        conn.command(pb.CommandProducer(topic=topic, producer_id=1, request_id=2))
        await conn.wait_for(pb.BaseCommand.PRODUCER_SUCCESS)

        gate = installed_gate(storage.journal)
        added_before = storage.entries_added
        payload = f"held message {uuid.uuid4().hex}".encode()
        metadata = pb.MessageMetadata(producer_name="gate", sequence_id=0, publish_time=1)
        gate.close()
        try:
            conn.send(
                encode_payload_command(
                    pb.CommandSend(producer_id=1, sequence_id=0, num_messages=1),
                    encode_message(metadata, payload),
                )
            )
            await blocked_holding(gate, storage.journal, payload)
            # A PING sent now is answered after everything the broker had to say before it:
            # the PONG proves the window passed with the journal still held in its sync.
            conn.command(pb.CommandPing())
            await conn.wait_for(pb.BaseCommand.PONG)
            assert gate.blocked.is_set() and gate.held
            assert pb.BaseCommand.SEND_RECEIPT not in conn.types()
            assert pb.BaseCommand.SEND_ERROR not in conn.types()
            assert storage.entries_added == added_before  # (a) the bookie add is pending
            returned = gate.syncs_returned
        finally:
            gate.open()
        receipt = await conn.wait_for(pb.BaseCommand.SEND_RECEIPT)
        assert gate.syncs_returned > returned
        assert storage.entries_added == added_before + 1
        assert receipt.command.send_receipt.sequence_id == 0
        assert receipt.command.send_receipt.message_id.entryId == 0
    finally:
        await conn.close()
