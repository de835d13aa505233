"""The storage's durable-file helpers: a directory created by the bookie has its parent
fsynced, so a crash cannot lose the directory together with the files synced inside it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from stripemq.bookie.config import BookieConfig
from stripemq.bookie.storage import files as files_module
from stripemq.bookie.storage.engine import AddOp, BookieStorage
from stripemq.bookie.storage.files import make_dirs
from stripemq.proto.entry import EntryHeader, encode_entry


class RecordingOs:
    """``os`` as the files module sees it, noting the path of every descriptor fsynced."""

    def __init__(self) -> None:
        self.synced: list[Path] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        os.fsync(fd)
        with self._lock:
            self.synced.append(path)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> RecordingOs:
    recording = RecordingOs()
    monkeypatch.setattr(files_module, "os", recording)
    return recording


def test_make_dirs_fsyncs_the_parent_of_each_directory_it_creates(
    tmp_path: Path, recorder: RecordingOs
) -> None:
    target = tmp_path / "a" / "b" / "c"
    created = make_dirs(target)
    assert created == [tmp_path / "a", tmp_path / "a" / "b", target]
    assert target.is_dir()
    # Top-down: each parent is synced once its new child is in it.
    assert recorder.synced == [tmp_path, tmp_path / "a", tmp_path / "a" / "b"]


def test_make_dirs_on_existing_directories_creates_and_syncs_nothing(
    tmp_path: Path, recorder: RecordingOs
) -> None:
    (tmp_path / "a").mkdir()
    assert make_dirs(tmp_path / "a") == []
    assert recorder.synced == []
    assert make_dirs(tmp_path / "a" / "b") == [tmp_path / "a" / "b"]
    assert recorder.synced == [tmp_path / "a"]


def test_make_dirs_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"not a directory")
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "a")
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "a" / "b")


async def test_every_directory_the_bookie_creates_has_its_parent_synced(
    tmp_path: Path, recorder: RecordingOs
) -> None:
    root = tmp_path / "bookie"
    storage = BookieStorage(BookieConfig(data_dir=str(root), flush_interval_ms=600_000))
    await storage.start()
    try:
        entry = encode_entry(7, 0, -1, b"payload")
        [added] = await storage.add_entries([AddOp(entry, b"key")])
        assert isinstance(added, EntryHeader)
        await storage.checkpoint()  # the index directories appear with the first ledger
    finally:
        await storage.stop()
    created = [root, *(path for path in root.rglob("*") if path.is_dir())]
    names = {path.relative_to(tmp_path).as_posix() for path in created}
    assert {"bookie/journal", "bookie/ledgers/logs", "bookie/ledgers/index"} <= names
    assert len(names) >= 6  # and index/<ledger & 0xff>
    for directory in created:
        assert directory.parent in recorder.synced, f"parent of {directory} never fsynced"
