"""``BookKeeper``: the ledger client's entry point (create, open, delete ledgers).

It holds what every handle shares: the metadata store, the ledger manager, the view of
registered bookies, the placement policy, one gRPC client per bookie and the record of
which bookies failed lately.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from stripemq.bookie.bookie_client import BookieCalls
from stripemq.bookie.client.bookie_watcher import BookieWatcher
from stripemq.bookie.client.config import ClientConfig
from stripemq.bookie.client.ledger_handle import LedgerHandle
from stripemq.bookie.client.ledger_manager import LedgerManager
from stripemq.bookie.client.metadata import LedgerMetadata, master_key_for
from stripemq.bookie.client.placement import EnsemblePlacementPolicy
from stripemq.bookie.client.pool import BookieClientPool
from stripemq.bookie.client.reader import BookieHealth, ReadOnlyLedgerHandle
from stripemq.bookie.client.recovery import LedgerRecovery
from stripemq.errors import (
    BookieError,
    ClientClosedError,
    MetadataError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)
from stripemq.metadata import MetadataStore

log = logging.getLogger(__name__)


class BookKeeper:
    """A ledger client on a started ``MetadataStore`` (which it does not own)."""

    def __init__(
        self,
        store: MetadataStore,
        config: ClientConfig | None = None,
        *,
        placement: EnsemblePlacementPolicy | None = None,
        local_bookies: Mapping[str, BookieCalls] | None = None,
    ) -> None:
        """``local_bookies``: clients of bookies in this process, by bookie id."""
        self.store = store
        self.config = config or ClientConfig()
        self.config.validate()
        self.ledger_manager = LedgerManager(store)
        self.bookie_watcher = BookieWatcher(store)
        self.placement = placement or EnsemblePlacementPolicy()
        self.clients = BookieClientPool(self.config, local_bookies)
        self.health = BookieHealth()
        self._started = False
        self._closed = False

    async def start(self) -> None:
        self.bookie_watcher.start()
        self._started = True

    async def close(self) -> None:
        """Stop the client; adds still pending fail with ``ClientClosedError`` and open
        ledgers stay open in metadata (whoever opens them next recovers them)."""
        self._closed = True
        self.bookie_watcher.close()
        await self.clients.close()

    async def __aenter__(self) -> BookKeeper:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed or not self._started:
            raise ClientClosedError("the ledger client is not started or already closed")

    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum_size: int = 2,
        ack_quorum_size: int = 2,
        *,
        password: bytes = b"",
        custom_metadata: Mapping[str, str] | None = None,
    ) -> LedgerHandle:
        """Place a new ledger, write its metadata first, and return its writer's handle."""
        self._check_open()
        if not 1 <= ack_quorum_size <= write_quorum_size <= ensemble_size:
            raise ValueError(
                f"need 1 <= ack quorum <= write quorum <= ensemble, got "
                f"{ensemble_size}/{write_quorum_size}/{ack_quorum_size}"
            )
        ensemble = self.placement.new_ensemble(
            ensemble_size, write_quorum_size, await self.bookie_watcher.writable()
        )
        master_key = master_key_for(password)
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
            ensembles={0: tuple(ensemble)},
            password_hash=master_key.hex(),
            custom_metadata=dict(custom_metadata or {}),
        )
        ledger_id = await self.ledger_manager.create(metadata)
        handle = LedgerHandle(self, ledger_id, metadata, 0, master_key)
        await handle.connect()
        log.debug("created ledger %d on %s", ledger_id, ensemble)
        return handle

    async def open_ledger(
        self, ledger_id: int, *, password: bytes | None = b"", recovery: bool = True
    ) -> ReadOnlyLedgerHandle:
        """Open for reading. With ``recovery`` an open ledger is fenced, recovered and closed
        first (the takeover path); without, it stays open and the handle may tail it.

        ``password=None`` skips the password check (auto-recovery and admin tools, which
        read the key from the metadata).
        """
        self._check_open()
        metadata, version = await self.ledger_manager.read(ledger_id)
        if password is not None and master_key_for(password).hex() != metadata.password_hash:
            raise UnauthorizedAccessError(f"wrong password for ledger {ledger_id}")
        if recovery and not metadata.is_closed:
            metadata, version = await LedgerRecovery(self, ledger_id, metadata, version).run()
        handle = ReadOnlyLedgerHandle(self, ledger_id, metadata, version)
        if not metadata.is_closed:
            await handle.read_last_add_confirmed()
        return handle

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the metadata; bookies garbage-collect the entries on their next pass."""
        self._check_open()
        await self.ledger_manager.delete(ledger_id)


async def delete_ledger_quietly(bk: BookKeeper, ledger_id: int, what: str) -> None:
    """Delete a ledger its owner no longer needs: one already gone is fine, and one that
    cannot be deleted now is logged (``what`` names it) and left as garbage."""
    try:
        await bk.delete_ledger(ledger_id)
    except NoSuchLedgerError:
        pass
    except (BookieError, MetadataError) as exc:
        log.warning("%s %d stays as garbage: %s", what, ledger_id, exc)
