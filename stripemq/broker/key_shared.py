"""Key_Shared dispatch: each key to one consumer, in order, even as consumers come and go.

A key's hash (Murmur3 of the key, modulo 65,536, as Pulsar computes it) picks its consumer:
on a consistent-hash ring of the consumers (AUTO_SPLIT), or by the hash ranges consumers
declared (STICKY). When consumers join or leave, some hashes move. A moved hash is
*draining* while its old consumer still holds delivered, unacknowledged messages of it:
nothing more of that hash is delivered to anyone until those are acknowledged (or handed
back), so no key is ever delivered out of order.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise

import mmh3

from stripemq.broker.dispatch import ConsumerSlot, Dispatcher
from stripemq.errors import ConsumerAssignError
from stripemq.managed_ledger.position import Position

HASH_RANGE = 65_536
REPLICA_POINTS = 100  # points per consumer on the ring (Pulsar's default)


def disjoint_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` sorted, each within ``[0, HASH_RANGE)`` and none overlapping another:
    O(n log n), by sorting and comparing neighbours. Raises ``ConsumerAssignError``."""
    if len(ranges) > HASH_RANGE:  # more ranges than hashes cannot be disjoint
        raise ConsumerAssignError(f"{len(ranges)} hash ranges cannot be disjoint")
    claimed = sorted(ranges)
    for start, end in claimed:
        if not 0 <= start <= end < HASH_RANGE:
            raise ConsumerAssignError(f"hash range {start}..{end} is out of bounds")
    for (_, previous_end), (start, end) in pairwise(claimed):
        if start <= previous_end:
            raise ConsumerAssignError(f"hash range {start}..{end} overlaps another of its own")
    return claimed


def sticky_key_hash(key: bytes) -> int:
    """The hash Key_Shared places a key by: Murmur3-32 (seed 0), positive, mod 65,536."""
    return (mmh3.hash(key, 0, signed=True) & 0x7FFFFFFF) % HASH_RANGE


@dataclass
class _Held:
    """What one consumer holds, per hash: delivered and not yet acknowledged."""

    by_hash: Counter[int] = field(default_factory=Counter)
    hash_of: dict[Position, int] = field(default_factory=dict)


class KeySharedDispatcher(Dispatcher):
    """Picks by key hash; refuses (for now) entries whose hash is draining elsewhere."""

    skips_blocked = True  # a refused entry waits for replay; later keys go on

    def __init__(self, sticky: bool = False) -> None:
        super().__init__()
        self.sticky = sticky
        self._ring: list[tuple[int, int]] = []  # (point, consumer id), sorted
        # STICKY: every consumer's ranges as (start, end, consumer id), sorted and disjoint.
        self._ranges: list[tuple[int, int, int]] = []
        self._held: dict[int, _Held] = {}
        # Entries refused for now, by hash, oldest first: nothing newer of that hash may pass.
        self._blocked: dict[int, list[Position]] = {}
        self._blocked_hash: dict[Position, int] = {}

    # ------------------------------------------------------------------ membership

    def add_consumer(self, slot: ConsumerSlot, ranges: list[tuple[int, int]] | None = None) -> None:
        if self.sticky:
            claimed = disjoint_ranges(ranges or [])
            if not claimed:
                raise ConsumerAssignError("a STICKY consumer must declare hash ranges")
            for start, end in claimed:
                if self._range_at_or_before(end, start) is not None:
                    raise ConsumerAssignError(
                        f"hash range {start}..{end} overlaps another consumer's"
                    )
            self._ranges = sorted(self._ranges + [(s, e, slot.slot_id) for s, e in claimed])
        else:
            for i in range(REPLICA_POINTS):
                point = sticky_key_hash(f"{slot.name}{slot.slot_id}-{i}".encode())
                bisect.insort(self._ring, (point, slot.slot_id))
        super().add_consumer(slot)
        self._held[slot.slot_id] = _Held()

    def remove_consumer(self, slot: ConsumerSlot) -> list[Position]:
        self._ring = [(p, c) for p, c in self._ring if c != slot.slot_id]
        self._ranges = [r for r in self._ranges if r[2] != slot.slot_id]
        held = self._held.pop(slot.slot_id, None)
        if held is not None:  # they come back for replay: nothing newer of theirs overtakes
            for position, key_hash in held.hash_of.items():
                self._block(position, key_hash)
        return super().remove_consumer(slot)

    def _range_at_or_before(self, point: int, low: int) -> tuple[int, int, int] | None:
        """The assigned range starting last at or before ``point``, if it reaches ``low``
        (``low <= point``): with the ranges disjoint, the only one that can meet
        ``[low, point]``; O(log n)."""
        i = bisect.bisect_right(self._ranges, (point, HASH_RANGE, HASH_RANGE))
        if i and self._ranges[i - 1][1] >= low:
            return self._ranges[i - 1]
        return None

    # ------------------------------------------------------------------ selection

    def owner_of_hash(self, key_hash: int) -> ConsumerSlot | None:
        """The consumer a hash belongs to now (ignoring draining)."""
        if self.sticky:
            found = self._range_at_or_before(key_hash, key_hash)
            return self._slot(found[2]) if found is not None else None
        if not self._ring:
            return None
        i = bisect.bisect_left(self._ring, (key_hash, -1))
        _, slot_id = self._ring[i % len(self._ring)]
        return self._slot(slot_id)

    def pick(self, position: Position, messages: int, key: bytes | None) -> ConsumerSlot | None:
        key_hash = sticky_key_hash(key if key is not None else b"")
        target = self._target(position, key_hash)
        if target is None:
            self._block(position, key_hash)
            return None
        self.forget(position)
        held = self._held[target.slot_id]
        held.by_hash[key_hash] += 1
        held.hash_of[position] = key_hash
        return target

    def _target(self, position: Position, key_hash: int) -> ConsumerSlot | None:
        waiting = self._blocked.get(key_hash)
        if waiting and waiting[0] < position:
            return None  # an older entry of this hash waits: keep the order
        target = self.owner_of_hash(key_hash)
        if target is None or not target.ready:
            return None
        for slot_id, held in self._held.items():
            if slot_id != target.slot_id and held.by_hash[key_hash]:
                return None  # draining: the old owner has not acknowledged this hash yet
        return target

    def _block(self, position: Position, key_hash: int) -> None:
        if position in self._blocked_hash:
            return
        self._blocked_hash[position] = key_hash
        bisect.insort(self._blocked.setdefault(key_hash, []), position)

    def forget(self, position: Position) -> None:
        key_hash = self._blocked_hash.pop(position, None)
        if key_hash is None:
            return
        waiting = self._blocked[key_hash]
        waiting.remove(position)
        if not waiting:
            del self._blocked[key_hash]

    def released(self, slot: ConsumerSlot, positions: list[Position]) -> None:
        """Entries a consumer acknowledged (or gave back): their hashes drain."""
        held = self._held.get(slot.slot_id)
        if held is None:
            return
        for position in positions:
            key_hash = held.hash_of.pop(position, None)
            if key_hash is not None:
                held.by_hash[key_hash] -= 1
                if not held.by_hash[key_hash]:
                    del held.by_hash[key_hash]

    def returned(self, slot: ConsumerSlot, positions: list[Position]) -> None:
        held = self._held.get(slot.slot_id)
        hashes = {p: held.hash_of.get(p) for p in positions} if held is not None else {}
        self.released(slot, positions)
        for position, key_hash in hashes.items():
            if key_hash is not None:
                self._block(position, key_hash)

    def _slot(self, slot_id: int) -> ConsumerSlot | None:
        for slot in self.consumers:
            if slot.slot_id == slot_id:
                return slot
        return None
