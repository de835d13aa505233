"""The cluster a chaos run attacks: real processes on 127.0.0.1, in a directory of its own.

One ZooKeeper server, bookies each behind a ``PartitionProxy`` (the bookie advertises the
proxy's address, so its id and everything that reaches it go through the proxy), brokers, and
one auto-recovery process. Every process can be killed, paused, restarted on the same ports
and disks, or (a bookie) lost for good and replaced by a new one.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from stripemq.bookie.autorecovery.underreplication import UnderReplicationManager
from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.bookie.client.metadata import stored_on
from stripemq.bookie.registration import AVAILABLE, READONLY
from stripemq.broker.ownership import BROKERS_ROOT, BrokerInfo, instance_of
from stripemq.chaos.proxy import PartitionProxy
from stripemq.chaos.schedule import bookie_name, broker_name
from stripemq.errors import NoSuchLedgerError, NotFoundError, StripeMQError
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.retry import poll
from stripemq.testing.autorecovery import AutoRecoveryProcess
from stripemq.testing.bookie import BookieProcess
from stripemq.testing.broker import BrokerProcess, cluster_service_url
from stripemq.testing.ports import free_port
from stripemq.testing.process import ChildProcess
from stripemq.testing.zookeeper import ZooKeeperServer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterShape:
    """How many of each process, the ledgers' quorums, and the session timeouts."""

    bookies: int = 4
    brokers: int = 2
    ensemble_size: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    session_timeout_ms: int = 4000

    def broker_settings(self) -> dict[str, object]:
        return {
            "zk_session_timeout_ms": self.session_timeout_ms,
            "managed_ledger_default_ensemble_size": self.ensemble_size,
            "managed_ledger_default_write_quorum": self.write_quorum,
            "managed_ledger_default_ack_quorum": self.ack_quorum,
            "broker_deduplication_enabled": True,
            # Small ledgers: rollovers, closes and recoveries happen during the run.
            "managed_ledger_max_entries_per_ledger": 2000,
            "managed_ledger_min_ledger_rollover_time_minutes": 0,
        }

    def bookie_settings(self) -> dict[str, object]:
        return {
            "zk_timeout_ms": self.session_timeout_ms,
            # Entries reach the entry logs within a second, where corruption can hit them.
            "flush_interval_ms": 500,
            "disk_check_interval_ms": 1000,
        }

    def autorecovery_settings(self) -> dict[str, object]:
        return {
            "zk_timeout_ms": self.session_timeout_ms,
            # At once, as BookKeeper's default: a killed bookie's ledgers get queued for
            # re-replication too, so auto-recovery works through the whole run.
            "lost_bookie_recovery_delay_s": 0,
            "open_ledger_rereplication_grace_period_s": 5,
            "replication_workers": 2,
            "replication_retry_backoff_s": 0.5,
            "replication_retry_backoff_max_s": 5,
            "underreplication_poll_interval_s": 5,
            "auditor_periodic_bookie_check_interval_s": 10,
        }


@dataclass
class BookieNode:
    """One bookie process and the proxy in front of it."""

    name: str
    process: BookieProcess
    proxy: PartitionProxy

    @property
    def bookie_id(self) -> str:
        return self.proxy.address


@dataclass
class ChaosCluster:
    """Start, attack and inspect the processes of one run under ``base_dir``."""

    base_dir: Path
    shape: ClusterShape = field(default_factory=ClusterShape)
    zookeeper: ZooKeeperServer | None = None
    bookies: dict[str, BookieNode] = field(default_factory=dict)
    lost_bookies: dict[str, BookieNode] = field(default_factory=dict)
    brokers: dict[str, BrokerProcess] = field(default_factory=dict)
    autorecovery: AutoRecoveryProcess | None = None
    store: MetadataStore | None = None

    @property
    def metadata_url(self) -> str:
        assert self.zookeeper is not None
        return self.zookeeper.url("/stripemq")

    @property
    def service_url(self) -> str:
        return cluster_service_url(self.brokers.values())

    @property
    def web_url(self) -> str:
        return next(iter(self.brokers.values())).web_url

    def processes(self) -> dict[str, ChildProcess]:
        """Every process that should be running, by name."""
        found: dict[str, ChildProcess] = {n: b.process for n, b in self.bookies.items()}
        found.update(self.brokers)
        if self.autorecovery is not None:
            found["autorecovery"] = self.autorecovery
        return found

    def broker_pids(self) -> dict[str, int]:
        return {
            name: broker.proc.pid
            for name, broker in self.brokers.items()
            if broker.proc is not None and broker.running
        }

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        # Its processes run in sessions of their own (a terminal's Ctrl-C does not reach
        # them): if the run is torn down before close(), they are killed at exit.
        atexit.register(self.kill_all)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.zookeeper = ZooKeeperServer(data_dir=self.base_dir / "zookeeper")
        await asyncio.to_thread(self.zookeeper.start)
        self.store = create_metadata_store(self.metadata_url)
        await self.store.start()
        await asyncio.gather(*(self.add_bookie(bookie_name(i)) for i in range(self.shape.bookies)))
        for i in range(self.shape.brokers):
            name = broker_name(i)
            self.brokers[name] = BrokerProcess(
                self.metadata_url, self.base_dir / name, settings=self.shape.broker_settings()
            )
        await asyncio.gather(*(b.start() for b in self.brokers.values()))
        self.autorecovery = AutoRecoveryProcess(
            self.metadata_url,
            self.base_dir / "autorecovery",
            name="autorecovery",
            settings=self.shape.autorecovery_settings(),
        )
        await self.autorecovery.start()
        log.info("cluster up: %s, metadata %s", self.service_url, self.metadata_url)

    async def add_bookie(self, name: str) -> BookieNode:
        """Start a new bookie ``name`` (new data, new id) and wait until it is writable."""
        port = free_port()
        proxy = PartitionProxy(("127.0.0.1", port), self.broker_pids, port=free_port())
        await proxy.start()
        process = BookieProcess(
            self.metadata_url,
            self.base_dir / name,
            port=port,
            settings={**self.shape.bookie_settings(), "advertised_address": proxy.address},
        )
        node = BookieNode(name, process, proxy)
        self.bookies[name] = node
        await process.start()
        await self.wait_writable(node)
        return node

    async def wait_writable(self, node: BookieNode, within_s: float = 60.0) -> None:
        store = self._store()

        async def registered() -> bool:
            return node.bookie_id in await store.children(AVAILABLE)

        if not await poll(registered, within_s=within_s, interval=0.05):
            raise TimeoutError(f"{node.name} not registered as writable after {within_s:.0f}s")

    def kill_all(self) -> None:
        """SIGKILL every process of the cluster now (SIGCONT first, so stopped ones die
        too); what ``close`` starts with, and what runs at exit if ``close`` never did."""
        for process in [*self.processes().values()]:
            self.resume(process)
            _signal(process, signal.SIGKILL)
        for process in [*self.processes().values()]:
            if process.proc is not None:
                process.proc.wait()

    async def close(self) -> None:
        """Kill everything and stop ZooKeeper."""
        atexit.unregister(self.kill_all)
        await asyncio.to_thread(self.kill_all)
        for node in [*self.bookies.values(), *self.lost_bookies.values()]:
            await node.proxy.close()
        if self.store is not None:
            with contextlib.suppress(StripeMQError, OSError):
                await self.store.close()
        if self.zookeeper is not None:
            await asyncio.to_thread(self.zookeeper.stop)

    def _store(self) -> MetadataStore:
        if self.store is None:
            raise RuntimeError("cluster not started")
        return self.store

    # ------------------------------------------------------------------ faults

    @staticmethod
    def pause(process: ChildProcess) -> None:
        _signal(process, signal.SIGSTOP)

    @staticmethod
    def resume(process: ChildProcess) -> None:
        _signal(process, signal.SIGCONT)

    async def restart(self, process: ChildProcess) -> None:
        """Start a process again on the ports and disks it had (after a kill or an exit)."""
        process.kill()
        if not isinstance(process, BrokerProcess | AutoRecoveryProcess | BookieProcess):
            raise TypeError(f"cannot restart {process!r}")
        await process.start(timeout=60)

    async def lose_bookie(self, name: str) -> None:
        """SIGKILL bookie ``name`` and wipe its disks: it never comes back."""
        node = self.bookies.pop(name)
        self.lost_bookies[name] = node
        self.resume(node.process)
        node.process.kill()
        await node.proxy.close()
        data = node.process.data_dir
        await asyncio.to_thread(_wipe_data, data)
        log.info("%s (%s) lost with its data", name, node.bookie_id)

    # ------------------------------------------------------------------ inspection

    async def under_replicated_ledgers(self) -> list[int]:
        """Ledgers with entries on a bookie no longer registered (lost or down) and those the
        auditor has queued for re-replication; the run has settled when there are none."""
        store = self._store()
        alive = set(await store.children(AVAILABLE)) | set(await _children(store, READONLY))
        short: set[int] = set()
        manager = LedgerManager(store)
        async for ledger_id in manager.ledger_ids():
            try:
                metadata, _version = await manager.read(ledger_id)
            except (NotFoundError, NoSuchLedgerError):
                continue  # deleted meanwhile
            for fragment in metadata.fragments():
                if fragment.is_empty():
                    continue
                for index, bookie in enumerate(fragment.ensemble):
                    if bookie not in alive and _holds_entries(
                        fragment.first_entry_id,
                        fragment.last_entry_id,
                        index,
                        metadata.ensemble_size,
                        metadata.write_quorum_size,
                    ):
                        short.add(ledger_id)
        marked = await UnderReplicationManager(store).ledger_ids()
        return sorted(short | set(marked))

    async def broker_instance(self, broker: BrokerProcess) -> str | None:
        """The instance id in ``broker``'s registration (a new one on each new session)."""
        store = self._store()
        for child in await _children(store, BROKERS_ROOT):
            found = await store.get(f"{BROKERS_ROOT}/{child}")
            if found is None:
                continue
            info = BrokerInfo.decode(found[0])
            if info is not None and info.service_url == broker.service_url:
                return instance_of(found[0])
        return None

    async def admin(self, method: str, path: str, body: object = None) -> None:
        """One admin REST call to the first broker that answers."""
        last: Exception | None = None
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
            for broker in self.brokers.values():
                try:
                    async with http.request(
                        method, broker.web_url + path, json=body, allow_redirects=True
                    ) as response:
                        if response.status < 300 or response.status == 409:
                            return
                        last = RuntimeError(
                            f"{method} {path}: {response.status} {await response.text()}"
                        )
                except aiohttp.ClientError as exc:
                    last = exc
        raise RuntimeError(f"admin call failed on every broker: {last}")

    def logs(self) -> list[Path]:
        """Every process's log file (for a failed run's evidence)."""
        found = [p.log_path for p in self.processes().values()]
        found += [n.process.log_path for n in self.lost_bookies.values()]
        found.append(self.base_dir / "zookeeper" / "zookeeper.log")
        return [p for p in found if p.exists()]


def _holds_entries(
    first: int, last: int | None, index: int, ensemble_size: int, write_quorum: int
) -> bool:
    if last is None or last - first + 1 >= ensemble_size:
        return True
    return any(stored_on(e, index, ensemble_size, write_quorum) for e in range(first, last + 1))


async def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return list(await store.children(path))
    except NotFoundError:
        return []


def _signal(process: ChildProcess, sig: int) -> None:
    if process.proc is not None and process.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.proc.pid, sig)


def _wipe_data(data_dir: Path) -> None:
    """Remove a bookie's journal and ledgers, keeping its log file for the report."""
    for child in data_dir.iterdir():
        if child.name.endswith(".log") and child.is_file():
            continue
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def describe(cluster: ChaosCluster) -> str:
    """A one-line JSON description of the cluster's addresses (for the run's log)."""
    return json.dumps(
        {
            "metadata": cluster.metadata_url,
            "service_url": cluster.service_url,
            "bookies": {n: b.bookie_id for n, b in cluster.bookies.items()},
            "brokers": {n: b.web_url for n, b in cluster.brokers.items()},
        }
    )
