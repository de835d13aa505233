"""Small durable-file helpers shared by the storage modules."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path) -> list[Path]:
    """Create ``directory`` and any missing ancestors durably; returns those it created.

    A directory's name lives in its parent, so each one created has its parent fsynced:
    otherwise a crash could lose the directory, and every file synced inside it with it.
    Blocking: call it off the event loop.
    """
    missing: list[Path] = []
    path = directory
    while not path.is_dir() and path.parent != path:
        missing.append(path)
        path = path.parent
    created = []
    for path in reversed(missing):
        try:
            os.mkdir(path)
            created.append(path)
        except FileExistsError:
            if not path.is_dir():
                raise
            # Made by someone else just now: their parent sync may not have happened yet.
        fsync_dir(path.parent)
    return created


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new content."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def pread_exact(fd: int, size: int, offset: int) -> bytes:
    """Read exactly ``size`` bytes at ``offset``, or fewer only at end of file."""
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def create_with_header(path: Path, header: bytes) -> int:
    """Create ``path`` for appending, durably holding ``header``; returns the open fd.

    On any failure (a full disk, say) the half-made file is removed, so the caller can try
    again with the same name.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    try:
        write_all(fd, header)
        os.fsync(fd)
        fsync_dir(path.parent)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return fd


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``; on failure cut the file back so no partial record remains."""
    start = os.lseek(fd, 0, os.SEEK_END)
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        try:
            os.ftruncate(fd, start)
        except OSError:
            pass
        raise
