"""Nothing is acknowledged before the journal's fdatasync returns.

A gate stands in for the journal's sync function (``JournalWriter.sync_file``): while it is
closed a sync blocks inside it, on the journal thread. With the gate closed and the journal
provably blocked in it holding the record, no bookie add, no ledger add and no SEND_RECEIPT
completes; once the gate opens, each does. The storage, the bookie server and the broker run
in this process (``Standalone``) so the gate can be held.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stripemq.bookie.client import BookKeeper
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.storage.engine import AddOp, BookieStorage
from stripemq.bookie.storage.journal import JournalWriter, SyncFile, journal_path
from stripemq.proto import pulsar_api_pb2 as pb
from stripemq.proto.entry import EntryHeader, encode_entry
from stripemq.proto.frames import (
    Frame,
    FrameDecoder,
    encode_command,
    encode_payload_command,
)
from stripemq.proto.frames import encode_entry as encode_message
from stripemq.standalone import Standalone, StandalonePorts
from stripemq.testing.polling import until
from stripemq.testing.ports import free_port

pytestmark = pytest.mark.integration

GATE_TIMEOUT_S = 60.0  # a sync held longer than this fails (so a broken test cannot hang)


class SyncGate:
    """A journal sync function that, while the gate is closed, blocks until it opens.

    ``blocked`` is set once a sync is waiting at the closed gate (the journal thread has
    written its group and is inside the sync); ``syncs_returned`` counts syncs that finished.
    """

    def __init__(self, real: SyncFile = os.fdatasync) -> None:
        self._real = real
        self._open = threading.Event()
        self._open.set()
        self.blocked = threading.Event()
        self._lock = threading.Lock()
        self.syncs_returned = 0

    @property
    def held(self) -> bool:
        """Whether the gate is closed (syncs wait in it)."""
        return not self._open.is_set()

    def close(self) -> None:
        self.blocked.clear()
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    def __call__(self, fd: int) -> None:
        if not self._open.is_set():
            self.blocked.set()
            if not self._open.wait(GATE_TIMEOUT_S):
                raise OSError(f"sync gate held for more than {GATE_TIMEOUT_S}s")
        self._real(fd)
        with self._lock:
            self.syncs_returned += 1


def installed_gate(journal: JournalWriter) -> SyncGate:
    """Put a gate in front of the journal's real sync function."""
    assert journal.sync_data, "the gate needs journal_sync_data on"
    gate = SyncGate(journal.sync_file)
    journal.sync_file = gate
    return gate


def journal_holds(journal: JournalWriter, data: bytes) -> bool:
    """Whether the journal's current file already holds ``data`` (written, maybe unsynced)."""
    path = journal_path(journal.directory, journal.written_mark.journal_id)
    return data in path.read_bytes()


async def blocked_holding(gate: SyncGate, journal: JournalWriter, data: bytes) -> None:
    """Wait until the journal has written ``data`` and sits in the gated sync."""
    await until(
        lambda: gate.blocked.is_set() and journal_holds(journal, data),
        "the journal has written the record and waits in its sync",
    )


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
        await asyncio.sleep(0.1)  # the loop runs freely while the sync is held
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
    ports = StandalonePorts(broker=free_port(), web=free_port(), bookie=free_port())
    node = Standalone(tmp_path / "data", ports, overrides={"stats_http_port": 0})
    await node.start()
    yield node
    await node.stop()


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
            await asyncio.sleep(0.1)
            assert not add.done()
            assert ledger.last_add_confirmed == -1
            assert storage.entries_added == 0
        finally:
            gate.open()
        assert await asyncio.wait_for(add, 10) == 0
        assert ledger.last_add_confirmed == 0
        assert gate.syncs_returned >= 1
        await ledger.close()


class RawConnection:
    """A Pulsar protocol connection that keeps every frame the broker sends, in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.frames: list[Frame] = []
        self._arrived = asyncio.Condition()
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, port: int) -> RawConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def _read(self) -> None:
        decoder = FrameDecoder()
        while data := await self._reader.read(65536):
            async with self._arrived:
                self.frames.extend(decoder.feed(data))
                self._arrived.notify_all()

    def send(self, raw: bytes) -> None:
        self._writer.write(raw)

    def types(self) -> list[int]:
        return [frame.command.type for frame in self.frames]

    async def wait_for(self, kind: int, count: int = 1, timeout: float = 15.0) -> Frame:
        """The ``count``-th frame of type ``kind``, once it has arrived."""

        def arrived() -> bool:
            return self.types().count(kind) >= count

        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(arrived), timeout)
        return [frame for frame in self.frames if frame.command.type == kind][count - 1]

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._writer.close()


async def test_no_send_receipt_goes_out_until_the_journal_sync_returns(
    standalone: Standalone,
) -> None:
    storage = bookie_storage(standalone)
    topic = f"persistent://public/default/gated-{uuid.uuid4().hex[:8]}"
    conn = await RawConnection.open(standalone.broker_config.broker_service_port)
    try:
        conn.send(encode_command(pb.CommandConnect(client_version="gate", protocol_version=20)))
        await conn.wait_for(pb.BaseCommand.CONNECTED)
        conn.send(encode_command(pb.CommandLookupTopic(topic=topic, request_id=1)))
        lookup = await conn.wait_for(pb.BaseCommand.LOOKUP_RESPONSE)
        assert lookup.command.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Connect
        conn.send(encode_command(pb.CommandProducer(topic=topic, producer_id=1, request_id=2)))
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
            conn.send(encode_command(pb.CommandPing()))
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
