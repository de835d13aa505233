"""LedgerChain: how positions follow each other across ledgers, and entry counts."""

from __future__ import annotations

import pytest

from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.position import Position


def chain() -> LedgerChain:
    # Ledger 4 is empty (rolled over before anything was written), 9 is being written.
    return LedgerChain(
        [
            LedgerInfo(2, 3, closed=True),
            LedgerInfo(4, 0, closed=True),
            LedgerInfo(5, 2),
            LedgerInfo(9, 0),
        ]
    )


def test_next_valid_steps_over_ledger_ends_and_empty_ledgers() -> None:
    c = chain()
    assert c.next_valid(Position(2, -1)) == Position(2, 0)
    assert c.next_valid(Position(2, 1)) == Position(2, 2)
    assert c.next_valid(Position(2, 2)) == Position(5, 0)  # 4 is empty
    assert c.next_valid(Position(3, 7)) == Position(5, 0)  # a ledger trimmed or never ours
    assert c.next_valid(Position(1, 0)) == Position(2, 0)
    assert c.next_valid(Position(5, 1)) == Position(9, 0)  # the write position
    assert c.write_position() == Position(9, 0)
    assert c.last_confirmed() == Position(5, 1)
    assert c.first_position() == Position(2, 0)


def test_the_nth_entry_from_either_end_skips_empty_ledgers() -> None:
    c = chain()  # 2:0 2:1 2:2 (4 empty) 5:0 5:1
    assert [c.nth_entry(n) for n in range(1, 6)] == [
        Position(2, 0),
        Position(2, 1),
        Position(2, 2),
        Position(5, 0),
        Position(5, 1),
    ]
    assert [c.nth_entry(n, from_end=True) for n in (1, 2, 3, 5)] == [
        Position(5, 1),
        Position(5, 0),
        Position(2, 2),
        Position(2, 0),
    ]
    assert c.nth_entry(6) is None and c.nth_entry(6, from_end=True) is None
    assert LedgerChain().nth_entry(1) is None
    with pytest.raises(ValueError):
        c.nth_entry(0)


def test_counts_and_existence() -> None:
    c = chain()
    assert c.entries == 5
    assert c.entries_after(Position(2, -1)) == 5
    assert c.entries_after(Position(2, 1)) == 3
    assert c.entries_after(Position(3, 0)) == 2
    assert c.entries_after(Position(5, 1)) == 0
    assert c.entries_between(Position(2, 1), Position(5, 0)) == 3
    assert c.exists(Position(5, 1)) and not c.exists(Position(5, 2))
    assert not c.exists(Position(4, 0)) and not c.exists(Position(2, -1))


def test_an_empty_chain_and_ordering() -> None:
    empty = LedgerChain()
    assert empty.last_confirmed() == Position(-1, -1)
    assert empty.entries_after(Position(0, -1)) == 0
    c = chain()
    with pytest.raises(ValueError):
        c.add(LedgerInfo(7))  # ledgers only join at the end
    removed = c.remove(2)
    assert c.first_position() == Position(5, 0)
    c.put_back([removed])
    assert c.first_position() == Position(2, 0)


def test_ledger_info_round_trips_through_json() -> None:
    info = LedgerInfo(12, 40, 4096, created_ms=5, closed=True, closed_ms=9)
    assert LedgerInfo.from_json(info.to_json()) == info


def test_size_after_counts_later_ledgers_whole_and_its_own_pro_rata() -> None:
    chain = LedgerChain([LedgerInfo(1, entries=4, size=400), LedgerInfo(2, entries=2, size=50)])
    assert chain.size_after(Position(1, -1)) == 450
    assert chain.size_after(Position(1, 1)) == 200 + 50
    assert chain.size_after(Position(1, 3)) == 50
    assert chain.size_after(Position(2, 1)) == 0
    assert chain.size_after(Position(3, -1)) == 0
