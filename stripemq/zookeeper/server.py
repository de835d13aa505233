"""``stripemq zookeeper``: one ZooKeeper server (Debian's 3.8 jar) supervised by this process.

At every start the supervisor writes ``zoo.cfg`` and ``myid`` into ``data_dir`` from its
settings (``zoo_cfg``), then runs ``QuorumPeerMain zoo.cfg`` as its child. It:

- relays the child's output (ZooKeeper logs to stdout) to its own stdout, keeping the last
  lines, so ``kubectl logs`` shows ZooKeeper's log and a crash can be explained;
- serves HTTP on ``stats_http_port`` (on ``client_port_address``): ``/heartbeat`` 200 while
  the child runs; ``/ready`` 200 once ``ruok`` answers ``imok`` and ``srvr`` shows a serving
  mode, else 503 with the reason; ``/metrics`` Prometheus text from ``mntr`` (``metrics``);
- forwards SIGTERM and SIGINT to the child and exits 0 once it has stopped (Kubernetes
  kills both after the grace period if it hangs); a child that ends on its own makes the
  supervisor log the tail of its output and exit non-zero (its code, 128 + signal, or 1).

Lifecycle: STARTING -> RUNNING -> STOPPING -> EXITED; RUNNING -> EXITED when the child ends
on its own; STARTING -> STOPPING -> EXITED when a signal comes before the child is started.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from aiohttp import web

from stripemq.errors import ConfigError
from stripemq.http_site import start_site
from stripemq.lifecycle import Transitions
from stripemq.zookeeper.config import ZooKeeperConfig
from stripemq.zookeeper.java import (
    INSTALL_HINT,
    find_java,
    java_command,
    missing_classpath_entries,
)
from stripemq.zookeeper.metrics import parse_mntr, prometheus_text, readiness
from stripemq.zookeeper.zoo_cfg import derive_server_id, render_myid, render_zoo_cfg

log = logging.getLogger(__name__)

TAIL_LINES = 40  # of the child's output, logged when it ends on its own
TAIL_BYTES = 16 * 1024  # kept to find them
RELAY_CHUNK = 64 * 1024
FOUR_LETTER_TIMEOUT_S = 2.0
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_WILDCARD_PROBE = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}


class SupervisorLifecycle(enum.Enum):
    STARTING = "starting"  # writing the config, spawning the child
    RUNNING = "running"  # the child runs
    STOPPING = "stopping"  # a signal was forwarded; waiting for the child
    EXITED = "exited"  # the child has ended (or was never started)


_S = SupervisorLifecycle
SUPERVISOR_TRANSITIONS = Transitions[SupervisorLifecycle](
    {
        _S.STARTING: {_S.RUNNING, _S.STOPPING},
        _S.RUNNING: {_S.STOPPING, _S.EXITED},
        _S.STOPPING: {_S.EXITED},
        _S.EXITED: set(),
    }
)


async def four_letter_word(host: str, port: int, word: str) -> str:
    """ZooKeeper's answer to the four-letter word ``word`` on ``host:port``.

    Raises:
        OSError: no connection (or it broke).
    """
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(word.encode("ascii"))
        await writer.drain()
        answer = await reader.read()  # the server closes the connection after answering
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return answer.decode("utf-8", "replace")


def _write_files(directory: Path, log_dir: Path | None, zoo_cfg: str, myid: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    config_file = directory / "zoo.cfg"
    for path, text in ((config_file, zoo_cfg), (directory / "myid", myid)):
        partial = path.with_name(path.name + ".tmp")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    return config_file


class ZooKeeperSupervisor:
    """Runs one ZooKeeper server as a child process; ``await run()`` returns the exit code."""

    def __init__(self, config: ZooKeeperConfig, *, hostname: str | None = None) -> None:
        self.config = config
        # POD_NAME: the pod's name, which the chart passes down (a pod's host name too).
        self.hostname = hostname or os.environ.get("POD_NAME") or socket.gethostname()
        self.server_id = derive_server_id(config, self.hostname)
        self.data_dir = Path(os.path.abspath(config.data_dir))
        self.data_log_dir = (
            Path(os.path.abspath(config.data_log_dir)) if config.data_log_dir else None
        )
        self.lifecycle = SupervisorLifecycle.STARTING
        self.http_port = 0
        self._process: asyncio.subprocess.Process | None = None
        self._tail = bytearray()
        self._runner: web.AppRunner | None = None
        address = config.client_port_address
        self._probe_host = _WILDCARD_PROBE.get(address, address.strip("[]"))

    # ------------------------------------------------------------------ lifecycle

    def _move_to(self, new: SupervisorLifecycle) -> None:
        """The one place the lifecycle changes; ``IllegalTransitionError`` if it may not."""
        owner = f"zookeeper server {self.server_id} supervisor"
        self.lifecycle = SUPERVISOR_TRANSITIONS.check(owner, self.lifecycle, new)

    @property
    def child_running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def run(self) -> int:
        """Start ZooKeeper, serve HTTP, and wait for the child to end; the exit code.

        Raises:
            ConfigError: java or a classpath entry is missing, or the server id is wrong.
            OSError: the data directory cannot be written or the HTTP port bound.
        """
        command = await self._prepare()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self._serve_http()
            try:
                return await self._supervise(command)
            finally:
                await self._close_http()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    async def _prepare(self) -> list[str]:
        """Check java and the classpath, write zoo.cfg and myid; the child's command."""
        config = self.config
        java = await asyncio.to_thread(find_java, config.java)
        if java is None:
            raise ConfigError(
                f"java not found (setting java = {config.java!r}): install a Java runtime, "
                "or " + INSTALL_HINT
            )
        missing = await asyncio.to_thread(missing_classpath_entries, config.classpath)
        if missing:
            raise ConfigError(
                f"classpath entries not found: {', '.join(missing)}; {INSTALL_HINT}, "
                "or set classpath"
            )
        data_dir, log_dir = self.data_dir, self.data_log_dir
        zoo_cfg = render_zoo_cfg(
            config, self.server_id, str(data_dir), str(log_dir) if log_dir else None
        )
        config_file = await asyncio.to_thread(
            _write_files, data_dir, log_dir, zoo_cfg, render_myid(self.server_id)
        )
        mode = (
            f"member {self.server_id} of {len(config.servers)}"
            if config.servers
            else ("standalone")
        )
        log.info("zookeeper server %d: %s, config %s", self.server_id, mode, config_file)
        return java_command(
            java,
            config.classpath,
            config_file,
            heap_mb=config.heap_mb,
            log_dir=data_dir,
            java_opts=config.java_opts,
        )

    async def _supervise(self, command: list[str]) -> int:
        if self.lifecycle is not SupervisorLifecycle.STARTING:
            self._move_to(SupervisorLifecycle.EXITED)
            return 0  # a signal came before the child was started
        self._process = process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=self.data_dir,
        )
        log.info("zookeeper server %d: started pid %d", self.server_id, process.pid)
        if self.lifecycle is SupervisorLifecycle.STOPPING:  # signalled while it was spawned
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        else:
            self._move_to(SupervisorLifecycle.RUNNING)
        relay = asyncio.create_task(self._relay_output(process))
        code = await process.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(relay), 5.0)
        relay.cancel()
        requested = self.lifecycle is SupervisorLifecycle.STOPPING
        self._move_to(SupervisorLifecycle.EXITED)
        if requested:
            log.info("zookeeper server %d: stopped (exit code %d)", self.server_id, code)
            return 0
        lines = self._tail.decode("utf-8", "replace").splitlines()[-TAIL_LINES:]
        tail = "\n".join(lines).rstrip()
        log.error(
            "zookeeper server %d: ZooKeeper exited on its own with code %d; its last output:\n%s",
            self.server_id,
            code,
            tail or "(none)",
        )
        if code < 0:
            return 128 - code
        return code or 1

    async def _relay_output(self, process: asyncio.subprocess.Process) -> None:
        """Copy the child's output to stdout as it comes (chunks, not lines: a line of any
        length passes), keeping its last ``TAIL_BYTES``."""
        assert process.stdout is not None
        out = sys.stdout.buffer
        while chunk := await process.stdout.read(RELAY_CHUNK):
            self._tail += chunk
            del self._tail[:-TAIL_BYTES]
            try:
                out.write(chunk)
                out.flush()
            except (OSError, ValueError):
                pass  # our stdout is gone; keep draining so the child never blocks

    def _on_signal(self, sig: signal.Signals) -> None:
        name = signal.Signals(sig).name
        if self.lifecycle in (SupervisorLifecycle.STARTING, SupervisorLifecycle.RUNNING):
            self._move_to(SupervisorLifecycle.STOPPING)
        process = self._process
        if process is None or process.returncode is not None:
            log.info("%s received before ZooKeeper runs; exiting", name)
            return
        log.info(
            "zookeeper server %d: %s received; forwarding it to ZooKeeper (pid %d)",
            self.server_id,
            name,
            process.pid,
        )
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)

    # ------------------------------------------------------------------ HTTP

    async def _serve_http(self) -> None:
        app = web.Application()
        app.router.add_get("/heartbeat", self._heartbeat)
        app.router.add_get("/ready", self._ready)
        app.router.add_get("/metrics", self._metrics)
        self._runner, self.http_port = await start_site(
            app, self.config.client_port_address, self.config.stats_http_port
        )
        log.info(
            "zookeeper server %d: HTTP (/metrics, /heartbeat, /ready) on %s:%d",
            self.server_id,
            self.config.client_port_address,
            self.http_port,
        )

    async def _close_http(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _ask(self, word: str) -> str | None:
        """The answer to ``word`` on the client port, or None if there was none."""
        try:
            async with asyncio.timeout(FOUR_LETTER_TIMEOUT_S):
                return await four_letter_word(self._probe_host, self.config.client_port, word)
        except (OSError, TimeoutError):
            return None

    async def _heartbeat(self, request: web.Request) -> web.Response:
        if self.child_running:
            return web.Response(text="OK\n")
        return web.Response(status=503, text=f"ZooKeeper is {self.lifecycle.value}\n")

    async def _ready(self, request: web.Request) -> web.Response:
        if not self.child_running:
            return web.Response(status=503, text=f"ZooKeeper is {self.lifecycle.value}\n")
        verdict = readiness(await self._ask("ruok"), await self._ask("srvr"))
        return web.Response(status=200 if verdict.ready else 503, text=verdict.reason + "\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        answer = await self._ask("mntr") if self.child_running else None
        body = prometheus_text(parse_mntr(answer) if answer is not None else None)
        return web.Response(
            body=body.encode("utf-8"), headers={"Content-Type": METRICS_CONTENT_TYPE}
        )
