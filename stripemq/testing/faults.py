"""Stand-ins that inject faults into what a component sees of the system."""

from __future__ import annotations

import errno
import os


class FullDisk:
    """``os`` as a module sees it, except that writes hit ENOSPC (patch it in as that
    module's ``os``)."""

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    @staticmethod
    def write(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")
