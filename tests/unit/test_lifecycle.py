"""``Transitions``, the table every lifecycle enum is checked against (``stripemq.lifecycle``),
and the tables themselves: each covers its enum, ``CLOSED`` is terminal and reachable."""

from __future__ import annotations

import enum
from typing import Any

import pytest

from stripemq.bookie.client.ledger_handle import HANDLE_TRANSITIONS, HandleLifecycle
from stripemq.client.producer import PRODUCER_TRANSITIONS, ProducerLifecycle
from stripemq.lifecycle import IllegalTransitionError, Transitions
from stripemq.managed_ledger.cursor.managed_cursor import CURSOR_TRANSITIONS, CursorLifecycle
from stripemq.managed_ledger.managed_ledger import (
    MANAGED_LEDGER_TRANSITIONS,
    ManagedLedgerLifecycle,
)


class Light(enum.Enum):
    OFF = 1
    ON = 2
    BROKEN = 3


TABLE = Transitions[Light](
    {Light.OFF: {Light.ON}, Light.ON: {Light.OFF, Light.BROKEN}, Light.BROKEN: set()}
)


def test_staying_is_always_allowed() -> None:
    assert all(TABLE.allows(state, state) for state in Light)
    assert TABLE.check("light", Light.BROKEN, Light.BROKEN) is Light.BROKEN


def test_only_the_listed_moves_are_allowed() -> None:
    assert TABLE.check("light", Light.OFF, Light.ON) is Light.ON
    assert TABLE.allows(Light.ON, Light.BROKEN)
    assert not TABLE.allows(Light.OFF, Light.BROKEN)
    assert not TABLE.allows(Light.BROKEN, Light.ON)
    assert TABLE.targets(Light.ON) == {Light.OFF, Light.BROKEN}


def test_an_illegal_move_raises_naming_the_owner_and_both_states() -> None:
    with pytest.raises(IllegalTransitionError, match=r"^hall light: BROKEN -> ON is not allowed$"):
        TABLE.check("hall light", Light.BROKEN, Light.ON)
    assert issubclass(IllegalTransitionError, RuntimeError)  # a bug, not a StripeMQError


def test_a_table_must_cover_every_state_of_one_enum() -> None:
    with pytest.raises(ValueError, match="BROKEN"):
        Transitions[Light]({Light.OFF: {Light.ON}, Light.ON: set()})

    class Other(enum.Enum):
        X = 1

    with pytest.raises(ValueError, match="one enum"):
        Transitions({Light.OFF: set(), Other.X: set()})


TABLES: dict[str, tuple[Transitions[Any], type[enum.Enum]]] = {
    "managed ledger": (MANAGED_LEDGER_TRANSITIONS, ManagedLedgerLifecycle),
    "cursor": (CURSOR_TRANSITIONS, CursorLifecycle),
    "ledger handle": (HANDLE_TRANSITIONS, HandleLifecycle),
    "producer": (PRODUCER_TRANSITIONS, ProducerLifecycle),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_closed_is_terminal_and_reachable_from_every_state(name: str) -> None:
    table, states = TABLES[name]
    closed = states["CLOSED"]
    assert table.targets(closed) == frozenset()
    for state in states:
        seen, frontier = {state}, [state]
        while frontier:
            for nxt in table.targets(frontier.pop()):
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        assert closed in seen, f"{name}: {state.name} can never close"
