"""The input partitions of a tieredlog read, batch or stream: a planned task of the remote tier or of the
brokers' tail, and the rows an executor reads for one. Both the batch reader (:mod:`spark_readers.datasource`)
and the stream reader (:mod:`spark_readers.stream`) hand Spark these."""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from spark_readers.brokers import Brokers, TailTask, consumer_config, read_tail
from spark_readers.options import ReaderOptions
from spark_readers.planner import ReadTask, Task
from spark_readers.read import read_task_batches
from spark_readers.storage import StorageSpec, open_storage


class ReadTaskPartition(InputPartition):
    def __init__(self, task: ReadTask) -> None:
        super().__init__(task)
        self.task = task

    def __repr__(self) -> str:
        t = self.task
        return (f"ReadTaskPartition({t.object_name} bytes {t.start_position}..{t.end_position}, "
                f"offsets {t.from_offset}..{t.to_offset})")


class TailPartition(InputPartition):
    def __init__(self, task: TailTask) -> None:
        super().__init__(task)
        self.task = task

    def __repr__(self) -> str:
        t = self.task
        return f"TailPartition({t.topic}-{t.partition} offsets {t.from_offset}..{t.to_offset} from the brokers)"


def input_partition(task: Task) -> InputPartition:
    return TailPartition(task) if isinstance(task, TailTask) else ReadTaskPartition(task)


def brokers_for(options: ReaderOptions) -> Brokers | None:
    """The driver's admin client, when the reader reads the brokers' tail."""
    if not options.reads_brokers:
        return None
    return Brokers(options.kafka, options.read_committed, options.poll_timeout_ms / 1000)


def read_partition(spec: StorageSpec, options: ReaderOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """One input partition's rows, from the remote tier or the brokers."""
    if isinstance(partition, ReadTaskPartition):
        return read_task_batches(open_storage(spec), partition.task, options.include_headers, options.fail_on_data_loss)
    if isinstance(partition, TailPartition):
        return read_tail(consumer_config(options.kafka, options.read_committed), partition.task,
                         options.include_headers, options.poll_timeout_ms)
    raise TypeError(f"not a tieredlog input partition: {partition!r}")
