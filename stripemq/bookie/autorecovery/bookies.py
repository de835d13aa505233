"""Which bookies are registered right now, read fresh from the metadata store.

A bookie moving between the writable and read-only sets creates its new node before deleting
the old one, but the two sets cannot be listed atomically. Listing writable, read-only, then
writable again sees every bookie that stayed registered throughout, whichever way it moved, so
a moving bookie is never taken for a lost one.
"""

from __future__ import annotations

from stripemq.bookie.registration import AVAILABLE, READONLY
from stripemq.metadata import MetadataStore

_NOT_A_BOOKIE = "readonly"


async def registered_bookies(store: MetadataStore) -> set[str]:
    """Every registered bookie, writable or read-only (a read-only bookie is not lost)."""
    writable = set(await store.children(AVAILABLE))
    readonly = set(await store.children(READONLY))
    writable |= set(await store.children(AVAILABLE))
    return (writable | readonly) - {_NOT_A_BOOKIE}
