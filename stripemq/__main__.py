"""``python -m stripemq`` is the ``stripemq`` command."""

from stripemq.cli.main import main

if __name__ == "__main__":
    main()
