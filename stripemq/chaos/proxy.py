"""A TCP proxy in front of one bookie that can cut named processes off from it.

The chaos runner starts one ``PartitionProxy`` per bookie and makes the bookie advertise the
proxy's address, so every client (brokers, auto-recovery, readers) reaches the bookie through
it. ``partition("broker-0")`` black-holes the traffic of every connection that belongs to the
process currently registered as ``broker-0``, as dropped packets would: no RST, no FIN.

Invariants:
- A connection's owner is decided once, when it is accepted and before any byte is forwarded:
  the candidate process (``candidates()``: name -> current pid) that holds the client end of
  the connection (found with psutil, off the event loop). A connection whose owner is not
  found is "unknown" and is never partitioned. Owners are kept by name, so a partition
  outlives restarts of the partitioned process: its new connections are held too.
- While its owner is partitioned a connection is held in both directions: bytes already read
  wait (with the kernel's buffers behind them, so backpressure stops the senders), nothing is
  dropped. A new connection is accepted but not connected to the bookie until the heal.
- A close (EOF or reset) from either side is held like data and passed on after the heal, in
  order after the bytes that preceded it, as a retransmitted FIN would be.
- If the bookie cannot be reached, the accepted connection is closed at once: the client sees
  the bookie down, which it is.

``partition``, ``heal`` and ``heal_all`` must be called from the proxy's event loop.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

logger = logging.getLogger(__name__)

_CHUNK = 256 * 1024  # one read; also the streams' buffer limit


class _State(enum.Enum):
    """Where the proxy is in its life."""

    NEW = "new"
    SERVING = "serving"
    CLOSED = "closed"


@dataclass(eq=False, slots=True)
class _Link:
    """One proxied connection: the accepted client end, the bookie end and their gate."""

    id: int
    peer: tuple[str, int]
    client: asyncio.StreamWriter
    owner: str | None = None  # the candidate's name; None while unclassified or unknown
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # set: bytes flow
    target: asyncio.StreamWriter | None = None

    def label(self) -> str:
        return f"[conn {self.id} {self.peer[0]}:{self.peer[1]} {self.owner or 'unknown'}]"

    def close(self) -> None:
        """Close both ends (idempotent)."""
        for writer in (self.client, self.target):
            if writer is not None and not writer.is_closing():
                writer.close()


def find_owner(
    pids: dict[str, int], client: tuple[str, int], server: tuple[str, int]
) -> str | None:
    """The name of the process in ``pids`` that holds a TCP connection from ``client`` to
    ``server``, or None. Blocking (reads /proc): call it off the event loop."""
    for name, pid in pids.items():
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue  # exited or restarting: not this one
        for conn in connections:
            if conn.raddr and tuple(conn.laddr) == client and tuple(conn.raddr) == server:
                return name
    return None


class PartitionProxy:
    """A TCP forwarder in front of one bookie that can black-hole named processes' traffic."""

    def __init__(
        self,
        target: tuple[str, int],
        candidates: Callable[[], dict[str, int]],
        *,
        listen_host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._target = target
        self._candidates = candidates
        self._listen_host = listen_host
        self._requested_port = port
        self._port: int | None = None
        self._state = _State.NEW
        self._server: asyncio.Server | None = None
        self._partitioned: set[str] = set()
        self._links: dict[_Link, asyncio.Task[None]] = {}
        self._ids = itertools.count(1)
        self._stats: dict[str, int] = {
            "accepted": 0,
            "unknown": 0,  # accepted connections no candidate owned
            "refused": 0,  # closed because the bookie could not be reached
            "bytes_to_target": 0,
            "bytes_to_client": 0,
        }

    async def start(self) -> None:
        """Listen on ``listen_host:port``.

        Raises:
            OSError: the address cannot be bound.
        """
        if self._state is not _State.NEW:
            raise RuntimeError(f"proxy to {self._target_text()} already {self._state.value}")
        self._server = await asyncio.start_server(
            self._serve, self._listen_host, self._requested_port, limit=_CHUNK
        )
        self._port = self._server.sockets[0].getsockname()[1]
        self._state = _State.SERVING
        logger.info("[proxy %s] forwarding to %s", self.address, self._target_text())

    @property
    def port(self) -> int:
        """The listening port (after ``start``)."""
        if self._port is None:
            raise RuntimeError(f"proxy to {self._target_text()} not started")
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` clients dial (after ``start``)."""
        return f"{self._listen_host}:{self.port}"

    @property
    def partitioned(self) -> frozenset[str]:
        """The names whose traffic is held."""
        return frozenset(self._partitioned)

    def partition(self, name: str) -> None:
        """Hold the traffic of every connection of ``name``, now and until ``heal(name)``."""
        self._partitioned.add(name)
        held = 0
        for link in self._links:
            if link.owner == name:
                link.gate.clear()
                held += 1
        logger.info("[proxy %s] partitioned %s: holding %d connections", self._where(), name, held)

    def heal(self, name: str) -> None:
        """Let ``name``'s held traffic flow again, in order."""
        if name not in self._partitioned:
            return
        self._partitioned.discard(name)
        released = 0
        for link in self._links:
            if link.owner == name:
                link.gate.set()
                released += 1
        logger.info("[proxy %s] healed %s: releasing %d connections", self._where(), name, released)

    def heal_all(self) -> None:
        """Heal every partition."""
        for name in sorted(self._partitioned):
            self.heal(name)

    async def close(self) -> None:
        """Stop listening and close every connection, held ones included."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        if self._server is not None:
            self._server.close()
        tasks = list(self._links.values())
        for link in list(self._links):
            link.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        logger.info("[proxy %s] closed", self._where())

    def stats(self) -> dict[str, int]:
        """Counters: connections accepted, open, held, unknown, refused; bytes forwarded."""
        return {
            **self._stats,
            "open": len(self._links),
            "held": sum(1 for link in self._links if link.owner in self._partitioned),
        }

    # ------------------------------------------------------------------ connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Run one accepted connection in a task of its own, which ``close`` may cancel (a
        cancelled connection callback is reported as an error by asyncio's streams)."""
        if self._state is not _State.SERVING:
            writer.close()
            return
        peer: tuple[str, int] = tuple(writer.get_extra_info("peername")[:2])
        link = _Link(next(self._ids), peer, writer)
        task = asyncio.create_task(self._run(link, reader, writer))
        self._links[link] = task
        self._stats["accepted"] += 1
        try:
            await asyncio.wait([task])
        finally:
            task.cancel()
            link.close()
            self._links.pop(link, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error("[proxy %s] %s failed", self._where(), link.label(), exc_info=exc)

    async def _run(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Classify the connection, wait out a partition, then pump both ways."""
        local: tuple[str, int] = tuple(writer.get_extra_info("sockname")[:2])
        link.owner = await self._classify(link.peer, local)
        if link.owner is None:
            self._stats["unknown"] += 1
        if link.owner not in self._partitioned:
            link.gate.set()
        logger.debug(
            "[proxy %s] %s accepted%s",
            self._where(),
            link.label(),
            "" if link.gate.is_set() else " and held",
        )
        await link.gate.wait()
        try:
            target_reader, link.target = await asyncio.open_connection(*self._target, limit=_CHUNK)
        except OSError as exc:
            self._stats["refused"] += 1
            logger.debug(
                "[proxy %s] %s closed: %s unreachable (%s)",
                self._where(),
                link.label(),
                self._target_text(),
                exc,
            )
            return
        await asyncio.gather(
            self._pump(link, reader, link.target, "bytes_to_target"),
            self._pump(link, target_reader, writer, "bytes_to_client"),
        )
        logger.debug("[proxy %s] %s closed", self._where(), link.label())

    async def _classify(self, peer: tuple[str, int], local: tuple[str, int]) -> str | None:
        """The candidate that owns the connection from ``peer`` to ``local``, or None."""
        try:
            pids = dict(self._candidates())
        except Exception:
            logger.exception("[proxy %s] candidates() failed", self._where())
            return None
        return await asyncio.to_thread(find_owner, pids, peer, local)

    async def _pump(
        self,
        link: _Link,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        counter: str,
    ) -> None:
        """Copy ``source`` to ``sink`` while the gate is open; EOF becomes a half-close and a
        reset closes both ends, each only once the gate lets it through."""
        while True:
            try:
                data = await source.read(_CHUNK)
            except OSError:
                await link.gate.wait()
                link.close()
                return
            await link.gate.wait()
            if sink.is_closing():
                return
            try:
                if not data:
                    if sink.can_write_eof():
                        sink.write_eof()
                    else:
                        link.close()
                    return
                sink.write(data)
                self._stats[counter] += len(data)
                await sink.drain()
            except OSError:
                link.close()
                return

    def _where(self) -> str:
        return self.address if self._port is not None else f"-> {self._target_text()}"

    def _target_text(self) -> str:
        return f"{self._target[0]}:{self._target[1]}"
