"""stripemq: persistent pub/sub with brokers separated from replicated ledger storage."""
