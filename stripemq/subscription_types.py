"""Pulsar's subscription type names, as policies, settings and pulsar-admin spell them.

Outside the broker package: the admin CLI checks a ``--types`` list with it, and must not
import the broker."""

from __future__ import annotations

SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
_BY_LOWER = {name.lower(): name for name in SUBSCRIPTION_TYPES}


def subscription_type_named(name: str) -> str | None:
    """``name`` (any case, spaces around it allowed) in Pulsar's spelling; None if it is
    not a subscription type."""
    return _BY_LOWER.get(name.strip().lower())
