"""PartitionProxy with real child processes: traffic passes, a named process's connections are
held both ways (new ones too) and released in order on heal, unknown processes pass, a partition
outlives a restart of its process, and an unreachable target closes the client at once."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from stripemq.chaos.proxy import PartitionProxy
from stripemq.testing.polling import until

pytestmark = pytest.mark.integration

# A child that dials the proxy and is driven over stdin: "open ID", "send ID TEXT", "eof ID"
# (shutdown for writing: a FIN). It prints "ID OPEN", every line it receives as "ID LINE"
# and "ID EOF" when the far end closes.
_CHILD = r"""
import socket, sys, threading
port = int(sys.argv[1])
socks = {}
lock = threading.Lock()
def say(text):
    with lock:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
def receive(cid, sock):
    for line in sock.makefile("rb"):
        say(f"{cid} {line.decode().rstrip()}")
    say(f"{cid} EOF")
for command in sys.stdin:
    op, cid, *rest = command.split()
    if op == "open":
        socks[cid] = socket.create_connection(("127.0.0.1", port))
        threading.Thread(target=receive, args=(cid, socks[cid]), daemon=True).start()
        say(f"{cid} OPEN")
    elif op == "send":
        socks[cid].sendall((rest[0] + "\n").encode())
    elif op == "eof":
        socks[cid].shutdown(socket.SHUT_WR)
"""

_WAIT = 5.0  # for what must happen
_ABSENT = 0.5  # for what must not: nothing within this window


@dataclass
class EchoServer:
    """Echoes lines back; reports ``(connection label, line)`` and ``(label, "EOF")``.
    A connection's label is the text before the "-" of its first line."""

    received: asyncio.Queue[tuple[str, str]] = field(default_factory=asyncio.Queue)
    writers: dict[str, asyncio.StreamWriter] = field(default_factory=dict)
    server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        label = "?"
        try:
            async for raw in reader:
                line = raw.decode().rstrip()
                if label == "?":
                    label = line.split("-")[0]
                    self.writers[label] = writer
                self.received.put_nowait((label, line))
                writer.write(raw)
                await writer.drain()
            self.received.put_nowait((label, "EOF"))
        finally:
            writer.close()

    async def expect(self, *items: tuple[str, str]) -> None:
        """The next items received are exactly ``items`` (in any order across labels, in
        order within one)."""
        got = [await asyncio.wait_for(self.received.get(), _WAIT) for _ in items]
        for label in {label for label, _ in items}:
            assert [i for i in got if i[0] == label] == [i for i in items if i[0] == label]

    async def expect_nothing(self) -> None:
        with pytest.raises(TimeoutError):
            item = await asyncio.wait_for(self.received.get(), _ABSENT)
            pytest.fail(f"received {item} through a partition")


class Child:
    """One child process that dials through the proxy, driven over stdin/stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, port: int) -> Child:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CHILD,
            str(port),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def do(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        await self.proc.stdin.drain()

    async def open(self, cid: str) -> None:
        await self.do(f"open {cid}")
        assert await self.line() == f"{cid} OPEN"

    async def line(self, timeout: float = _WAIT) -> str:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        assert raw, "the child exited"
        return raw.decode().rstrip()

    async def expect_nothing(self) -> None:
        with pytest.raises(TimeoutError):
            line = await self.line(_ABSENT)
            pytest.fail(f"child received {line!r} through a partition")

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    server = EchoServer()
    await server.start()
    yield server
    assert server.server is not None
    server.server.close()
    for writer in server.writers.values():
        writer.close()


@pytest.fixture
async def pids() -> dict[str, int]:
    return {}


@pytest.fixture
async def proxy(echo: EchoServer, pids: dict[str, int]) -> AsyncIterator[PartitionProxy]:
    assert echo.server is not None
    target = echo.server.sockets[0].getsockname()[:2]
    proxy = PartitionProxy(target, lambda: pids)
    await proxy.start()
    yield proxy
    await proxy.close()


@pytest.fixture
async def children(proxy: PartitionProxy, pids: dict[str, int]) -> AsyncIterator[list[Child]]:
    started: list[Child] = []
    for name in ("a", "b"):
        child = await Child.start(proxy.port)
        pids[name] = child.pid
        started.append(child)
    yield started
    for child in started:
        await child.stop()


async def test_partition_holds_one_process_both_ways_and_heal_releases_in_order(
    proxy: PartitionProxy, echo: EchoServer, children: list[Child]
) -> None:
    a, b = children
    await a.open("0")
    await b.open("0")
    await a.do("send 0 a0-1")
    await b.do("send 0 b0-1")
    await echo.expect(("a0", "a0-1"), ("b0", "b0-1"))
    assert await a.line() == "0 a0-1"
    assert await b.line() == "0 b0-1"
    assert proxy.stats()["unknown"] == 0

    proxy.partition("a")
    assert proxy.partitioned == frozenset({"a"})
    assert proxy.stats()["held"] == 1
    await a.do("send 0 a0-2")
    await a.do("send 0 a0-3")
    await b.do("send 0 b0-2")
    await echo.expect(("b0", "b0-2"))  # b flows
    assert await b.line() == "0 b0-2"
    # the bookie side of a's connection is held too
    echo.writers["a0"].write(b"a0-pushed\n")
    # a new connection from a is accepted and held
    await a.open("1")
    await a.do("send 1 a1-1")
    await until(lambda: proxy.stats()["held"] == 2, "a's new connection is held")
    # a close is held like data
    await a.do("eof 1")
    # a connection of an unknown process (this one) passes
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"t0-1\n")
    await echo.expect(("t0", "t0-1"))
    assert await asyncio.wait_for(reader.readline(), _WAIT) == b"t0-1\n"
    await echo.expect_nothing()
    await a.expect_nothing()

    proxy.heal("a")
    assert proxy.partitioned == frozenset()
    await echo.expect(("a0", "a0-2"), ("a0", "a0-3"), ("a1", "a1-1"), ("a1", "EOF"))
    lines = [await a.line() for _ in range(5)]
    assert [line for line in lines if line.startswith("0 ")] == ["0 a0-pushed", "0 a0-2", "0 a0-3"]
    assert [line for line in lines if line.startswith("1 ")] == ["1 a1-1", "1 EOF"]
    await until(lambda: proxy.stats()["open"] == 3, "a's closed connection is gone")
    stats = proxy.stats()
    assert stats["accepted"] == 4 and stats["unknown"] == 1 and stats["held"] == 0
    assert stats["bytes_to_target"] > 0 and stats["bytes_to_client"] > 0

    await proxy.close()
    assert await asyncio.wait_for(reader.read(), _WAIT) == b""  # closing closes every link
    writer.close()
    assert await a.line() == "0 EOF" and await b.line() == "0 EOF"


async def test_partition_outlives_a_restart_of_its_process(
    proxy: PartitionProxy, echo: EchoServer, pids: dict[str, int]
) -> None:
    proxy.partition("a")
    first = await Child.start(proxy.port)
    pids["a"] = first.pid
    try:
        await first.open("0")
        await first.do("send 0 a0-1")
        await until(lambda: proxy.stats()["held"] == 1, "the first a's connection is held")
        await first.stop()  # its FIN / RST is held as well
        second = await Child.start(proxy.port)
        pids["a"] = second.pid
        try:
            await second.open("0")
            await second.do("send 0 n0-1")
            await until(lambda: proxy.stats()["held"] == 2, "the new a's connection is held")
            await echo.expect_nothing()
            proxy.heal_all()
            await echo.expect(("a0", "a0-1"), ("a0", "EOF"), ("n0", "n0-1"))
            assert await second.line() == "0 n0-1"
        finally:
            await second.stop()
    finally:
        await first.stop()


async def test_unreachable_target_closes_the_accepted_connection() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[:2]
    proxy = PartitionProxy(dead, dict)
    await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        with contextlib.closing(writer):
            writer.write(b"hello\n")
            with contextlib.suppress(ConnectionResetError):
                assert await asyncio.wait_for(reader.read(), _WAIT) == b""
        await until(lambda: proxy.stats()["refused"] == 1, "the connection is refused")
        assert proxy.stats()["open"] == 0
    finally:
        await proxy.close()
