"""A SparkSession for the Spark tests: one per test run (starting one takes seconds), on
``local[2]`` with this interpreter as the Python workers'. Only tests import this module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The run's SparkSession, with the ``stripemq`` source registered; stopped at the end."""
    from stripemq.spark import spark_session

    session = spark_session(
        "stripemq-tests",
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
            "spark.python.worker.reuse": "true",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
