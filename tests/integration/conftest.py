"""Fixtures of the integration tests: a fresh ZooKeeper namespace, a store on it, bookie
processes on it (``make_bookie``), and a broker (in this process) over real bookie
processes; modules may override ``broker``.
The interop tests share them: both conftests take them from ``stripemq.testing.fixtures``.
``spark`` is the run's one SparkSession (``stripemq.testing.spark``)."""

from __future__ import annotations

from stripemq.testing.fixtures import broker, make_bookie, metadata_url, store
from stripemq.testing.spark import spark

__all__ = ["broker", "make_bookie", "metadata_url", "spark", "store"]
