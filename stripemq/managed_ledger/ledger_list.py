"""Where a managed ledger lives in the metadata store, and how its ledger list is encoded.

The node ``/stripemq/managed-ledgers/<tenant>/<ns>/persistent/<topic>`` holds the topic's
ledger list as JSON (``{"ledgers": [...], "properties": {...}}``); each cursor is a child
node named by its quoted subscription name. A terminated topic's list also holds
``"terminated": "<ledger>:<entry>"``, its last entry for ever. Readers that are not the
broker (Spark, the admin tools) decode the same bytes with this module and nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from stripemq.errors import ManagedLedgerError
from stripemq.managed_ledger.ledger_chain import LedgerChain, LedgerInfo
from stripemq.managed_ledger.position import Position

ROOT = "/stripemq/managed-ledgers"


def managed_ledger_path(name: str) -> str:
    """The metadata node of a managed ledger named like ``tenant/ns/persistent/topic``."""
    parts = name.split("/")
    if not name or any(p in ("", ".", "..") for p in parts):
        raise ManagedLedgerError(f"invalid managed ledger name {name!r}")
    return f"{ROOT}/" + "/".join(quote(p, safe="-_.") for p in parts)


def cursor_path(ledger_path: str, cursor_name: str) -> str:
    """The metadata node of a cursor under its managed ledger's node."""
    return f"{ledger_path}/{quote(cursor_name, safe='')}"


def child_name(child: str) -> str:
    """The managed ledger or cursor name a child node stands for."""
    return unquote(child)


@dataclass
class LedgerList:
    """A managed ledger's metadata: its ledgers in order and its properties."""

    chain: LedgerChain = field(default_factory=LedgerChain)
    properties: dict[str, str] = field(default_factory=dict)
    terminated: Position | None = None  # the last entry of a terminated topic

    def encode(self) -> bytes:
        doc: dict[str, object] = {
            "ledgers": [info.to_json() for info in self.chain],
            "properties": self.properties,
        }
        if self.terminated is not None:
            doc["terminated"] = str(self.terminated)
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes, name: str) -> LedgerList:
        """Parse a ledger list; ``name`` only labels the error when the bytes are bad."""
        try:
            doc = json.loads(raw) if raw else {}
            chain = LedgerChain(LedgerInfo.from_json(item) for item in doc.get("ledgers", []))
            properties = {str(k): str(v) for k, v in doc.get("properties", {}).items()}
            terminated = doc.get("terminated")
            terminated = Position.parse(terminated) if terminated is not None else None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManagedLedgerError(
                f"metadata of managed ledger {name} is unreadable: {exc}"
            ) from None
        return cls(chain, properties, terminated)
