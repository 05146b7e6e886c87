"""Fixtures of the load statistics tests: ONE local SparkSession per test run, sample generators."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A quiet ``local[2]`` SparkSession shared by every Spark test of the run."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's import-time pandas version notice
        from pyspark.sql import SparkSession

        session = (
            SparkSession.builder.master("local[2]")
            .appName("groupcoord-loadstats-tests")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.default.parallelism", "4")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .config("spark.sql.session.timeZone", "UTC")
            # tiny data: skip whole-stage code generation and C2 (both cost far more CPU than they save)
            .config("spark.sql.codegen.wholeStage", "false")
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
            .getOrCreate()
        )
    session.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    yield session
    session.stop()


def pytest_configure(config: pytest.Config) -> None:
    # pyspark 4.x warns at import that pandas >= 3 is not fully supported; the job uses no pandas.
    config.addinivalue_line("filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning")
