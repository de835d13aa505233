"""Lifecycle state machines: an enum of states and the transitions between them.

A component with a lifecycle (``ManagedLedger``, ``ManagedCursor``, ``LedgerHandle``, the
client's ``Producer``) keeps it in one ``lifecycle`` attribute holding a member of its own
enum, as Pulsar's ``ManagedLedgerImpl.State`` and ``ManagedCursorImpl.State`` do, instead of
several boolean flags. The attribute changes only in one small method of the component,
which asks its ``Transitions`` table first.

Invariants:
- staying in a state is always allowed (closing twice, fencing twice);
- every other move must be in the table; one that is not is a bug in the caller and raises
  ``IllegalTransitionError``, leaving the state as it was;
- a state with no way out is terminal (``CLOSED`` everywhere).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

S = TypeVar("S", bound=enum.Enum)


class IllegalTransitionError(RuntimeError):
    """A lifecycle move its state machine does not allow: a bug, not an operational error."""


class Transitions(Generic[S]):
    """Which state may follow which. Built from ``{state: states it may move to}``, with an
    entry for every member of the enum (terminal states map to nothing)."""

    def __init__(self, allowed: Mapping[S, Iterable[S]]) -> None:
        self._allowed: dict[S, frozenset[S]] = {
            state: frozenset(targets) for state, targets in allowed.items()
        }
        members = {type(state) for state in self._allowed}
        if len(members) != 1:
            raise ValueError("a transition table covers the states of exactly one enum")
        (kind,) = members
        missing = [state.name for state in kind if state not in self._allowed]
        if missing:
            raise ValueError(f"no transitions given for {', '.join(missing)}")

    def allows(self, current: S, new: S) -> bool:
        return new is current or new in self._allowed[current]

    def targets(self, state: S) -> frozenset[S]:
        """The states ``state`` may move to (besides staying)."""
        return self._allowed[state]

    def check(self, owner: str, current: S, new: S) -> S:
        """``new`` if ``current`` may move to it; else ``IllegalTransitionError``."""
        if not self.allows(current, new):
            raise IllegalTransitionError(f"{owner}: {current.name} -> {new.name} is not allowed")
        return new
