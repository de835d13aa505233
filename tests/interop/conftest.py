"""Fixtures of the interop tests, which drive the broker with the official ``pulsar-client``:
the integration tests' fresh ZooKeeper namespace, store and broker over real bookie
processes (from ``stripemq.testing.fixtures``); modules may override ``broker``."""

from __future__ import annotations

from stripemq.testing.fixtures import broker, metadata_url, store

__all__ = ["broker", "metadata_url", "store"]
