"""``read_split`` against a running ``stripemq standalone``, from another process: its
``local://`` metadata is opened read-only beside the standalone that holds it, the ledgers
are read from its bookie, and a producer keeps writing throughout (never fenced)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pulsar
import pytest

from stripemq.errors import CorruptEntryError
from stripemq.managed_ledger.ledger_list import LedgerList, managed_ledger_path
from stripemq.proto.topic_name import TopicName
from stripemq.spark import ledger_reader
from stripemq.spark.catalog import LedgerCatalog, connect
from stripemq.spark.ledger_reader import THREAD_PREFIX, read_split
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import Pushdown, ReadSplit, TopicPartitionRef
from stripemq.testing.polling import until
from stripemq.testing.standalone import StandaloneProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "persistent://public/default/standalone-orders"
SETTINGS: dict[str, object] = {
    "managed_ledger_max_entries_per_ledger": 5,
    "managed_ledger_min_ledger_rollover_time_minutes": 0,
    "default_retention_time_in_minutes": -1,  # no subscription: keep every ledger
    "default_retention_size_in_mb": -1,
}


class KeepWriting:
    """An official producer sending one message after another from a thread until stopped;
    what it got receipts for, in order."""

    def __init__(self, url: str) -> None:
        self.client = pulsar.Client(url, operation_timeout_seconds=15)
        self.producer = self.client.create_producer(
            TOPIC,
            producer_name="keeps-writing",
            batching_enabled=True,
            batching_max_messages=4,
            batching_max_publish_delay_ms=2,
            compression_type=pulsar.CompressionType.LZ4,
        )
        self.acked: list[tuple[bytes, Any]] = []
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def send(self, count: int) -> None:
        """``count`` messages in batches, receipts awaited."""
        receipts: list[Any] = [None] * count
        payloads = [f"order {len(self.acked) + i}".encode() for i in range(count)]
        for i, payload in enumerate(payloads):

            def receipt(result: Any, mid: Any, i: int = i) -> None:
                receipts[i] = (result, mid)

            self.producer.send_async(payload, receipt, properties={"n": str(i)})
        self.producer.flush()
        for payload, (result, mid) in zip(payloads, receipts, strict=True):
            assert result == pulsar.Result.Ok
            self.acked.append((payload, mid))

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.send(3)
        except BaseException as exc:  # reported by close()
            self.failure = exc

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(30)
        self.client.close()
        if self.failure is not None:
            raise self.failure


async def plan(metadata_url: str, ref: TopicPartitionRef, through: Any) -> list[ReadSplit]:
    """One split per ledger (the open one to its LAC) once the LAC reaches ``through``, a
    message id; planned through the read-only store, from this process."""
    found: list[list[ReadSplit]] = []
    async with connect(metadata_url) as conn:

        async def covered() -> bool:
            got = await conn.store.get(managed_ledger_path(ref.managed_ledger))
            assert got is not None
            splits = []
            for info in LedgerList.decode(got[0], ref.managed_ledger).chain:
                last = info.entries - 1
                if not info.closed:
                    handle = await conn.bk.open_ledger(
                        info.ledger_id, password=None, recovery=False
                    )
                    last = handle.last_add_confirmed
                if last >= 0:
                    splits.append(ReadSplit(ref, info.ledger_id, 0, last, 100 * (last + 1)))
            reached = (through.ledger_id(), through.entry_id()) <= (
                splits[-1].ledger_id,
                splits[-1].last_entry,
            )
            if reached:
                found.append(splits)
            return reached

        await until(covered, "the standalone's LAC covers what was acknowledged", timeout=15)
    return found[0]


def read(splits: list[ReadSplit], options: SourceOptions) -> list[dict[str, Any]]:
    return [
        row for split in splits for batch in read_split(split, options) for row in batch.to_pylist()
    ]


async def test_read_split_reads_a_running_standalone_while_it_is_written(
    tmp_path: Path,
) -> None:
    standalone = StandaloneProcess(tmp_path / "data", SETTINGS)
    await standalone.start()
    writer: KeepWriting | None = None
    try:
        writer = await asyncio.to_thread(KeepWriting, standalone.service_url)
        await asyncio.to_thread(writer.send, 60)  # >= 15 entries: >= 3 ledgers
        writer.thread.start()  # and it keeps writing while Spark's reader reads

        metadata_url = f"local://{tmp_path / 'data' / 'metadata'}"
        name = TopicName.parse(TOPIC)
        ref = TopicPartitionRef(TOPIC, -1, name.managed_ledger_name)
        acked = list(writer.acked)
        splits = await plan(metadata_url, ref, acked[-1][1])
        assert len({split.ledger_id for split in splits}) >= 3, "expected rollovers"
        options = SourceOptions.parse({"metadata": metadata_url, "topic": TOPIC})
        rows = await asyncio.to_thread(read, splits, options)

        # What was acknowledged before planning is all there, in order, with its ids;
        # what came after, up to the planned LAC, too (a prefix of the rest).
        assert len(rows) >= len(acked)
        for row, (payload, mid) in zip(rows, list(writer.acked), strict=False):
            assert row["value"] == payload
            assert (row["__ledgerId"], row["__entryId"], row["__batchIndex"]) == (
                mid.ledger_id(),
                mid.entry_id(),
                mid.batch_index(),
            )
            assert pulsar.MessageId.deserialize(row["__messageId"]).batch_index() == (
                mid.batch_index()
            )
        assert {row["__producerName"] for row in rows} == {"keeps-writing"}

        # The writer was never fenced: it is still getting receipts.
        before = len(writer.acked)
        await until(lambda: len(writer.acked) > before + 10, "the producer keeps writing")
        ledger_reader.shutdown()
        assert [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)] == []
    finally:
        if writer is not None:
            await asyncio.to_thread(writer.close)
        standalone.terminate()


async def test_an_entry_corrupted_on_disk_fails_the_read_naming_topic_and_ledger(
    tmp_path: Path,
) -> None:
    standalone = StandaloneProcess(tmp_path / "data", SETTINGS)
    await standalone.start()
    marker = b"CORRUPT-ME-" * 30
    topic = "persistent://public/default/corrupted"

    def produce() -> None:
        client = pulsar.Client(standalone.service_url, operation_timeout_seconds=15)
        producer = client.create_producer(topic, batching_enabled=False)
        for payload in (b"before", marker, b"after"):
            producer.send(payload)
        client.close()

    try:
        await asyncio.to_thread(produce)
    finally:
        assert standalone.terminate() == 0  # a clean stop moves the entries to entry logs
    flipped = 0
    for path in (tmp_path / "data").rglob("*.log"):
        data = bytearray(path.read_bytes())
        at = data.find(marker)
        if at >= 0:
            data[at + 7] ^= 0xFF
            path.write_bytes(bytes(data))
            flipped += 1
    assert flipped == 1
    await standalone.start()
    try:
        metadata_url = f"local://{tmp_path / 'data' / 'metadata'}"
        options = SourceOptions.parse({"metadata": metadata_url, "topic": topic})
        async with connect(metadata_url) as conn:
            splits = await LedgerCatalog(conn).plan(options, Pushdown())
        [split] = [s for s in splits if s.entries == 3]
        with pytest.raises(CorruptEntryError) as caught:
            await asyncio.to_thread(read, [split], options)
        assert topic in str(caught.value) and f"ledger {split.ledger_id}" in str(caught.value)
    finally:
        standalone.terminate()
