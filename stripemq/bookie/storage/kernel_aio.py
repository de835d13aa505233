"""Linux native AIO's asynchronous fdatasync (``IOCB_CMD_FDSYNC``), for the journal.

The kernel runs the sync on its own worker and signals an eventfd when it is done, so the
event loop learns of it from ``epoll`` like any socket. Syncing on a Python thread instead
costs two or three hand-offs per sync, and a thread coming back from a system call waits for
the GIL until a busy event loop happens to let it go: that, not the disk, was most of a
journal group's time. The sync itself is the kernel's ``vfs_fsync(datasync=1)``, the same
work ``fdatasync(2)`` does.

Only the system calls live here (through ``ctypes``, no libaio needed); the journal decides
what to sync and when.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import select
from dataclasses import dataclass

log = logging.getLogger(__name__)

# io_setup, io_destroy, io_submit, io_getevents: the kernel ABI's numbers per architecture.
_SYSCALLS = {
    "x86_64": (206, 207, 209, 208),
    "aarch64": (0, 1, 2, 4),
}
_IOCB_CMD_FDSYNC = 3
_IOCB_FLAG_RESFD = 1  # signal aio_resfd (an eventfd) on completion
_MAX_EVENTS = 8


class _Iocb(ctypes.Structure):
    """``struct iocb`` of ``linux/aio_abi.h`` (little-endian field order)."""

    _fields_ = [
        ("aio_data", ctypes.c_uint64),
        ("aio_key", ctypes.c_uint32),
        ("aio_rw_flags", ctypes.c_int32),
        ("aio_lio_opcode", ctypes.c_uint16),
        ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32),
        ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64),
        ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64),
        ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32),
    ]


class _IoEvent(ctypes.Structure):
    """``struct io_event``: which request (``data``) and its result (``res``, ``-errno``)."""

    _fields_ = [
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    ]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


@dataclass(frozen=True, slots=True)
class SyncDone:
    """A finished sync: the token it was submitted with, and 0 or the errno it failed with."""

    token: int
    error: int


class AsyncDataSync:
    """An AIO context and its eventfd: submit fdatasyncs, reap them once ``eventfd`` is
    readable. Not thread-safe: one event loop uses it.

    Raises ``OSError`` when the kernel (or a sandbox in front of it) does not offer AIO.
    """

    def __init__(self, depth: int = 4) -> None:
        numbers = _SYSCALLS.get(platform.machine())
        if numbers is None:
            raise OSError(f"no AIO system call numbers for {platform.machine()}")
        self._setup, self._destroy, self._submit, self._getevents = numbers
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long
        self._context = ctypes.c_ulong(0)
        self._call(self._setup, ctypes.c_long(depth), ctypes.byref(self._context))
        try:
            self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            self._call(self._destroy, self._context)
            raise
        self._iocb = _Iocb()
        self._iocbs = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self._iocb))
        self._events = (_IoEvent * _MAX_EVENTS)()
        self._no_wait = _Timespec(0, 0)
        self.in_flight = 0
        self._closed = False

    def _call(self, number: int, *args: object) -> int:
        result = int(self._syscall(ctypes.c_long(number), *args))
        if result < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return result

    def submit(self, fd: int, token: int) -> None:
        """Start an fdatasync of ``fd``; what was written to it before is covered."""
        ctypes.memset(ctypes.byref(self._iocb), 0, ctypes.sizeof(self._iocb))
        self._iocb.aio_data = token
        self._iocb.aio_lio_opcode = _IOCB_CMD_FDSYNC
        self._iocb.aio_fildes = fd
        self._iocb.aio_flags = _IOCB_FLAG_RESFD
        self._iocb.aio_resfd = self.eventfd
        self._call(self._submit, self._context, ctypes.c_long(1), self._iocbs)
        self.in_flight += 1

    def reap(self) -> list[SyncDone]:
        """The syncs finished since the last call (never blocks)."""
        try:
            os.eventfd_read(self.eventfd)
        except BlockingIOError:
            pass
        done = []
        while self.in_flight:
            count = self._call(
                self._getevents,
                self._context,
                ctypes.c_long(0),
                ctypes.c_long(_MAX_EVENTS),
                self._events,
                ctypes.byref(self._no_wait),
            )
            for event in self._events[:count]:
                done.append(SyncDone(event.data, -event.res if event.res < 0 else 0))
            self.in_flight -= count
            if count < _MAX_EVENTS:
                break
        return done

    def close(self) -> None:
        """Release the context; blocks until syncs in flight finish (call it off the loop)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._destroy, self._context)
        finally:
            os.close(self.eventfd)


def open_async_datasync(probe_fd: int) -> AsyncDataSync | None:
    """An ``AsyncDataSync`` that has synced ``probe_fd`` once, or None (logged) where the
    kernel or the file system refuses: the caller then syncs on a thread. Blocking (the
    probe waits for its sync): call it off the event loop."""
    try:
        datasync = AsyncDataSync()
    except OSError as exc:
        log.info("asynchronous fdatasync unavailable (%s): the journal syncs on a thread", exc)
        return None
    try:
        datasync.submit(probe_fd, 0)
        _wait_readable(datasync.eventfd)
        (done,) = datasync.reap()
        if done.error:
            raise OSError(done.error, os.strerror(done.error))
    except (OSError, ValueError) as exc:
        log.info("asynchronous fdatasync refused (%s): the journal syncs on a thread", exc)
        datasync.close()
        return None
    return datasync


def _wait_readable(fd: int, timeout_s: float = 30.0) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(timeout_s * 1000):
        raise OSError(f"no AIO completion within {timeout_s}s")
