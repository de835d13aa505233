"""A real, throw-away ZooKeeper server process for tests and benchmarks.

Runs ``ZooKeeperServerMain`` from the Debian ``zookeeper`` package on a free loopback port
with a private data directory, so integration tests exercise the production backend. The jar,
the classpath, the ``java`` lookup and the JVM command line are the ``stripemq zookeeper``
role's (``stripemq.zookeeper.java``); the server's log goes to ``log_path``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from stripemq.testing.ports import free_port
from stripemq.zookeeper.java import (
    DEBIAN_CONF_DIR,
    DEBIAN_JAR,
    INSTALL_HINT,
    STANDALONE_MAIN,
    classpath,
    find_java,
    java_command,
)

logger = logging.getLogger(__name__)

DEFAULT_JAR = DEBIAN_JAR
DEFAULT_CONF_DIR = DEBIAN_CONF_DIR
MAIN_CLASS = STANDALONE_MAIN


class ZooKeeperUnavailableError(RuntimeError):
    """ZooKeeper cannot be started here: a package is missing or the server did not come up."""


class ZooKeeperServer:
    """One standalone ZooKeeper server process; ``start()``/``stop()``, or a context manager."""

    def __init__(
        self,
        *,
        port: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        tick_time_ms: int = 500,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 60_000,
        force_sync: bool = True,
        heap_mb: int = 256,
        jar: str = DEFAULT_JAR,
        conf_dir: str = DEFAULT_CONF_DIR,
        java: str | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        self._requested_port = port
        self._port = port or 0
        self._given_data_dir = Path(data_dir) if data_dir is not None else None
        self._data_dir: Path | None = None
        self._tick_time_ms = tick_time_ms
        self._min_session_timeout_ms = min_session_timeout_ms
        self._max_session_timeout_ms = max_session_timeout_ms
        self._force_sync = force_sync
        self._heap_mb = heap_mb
        self._jar = jar
        self._conf_dir = conf_dir
        self._java = java
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    # ------------------------------------------------------------------ properties

    @property
    def port(self) -> int:
        """The client port (valid once started)."""
        return self._port

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:PORT``, as ZooKeeper clients take it."""
        return f"127.0.0.1:{self._port}"

    def url(self, chroot: str = "") -> str:
        """A stripemq metadata URL for this server, e.g. ``zk://127.0.0.1:PORT/chroot``."""
        if chroot and not chroot.startswith("/"):
            chroot = "/" + chroot
        return f"zk://{self.connect_string}{chroot.rstrip('/')}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process is not None else None

    @property
    def data_dir(self) -> Path:
        """The directory holding the config, snapshots, transaction logs and the log file."""
        if self._data_dir is None:
            raise RuntimeError("ZooKeeper server not started")
        return self._data_dir

    @property
    def log_path(self) -> Path:
        """The file the server's stdout and stderr go to."""
        return self.data_dir / "zookeeper.log"

    def is_running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Start the server and wait until it serves requests; retries on a port clash."""
        if self._process is not None:
            return self
        java = self._find_java()
        if not Path(self._jar).is_file():
            raise ZooKeeperUnavailableError(
                f"ZooKeeper jar not found at {self._jar}: {INSTALL_HINT}"
            )
        if self._given_data_dir is not None:
            self._given_data_dir.mkdir(parents=True, exist_ok=True)
            self._data_dir = self._given_data_dir
        else:
            self._data_dir = Path(tempfile.mkdtemp(prefix="stripemq-zk-"))
        attempts = 1 if self._requested_port else 3
        for attempt in range(1, attempts + 1):
            self._port = self._requested_port or free_port()
            self._spawn(java)
            try:
                self._wait_until_serving()
            except ZooKeeperUnavailableError:
                clash = not self.is_running() and "Address already in use" in self._log_tail()
                self._kill()
                if clash and attempt < attempts:
                    logger.warning("port %d was taken, retrying ZooKeeper start", self._port)
                    continue
                self._cleanup()
                raise
            break
        atexit.register(self.stop)
        logger.info("ZooKeeper serving on %s (pid %s)", self.connect_string, self.pid)
        return self

    def stop(self) -> None:
        """Kill the server (SIGTERM, then SIGKILL) and remove a data dir we created."""
        atexit.unregister(self.stop)
        self._kill()
        self._cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ admin

    def four_letter_word(self, command: str, timeout: float = 2.0) -> str:
        """Send a four-letter-word admin command (``ruok``, ``srvr``, ``mntr`` ...)."""
        with socket.create_connection(("127.0.0.1", self._port), timeout=timeout) as sock:
            sock.sendall(command.encode("ascii"))
            chunks: list[bytes] = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")

    # ------------------------------------------------------------------ internals

    def _find_java(self) -> str:
        java = find_java(self._java or "java")
        if java is None:
            raise ZooKeeperUnavailableError(
                "java not found: install a Java runtime, e.g. the Debian package "
                "'default-jre-headless' (the 'zookeeper' package depends on it)"
            )
        return java

    def _write_config(self) -> Path:
        data = self.data_dir / "data"
        data.mkdir(exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        lines = [
            f"tickTime={self._tick_time_ms}",
            f"dataDir={data}",
            f"clientPort={self._port}",
            "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0",
            f"minSessionTimeout={self._min_session_timeout_ms}",
            f"maxSessionTimeout={self._max_session_timeout_ms}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            f"forceSync={'yes' if self._force_sync else 'no'}",
        ]
        config.write_text("\n".join(lines) + "\n")
        return config

    def _spawn(self, java: str) -> None:
        config = self._write_config()
        command = java_command(
            java,
            classpath(self._conf_dir, self._jar),
            config,
            heap_mb=self._heap_mb,
            log_dir=self.data_dir,
            main_class=MAIN_CLASS,
        )
        self._log_file = open(self.log_path, "ab")  # closed in _kill
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            start_new_session=True,
        )

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if not self.is_running():
                raise ZooKeeperUnavailableError(
                    f"ZooKeeper exited during startup; see {self.log_path}:\n{self._log_tail()}"
                )
            with contextlib.suppress(OSError):
                if self.four_letter_word("ruok", timeout=1.0) == "imok" and (
                    "Mode: standalone" in self.four_letter_word("srvr", timeout=1.0)
                ):
                    return
            time.sleep(0.05)
        raise ZooKeeperUnavailableError(
            f"ZooKeeper did not answer on {self.connect_string} within "
            f"{self._startup_timeout}s; see {self.log_path}"
        )

    def _log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-limit:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                logger.warning("ZooKeeper pid %d ignored SIGTERM; killing it", process.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
                process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _cleanup(self) -> None:
        if self._data_dir is not None and self._given_data_dir is None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
        self._data_dir = None
