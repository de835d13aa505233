"""A gate in front of a bookie journal's sync, for tests that must hold a sync open.

``JournalWriter.sync_file`` is the journal's sync function; ``installed_gate`` wraps the
real one so that, while the gate is closed, a sync blocks inside it on the journal thread.
"""

from __future__ import annotations

import os
import threading

from stripemq.bookie.storage.journal import JournalWriter, SyncFile, journal_path
from stripemq.testing.polling import until

GATE_TIMEOUT_S = 60.0  # a sync held longer than this fails (so a broken test cannot hang)


class SyncGate:
    """A journal sync function that, while the gate is closed, blocks until it opens.

    ``blocked`` is set once a sync is waiting at the closed gate (the journal thread has
    written its group and is inside the sync); ``syncs_returned`` counts syncs that finished.
    """

    def __init__(self, real: SyncFile = os.fdatasync) -> None:
        self._real = real
        self._open = threading.Event()
        self._open.set()
        self.blocked = threading.Event()
        self._lock = threading.Lock()
        self.syncs_returned = 0

    @property
    def held(self) -> bool:
        """Whether the gate is closed (syncs wait in it)."""
        return not self._open.is_set()

    def close(self) -> None:
        self.blocked.clear()
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    def __call__(self, fd: int) -> None:
        if not self._open.is_set():
            self.blocked.set()
            if not self._open.wait(GATE_TIMEOUT_S):
                raise OSError(f"sync gate held for more than {GATE_TIMEOUT_S}s")
        self._real(fd)
        with self._lock:
            self.syncs_returned += 1


def installed_gate(journal: JournalWriter) -> SyncGate:
    """Put a gate in front of the journal's real sync function."""
    assert journal.sync_data, "the gate needs journal_sync_data on"
    gate = SyncGate(journal.sync_file)
    journal.sync_file = gate
    return gate


def journal_holds(journal: JournalWriter, data: bytes) -> bool:
    """Whether the journal's current file already holds ``data`` (written, maybe unsynced)."""
    path = journal_path(journal.directory, journal.written_mark.journal_id)
    return data in path.read_bytes()


async def blocked_holding(gate: SyncGate, journal: JournalWriter, data: bytes) -> None:
    """Wait until the journal has written ``data`` and sits in the gated sync."""
    await until(
        lambda: gate.blocked.is_set() and journal_holds(journal, data),
        "the journal has written the record and waits in its sync",
    )
