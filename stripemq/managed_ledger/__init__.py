"""A topic's storage, as Pulsar's managed-ledger module keeps it: the chain of ledgers
(``ManagedLedger``), its cursors (``cursor/``), the entry cache and the ledger-list codec.

Depends on ``bookie``, ``metadata`` and ``proto`` only; the broker and Spark build on it.
"""
