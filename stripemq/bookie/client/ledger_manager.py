"""Where ledger metadata lives in the metadata store, and the only code that touches it.

Paths follow BookKeeper's long hierarchical layout: the 19-digit id split 3/4/4/4/4, the
leaf prefixed with ``L`` (ledger 123 is ``/ledgers/000/0000/0000/0000/L0123``). The numeric
levels keep any one node's child list small and cannot collide with ``available``,
``idgen``, ``underreplication`` or ``auditor``. Ids come from sequential nodes under
``/ledgers/idgen``, whose counter ZooKeeper (and the embedded store) persists.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from stripemq.bookie.client.metadata import LedgerMetadata
from stripemq.errors import (
    BadVersionError,
    MetadataVersionError,
    NodeExistsError,
    NoSuchLedgerError,
    NotEmptyError,
    NotFoundError,
)
from stripemq.metadata import MetadataStore

log = logging.getLogger(__name__)

LEDGERS_ROOT = "/ledgers"
IDGEN_PATH = "/ledgers/idgen"
_ID_DIGITS = 19
_SPLITS = (3, 4, 4, 4, 4)


def hierarchical_parts(ledger_id: int) -> list[str]:
    """The 19-digit id split 3/4/4/4/4: ``['000', '0000', '0000', '0000', '0123']``."""
    if ledger_id < 0:
        raise ValueError(f"negative ledger id {ledger_id}")
    digits = f"{ledger_id:0{_ID_DIGITS}d}"
    parts, pos = [], 0
    for width in _SPLITS:
        parts.append(digits[pos : pos + width])
        pos += width
    return parts


def ledger_path(ledger_id: int) -> str:
    """``/ledgers/000/0000/0000/0000/L0123`` for ledger 123."""
    parts = hierarchical_parts(ledger_id)
    return f"{LEDGERS_ROOT}/{'/'.join(parts[:-1])}/L{parts[-1]}"


def ledger_id_from_path(path: str) -> int:
    tail = path[len(LEDGERS_ROOT) + 1 :].split("/")
    if len(tail) != len(_SPLITS) or not tail[-1].startswith("L"):
        raise ValueError(f"not a ledger path: {path}")
    return int("".join(tail[:-1]) + tail[-1][1:])


class LedgerManager:
    """Create, read, compare-and-set, delete and list ledger metadata."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def is_initialized(self) -> bool:
        """Whether any ledger id was ever allocated here; if not, this is not the cluster
        that wrote the bookie's ledgers (a wrong chroot), and GC must not trust it."""
        return await self.store.exists(IDGEN_PATH) is not None

    async def new_ledger_id(self) -> int:
        created = await self.store.create(f"{IDGEN_PATH}/ID-", b"", sequential=True)
        try:
            await self.store.delete(created)
        except NotFoundError:
            pass
        return int(created.rsplit("-", 1)[1])

    async def create(self, metadata: LedgerMetadata) -> int:
        """Allocate an id and write the metadata under it; returns the id."""
        while True:
            ledger_id = await self.new_ledger_id()
            try:
                await self.store.create(ledger_path(ledger_id), metadata.encode())
                return ledger_id
            except NodeExistsError:
                # Only possible if someone created this id by hand; take the next one.
                log.warning("ledger id %d already in use, allocating another", ledger_id)

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """The metadata and its version; ``NoSuchLedgerError`` if the ledger is gone."""
        found = await self.store.get(ledger_path(ledger_id))
        if found is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")
        raw, stat = found
        return LedgerMetadata.decode(raw), stat.version

    async def exists(self, ledger_id: int) -> bool:
        return await self.store.exists(ledger_path(ledger_id)) is not None

    async def write(self, ledger_id: int, metadata: LedgerMetadata, version: int) -> int:
        """Compare-and-set; returns the new version.

        ``MetadataVersionError`` when someone else changed it first (re-read and decide),
        ``NoSuchLedgerError`` when it was deleted.
        """
        try:
            stat = await self.store.put(ledger_path(ledger_id), metadata.encode(), version)
        except BadVersionError as exc:
            raise MetadataVersionError(
                f"metadata of ledger {ledger_id} changed since version {version}"
            ) from exc
        except NotFoundError as exc:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from exc
        return stat.version

    async def delete(self, ledger_id: int) -> None:
        path = ledger_path(ledger_id)
        try:
            await self.store.delete(path)
        except NotFoundError as exc:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from exc
        # Prune the now-empty hierarchy levels, best effort (a concurrent create may win).
        parent = path.rsplit("/", 1)[0]
        while parent != LEDGERS_ROOT:
            try:
                await self.store.delete(parent)
            except (NotEmptyError, NotFoundError):
                break
            parent = parent.rsplit("/", 1)[0]

    async def ledger_ids(self) -> AsyncIterator[int]:
        """Every ledger id in the store, ascending."""
        async for leaf in self._walk(LEDGERS_ROOT, 0):
            yield leaf

    async def _walk(self, path: str, depth: int) -> AsyncIterator[int]:
        width = _SPLITS[depth]
        for child in await self.store.children(path):
            child_path = f"{path}/{child}"
            if depth == len(_SPLITS) - 1:
                if child.startswith("L") and child[1:].isdigit() and len(child) == width + 1:
                    yield ledger_id_from_path(child_path)
            elif child.isdigit() and len(child) == width:
                async for ledger_id in self._walk(child_path, depth + 1):
                    yield ledger_id
