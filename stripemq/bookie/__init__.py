"""Bookie: storage engine, gRPC server, per-bookie client, registration."""
