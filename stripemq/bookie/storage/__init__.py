"""The bookie storage engine: journal, memtable, entry logs, index, checkpoints."""
