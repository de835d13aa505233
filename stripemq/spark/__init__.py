"""Spark over ledgers: a PySpark data source named ``stripemq`` that reads topics straight
from the bookies (batch and streaming), and the Parquet export job.

Needs the ``[spark]`` extra (PySpark 4.1+, pyarrow). Nothing here imports PySpark until it
is used, so the planning and decoding cores load without it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the ``stripemq`` data source with a ``SparkSession`` and turn on Python
    filter pushdown (Spark leaves it off by default; the source prunes by it)."""
    from stripemq.spark.source import StripeMQDataSource

    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(StripeMQDataSource)


def spark_session(
    app_name: str = "stripemq", master: str = "local[*]", conf: dict[str, str] | None = None
) -> Any:
    """A ``SparkSession`` ready for the ``stripemq`` source: Python workers run this
    interpreter (``PYSPARK_PYTHON``, unless set), the console progress bar and web UI are
    off, times are UTC, and the source is registered."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(FILTER_PUSHDOWN_CONF, "true")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


__all__ = ["FILTER_PUSHDOWN_CONF", "register", "spark_session"]
