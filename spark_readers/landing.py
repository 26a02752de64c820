"""Land a tiered topic as Parquet with Spark Structured Streaming, exactly once across restarts.

    python -m spark_readers.landing --topic orders --to s3a://lake/orders --checkpoint s3a://lake/_chk/orders \\
        --option path=s3://my-bucket/tiered --option kafka.bootstrap.servers=broker1:9092 [--once]

The query reads ``format("tieredlog")`` as a stream (the history from the remote tier, then the brokers'
tail when ``kafka.bootstrap.servers`` is given) and writes Spark's file sink, partitioned by the
record's UTC date (``date=YYYY-MM-DD`` folders), with the Kafka columns unchanged. Exactly once comes
from Spark's two logs under the checkpoint and the output: a micro-batch's offsets are written before it
runs and the sink's ``_spark_metadata`` log lists the files of each committed batch, so a job killed at
any point and started again from its checkpoint re-runs the unfinished batch over the same offsets and
the files of the killed attempt are never listed. Readers of the output must go through that log:
Spark's ``read.parquet`` does, and :func:`committed_files` gives the list to anything else (pyarrow,
DuckDB, Polars). ``--once`` processes what is there and stops (``Trigger.AvailableNow``); otherwise a
micro-batch runs every ``--trigger-seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import unquote, urlsplit

SINK_LOG = "_spark_metadata"


def landing_query(spark: Any, options: Mapping[str, str], to: str, checkpoint: str, once: bool,
                  trigger_seconds: int = 60) -> Any:
    """Start the landing query on ``spark`` (a session with the tieredlog source registered)."""
    from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

    stream = spark.readStream.format("tieredlog").options(**options).load()
    writer = (stream.withColumn("date", F.to_date(F.col("timestamp")))
              .writeStream.format("parquet").outputMode("append").partitionBy("date")
              .option("path", to).option("checkpointLocation", checkpoint))
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def committed_files(output: str | os.PathLike[str]) -> list[str]:
    """The Parquet files of the committed micro-batches of a landing folder on a local file system,
    from the sink's ``_spark_metadata`` log (compacted ``N.compact`` files included); files of a
    killed attempt are not in it."""
    log_dir = Path(output) / SINK_LOG
    batches = sorted((int(p.name.split(".")[0]), p) for p in log_dir.iterdir()
                     if p.name.split(".")[0].isdigit() and not p.name.endswith(".tmp"))
    last_compact = max((i for i, p in batches if p.name.endswith(".compact")), default=-1)
    files: dict[str, None] = {}
    for i, path in batches:
        if i < last_compact:
            continue  # the compact file holds these
        lines = path.read_text().splitlines()
        for line in lines[1:]:  # the first line is the log's version
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files[_local(entry["path"])] = None
            else:
                files.pop(_local(entry["path"]), None)
    return list(files)


def _local(uri: str) -> str:
    parts = urlsplit(uri)
    return unquote(parts.path) if parts.scheme in ("file", "") else uri


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spark_readers.landing", description=__doc__.split("\n")[0])
    p.add_argument("--topic", required=True)
    p.add_argument("--to", required=True, help="the output folder (any Hadoop path: file:, s3a:, ...)")
    p.add_argument("--checkpoint", required=True, help="the query's checkpoint folder; keep it to restart")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of format('tieredlog') (path, storage.*, rsm.config.*, kafka.*, ...)")
    p.add_argument("--once", action="store_true", help="process what is there and stop (Trigger.AvailableNow)")
    p.add_argument("--trigger-seconds", type=int, default=60)
    p.add_argument("--master", default=None, help="Spark master when not run by spark-submit (default local[*])")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = {"topic": args.topic, "includeHeaders": "true"}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"--option takes KEY=VALUE, got {key or item!r}", file=sys.stderr)
            return 2
        options[key] = value
    from pyspark.sql import SparkSession

    from spark_readers import TieredLogDataSource

    builder = SparkSession.builder.appName(f"tieredlog-landing-{args.topic}").config("spark.sql.session.timeZone", "UTC")
    if args.master or not os.environ.get("SPARK_ENV_LOADED"):
        builder = builder.master(args.master or "local[*]")
    spark = builder.getOrCreate()
    spark.dataSource.register(TieredLogDataSource)
    query = landing_query(spark, options, args.to, args.checkpoint, args.once, args.trigger_seconds)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
