"""The ``stripemq`` command."""
