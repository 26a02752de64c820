"""Real PySpark (local[2]) reading a transactional topic from the broker's remote folder, broker stopped.

Two confluent-kafka transactional producers interleave committed and aborted transactions across many
tiered segments; the last one is aborted by a marker that is never tiered. ``format("tieredlog")``
reads read_committed by default: exactly the rows a read_committed consumer got (up to the open
transaction's first offset, which is past every committed record here); with
``kafka.isolation.level=read_uncommitted``, the rows a read_uncommitted consumer got in the tiered part.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from spark_harness import spark  # noqa: F401  (fixture)
from txn_remote_harness import (
    OVERRIDES,
    TIERED,
    TOPIC,
    list_offset,
    produce_transactions,
    read_records,
    tiered_and_deleted,
)

pytestmark = pytest.mark.integration

LATEST_TIERED = -5  # ListOffsets: the highest offset in remote storage (KIP-1005)


def spark_records(spark, folder: Path, **options: str) -> list[tuple[int, str]]:  # noqa: F811 - the fixture
    r = spark.read.format("tieredlog").option("path", folder.as_uri()).option("topic", TOPIC)
    for k, v in options.items():
        r = r.option(k, v)
    return [(row["offset"], bytes(row["value"]).decode())
            for row in r.load().select("offset", "value").orderBy("offset").collect()]


def test_spark_reads_committed_records_by_default_and_everything_when_asked(spark, broker_factory) -> None:  # noqa: F811
    b = broker_factory(OVERRIDES)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept alive until the result arrives
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=TIERED)])[TOPIC].result(30)
    del admin
    committed, aborted, _ = produce_transactions(b.bootstrap)
    tiered_and_deleted(b.bootstrap, Path(b.data_dir) / f"{TOPIC}-0")
    tiered_end = list_offset(b.bootstrap, LATEST_TIERED) + 1
    consumer_committed = read_records(b.bootstrap, "read_committed", len(committed))
    consumer_everything = read_records(b.bootstrap, "read_uncommitted", len(committed) + len(aborted))
    b.stop()
    folder = Path(b.data_dir) / "remote-storage"  # the broker's default LocalTieredStorage

    assert sorted(v for _, v in consumer_committed) == sorted(committed)
    assert spark_records(spark, folder) == consumer_committed
    uncommitted = spark_records(spark, folder, **{"kafka.isolation.level": "read_uncommitted"})
    assert uncommitted == [(o, v) for o, v in consumer_everything if o < tiered_end]
    # the last transaction's records were tiered (its marker was not): only read_uncommitted has them
    assert any(v.startswith("left-last") for _, v in uncommitted)
