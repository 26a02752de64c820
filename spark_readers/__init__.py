"""Read tiered topics straight from the remote tier, without a broker: Spark's Kafka source schema,
from the segment manifests and ranged GETs. See docs/spark.md.

``read_topic(topic, options)`` returns the rows as a ``pyarrow.RecordBatchReader`` (DuckDB, Polars, pandas).

The core modules (``storage``, ``catalog``, ``decoder``, ``options``, ``planner``, ``read``, ``arrow``, ``export``)
need only the base install (tieredlog's own dependencies: pyarrow, numpy, fsspec); ``TieredLogDataSource``
needs the ``spark`` extra (PySpark 4, and confluent-kafka where it talks to the brokers) and is imported on
first use, so the core works where neither is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_readers.arrow import read_topic

if TYPE_CHECKING:
    from spark_readers.datasource import TieredLogDataSource

__all__ = ["TieredLogDataSource", "read_topic"]


def __getattr__(name: str) -> object:
    if name == "TieredLogDataSource":
        from spark_readers.datasource import TieredLogDataSource

        return TieredLogDataSource
    raise AttributeError(f"module 'spark_readers' has no attribute {name!r}")
