"""Fixtures of the integration tests: a fresh ZooKeeper namespace, a store on it, and a
broker (in this process) over real bookie processes; modules may override ``broker``.
The interop tests share them: both conftests take them from ``stripemq.testing.fixtures``."""

from __future__ import annotations

from stripemq.testing.fixtures import broker, metadata_url, store

__all__ = ["broker", "metadata_url", "store"]
