"""``spark.read.format("tieredlog")``: the PySpark 4 Python Data Source over the remote tier.

The driver lists the manifests and plans :class:`~spark_readers.planner.ReadTask` s; each becomes one
input partition, and an executor turns it into one ranged GET and one Arrow batch. Executors open the
store themselves from the reader's options (the reader object is pickled to them), so the planned
partitions carry no credentials. With ``kafka.bootstrap.servers`` the offsets past the tiered part are
planned as :class:`~spark_readers.brokers.TailTask` s, read by a consumer in the executor.

``pushFilters=true`` gives a reader that takes Spark's pushed filters (:mod:`spark_readers.filters`).
Spark 4.1+ refuses a reader implementing ``pushFilters`` unless the session sets
``spark.sql.python.filterPushdown.enabled=true`` (default false), so the plain reader stays the default:
a session without that setting keeps working.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, Filter, InputPartition
from pyspark.sql.types import StructType

from spark_readers.decoder import spark_ddl
from spark_readers.filters import PushedFilters, describe, push
from spark_readers.options import ReaderOptions, include_headers, parse_options, push_filters
from spark_readers.partitions import brokers_for, input_partition, read_partition
from spark_readers.planner import plan
from spark_readers.storage import StorageSpec, open_storage, storage_spec
from spark_readers.stream import TieredLogStreamReader
from spark_readers.writer import TieredLogStreamWriter, TieredLogWriter, parse_write_options


class TieredLogDataSource(DataSource):
    """Options: see :mod:`spark_readers.options` and :mod:`spark_readers.storage`, and docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "tieredlog"

    def schema(self) -> str:
        # includeHeaders alone: a stream's startingOffsets=latest is not a batch option
        return spark_ddl(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_options(self.options)
        spec = storage_spec(options.path, options.storage)
        if push_filters(self.options):
            return TieredLogFilteringReader(options, spec)
        return TieredLogReader(options, spec)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_options(self.options, streaming=True)
        return TieredLogStreamReader(options, storage_spec(options.path, options.storage))

    def writer(self, schema: StructType, overwrite: bool) -> TieredLogWriter:
        # Checked here, on the driver, so a bad schema fails the query before any task runs.
        return TieredLogWriter(parse_write_options(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> TieredLogStreamWriter:
        return TieredLogStreamWriter(parse_write_options(self.options, schema, overwrite))


class TieredLogReader(DataSourceReader):
    def __init__(self, options: ReaderOptions, spec: StorageSpec) -> None:
        self.options = options
        self.spec = spec
        self.pushed = PushedFilters()

    def partitions(self) -> Sequence[InputPartition]:
        tasks = plan(open_storage(self.spec), self.options, pushed=self.pushed, brokers=brokers_for(self.options))
        return [input_partition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for batch in read_partition(self.spec, self.options, partition):
            yield self.pushed.filter_batch(batch)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(describe(self.pushed)) or 'no pushed filters'})"


class TieredLogFilteringReader(TieredLogReader):
    """``pushFilters=true``: takes the filters on ``partition``, ``offset`` and ``timestamp``."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 (Spark's name)
        self.pushed, rest = push(filters)
        return rest
