"""The ledger client: replicated, striped, fenceable ledgers over bookies."""

from stripemq.bookie.client.bookkeeper import BookKeeper
from stripemq.bookie.client.config import ClientConfig
from stripemq.bookie.client.ledger_handle import LedgerHandle
from stripemq.bookie.client.ledger_manager import LedgerManager, ledger_path
from stripemq.bookie.client.metadata import Fragment, LedgerMetadata, LedgerState
from stripemq.bookie.client.placement import BookieInfo, EnsemblePlacementPolicy
from stripemq.bookie.client.reader import LedgerEntry, ReadOnlyLedgerHandle

__all__ = [
    "BookKeeper",
    "BookieInfo",
    "ClientConfig",
    "EnsemblePlacementPolicy",
    "Fragment",
    "LedgerEntry",
    "LedgerHandle",
    "LedgerManager",
    "LedgerMetadata",
    "LedgerState",
    "ReadOnlyLedgerHandle",
    "ledger_path",
]
