"""Shared by the Spark tests: one real ``local[2]`` session per module with the tieredlog data source
registered, and the overrides of a broker tiering into an S3 server.

    from spark_harness import s3_tier_overrides, spark  # noqa: F401  (fixture)
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterator

import pytest
from s3servers import S3Endpoint


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors run the driver's interpreter
    from pyspark.sql import SparkSession

    from spark_readers import TieredLogDataSource

    session = (SparkSession.builder.master("local[2]").appName("tieredlog-tests")
               .config("spark.driver.memory", "512m").config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TieredLogDataSource)
    yield session
    session.stop()


def s3_tier_overrides(endpoint: S3Endpoint, prefix: str) -> dict[str, str]:
    """A broker tiering under ``prefix`` of ``endpoint``'s bucket, its tasks and retention checks
    every 200 ms so tests see segments tiered within a second."""
    return {
        "remote.log.storage.manager.class.name": "s3",
        **{f"rsm.config.{k}": str(v) for k, v in endpoint.rsm_configs(prefix=prefix).items()},
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
    }
