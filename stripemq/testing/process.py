"""A stripemq command run as a child process for tests and benchmarks: spawn, signal, log."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from stripemq.testing.polling import until


class ChildProcess:
    """``python -m stripemq <args>`` in its own session, its output appended to ``log_path``."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def stripemq_command(self, *args: str, settings: dict[str, object]) -> list[str]:
        cmd = [sys.executable, "-m", "stripemq", *args]
        for key, value in settings.items():
            cmd += ["-c", f"{key}={value}"]
        return cmd

    def spawn(self) -> None:
        """Start the process without waiting for it."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                self.command(), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited_with(self) -> int | None:
        """The exit code if the process has ended, else ``None``."""
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """SIGKILL: no clean shutdown of any kind."""
        self._signal(signal.SIGKILL)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for the clean shutdown; returns the exit code."""
        return self._signal(signal.SIGTERM, timeout)

    def _signal(self, sig: int, timeout: float = 30.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    async def wait_listening(self, port: int, what: str, timeout: float) -> None:
        """Until something accepts TCP connections on ``port``; fails early if we exit."""

        async def listening() -> bool:
            code = self.exited_with()
            if code is not None:
                raise RuntimeError(f"{what} exited with {code}; log:\n{self.tail_log()}")
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            writer.close()
            return True

        await until(listening, f"{what} listens on port {port}", timeout=timeout)

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


async def run_stripemq(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    """Run ``python -m stripemq <args>`` to completion: its exit code, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stripemq",
        *args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
