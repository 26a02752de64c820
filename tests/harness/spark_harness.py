"""Shared by the Spark tests: one real ``local[2]`` session per module with the tieredlog data source
registered, the overrides of a broker tiering into an S3 server, and ``write_segment``: records of
every codec written by LogSegment into a segment copied to a LocalTieredStorage, with the rows Spark
must read of them (``expected_rows``).

    from spark_harness import s3_tier_overrides, spark  # noqa: F401  (fixture)
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
from s3servers import S3Endpoint

from tieredlog.formats.checkpoints import encode_leader_epoch_checkpoint
from tieredlog.formats.lineage import segment_leader_epochs
from tieredlog.log.producer_state import encode_snapshot
from tieredlog.log.segment import LogSegment
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import CONTROL_COMMIT, build_batch, build_control_batch
from tieredlog.rsm.api import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tieredlog.rsm.local import LocalTieredStorage


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


TOPIC = "orders"
TS0 = 1_700_000_000_000
CODECS = (0, 1, 2, 3, 4)  # none, gzip, snappy, lz4, zstd


def record(i: int, tag: bytes = b"") -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]:
    key = None if i % 7 == 3 else b"k%d" % i
    value = None if i % 11 == 5 else tag + b"v%d-" % i * (1 + i % 9)
    headers: list[tuple[str, bytes | None]] = [] if i % 3 else [("h", b"%d" % i), ("n", None)]
    return key, value, headers, TS0 + i


@dataclass
class Written:
    metadata: RemoteLogSegmentMetadata
    records: dict[int, tuple]


def write_segment(tmp: Path, rsm: LocalTieredStorage, tp: TopicIdPartition, epochs: list[tuple[int, int]],
                  start: int, end: int, *, tag: bytes = b"", tag_from: int = 0, per_batch: int = 5, with_control: bool = False,
                  jumble: bool = False) -> Written:
    """Offsets start..end-1 in batches of ``per_batch`` records, codecs rotating, written by LogSegment
    (which builds the offset and time indexes) and copied by LocalTieredStorage."""
    folder = tmp / f"seg-{uuid.uuid4().hex[:8]}"
    seg = LogSegment(folder, start, index_interval_bytes=200, active=True)
    written: dict[int, tuple] = {}
    offset = start
    n = 0
    while offset < end:
        epoch = max(e for e, s in epochs if s <= offset)
        if with_control and n % 4 == 3:
            batch = build_control_batch(CONTROL_COMMIT, 7, 0, offset, TS0 + offset,
                                        partition_leader_epoch=epoch)
        else:
            count = min(per_batch, end - offset)
            records = [record(i, tag if i >= tag_from else b"A") for i in range(offset, offset + count)]
            if jumble:  # timestamps out of offset order, as producers with skewed clocks write them
                records = [(k, v, h, TS0 + (o * 37) % 101) for o, (k, v, h, _) in enumerate(records, offset)]
            written.update({offset + k: r for k, r in enumerate(records)})
            batch = build_batch(records, base_offset=offset, codec=CODECS[n % 5], partition_leader_epoch=epoch)
        headers = [h for _, h in iter_headers(batch)]
        seg.append(batch, headers)
        offset = headers[-1].next_offset
        n += 1
    seg.close()
    snapshot = folder / "empty.snapshot"
    snapshot.write_bytes(encode_snapshot([]))  # no producer: as a broker uploads it for such a segment
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, uuid.uuid4()), start, offset - 1, TS0 + offset, 0, TS0 + len(list(tmp.iterdir())),
        seg.size, segment_leader_epochs(epochs, start, offset))
    rsm.copy_log_segment_data(md, LogSegmentData(seg.log_path, seg.offset_index_path, seg.time_index_path, None,
                                                 snapshot, encode_leader_epoch_checkpoint(epochs)))
    return Written(md, written)


def expected_rows(written: dict[int, tuple], partition: int, offsets: range) -> list[dict]:
    rows = []
    for o in offsets:
        key, value, headers, ts = written[o]
        rows.append({"key": key, "value": value, "topic": TOPIC, "partition": partition, "offset": o,
                     "timestamp": ts, "timestampType": 0,
                     "headers": [{"key": k, "value": v} for k, v in headers] or None})
    return rows
