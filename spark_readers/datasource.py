"""``spark.read.format("tieredlog")``: the PySpark 4 Python Data Source over the remote tier.

The driver lists the manifests and plans :class:`~spark_readers.planner.ReadTask` s; each becomes one
input partition, and an executor turns it into one ranged GET and one Arrow batch. Executors open the
store themselves from the reader's options (the reader object is pickled to them), so the planned
partitions carry no credentials.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from spark_readers.decoder import spark_ddl
from spark_readers.options import ReaderOptions, include_headers, parse_options
from spark_readers.planner import ReadTask, plan
from spark_readers.read import read_task
from spark_readers.storage import StorageSpec, open_storage, storage_spec
from spark_readers.writer import TieredLogStreamWriter, TieredLogWriter, parse_write_options


class ReadTaskPartition(InputPartition):
    def __init__(self, task: ReadTask) -> None:
        super().__init__(task)
        self.task = task

    def __repr__(self) -> str:
        t = self.task
        return (f"ReadTaskPartition({t.object_name} bytes {t.start_position}..{t.end_position}, "
                f"offsets {t.from_offset}..{t.to_offset})")


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
        return TieredLogReader(options, storage_spec(options.path, options.storage))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # imported here: spark_readers.stream imports ReadTaskPartition from this module
        from spark_readers.stream import TieredLogStreamReader

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

    def partitions(self) -> Sequence[InputPartition]:
        return [ReadTaskPartition(task) for task in plan(open_storage(self.spec), self.options)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadTaskPartition):
            raise TypeError(f"not a tieredlog input partition: {partition!r}")
        yield read_task(open_storage(self.spec), partition.task, self.options.include_headers)
