"""On-disk snapshots of the RLMM state of one ``__remote_log_metadata`` partition (beyond Kafka).

Kafka replays every metadata partition from offset 0 at each restart (KAFKA-19599). We save the
state of each metadata partition together with the next metadata-topic offset it covers; a restart
loads the snapshot and replays only the records after that offset.

File ``<log.dir>/remote-log-metadata-snapshots/__remote_log_metadata-<p>.snapshot``:
``magic "TLRLMMS1" | u16 version | u32 crc32c(body) | u64 len(body) | body``; the body is UTF-8
JSON. The per-epoch maps are stored as they are rather than rebuilt, because which copy of a
re-uploaded range is referenced depends on the order the events came in.
"""

from __future__ import annotations

import base64
import json
import logging
import struct
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from tieredlog.atomic_file import atomic_write
from tieredlog.rlmm.cache import LeaderEpochState, RemoteLogMetadataCache, RemotePartitionMetadataStore
from tieredlog.rsm.api import (
    CustomMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

SNAPSHOT_DIR = "remote-log-metadata-snapshots"
MAGIC = b"TLRLMMS1"
VERSION = 1
_HEADER = struct.Struct(">8sHIQ")
_WRITE_LOCK = threading.Lock()


class SnapshotError(ValueError):
    """A snapshot file that cannot be used (corrupt, other version, other partition)."""


@dataclass(slots=True)
class PartitionSnapshot:
    metadata_partition: int
    num_partitions: int
    next_offset: int  # first metadata-topic offset NOT reflected in the state
    store: RemotePartitionMetadataStore


def snapshot_path(directory: Path, metadata_partition: int) -> Path:
    return Path(directory) / f"__remote_log_metadata-{int(metadata_partition)}.snapshot"


# -- encode ---------------------------------------------------------------------------------------


def _segment_row(md: RemoteLogSegmentMetadata) -> list:
    return [
        md.remote_log_segment_id.id.hex,
        md.start_offset,
        md.end_offset,
        md.max_timestamp_ms,
        md.broker_id,
        md.event_timestamp_ms,
        md.segment_size_in_bytes,
        int(md.state),
        [[e, o] for e, o in md.segment_leader_epochs.items()],
        None if md.custom_metadata is None else base64.b64encode(md.custom_metadata.value).decode("ascii"),
        md.tx_index_present,
    ]


def _cache_entry(tp: TopicIdPartition, cache: RemoteLogMetadataCache, delete: RemotePartitionDeleteMetadata | None):
    index: dict[RemoteLogSegmentId, int] = {}
    segments: list[list[Any]] = []
    for sid, md in cache.id_to_metadata.items():
        index[sid] = len(segments)
        segments.append(_segment_row(md))
    epochs = []
    for epoch, state in cache.epochs.items():
        mapped = [[o, index[state.offset_to_id[o]]] for o in state.offsets if state.offset_to_id[o] in index]
        unreferenced = [index[s] for s in state.unreferenced if s in index]
        epochs.append([epoch, state.highest_log_offset, mapped, unreferenced])
    return {
        "topic": tp.topic,
        "topic_id": tp.topic_id.hex,
        "partition": tp.partition,
        "delete": None if delete is None else [int(delete.state), delete.event_timestamp_ms, delete.broker_id],
        "segments": segments,
        "epochs": epochs,
    }


def snapshot_body(metadata_partition: int, num_partitions: int, next_offset: int,
                  store: RemotePartitionMetadataStore) -> dict:
    """A plain-data copy of the state; build it under the owner's lock, encode it outside."""
    tps = set(store.caches) | set(store.delete_metadata)
    return {
        "metadata_partition": metadata_partition,
        "num_partitions": num_partitions,
        "next_offset": next_offset,
        "partitions": [
            _cache_entry(tp, store.caches.get(tp) or RemoteLogMetadataCache(), store.delete_metadata.get(tp))
            for tp in sorted(tps, key=lambda t: (t.topic, t.partition, t.topic_id.hex))
        ],
    }


def write_snapshot(directory: Path, body: dict) -> Path:
    """Atomically replace the snapshot of ``body['metadata_partition']``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = json.dumps(body, separators=(",", ":")).encode("utf-8")
    blob = _HEADER.pack(MAGIC, VERSION, crc32c.crc32c(data), len(data)) + data
    dest = snapshot_path(directory, body["metadata_partition"])
    # The loader and the periodic snapshot thread may write one partition at once: they would share
    # the ``.tmp`` file.
    with _WRITE_LOCK:
        atomic_write(dest, blob)
    return dest


# -- decode ---------------------------------------------------------------------------------------


def read_snapshot_body(path: Path) -> dict:
    blob = Path(path).read_bytes()
    if len(blob) < _HEADER.size:
        raise SnapshotError(f"{path.name}: truncated header")
    magic, version, crc, length = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise SnapshotError(f"{path.name}: bad magic")
    if version != VERSION:
        raise SnapshotError(f"{path.name}: unsupported version {version}")
    data = blob[_HEADER.size :]
    if len(data) != length or crc32c.crc32c(data) != crc:
        raise SnapshotError(f"{path.name}: checksum mismatch")
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:  # deep nesting is a RecursionError, not a ValueError
        raise SnapshotError(f"{path.name}: {exc}") from None
    if not isinstance(body, dict):
        raise SnapshotError(f"{path.name}: not a JSON object")
    return body


def _restore_cache(entry: dict, tp: TopicIdPartition) -> RemoteLogMetadataCache:
    cache = RemoteLogMetadataCache()
    ids: list[RemoteLogSegmentId] = []
    for row in entry["segments"]:
        sid = RemoteLogSegmentId(tp, uuid.UUID(hex=row[0]))
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=sid,
            start_offset=row[1],
            end_offset=row[2],
            max_timestamp_ms=row[3],
            broker_id=row[4],
            event_timestamp_ms=row[5],
            segment_size_in_bytes=row[6],
            state=RemoteLogSegmentState(row[7]),
            segment_leader_epochs={e: o for e, o in row[8]},
            custom_metadata=None if row[9] is None else CustomMetadata(base64.b64decode(row[9])),
            tx_index_present=bool(row[10]),
        )
        ids.append(sid)
        cache.id_to_metadata[sid] = md
    for epoch, highest, mapped, unreferenced in entry["epochs"]:
        state = LeaderEpochState(highest_log_offset=highest)
        for offset, i in mapped:  # written in ascending order
            state.offsets.append(offset)
            state.offset_to_id[offset] = ids[i]
        state.unreferenced.update(ids[i] for i in unreferenced)
        cache.epochs[epoch] = state
    return cache


def load_snapshot(path: Path, metadata_partition: int, num_partitions: int) -> PartitionSnapshot:
    body = read_snapshot_body(path)
    if body.get("metadata_partition") != metadata_partition or body.get("num_partitions") != num_partitions:
        raise SnapshotError(f"{Path(path).name}: snapshot of another partition layout")
    store = RemotePartitionMetadataStore()
    try:
        for entry in body["partitions"]:
            tp = TopicIdPartition(uuid.UUID(hex=entry["topic_id"]), entry["topic"], int(entry["partition"]))
            if entry["segments"] or entry["epochs"]:
                store.caches[tp] = _restore_cache(entry, tp)
            if entry["delete"] is not None:
                state, ts, broker = entry["delete"]
                store.delete_metadata[tp] = RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState(state), ts,
                                                                           broker)
        next_offset = int(body["next_offset"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as exc:
        raise SnapshotError(f"{Path(path).name}: malformed content: {exc!r}") from None
    return PartitionSnapshot(metadata_partition, num_partitions, next_offset, store)
