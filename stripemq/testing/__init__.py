"""Helpers that start real infrastructure (ZooKeeper, ...) for tests and benchmarks."""
