"""The broker: topics as managed ledgers, subscriptions as cursors, the Pulsar protocol."""
