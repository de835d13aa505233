"""The standalone's broker reaches its own bookie in-process, and loses nothing by it.

``LocalBookieClient`` answers a ledger handle's calls from the bookie's request handler
directly. These tests hold it to what the gRPC client gives: adds durable (journaled and
fsynced) before they complete, typed errors, verified reads, the same metrics; and that a
standalone really uses it, while other clients of the same bookie still use gRPC.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from stripemq.bookie.bookie_client import BookieClient
from stripemq.bookie.client.config import ClientConfig
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.handler import BookieRequestHandler
from stripemq.bookie.local_client import LocalBookieClient
from stripemq.bookie.metrics import BookieMetrics
from stripemq.bookie.storage.engine import BookieStorage
from stripemq.errors import (
    BookieTimeoutError,
    BookieUnavailableError,
    DigestMismatchError,
    LedgerFencedError,
    NoSuchEntryError,
    UnauthorizedAccessError,
)
from stripemq.proto.entry import encode_entry
from stripemq.standalone import Standalone
from stripemq.testing.journal_gate import blocked_holding, installed_gate
from stripemq.testing.polling import until
from stripemq.testing.standalone import in_process_standalone

pytestmark = pytest.mark.integration

KEY = b"master key"


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalBookieClient]:
    config = BookieConfig(data_dir=str(tmp_path / "bookie"))
    storage = BookieStorage(config)
    await storage.start()
    handler = BookieRequestHandler(storage, config, BookieMetrics(storage))
    client = LocalBookieClient("127.0.0.1:3181", handler)
    await client.connect()
    yield client
    await client.close()
    await storage.stop()


async def test_an_add_completes_only_once_its_journal_sync_has_returned(
    local: LocalBookieClient,
) -> None:
    journal = local.handler.storage.journal
    gate = installed_gate(journal)
    entry = encode_entry(5, 0, -1, b"held until durable")
    gate.close()
    try:
        add = local.add_entry(KEY, entry)
        await blocked_holding(gate, journal, b"held until durable")
        assert not add.done()
    finally:
        gate.open()
    assert await asyncio.wait_for(add, 10) == (5, 0)
    assert gate.syncs_returned >= 1


async def test_adds_of_one_loop_turn_share_one_journal_append(
    local: LocalBookieClient,
) -> None:
    storage = local.handler.storage
    syncs = storage.journal.fsync_count
    adds = [local.add_entry(KEY, encode_entry(6, i, i - 1, b"x" * 100)) for i in range(20)]
    assert await asyncio.gather(*adds) == [(6, i) for i in range(20)]
    assert storage.journal.fsync_count == syncs + 1
    assert storage.entries_added == 20


async def test_reads_and_lacs_answer_as_the_grpc_client_does(
    local: LocalBookieClient,
) -> None:
    for i in range(3):
        await local.add_entry(KEY, encode_entry(7, i, i - 1, f"entry {i}".encode()))
    read = await local.read_entry(7, 1)
    assert read.entry == encode_entry(7, 1, 0, b"entry 1")
    entries, lac = await local.read_entries(7, [0, 1, 2])
    assert [e[-7:] for e in entries] == [b"entry 0", b"entry 1", b"entry 2"]
    assert lac == 1  # the LAC the last entry carried
    await local.write_lac(7, KEY, 2)
    assert (await local.read_lac(7)).lac == 2
    info = await local.get_info()
    assert info.entries_added == 3 and info.journal_fsyncs >= 1
    assert local.handler.metrics.add_entry.count() == 3
    assert local.handler.metrics.add_entry_request.count() == 3


async def test_failures_are_typed_and_counted(local: LocalBookieClient) -> None:
    await local.add_entry(KEY, encode_entry(8, 0, -1, b"first"))
    with pytest.raises(NoSuchEntryError):
        await local.read_entry(8, 5)
    with pytest.raises(UnauthorizedAccessError):
        await local.add_entry(b"another writer's key", encode_entry(8, 1, 0, b"second"))
    fenced = await local.read_entry(8, -1, fence=True, master_key=KEY)
    assert fenced.fenced
    with pytest.raises(LedgerFencedError):
        await local.add_entry(KEY, encode_entry(8, 1, 0, b"too late"))
    damaged = bytearray(encode_entry(9, 0, -1, b"bits"))
    damaged[-1] ^= 0xFF
    with pytest.raises(DigestMismatchError):
        await local.add_entry(KEY, bytes(damaged))
    assert local.handler.metrics.add_entry.count(success=False) == 3
    errors: Counter[str] = Counter()
    for metric in local.handler.metrics.request_errors.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                errors[sample.labels["operation"]] += int(sample.value)
    assert errors == {"read": 1, "add": 3}


async def test_an_add_held_past_its_timeout_fails_and_still_completes_in_storage(
    tmp_path: Path,
) -> None:
    config = BookieConfig(data_dir=str(tmp_path / "bookie"))
    storage = BookieStorage(config)
    await storage.start()
    handler = BookieRequestHandler(storage, config, BookieMetrics(storage))
    client = LocalBookieClient("127.0.0.1:3181", handler, ClientConfig(add_entry_timeout_s=0.2))
    gate = installed_gate(storage.journal)
    gate.close()  # a disk that does not answer
    try:
        held = client.add_entry(KEY, encode_entry(11, 0, -1, b"slow disk"))
        with pytest.raises(BookieTimeoutError):
            await asyncio.wait_for(held, 30)
        with pytest.raises(BookieTimeoutError):
            await asyncio.wait_for(client.add_entry(KEY, encode_entry(11, 1, 0, b"also held")), 30)
    finally:
        gate.open()
    await until(lambda: storage.entries_added == 2, "the held adds reach the journal")
    await client.close()
    await storage.stop()


async def test_a_closed_client_refuses_calls_and_fails_what_it_queued(
    local: LocalBookieClient,
) -> None:
    queued = local.add_entry(KEY, encode_entry(10, 0, -1, b"never sent"))
    await local.close()
    with pytest.raises(BookieUnavailableError):
        await queued
    with pytest.raises(BookieUnavailableError):
        local.add_entry(KEY, encode_entry(10, 1, 0, b"refused"))
    with pytest.raises(BookieUnavailableError):
        await local.read_lac(10)


# ---------------------------------------------------------------------------- in a standalone


@pytest.fixture
async def standalone(tmp_path: Path) -> AsyncIterator[Standalone]:
    async with in_process_standalone(tmp_path) as node:
        yield node


async def test_the_standalone_broker_writes_through_the_local_client(
    standalone: Standalone,
) -> None:
    assert standalone.broker is not None and standalone.bookie is not None
    bk = standalone.broker.bk
    assert bk is not None
    bookie_id = standalone.bookie.bookie_id
    assert await bk.clients.get(bookie_id) is standalone.local_bookie

    url = f"pulsar://127.0.0.1:{standalone.broker_config.broker_service_port}"
    topic = "persistent://public/default/local-path"
    storage = standalone.bookie.storage

    def produce_and_consume() -> list[bytes]:
        client = pulsar.Client(url)
        try:
            consumer = client.subscribe(topic, "sub")
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(10):
                producer.send(f"message {i}".encode())
            received = [consumer.receive(10_000) for _ in range(10)]
            for message in received:
                consumer.acknowledge(message)
            return [m.data() for m in received]
        finally:
            client.close()

    added = storage.entries_added
    got = await asyncio.get_running_loop().run_in_executor(None, produce_and_consume)
    assert got == [f"message {i}".encode() for i in range(10)]
    assert storage.entries_added >= added + 10  # every message went through the journal

    # Another process's view of the same bookie (auto-recovery, Spark) is still gRPC.
    remote = BookieClient(f"127.0.0.1:{standalone.bookie_config.bookie_port}")
    await remote.connect()
    try:
        info = await remote.get_info()
        assert info.bookie_id == bookie_id and info.entries_added == storage.entries_added
    finally:
        await remote.close()
