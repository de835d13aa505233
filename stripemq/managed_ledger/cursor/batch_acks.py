"""Acknowledgements of single messages inside a batch entry.

A batch entry holds several messages; a consumer may acknowledge them one by one. The cursor
keeps a ``bitarray`` per partially acknowledged entry, a set bit meaning "not acknowledged
yet" (Pulsar's ack set); the entry counts as acknowledged once every bit is clear.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from bitarray import bitarray
from sortedcontainers import SortedDict

from stripemq.errors import InvalidCursorPositionError
from stripemq.managed_ledger.position import Position
from stripemq.proto.ack_set import MAX_BATCH_SIZE


class BatchAcks:
    """Unacknowledged-message bits of the partially acknowledged batch entries."""

    def __init__(self) -> None:
        self._bits: SortedDict = SortedDict()  # Position -> bitarray

    def __len__(self) -> int:
        return len(self._bits)

    def __contains__(self, position: Position) -> bool:
        return position in self._bits

    def __iter__(self) -> Iterator[tuple[Position, bitarray]]:
        return iter(self._bits.items())

    def memory_bytes(self) -> int:
        """Bytes held (``sys.getsizeof`` of the map, its positions and bit arrays)."""
        total = sys.getsizeof(self._bits)
        for position, bits in self._bits.items():
            total += sys.getsizeof(position) + sys.getsizeof(bits) + 16  # + two int fields
        return total

    def get(self, position: Position) -> bitarray | None:
        """The entry's unacknowledged bits, or ``None`` if no message of it was acked alone."""
        return self._bits.get(position)

    def ack(self, position: Position, indexes: range | list[int], batch_size: int) -> bool:
        """Clear ``indexes`` of the entry's bits; ``True`` once the whole entry is acked."""
        if not 0 < batch_size <= MAX_BATCH_SIZE:
            raise InvalidCursorPositionError(f"batch size {batch_size} out of range")
        bits = self._bits.get(position)
        if bits is not None and len(bits) != batch_size:
            raise InvalidCursorPositionError(
                f"entry {position} was acked as a batch of {len(bits)}, now of {batch_size}"
            )
        for index in indexes:  # checked first: a bad index changes nothing
            if not 0 <= index < batch_size:
                raise InvalidCursorPositionError(
                    f"batch index {index} outside a batch of {batch_size} at {position}"
                )
        if bits is None:
            bits = bitarray(batch_size)
            bits.setall(1)
        else:
            bits = bits.copy()
        for index in indexes:
            bits[index] = 0
        if bits.any():
            self._bits[position] = bits
            return False
        self._bits.pop(position, None)
        return True

    def restore(self, position: Position, bits: bitarray) -> None:
        """Put back bits read from a snapshot."""
        if bits.any():
            self._bits[position] = bits

    def discard(self, position: Position) -> None:
        self._bits.pop(position, None)

    def discard_at_most(self, position: Position) -> None:
        """Forget every entry ``<= position`` (the mark-delete moved past them)."""
        for key in list(self._bits.irange(maximum=position)):
            del self._bits[key]

    def clear(self) -> None:
        self._bits.clear()

    def in_range(self, low: Position, high: Position) -> Iterator[tuple[Position, bitarray]]:
        """Entries in ``[low, high)``."""
        for key in self._bits.irange(low, high, inclusive=(True, False)):
            yield key, self._bits[key]
