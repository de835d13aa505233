"""Seek by publish time: a binary search over a topic's entries (sans-IO).

Pulsar resets a subscription to a publish time by a binary search over the entries
(``PersistentMessageFinder`` calling ``ManagedCursor.asyncFindNewestMatching`` with the
predicate "published before t"), taking the predicate to hold on a prefix of the topic:
publish times rise with each producer, and nearly so across producers. It then resets to
the entry after the newest match, which is the first entry published at or after ``t``.

stripemq does the same over its ledger chain. The chain's non-empty ledgers are numbered as
one sequence (``index`` 0 is the first entry of the first ledger, a ledger's entries follow
its predecessor's; trimming removes whole ledgers, so every ledger holds entries ``0 ..
entries-1``), and a lower-bound search over that sequence reads
``ceil(log2(n + 1))`` entries for ``n`` entries: 17 for 100,000.

``PublishTimeSearch`` does no I/O: it names the entry it wants to see (``probe``) and is
told that entry's publish time (``record``). An entry that cannot be read as a message, or
that went away meanwhile (trimmed: older than anything kept), counts as published before
the target. ``find_first_published`` drives a search with a synchronous lookup (tests,
tools); the topic drives it with its managed ledger's reads.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable

from stripemq.managed_ledger.ledger_chain import LedgerChain
from stripemq.managed_ledger.position import Position
from stripemq.proto.frames import entry_metadata

log = logging.getLogger(__name__)


def publish_time_of(entry: bytes) -> int | None:
    """The publish time (ms) of a stored entry (a batch's, for a batch); ``None`` when the
    entry is not a readable message."""
    metadata = entry_metadata(entry)
    return None if metadata is None else metadata.publish_time


class EntrySequence:
    """The entries of a chain's non-empty ledgers numbered as one sequence (``index`` 0 is
    the first entry of the first ledger; a ledger's entries follow its predecessor's), so
    that a search can bisect over them: ``position(index)`` is O(log ledgers)."""

    def __init__(self, ledgers: Iterable[tuple[int, int]]) -> None:
        self._ledger_ids: list[int] = []
        self._starts: list[int] = []  # index of each ledger's first entry
        total = 0
        for ledger_id, entries in ledgers:
            if entries > 0:
                self._ledger_ids.append(ledger_id)
                self._starts.append(total)
                total += entries
        self.total = total

    @classmethod
    def over(cls, chain: LedgerChain) -> EntrySequence:
        """The entries the chain holds now."""
        return cls((info.ledger_id, info.entries) for info in chain)

    def __len__(self) -> int:
        return self.total

    def position(self, index: int) -> Position:
        """The position of the ``index``-th entry."""
        if not 0 <= index < self.total:
            raise IndexError(f"entry {index} of {self.total}")
        ledger = bisect.bisect_right(self._starts, index) - 1
        return Position(self._ledger_ids[ledger], index - self._starts[ledger])


class PublishTimeSearch:
    """Finds the first entry published at or after ``target_ms`` among the entries of
    ``ledgers`` (``(ledger_id, entries)`` in chain order), one probe at a time."""

    def __init__(self, ledgers: Iterable[tuple[int, int]], target_ms: int) -> None:
        self.target_ms = target_ms
        self.entries = EntrySequence(ledgers)
        self.total = self.entries.total
        # Invariant: entries before ``_lo`` were published before the target, entries from
        # ``_hi`` on at or after it; the answer lies in ``[_lo, _hi]``.
        self._lo = 0
        self._hi = self.total
        self.probes = 0

    @classmethod
    def over(cls, chain: LedgerChain, target_ms: int) -> PublishTimeSearch:
        """A search over the entries the chain holds now."""
        return cls(((info.ledger_id, info.entries) for info in chain), target_ms)

    @property
    def done(self) -> bool:
        return self._lo >= self._hi

    def position(self, index: int) -> Position:
        """The position of the ``index``-th entry of the search."""
        return self.entries.position(index)

    def probe(self) -> Position | None:
        """The entry whose publish time is wanted next; ``None`` when the search is done."""
        if self.done:
            return None
        return self.position((self._lo + self._hi) // 2)

    def record(self, publish_time_ms: int | None) -> None:
        """The publish time of the entry ``probe`` named (``None``: unreadable or gone)."""
        if self.done:
            raise RuntimeError("the search is done: nothing was probed")
        middle = (self._lo + self._hi) // 2
        self.probes += 1
        if publish_time_ms is None or publish_time_ms < self.target_ms:
            self._lo = middle + 1
        else:
            self._hi = middle

    @property
    def result(self) -> Position | None:
        """The first entry published at or after the target; ``None`` when every entry was
        published before it (the answer is then the position after the last entry)."""
        if not self.done:
            raise RuntimeError("the search is not done")
        return self.position(self._lo) if self._lo < self.total else None


def find_first_published(
    ledgers: Iterable[tuple[int, int]],
    target_ms: int,
    publish_time_at: Callable[[Position], int | None],
) -> Position | None:
    """``PublishTimeSearch`` run to its end with ``publish_time_at`` as the reader."""
    search = PublishTimeSearch(ledgers, target_ms)
    while (probe := search.probe()) is not None:
        search.record(publish_time_at(probe))
    return search.result
