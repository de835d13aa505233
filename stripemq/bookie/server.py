"""The bookie process: gRPC service over ``BookieStorage``, registration, disk monitor, GC.

A client's bytes can make a request fail, never the bookie: every handler turns storage errors
into a typed answer (a per-entry code on the add stream, a gRPC status plus the BookKeeper code
in the ``bk-code`` trailer for unary calls) and unexpected exceptions into ``INTERNAL``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import grpc

from stripemq.bookie.autorecovery import AutoRecoveryConfig, AutoRecoveryService
from stripemq.bookie.binary_server import BinaryAddServer
from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.bookie.config import BookieConfig
from stripemq.bookie.cookie import check_cookies, cookies_apply
from stripemq.bookie.disk import fullest_disk
from stripemq.bookie.handler import BookieRequestHandler
from stripemq.bookie.metrics import BookieMetrics
from stripemq.bookie.registration import BookieRegistration
from stripemq.bookie.storage.engine import AddOp, BookieStorage
from stripemq.bookie.storage.gc import GarbageCollector
from stripemq.errors import BookieError
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.proto import bookie_pb2 as pb
from stripemq.proto import bookie_pb2_grpc as pb_grpc
from stripemq.proto.entry import EntryHeader

log = logging.getLogger(__name__)

T = TypeVar("T")

# A request may carry a full 5 MiB entry plus framing; batches are bounded by the client.
GRPC_MAX_MESSAGE = 64 * 1024 * 1024
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE),
    ("grpc.max_send_message_length", GRPC_MAX_MESSAGE),
    ("grpc.so_reuseport", 0),
    # Accept the clients' keepalive pings (see bookie_client.CLIENT_OPTIONS).
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]
# Add requests one stream may have in progress before the bookie stops reading from it.
MAX_INFLIGHT_REQUESTS_PER_STREAM = 256


class BookieService(pb_grpc.BookieServicer):
    """Maps the gRPC calls onto a ``BookieRequestHandler``."""

    def __init__(self, handler: BookieRequestHandler) -> None:
        self.handler = handler

    async def AddEntry(
        self, request_iterator: AsyncIterator[pb.AddRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AddResponse]:
        responses: asyncio.Queue[pb.AddResponse | None] = asyncio.Queue()
        # A permit is held from reading a request until its response is handed to gRPC, so
        # a client that stops reading answers soon stops being read from.
        permits = asyncio.Semaphore(MAX_INFLIGHT_REQUESTS_PER_STREAM)
        tasks: set[asyncio.Task[None]] = set()

        async def handle(request: pb.AddRequest, arrived: float) -> None:
            response = await self._add(request)
            took = time.perf_counter() - arrived
            self.handler.answered((result.code == 0 for result in response.results), took)
            await responses.put(response)

        async def read_requests() -> None:
            try:
                async for request in request_iterator:
                    arrived = time.perf_counter()
                    await permits.acquire()
                    task = asyncio.create_task(handle(request, arrived))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if tasks:
                    await asyncio.wait(set(tasks))  # unlike gather, never cancels them
            finally:
                await responses.put(None)

        reader = asyncio.create_task(read_requests())
        try:
            while (response := await responses.get()) is not None:
                yield response
                permits.release()
        finally:
            # Adds already handed to storage finish on their own (their journal records are
            # on the way); only reading more requests stops.
            reader.cancel()

    async def _add(self, request: pb.AddRequest) -> pb.AddResponse:
        ops = [AddOp(op.entry, op.master_key, op.recovery_add) for op in request.ops]
        results = await self.handler.add(ops)
        response = pb.AddResponse()
        for op, result in zip(request.ops, results, strict=True):
            out = response.results.add(request_id=op.request_id)
            if isinstance(result, EntryHeader):
                out.ledger_id, out.entry_id = result.ledger_id, result.entry_id
            else:
                out.code, out.message = result.bk_code, str(result)
        return response

    async def ReadEntry(
        self, request: pb.ReadRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadResponse:
        async def read() -> pb.ReadResponse:
            entry, state = await self.handler.read_entry(
                request.ledger_id,
                request.entry_id,
                fence=request.fence,
                master_key=request.master_key,
                long_poll_timeout_ms=request.long_poll_timeout_ms,
            )
            return pb.ReadResponse(entry=entry, lac=state.lac, fenced=state.fenced)

        return await self._answer(context, "read", read())

    async def ReadEntries(
        self, request: pb.ReadEntriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadEntriesResponse:
        # Never more than a message can carry, whatever the caller asked for.
        limit = min(request.max_bytes or GRPC_MAX_MESSAGE // 2, GRPC_MAX_MESSAGE // 2)

        async def read() -> pb.ReadEntriesResponse:
            entries, state = await self.handler.read_entries(
                request.ledger_id, list(request.entry_ids), limit
            )
            return pb.ReadEntriesResponse(entries=entries, lac=state.lac)

        return await self._answer(context, "read", read())

    async def ReadLac(
        self, request: pb.ReadLacRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadLacResponse:
        async def read_lac() -> pb.ReadLacResponse:
            state = await self.handler.ledger_state(request.ledger_id)
            return pb.ReadLacResponse(
                lac=state.lac, last_entry_id=state.last_entry_id, fenced=state.fenced
            )

        return await self._answer(context, "read_lac", read_lac())

    async def WriteLac(
        self, request: pb.WriteLacRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteLacResponse:
        async def write_lac() -> pb.WriteLacResponse:
            await self.handler.write_lac(request.ledger_id, request.master_key, request.lac)
            return pb.WriteLacResponse()

        return await self._answer(context, "write_lac", write_lac())

    async def GetInfo(
        self, request: pb.GetInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetInfoResponse:
        return await self._answer(context, "get_info", self.handler.info())

    async def _answer(
        self, context: grpc.aio.ServicerContext, operation: str, work: Awaitable[T]
    ) -> T:
        """Run a unary handler; errors become a gRPC status with the ``bk-code`` trailer."""
        try:
            return await work
        except BookieError as exc:
            error, status = exc, grpc.StatusCode[exc.grpc_status]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("unexpected failure in %s", operation)
            error, status = BookieError(f"internal error: {exc}"), grpc.StatusCode.INTERNAL
        self.handler.count_error(operation, error)
        context.set_trailing_metadata((("bk-code", str(error.bk_code)),))
        await context.abort(status, str(error))


def _unused_port(host: str) -> int:
    """A port nothing listens on right now (what binding port 0 would have picked)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class BookieServer:
    """One bookie: storage, the gRPC server, registration, the disk monitor and GC."""

    def __init__(
        self, config: BookieConfig, store: MetadataStore | None = None, *, serve_http: bool = True
    ) -> None:
        """``serve_http`` false: no HTTP port of its own (metrics and probes are served by
        whoever embeds it, as the standalone does on its web port)."""
        self.config = config
        self.storage = BookieStorage(config)
        self.metrics = BookieMetrics(self.storage, enabled=config.enable_statistics)
        # Every request is served through this, over gRPC or from this process.
        self.handler = BookieRequestHandler(self.storage, config, self.metrics)
        self.serve_http = serve_http
        self._shared_store = store
        self._server: grpc.aio.Server | None = None
        self.binary_server: BinaryAddServer | None = None
        self.registration: BookieRegistration | None = None
        self._monitor: asyncio.Task[None] | None = None
        self.autorecovery: AutoRecoveryService | None = None
        self.gc: GarbageCollector | None = None

    @property
    def bookie_id(self) -> str:
        return self.config.bookie_id

    async def start(self) -> None:
        """Check the cookies, recover storage, listen, then register (so a registered bookie
        always answers, and never from directories that are not its own).

        A start that fails part-way (a port in use, an unreachable metadata store) releases
        what it had opened before raising, so the process exits without leaked servers.
        """
        try:
            await self._start()
        except BaseException:
            await self._abandon_start()
            raise

    async def _start(self) -> None:
        # Before storage writes anything into directories that may not be this bookie's.
        await self._check_cookies()
        await self.storage.start()
        server = grpc.aio.server(options=GRPC_OPTIONS)
        service = BookieService(self.handler)
        pb_grpc.add_BookieServicer_to_server(service, server)
        address = f"{self.config.bookie_host}:{self.config.bookie_port}"
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio raises where older releases returned 0
            raise OSError(f"cannot listen on {address}: {exc}") from None
        if port == 0:
            raise OSError(f"cannot listen on {address}")
        self.config.bookie_port = port
        await server.start()
        self._server = server
        if self.config.binary_add_port >= 0:
            self.binary_server = BinaryAddServer(self.handler)
            try:
                self.config.binary_add_port = await self.binary_server.start(
                    self.config.bookie_host, self.config.binary_add_port
                )
            except OSError as exc:
                raise OSError(
                    f"cannot listen on {self.config.bookie_host}:"
                    f"{self.config.binary_add_port} (binary_add_port): {exc}"
                ) from None
        if self.config.enable_statistics and self.serve_http:
            port = await self.metrics.serve(self.config.bookie_host, self.config.stats_http_port)
            log.info("bookie metrics on http://%s:%d/metrics", self.config.bookie_host, port)
        usage = await asyncio.to_thread(fullest_disk, self._disk_paths())
        self.storage.disk_usage_checked(usage.fraction)
        self.registration = BookieRegistration(
            self._make_store,
            self.bookie_id,
            {"rack": self.config.rack},
            owns_store=self._shared_store is None,
        )
        await self.registration.start(read_only=self.storage.read_only)
        self._monitor = asyncio.create_task(self._watch_disks(), name="bookie-disk-monitor")
        self._start_gc()
        if self.config.autorecovery_enabled:
            self.autorecovery = AutoRecoveryService(
                self._shared_store or self.config.metadata_service_uri,
                AutoRecoveryConfig.for_bookie(self.config),
            )
            await self.autorecovery.start()
            # No port of its own: its metrics are on the bookie's endpoint.
            self.metrics.registry.register(self.autorecovery.metrics)
        self.metrics.running = True
        log.info(
            "bookie %s serving (journal %s, ledgers %s, binary adds %s)%s",
            self.bookie_id,
            self.config.journal_dir,
            self.config.ledger_dir,
            f"on port {self.config.binary_add_port}" if self.binary_server else "off",
            " read-only" if self.storage.read_only else "",
        )

    async def stop(self, grace: float = 5.0) -> None:
        """Clean shutdown: unregister, finish in-flight calls, checkpoint, close."""
        self.metrics.shutting_down = True
        await self._stop_services(grace)
        await self.storage.stop()
        await self.metrics.close()
        log.info("bookie %s stopped", self.bookie_id)

    async def _stop_services(self, grace: float) -> None:
        """Stop everything that runs on top of storage, newest first; a step that fails is
        logged and the others still run."""
        steps: list[tuple[str, Callable[[], Awaitable[object]]]] = []
        if self.autorecovery is not None:
            steps.append(("auto-recovery", self.autorecovery.stop))
        if self._monitor is not None:
            self._monitor.cancel()
        if self.gc is not None:
            steps.append(("garbage collector", self.gc.stop))
        if self.registration is not None:
            steps.append(("registration", self.registration.stop))
        if self.binary_server is not None:
            binary = self.binary_server
            steps.append(("binary add server", lambda: binary.close(grace)))
        if self._server is not None:
            server = self._server
            steps.append(("gRPC server", lambda: server.stop(grace)))
        for name, stop in steps:
            try:
                await stop()
            except Exception:
                log.exception("stopping the %s failed", name)

    async def _abandon_start(self) -> None:
        """Close what a failed start opened; the disks are left as a crash would leave them."""
        try:
            await self._stop_services(grace=0)
        finally:
            await self.storage.abort()
            await self.metrics.close()

    async def _check_cookies(self) -> None:
        """Refuse to start (``InvalidCookieError``) unless this bookie's directories are the
        ones the cluster knows it by; stamp them when it is new (``stripemq.bookie.cookie``)."""
        if not cookies_apply(self.config.metadata_service_uri):
            log.debug("bookie %s: no cookie check on a memory:// store", self.bookie_id)
            return
        if self.config.bookie_port == 0:
            # The port is part of the id the cookie names: pick it now, not at the bind.
            self.config.bookie_port = await asyncio.to_thread(_unused_port, self.config.bookie_host)
        store = await self._make_store()
        try:
            await check_cookies(store, self.config)
        finally:
            if store is not self._shared_store:
                await store.close()

    async def _make_store(self) -> MetadataStore:
        if self._shared_store is not None:
            return self._shared_store
        store = create_metadata_store(
            self.config.metadata_service_uri, session_timeout=self.config.zk_timeout_ms / 1000
        )
        await store.start()
        return store

    def _start_gc(self) -> None:
        """Garbage-collect against the ledgers in metadata, unless off or pointless."""
        if not self.config.gc_enabled:
            log.info("garbage collection is off (gc_wait_time_ms <= 0)")
            return
        if self._shared_store is None and self.config.metadata_service_uri.startswith("memory:"):
            # A private in-memory store can never hold a ledger's metadata: every ledger
            # would look deleted.
            log.warning("garbage collection is off: no shared metadata store holds ledgers")
            return
        self.gc = GarbageCollector(self.storage, self.config, self._ledger_source)
        self.gc.start()

    def _ledger_source(self) -> LedgerManager | None:
        """Ledger metadata through the registration's current store (it may be replaced)."""
        store = self.registration.store if self.registration is not None else None
        return LedgerManager(store) if store is not None else None

    def _disk_paths(self) -> list[str]:
        return [self.config.journal_dir, self.config.ledger_dir]

    async def _watch_disks(self) -> None:
        interval = self.config.disk_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                usage = await asyncio.to_thread(fullest_disk, self._disk_paths())
                # Storage weighs this against its other reasons (a full journal, a failed
                # checkpoint); the registration follows whatever it concludes.
                read_only = self.storage.disk_usage_checked(usage.fraction)
                assert self.registration is not None
                await self.registration.set_read_only(read_only)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("disk check failed")
