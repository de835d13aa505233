"""The executor's side: read one split's entries from the bookies and yield Arrow batches.

Each task opens its own metadata store and ledger client (nothing is shared between
Python workers), opens the ledger read-only without recovery, and reads its entries in
windows while the previous window is decoded. A ledger deleted under the job raises
``DataLossError`` naming topic and ledger (or yields nothing when the options allow data
loss); a bad entry raises ``CorruptEntryError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stripemq.spark.options import SourceOptions
from stripemq.spark.planning import ReadSplit


def read_split(split: ReadSplit, options: SourceOptions) -> Iterator[Any]:
    """The rows of ``split`` as ``pyarrow.RecordBatch``\\ es of at most
    ``options.max_records_per_batch`` rows, in entry order."""
    raise NotImplementedError
