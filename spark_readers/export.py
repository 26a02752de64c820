"""``tieredlog export``: a tiered topic's history from the remote tier to Parquet, without Spark.

    tieredlog export --topic T --path s3://bucket/prefix --to out/ \\
        [--from-offset N | --from-time MS] [--to-offset N | --to-time MS] \\
        [--storage storage.s3.endpoint.url=http://...] [--include-headers] \\
        [--bootstrap-server HOST:PORT [--metadata-source brokers]]
    tieredlog export --topic T --to out/ --storage remote.log.storage.manager.class.name=chunked \\
        --storage rsm.config.chunked.backend=s3 ...   # the broker's own properties instead of --path

The rows of :func:`spark_readers.read_topic`: the same planner and decoder as ``spark.read.format("tieredlog")``, so the files hold the same rows in
the same schema (Spark's Kafka source): one Parquet file per topic partition, ``<to>/<T>-<p>.parquet``
sorted by offset, which ``pyarrow.dataset`` (or Spark) reads back as one dataset. (Not Hive-style
``partition=<p>`` folders: their names would add columns that clash with the schema's own.) ``--to-offset`` is exclusive, as ``endingOffsets``; offsets apply to every partition. Committed
data only, as the data source's default (read_committed, :mod:`spark_readers.transactions`). Storage
options take the broker's S3 backend names (``storage.aws.access.key.id`` ...) or come from the AWS
chain; they are never printed. With ``--bootstrap-server`` the brokers are asked too, as with the data
source's ``kafka.bootstrap.servers``: the log start offset (nothing below it is written) and the offsets
not tiered yet; ``--metadata-source brokers`` also lists the committed segments from
``__remote_log_metadata`` through them, for a tier whose writer leaves no manifests.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Sequence

import pyarrow.parquet as pq

from spark_readers.arrow import plan_read
from spark_readers.catalog import CatalogError
from spark_readers.decoder import CorruptSegmentError
from spark_readers.options import OffsetSpec, OptionError, ReaderOptions, parse_options
from spark_readers.planner import PlanError, Task
from spark_readers.storage import StorageError
from tieredlog.rsm.api import RemoteStorageException


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog export", description=__doc__.split("\n")[0])
    p.add_argument("--topic", required=True)
    p.add_argument("--path", default="", help="the remote tier: s3://bucket/prefix, file:///dir, any fsspec URL; or "
                   "--storage remote.log.storage.manager.class.name=... with the broker's rsm.config.* as --storage")
    p.add_argument("--to", required=True, type=Path, help="output directory (created)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-offset", type=int, help="first offset, every partition (default: the earliest)")
    start.add_argument("--from-time", type=int, metavar="MS", help="first record at or after this epoch-ms time")
    end = p.add_mutually_exclusive_group()
    end.add_argument("--to-offset", type=int, help="offset to stop before, every partition (default: the tiered end)")
    end.add_argument("--to-time", type=int, metavar="MS", help="stop at the first record at or after this time")
    p.add_argument("--storage", action="append", default=[], metavar="KEY=VALUE",
                   help="a storage option (storage.s3.endpoint.url=..., storage.s3.region=..., or the broker's "
                   "remote.log.storage.manager.class.name=... and rsm.config.*=...), repeatable")
    p.add_argument("--include-headers", action="store_true", help="add the headers column, as includeHeaders")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="also read from the brokers: the log start "
                   "offset and the offsets not tiered yet (kafka.bootstrap.servers)")
    p.add_argument("--metadata-source", choices=("manifests", "brokers"), default="manifests",
                   help="list the committed segments from the tier's manifests (default) or from "
                   "__remote_log_metadata through --bootstrap-server (metadataSource)")
    return p


def reader_options(args: argparse.Namespace) -> ReaderOptions:
    raw = {"path": args.path, "topic": args.topic, "includeHeaders": str(args.include_headers).lower(),
           "metadataSource": args.metadata_source}
    if args.bootstrap_server:
        raw["kafka.bootstrap.servers"] = args.bootstrap_server
    for item in args.storage:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise OptionError(f"--storage takes KEY=VALUE, got {key or item!r}")
        raw[key] = value
    if args.from_time is not None:
        raw["startingTimestamp"] = str(args.from_time)
    if args.to_time is not None:
        raw["endingTimestamp"] = str(args.to_time)
    options = parse_options(raw)
    # one offset for every partition: Spark's options name each partition, the command does not
    if args.from_offset is not None:
        options = dataclasses.replace(options, starting=OffsetSpec(args.from_offset, {}))
    if args.to_offset is not None:
        options = dataclasses.replace(options, ending=OffsetSpec(args.to_offset, {}))
    return options


def _progress(done: int, total: int, rows: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} segment reads, {rows} rows")
    sys.stderr.flush()


def export(options: ReaderOptions, to: Path, progress: bool = True) -> int:
    """Write every planned row under ``to``; returns the row count."""
    read = plan_read(options)
    by_partition: dict[tuple[str, int], list[Task]] = {}
    for task in read.tasks:
        by_partition.setdefault((task.topic, task.partition), []).append(task)
    rows = done = 0
    to.mkdir(parents=True, exist_ok=True)
    for (topic, partition), part_tasks in sorted(by_partition.items()):
        with pq.ParquetWriter(to / f"{topic}-{partition}.parquet", read.schema) as writer:
            for task in part_tasks:  # in offset order: the file is sorted by offset
                for batch in read.task_batches(task):
                    writer.write_batch(batch)
                    rows += batch.num_rows
                done += 1
                if progress:
                    _progress(done, len(read.tasks), rows)
    if progress:
        sys.stderr.write("\n")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.metadata_source == "brokers" and not args.bootstrap_server:
        parser.error("--metadata-source brokers reads __remote_log_metadata through the brokers: "
                     "give --bootstrap-server")
    try:
        rows = export(reader_options(args), args.to, progress=sys.stderr.isatty())
    except (OptionError, PlanError, StorageError, CatalogError, CorruptSegmentError, RemoteStorageException,
            ModuleNotFoundError) as exc:
        print(f"tieredlog export: {exc}", file=sys.stderr)
        return 1
    print(f"exported {rows} rows of {args.topic} to {args.to}")
    return 0
