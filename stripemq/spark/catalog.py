"""The driver's view of what is stored: topics, their ledgers, and the open ledgers' LACs.

``LedgerCatalog`` reads the metadata store (managed-ledger lists, partitioned-topic
counts) and asks the bookies for the LAC of each open ledger, read-only and without
recovery: planning never fences a live writer. ``connect`` opens the store and the ledger
client for one job (a ``local://`` store read-only, beside the standalone that holds it).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from stripemq.bookie.client import BookKeeper
from stripemq.metadata import MetadataStore
from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import Pushdown, ReadSplit, TopicPartitionRef, TopicSnapshot


@dataclass
class Connection:
    """A started metadata store and ledger client, closed together."""

    store: MetadataStore
    bk: BookKeeper


@contextlib.asynccontextmanager
async def connect(metadata_url: str) -> AsyncIterator[Connection]:
    """Open ``metadata_url`` (read-only when ``local://``) and a ledger client on it.

    Raises:
        SparkSourceError: the metadata store cannot be reached (the message names it).
    """
    raise NotImplementedError
    yield  # pragma: no cover


class LedgerCatalog:
    """Topics and ledgers to plan, read from one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def resolve(self, options: SourceOptions) -> list[TopicPartitionRef]:
        """The stored topics ``options`` names: each partition of a partitioned topic,
        topics matching ``topicsPattern`` in its namespace; sorted by name.

        Raises:
            UnknownTopicError: a named topic has no managed ledger and is not partitioned.
        """
        raise NotImplementedError

    async def snapshot(self, ref: TopicPartitionRef) -> TopicSnapshot:
        """``ref``'s ledgers now: closed ones whole, the open one to its LAC."""
        raise NotImplementedError

    async def publish_time(self, ref: TopicPartitionRef, ledger_id: int, entry_id: int) -> int:
        """The publish time (ms) of an entry, from its metadata (a probe for planning).

        Raises:
            DataLossError: the ledger is gone. CorruptEntryError: the entry does not parse.
        """
        raise NotImplementedError

    async def plan(self, options: SourceOptions, pushdown: Pushdown) -> list[ReadSplit]:
        """Resolve, snapshot, prune (ledgers, then entry ranges by publish time) and split."""
        raise NotImplementedError
