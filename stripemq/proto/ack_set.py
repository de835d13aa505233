"""Pulsar's ack set: one bit per message of a batch entry, set while that message is
still unacknowledged, carried as a Java ``BitSet.toLongArray`` (signed 64-bit words,
bit 0 of word 0 first). Broker and client read and write it the same way."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_M64 = (1 << 64) - 1


def words_of(bits: Sequence[bool | int]) -> list[int]:
    """``bits`` (index 0 first) as signed 64-bit words."""
    words = []
    for start in range(0, len(bits), 64):
        word = sum(1 << i for i, bit in enumerate(bits[start : start + 64]) if bit)
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
    return words


def bits_of(words: Iterable[int], size: int) -> list[bool]:
    """The first ``size`` bits of ``words``; bits past the words are clear."""
    bits: list[bool] = []
    for word in words:
        if len(bits) >= size:
            break
        word &= _M64
        bits.extend(bool(word >> i & 1) for i in range(64))
    return (bits + [False] * size)[:size]
