"""``read_topic``: a tiered topic's rows as a :class:`pyarrow.RecordBatchReader`, with no JVM and no broker,
for pandas, DuckDB, Polars or anything that takes Arrow::

    reader = read_topic("orders", {"path": "s3://bucket/tiered", "storage.s3.region": "eu-west-1"})
    duckdb.sql("SELECT partition, count(*) FROM reader GROUP BY 1")

The options are the data source's (``startingOffsets``, ``includeHeaders``, ``kafka.isolation.level``
...) and its storage options (``path`` and the short form's ``storage.*``, or the broker's own
``remote.log.storage.manager.class.name`` and ``rsm.config.*``); the rows and their schema are the
DataFrame's, from the same planner and decoder. The plan is made when ``read_topic`` is called (a bad
option or a missing topic fails there); the segments are fetched and decoded one task at a time as the
reader is consumed, the next task's bytes fetched while the current one is checked and decodes.
With ``kafka.bootstrap.servers`` the offsets past the tiered part come from the brokers
(confluent-kafka), as in the data source.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Iterator, Mapping

import pyarrow as pa

from spark_readers.brokers import Brokers, TailTask, consumer_config, read_tail
from spark_readers.decoder import Source, kafka_schema
from spark_readers.options import ReaderOptions, parse_options
from spark_readers.planner import ReadTask, Task, plan
from spark_readers.read import FetchedTask, checked_task, fetch_bytes, fetched_task_batches, read_task_batches
from spark_readers.storage import open_storage, storage_spec
from tieredlog.rsm.api import RemoteStorageManager


@dataclass(frozen=True)
class TopicRead:
    """A planned read: its tasks, in plan order (by topic, partition, offset), and how to read each."""

    options: ReaderOptions
    rsm: RemoteStorageManager
    tasks: list[Task]

    @property
    def schema(self) -> pa.Schema:
        return kafka_schema(self.options.include_headers)

    def task_batches(self, task: Task) -> Iterator[pa.RecordBatch]:
        o = self.options
        if isinstance(task, TailTask):
            return read_tail(consumer_config(o.kafka, o.read_committed), task, o.include_headers, o.poll_timeout_ms)
        return read_task_batches(self.rsm, task, o.include_headers, o.fail_on_data_loss)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every task's rows in plan order; the next task's GET runs while this one is checked and
        decodes, so the store and the decoder work at once (two tasks' bytes in memory at most)."""
        with ThreadPoolExecutor(1, thread_name_prefix="read-topic-fetch") as pool:
            fetching: Future[tuple[bytes, Source]] | None = None
            for i, task in enumerate(self.tasks):
                if not isinstance(task, ReadTask):
                    yield from self.task_batches(task)
                    continue
                current = fetching if fetching is not None else pool.submit(fetch_bytes, self.rsm, task)
                following = next((t for t in self.tasks[i + 1:i + 2] if isinstance(t, ReadTask)), None)
                fetching = pool.submit(fetch_bytes, self.rsm, following) if following is not None else None
                yield from fetched_task_batches(task, partial(_checked, task, current), self.options.include_headers,
                                                self.options.fail_on_data_loss)

    def reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.batches())


def _checked(task: ReadTask, fetching: Future[tuple[bytes, Source]]) -> FetchedTask:
    return checked_task(task, fetching.result())


def plan_read(options: ReaderOptions) -> TopicRead:
    rsm = open_storage(storage_spec(options.path, options.storage))
    brokers = (Brokers(options.kafka, options.read_committed, options.poll_timeout_ms / 1000)
               if options.reads_brokers else None)
    return TopicRead(options, rsm, plan(rsm, options, brokers=brokers))


def read_topic(topic: str | None, options: Mapping[str, str] | None = None) -> pa.RecordBatchReader:
    """The rows of ``topic`` (or of the topics ``options`` name with ``subscribe``, ``topicPattern`` or
    ``assign`` when ``topic`` is None) in Spark's Kafka source schema. Option values are strings, as
    Spark's; see docs/spark.md."""
    raw = {k: str(v) for k, v in (options or {}).items()}
    if topic is not None:
        raw["topic"] = topic
    return plan_read(parse_options(raw)).reader()
