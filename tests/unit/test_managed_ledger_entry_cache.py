"""The broker-wide entry cache: one byte budget for every managed ledger's entries."""

from __future__ import annotations

import gc

from stripemq.managed_ledger.entry_cache import EntryCacheManager
from stripemq.managed_ledger.position import Position


def test_one_budget_for_all_topics_evicts_the_least_recently_used_anywhere() -> None:
    manager = EntryCacheManager(max_bytes=300)
    a, b = manager.cache_for("a"), manager.cache_for("b")
    a.put(Position(1, 0), b"x" * 100)
    b.put(Position(7, 0), b"y" * 100)
    a.put(Position(1, 1), b"x" * 100)
    assert manager.size == 300 and (a.size, b.size) == (200, 100)
    assert a.get(Position(1, 0)) is not None  # now the most recently used
    b.put(Position(7, 1), b"y" * 100)  # over budget: b's (7, 0) is the oldest
    assert manager.size == 300
    assert b.get(Position(7, 0)) is None
    assert (a.size, b.size) == (200, 100)
    a.put(Position(1, 2), b"x" * 100)  # now a's (1, 1) is: a topic evicts its own too
    assert a.get(Position(1, 1)) is None and b.get(Position(7, 1)) is not None
    assert (a.hits, a.misses, b.hits, b.misses) == (1, 1, 1, 1)


def test_invalidating_and_clearing_touch_only_their_own_entries() -> None:
    manager = EntryCacheManager(max_bytes=1000)
    a, b = manager.cache_for("a"), manager.cache_for("b")
    for entry in range(3):
        a.put(Position(1, entry), b"a")
        a.put(Position(2, entry), b"a")
        b.put(Position(1, entry), b"b")
    a.invalidate_ledger(1)
    assert len(a) == 3 and len(b) == 3 and manager.size == 6
    a.clear()
    assert len(a) == 0 and a.size == 0 and manager.size == 3
    assert b.get(Position(1, 2)) == b"b"


def test_a_reopened_ledger_gets_a_fresh_view_and_the_old_one_cannot_corrupt_it() -> None:
    manager = EntryCacheManager(max_bytes=1000)
    old = manager.cache_for("t")
    old.put(Position(1, 0), b"old")
    old.clear()  # the managed ledger closed
    new = manager.cache_for("t")
    assert new is not old
    new.put(Position(1, 0), b"new")
    old.put(Position(1, 1), b"late")  # an append that completed after the close
    old.clear()
    assert new.get(Position(1, 0)) == b"new" and new.size == 3


def test_an_entry_larger_than_the_budget_is_not_kept() -> None:
    manager = EntryCacheManager(max_bytes=10)
    cache = manager.cache_for("t")
    cache.put(Position(1, 0), b"x" * 11)
    assert manager.size == 0 and cache.get(Position(1, 0)) is None


def test_cached_entries_give_the_garbage_collector_nothing_to_scan() -> None:
    """A full collection walks every tracked object while the event loop waits; a big
    cache must not add its entries to that walk."""
    manager = EntryCacheManager(max_bytes=1 << 30)
    cache = manager.cache_for("t")
    gc.collect()
    before = len(gc.get_objects())
    for entry in range(10_000):
        cache.put(Position(3, entry), b"x")
    gc.collect()  # a collection stops tracking tuples of plain integers
    assert len(gc.get_objects()) - before < 100
    assert len(cache) == 10_000 and cache.get(Position(3, 9_999)) == b"x"


def test_a_view_that_is_gone_leaves_its_entries_to_age_out() -> None:
    manager = EntryCacheManager(max_bytes=200)
    gone = manager.cache_for("gone")
    gone.put(Position(1, 0), b"x" * 100)
    del gone
    gc.collect()
    kept = manager.cache_for("kept")
    kept.put(Position(1, 0), b"y" * 100)
    kept.put(Position(1, 1), b"y" * 100)  # over budget: the orphan goes first
    assert manager.size == 200 and kept.size == 200 and len(kept) == 2
