"""`tieredlog remote`: inspect remote segments and ``__remote_log_metadata`` offline, from a log dir.

    tieredlog remote segments --topic T [--partition P] [--log-dir DIR] [--all-states]
    tieredlog remote dump-metadata [--log-dir DIR] [--partition P]

Both read the metadata topic's partition folders (``__remote_log_metadata-<p>``) in the log dir and
decode the records with Kafka's serde; ``segments`` starts from the RLMM snapshots when they are
consistent with the topic, as the broker does, and replays the rest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterator

from tieredlog.kafka_uuid import uuid_to_kafka_str
from tieredlog.rlmm import serde
from tieredlog.rlmm.cache import RemotePartitionMetadataStore
from tieredlog.rlmm.snapshot import SNAPSHOT_DIR, SnapshotError, load_snapshot, snapshot_path
from tieredlog.rlmm.topic import METADATA_TOPIC, iter_partition_dir
from tieredlog.rsm.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from tieredlog.tools import run_tool

DEFAULT_LOG_DIR = "./data"


def metadata_partition_dirs(log_dir: Path) -> dict[int, Path]:
    out = {}
    for d in log_dir.glob(f"{METADATA_TOPIC}-*"):
        suffix = d.name[len(METADATA_TOPIC) + 1 :]
        if d.is_dir() and suffix.isdigit():
            out[int(suffix)] = d
    return dict(sorted(out.items()))


def _snapshot_partitions(log_dir: Path) -> list[int]:
    out = []
    for f in (log_dir / SNAPSHOT_DIR).glob(f"{METADATA_TOPIC}-*.snapshot"):
        num = f.name[len(METADATA_TOPIC) + 1 : -len(".snapshot")]
        if num.isdigit():
            out.append(int(num))
    return sorted(out)


def render(md) -> str:
    """One metadata event as text, Kafka's field names in Kafka's order."""
    if isinstance(md, RemoteLogSegmentMetadata):
        return (
            f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_sid(md)}, startOffset={md.start_offset}, "
            f"endOffset={md.end_offset}, brokerId={md.broker_id}, maxTimestampMs={md.max_timestamp_ms}, "
            f"eventTimestampMs={md.event_timestamp_ms}, segmentLeaderEpochs={_epochs(md)}, "
            f"segmentSizeInBytes={md.segment_size_in_bytes}, customMetadata={_custom(md)}, "
            f"state={md.state.name}, txnIndexEmpty={not md.tx_index_present}}}"
        )
    if isinstance(md, RemoteLogSegmentMetadataUpdate):
        return (
            f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={_sid(md)}, customMetadata={_custom(md)}, "
            f"state={md.state.name}, eventTimestampMs={md.event_timestamp_ms}, brokerId={md.broker_id}}}"
        )
    if isinstance(md, RemotePartitionDeleteMetadata):
        tp = md.topic_id_partition
        return (
            f"RemotePartitionDeleteMetadata{{topicPartition={uuid_to_kafka_str(tp.topic_id)}:{tp}, "
            f"state={md.state.name}, eventTimestampMs={md.event_timestamp_ms}, brokerId={md.broker_id}}}"
        )
    return repr(md)


def _sid(md) -> str:
    sid = md.remote_log_segment_id
    tp = sid.topic_id_partition
    return f"RemoteLogSegmentId{{topicIdPartition={uuid_to_kafka_str(tp.topic_id)}:{tp}, id={uuid_to_kafka_str(sid.id)}}}"


def _epochs(md: RemoteLogSegmentMetadata) -> str:
    return "{" + ", ".join(f"{e}={o}" for e, o in sorted(md.segment_leader_epochs.items())) + "}"


def _custom(md) -> str:
    cm = md.custom_metadata
    return "Optional.empty" if cm is None else f"Optional[CustomMetadata{{{len(cm.value)} bytes}}]"


def iter_metadata_records(log_dir: Path, partition: int | None = None) -> Iterator[tuple[int, int, object]]:
    """(metadata partition, offset, decoded event or MetadataSerdeError) for every record."""
    for p, d in metadata_partition_dirs(log_dir).items():
        if partition is not None and p != partition:
            continue
        for offset, value in iter_partition_dir(d):
            try:
                yield p, offset, serde.deserialize(value)
            except serde.MetadataSerdeError as exc:
                yield p, offset, exc


def apply_event(store: RemotePartitionMetadataStore, md) -> None:
    """One decoded metadata event applied to ``store`` as the broker's RLMM applies it (also used by
    `topics describe`, which reads the topic over the protocol)."""
    try:
        store.apply(md)
    except Exception:  # the broker drops bad events too; the tool shows what the broker would
        pass


def load_stores(log_dir: Path) -> dict[int, RemotePartitionMetadataStore]:
    """The RLMM state of every metadata partition: snapshot (when consistent) + the records after it."""
    dirs = metadata_partition_dirs(log_dir)
    snap_parts = _snapshot_partitions(log_dir)
    num = len(dirs) if dirs else (max(snap_parts) + 1 if snap_parts else 0)
    stores: dict[int, RemotePartitionMetadataStore] = {}
    for p in sorted(set(dirs) | set(snap_parts)):
        store, start = RemotePartitionMetadataStore(), 0
        records = list(iter_partition_dir(dirs[p])) if p in dirs else []
        end = records[-1][0] + 1 if records else 0
        path = snapshot_path(log_dir / SNAPSHOT_DIR, p)
        if path.exists():
            try:
                snap = load_snapshot(path, p, num)
                if snap.next_offset <= end or not dirs:
                    store, start = snap.store, snap.next_offset
            except (SnapshotError, OSError) as exc:
                print(f"warning: ignoring {path}: {exc}", file=sys.stderr)
        for offset, value in records:
            if offset >= start:
                try:
                    apply_event(store, serde.deserialize(value))
                except serde.MetadataSerdeError:
                    pass
        stores[p] = store
    return stores


def cmd_segments(args) -> int:
    log_dir = Path(args.log_dir)
    rows = []
    for store in load_stores(log_dir).values():
        for tp, cache in store.caches.items():
            if tp.topic != args.topic or (args.partition is not None and tp.partition != args.partition):
                continue
            for md in cache.list_remote_log_segments():
                rows.append((tp.partition, md))
    if not rows:
        print(f"no remote segments for topic {args.topic!r} in {log_dir}", file=sys.stderr)
        return 1
    print(f"{'PARTITION':>9} {'START':>12} {'END':>12} {'STATE':<22} {'SIZE':>12} {'EPOCHS':<16} SEGMENT ID")
    for partition, md in sorted(rows, key=lambda r: (r[0], r[1].start_offset)):
        print(f"{partition:>9} {md.start_offset:>12} {md.end_offset:>12} {md.state.name:<22} "
              f"{md.segment_size_in_bytes:>12} {_epochs(md):<16} {uuid_to_kafka_str(md.remote_log_segment_id.id)}")
    return 0


def cmd_dump_metadata(args) -> int:
    log_dir = Path(args.log_dir)
    if not metadata_partition_dirs(log_dir):
        print(f"no {METADATA_TOPIC} partitions in {log_dir}", file=sys.stderr)
        return 1
    for p, offset, md in iter_metadata_records(log_dir, args.partition):
        value = f"<undecodable: {md}>" if isinstance(md, Exception) else render(md)
        print(f"partition: {p}, offset: {offset}, value: {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tieredlog remote", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    seg = sub.add_parser("segments", help="list a topic's remote segments and their states")
    seg.add_argument("--topic", required=True)
    seg.add_argument("--partition", type=int)
    seg.add_argument("--log-dir", default=DEFAULT_LOG_DIR)
    seg.set_defaults(func=cmd_segments)
    dump = sub.add_parser("dump-metadata", help=f"print {METADATA_TOPIC} records decoded")
    dump.add_argument("--log-dir", default=DEFAULT_LOG_DIR)
    dump.add_argument("--partition", type=int, help="only this metadata partition")
    dump.set_defaults(func=cmd_dump_metadata)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return run_tool(lambda: int(args.func(args)))


if __name__ == "__main__":
    sys.exit(main())
