"""Damage a bookie's entry logs on disk: flip one bit, or cut a log's tail (the chaos faults
"bit flip" and "truncation" of one replica).

Pure, blocking file operations: the injector runs them in a thread (``asyncio.to_thread``).
An entry log (``stripemq.bookie.storage.entry_log``) lives in ``<ledger_dir>/logs/`` as
``<log_id:08x>.log``: an 8-byte header (``FILE_MAGIC``) followed by ``size:u32 | entry``
records. Only the data region after the header is ever touched, so the bookie still knows the
file for an entry log; every change is fsynced before the helper returns.

A running bookie appends to its log with the highest id; damaging that one is fair too (the
bookie notices a cut before its next append and moves to a new log).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stripemq.bookie.storage.entry_log import FILE_MAGIC

log = logging.getLogger(__name__)

# Where ``BookieStorage`` keeps its entry logs inside the ledger directory.
LOGS_SUBDIR = "logs"
LOG_HEADER_SIZE = len(FILE_MAGIC)


@dataclass(frozen=True)
class Corruption:
    """One change made to an entry log: which file, what kind, where, and a line for a report.

    ``offset`` is the byte whose bit was flipped, or the file's new size after a truncation
    (the first byte cut).
    """

    path: Path
    kind: str  # "bit_flip" or "truncate"
    offset: int
    detail: str


def entry_log_files(ledger_dir: Path) -> list[Path]:
    """The bookie's entry logs that hold records beyond their header, oldest first.

    ``ledger_dir`` is the bookie's ``ledger_dir`` (``<data_dir>/ledgers`` by default).
    """
    logs_dir = Path(ledger_dir) / LOGS_SUBDIR
    found: list[tuple[int, Path]] = []
    for path in logs_dir.glob("*.log"):
        try:
            log_id = int(path.stem, 16)
            size = path.stat().st_size
        except (ValueError, FileNotFoundError):  # not a log, or removed by compaction meanwhile
            continue
        if size > LOG_HEADER_SIZE:
            found.append((log_id, path))
    return [path for _, path in sorted(found)]


def pick_entry_log(ledger_dir: Path, rng: random.Random) -> Path:
    """One of the bookie's entry logs holding data, chosen by ``rng``.

    Raises:
        LookupError: no entry log holds anything beyond its header yet.
    """
    logs = entry_log_files(ledger_dir)
    if not logs:
        raise LookupError(f"no entry log with data under {Path(ledger_dir) / LOGS_SUBDIR}")
    return rng.choice(logs)


def corrupt_entry_log(ledger_dir: Path, kind: str, rng: random.Random) -> Corruption:
    """Damage one entry log of the bookie whose ledger directory is ``ledger_dir``.

    Raises:
        ValueError: ``kind`` is neither ``"bit_flip"`` nor ``"truncate"``.
        LookupError: no entry log holds data (or the one picked vanished meanwhile).
    """
    damage = _KINDS.get(kind)
    if damage is None:
        raise ValueError(f"unknown corruption kind {kind!r}; expected one of {sorted(_KINDS)}")
    return damage(pick_entry_log(ledger_dir, rng), rng)


def _open_log(path: Path) -> tuple[int, int]:
    """The log opened for writing and its data bytes (after the header).

    Raises:
        LookupError: the log is gone or holds nothing beyond its header.
    """
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        raise LookupError(f"entry log {path} does not exist (compacted away?)") from None
    data = os.fstat(fd).st_size - LOG_HEADER_SIZE
    if data <= 0:
        os.close(fd)
        raise LookupError(f"entry log {path} holds no data beyond its header")
    return fd, data


def flip_bit(path: Path, rng: random.Random) -> Corruption:
    """Flip one random bit of one random byte in the log's data region, durably.

    Raises:
        LookupError: the log is gone or holds nothing beyond its header.
    """
    path = Path(path)
    fd, data = _open_log(path)
    try:
        offset = LOG_HEADER_SIZE + rng.randrange(data)
        bit = rng.randrange(8)
        old = os.pread(fd, 1, offset)
        if len(old) != 1:  # cut short since we looked
            raise LookupError(f"entry log {path} shrank below offset {offset}")
        os.pwrite(fd, bytes([old[0] ^ (1 << bit)]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    detail = f"flipped bit {bit} of byte {offset} in {path.name}"
    log.info("%s", detail)
    return Corruption(path, "bit_flip", offset, detail)


def truncate_tail(path: Path, rng: random.Random) -> Corruption:
    """Cut between 1 byte and half the data region off the log's end, durably; the header
    always stays.

    Raises:
        LookupError: the log is gone or holds nothing beyond its header.
    """
    path = Path(path)
    fd, data = _open_log(path)
    try:
        cut = rng.randint(1, max(1, data // 2))
        new_size = LOG_HEADER_SIZE + data - cut
        os.ftruncate(fd, new_size)
        os.fsync(fd)
    finally:
        os.close(fd)
    detail = f"cut {cut} of {data} data bytes off {path.name} (now {new_size} bytes)"
    log.info("%s", detail)
    return Corruption(path, "truncate", new_size, detail)


_KINDS: dict[str, Callable[[Path, random.Random], Corruption]] = {
    "bit_flip": flip_bit,
    "truncate": truncate_tail,
}
