"""Choosing bookies for an ensemble or a replacement (sans-IO, like BookKeeper's
RackawareEnsemblePlacementPolicy).

Bookies carry an optional rack label. When the bookies span enough racks, every write set
(``Qw`` consecutive ensemble slots, cyclically) gets bookies from ``Qw`` distinct racks, so
losing a rack loses no entry; otherwise placement falls back to fewer distinct racks, and with
no labels at all it is a random pick. Too few bookies is ``NotEnoughBookiesError``.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from stripemq.errors import NotEnoughBookiesError

DEFAULT_RACK = "/default-rack"
_SEARCH_BUDGET = 5000  # placements tried per spread level before relaxing it


@dataclass(frozen=True)
class BookieInfo:
    bookie_id: str
    rack: str = DEFAULT_RACK


class EnsemblePlacementPolicy:
    """Pick ``E`` distinct writable bookies, or one replacement for a slot."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._budget = 0

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        bookies: Mapping[str, BookieInfo],
        exclude: Collection[str] = (),
    ) -> list[str]:
        candidates = [b for b in bookies.values() if b.bookie_id not in exclude]
        if len(candidates) < ensemble_size:
            raise NotEnoughBookiesError(
                f"need {ensemble_size} writable bookies, have {len(candidates)}"
                f" ({sorted(b.bookie_id for b in candidates)})"
            )
        racks = {b.rack for b in candidates}
        # Ask for as many distinct racks per write set as exist, then relax.
        for spread in range(min(write_quorum_size, len(racks)), 0, -1):
            self._budget = _SEARCH_BUDGET
            slots: list[BookieInfo | None] = [None] * ensemble_size
            ensemble = self._search(slots, 0, candidates, write_quorum_size, spread)
            if ensemble is not None:
                return ensemble
        raise NotEnoughBookiesError("no ensemble satisfies placement")  # unreachable: spread 1

    def replace_bookie(
        self,
        ensemble: list[str] | tuple[str, ...],
        index: int,
        write_quorum_size: int,
        bookies: Mapping[str, BookieInfo],
        exclude: Collection[str] = (),
    ) -> str:
        """A bookie for slot ``index``: not in the ensemble, rack-diverse from its neighbours."""
        taken = set(ensemble) | set(exclude)
        candidates = [b for b in bookies.values() if b.bookie_id not in taken]
        if not candidates:
            raise NotEnoughBookiesError(
                f"no writable bookie left to replace {ensemble[index]} "
                f"(ensemble {list(ensemble)}, excluded {sorted(exclude)})"
            )
        self._rng.shuffle(candidates)
        e = len(ensemble)
        neighbours = {
            bookies[ensemble[(index + d) % e]].rack
            for d in range(-(write_quorum_size - 1), write_quorum_size)
            if d != 0 and ensemble[(index + d) % e] in bookies
        }
        for candidate in candidates:
            if candidate.rack not in neighbours:
                return candidate.bookie_id
        return candidates[0].bookie_id

    # ----------------------------------------------------------------- search

    def _search(
        self,
        slots: list[BookieInfo | None],
        position: int,
        remaining: list[BookieInfo],
        write_quorum_size: int,
        spread: int,
    ) -> list[str] | None:
        """Fill ``slots`` so each cyclic window of ``Qw`` slots spans ``spread`` racks."""
        self._budget -= 1
        if self._budget < 0:
            return None  # give up on this spread; the caller relaxes it
        if position == len(slots):
            if _windows_ok(slots, write_quorum_size, spread, complete=True):
                return [b.bookie_id for b in slots if b is not None]
            return None
        # Prefer racks with the most bookies left, so small racks are not exhausted early.
        by_rack: dict[str, list[BookieInfo]] = {}
        for bookie in remaining:
            by_rack.setdefault(bookie.rack, []).append(bookie)
        rack_order = list(by_rack)
        self._rng.shuffle(rack_order)
        rack_order.sort(key=lambda r: -len(by_rack[r]))
        for rack in rack_order:
            bookie = self._rng.choice(by_rack[rack])
            slots[position] = bookie
            if _windows_ok(slots, write_quorum_size, spread, complete=False):
                rest = [b for b in remaining if b is not bookie]
                found = self._search(slots, position + 1, rest, write_quorum_size, spread)
                if found is not None:
                    return found
            slots[position] = None
        return None


def _windows_ok(
    slots: list[BookieInfo | None], write_quorum_size: int, spread: int, complete: bool
) -> bool:
    """Every window of ``Qw`` consecutive slots that is fully filled spans >= spread racks.

    While filling, only windows that do not wrap are checked; once complete, all are.
    """
    e = len(slots)
    qw = min(write_quorum_size, e)
    starts = range(e) if complete else range(max(0, e - qw + 1))
    for start in starts:
        window = [slots[(start + i) % e] for i in range(qw)]
        if any(b is None for b in window):
            continue
        if len({b.rack for b in window if b is not None}) < spread:
            return False
    return True
