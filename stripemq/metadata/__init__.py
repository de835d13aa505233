"""Versioned hierarchical metadata (ZooKeeper semantics) behind one async interface.

``create_metadata_store(url)`` picks the backend from the URL scheme: ``zk://`` for
ZooKeeper, ``local://`` for the durable embedded store, ``memory://`` for an in-memory one.
"""

from __future__ import annotations

from typing import Any

from stripemq.errors import ConfigError
from stripemq.metadata.api import (
    ANY_VERSION,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
    Op,
    SessionEvent,
    SessionListener,
    SetOp,
    Stat,
    WatchCallback,
    WatchEvent,
    WatchHandle,
    parent_of,
    validate_path,
)
from stripemq.metadata.embedded import EmbeddedMetadataStore
from stripemq.metadata.zookeeper import ZooKeeperMetadataStore

__all__ = [
    "ANY_VERSION",
    "CheckOp",
    "CreateOp",
    "DeleteOp",
    "EmbeddedMetadataStore",
    "EventType",
    "MetadataStore",
    "Op",
    "SessionEvent",
    "SessionListener",
    "SetOp",
    "Stat",
    "WatchCallback",
    "WatchEvent",
    "WatchHandle",
    "ZooKeeperMetadataStore",
    "create_metadata_store",
    "parent_of",
    "validate_path",
]


def create_metadata_store(url: str, **kwargs: Any) -> MetadataStore:
    """A new, not yet started store for ``url``; ``kwargs`` go to the backend's constructor."""
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme == "zk":
        return ZooKeeperMetadataStore(url, **kwargs)
    if scheme in ("local", "memory"):
        return EmbeddedMetadataStore(url, **kwargs)
    raise ConfigError(f"unknown metadata store URL {url!r}: expected zk://, local:// or memory://")
