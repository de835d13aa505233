"""Pulsar's ack set: one bit per message of a batch entry, set while that message is
still unacknowledged, carried as a Java ``BitSet.toLongArray`` (signed 64-bit words,
bit 0 of word 0 first; trailing all-clear words are left out, so a batch of ``n`` messages
has at most ``words_for(n)`` words). Broker and client read and write it the same way.

Batch sizes come from the other side (an ack's ``batch_size``, an entry's message count):
nothing here decodes a batch larger than ``MAX_BATCH_SIZE``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_M64 = (1 << 64) - 1
MAX_BATCH_SIZE = 1 << 16  # messages in one batch entry whose ack set is decoded or kept


def words_for(size: int) -> int:
    """The most words the ack set of a batch of ``size`` messages has."""
    return -(-size // 64)


def words_of(bits: Sequence[bool | int]) -> list[int]:
    """``bits`` (index 0 first) as signed 64-bit words."""
    words = []
    for start in range(0, len(bits), 64):
        word = sum(1 << i for i, bit in enumerate(bits[start : start + 64]) if bit)
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
    return words


def bits_of(words: Iterable[int], size: int) -> list[bool]:
    """The first ``size`` bits of ``words``; bits past the words are clear.

    Raises ``ValueError`` (before allocating) unless ``0 <= size <= MAX_BATCH_SIZE``.
    """
    if not 0 <= size <= MAX_BATCH_SIZE:
        raise ValueError(f"batch size {size} is outside 0..{MAX_BATCH_SIZE}")
    bits: list[bool] = []
    for word in words:
        if len(bits) >= size:
            break
        word &= _M64
        bits.extend(bool(word >> i & 1) for i in range(64))
    return (bits + [False] * size)[:size]
