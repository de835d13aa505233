"""Which partition a message goes to: key hashes that match the official clients, and the
round-robin and single-partition routers."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import mmh3

from stripemq.client.options import HashingScheme, PartitionsRoutingMode

_M64 = (1 << 64) - 1
_Q = 0x9E3779B97F4A7C15  # boost's golden-ratio step
_K = 0xDF442D22CE4859B9  # its multiplier (Q * K == 1 mod 2^64)


def _fold(a: int, b: int) -> int:
    product = (a & _M64) * b
    return (product ^ (product >> 64)) & _M64


def boost_hash(key: str) -> int:
    """``boost::hash<std::string>`` (Boost >= 1.81, 64-bit) masked to 31 bits: the official
    Python and C++ clients' default key hash."""
    data = key.encode()
    n = len(data)
    w = _fold(_Q, _K)
    h = w ^ n
    i = 0
    while n - i >= 8:
        w = (w + _Q) & _M64
        h ^= _fold(int.from_bytes(data[i : i + 8], "little") + w, _K)
        i += 8
    rest = n - i
    if rest >= 4:
        high = int.from_bytes(data[i + rest - 4 : i + rest], "little")
        word = (high << ((rest - 4) * 8)) | int.from_bytes(data[i : i + 4], "little")
    elif rest >= 1:
        x1, x2 = (rest - 1) & 2, rest >> 1
        word = (data[i + x2] << (x2 * 8)) | (data[i + x1] << (x1 * 8)) | data[i]
    else:
        word = 0
    w = (w + _Q) & _M64
    h ^= _fold(word + w, _K)
    return _fold(h + w, _K) & 0x7FFFFFFF


def java_string_hash(key: str) -> int:
    """Java's ``String.hashCode`` masked to 31 bits, as the Java client routes by default."""
    h = 0
    for unit in _utf16_units(key):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


def _utf16_units(text: str) -> list[int]:
    raw = text.encode("utf-16-be")
    return [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]


def murmur3_32_hash(key: str) -> int:
    """Murmur3 (32-bit, seed 0) of the UTF-8 key, masked to 31 bits."""
    return mmh3.hash(key.encode(), 0, signed=False) & 0x7FFFFFFF


HASHES: dict[HashingScheme, Callable[[str], int]] = {
    HashingScheme.BoostHash: boost_hash,
    HashingScheme.JavaStringHash: java_string_hash,
    HashingScheme.Murmur3_32Hash: murmur3_32_hash,
}


class MessageRouter:
    """Picks a partition for each message. Keyed messages always go by key hash; the rest
    round-robin (switching partition once per batching window, so batches fill) or stay on
    one randomly chosen partition."""

    def __init__(
        self,
        mode: PartitionsRoutingMode,
        hashing: HashingScheme = HashingScheme.BoostHash,
        batching_window_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mode = mode
        self._hash = HASHES[hashing]
        self._window = batching_window_s
        self._clock = clock
        self._counter = random.randrange(1 << 16)
        self._last_switch = clock()
        self._single = random.randrange(1 << 16)

    def choose(self, key: str | None, partitions: int) -> int:
        if key:
            return self._hash(key) % partitions
        if self.mode is PartitionsRoutingMode.UseSinglePartition:
            return self._single % partitions
        if self._window > 0:
            now = self._clock()
            if now - self._last_switch >= self._window:
                self._counter += 1
                self._last_switch = now
            return self._counter % partitions
        self._counter += 1
        return self._counter % partitions
