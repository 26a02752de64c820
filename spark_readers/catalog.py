"""The remote tier as a broker-less reader sees it: which segments of a topic are committed, and which
copy of each offset belongs to the log.

Where the metadata comes from: the segment **manifests** (``<stem>.manifest``, see
``docs/tiered-storage.md``), not the ``__remote_log_metadata`` topic. The manifest is written last by
every RemoteStorageManager (S3, fsspec, LocalTieredStorage), so its presence is exactly
"COPY_SEGMENT_FINISHED" for the objects beside it, and it carries everything a reader needs (offsets,
leader epochs, sizes, max timestamp). ``__remote_log_metadata`` lives on the brokers' local disks (a
Kafka topic, not an object in the bucket), so reading it would need a broker or its disks; and a
deleted segment loses its manifest first, so a listing never shows a half-deleted segment as committed.

Overlapping uploads (the same offsets copied twice after a failover, or a retried copy with a new
segment id) are resolved by the leader-epoch rule Kafka itself applies: one leader wrote each
(epoch, offset), and a later epoch that starts at offset ``o`` replaced whatever lower epochs held from
``o`` on. So the log's lineage is rebuilt from the segments' own epoch maps, highest epoch first: the
highest epoch owns ``[its start, end)``; each lower epoch owns ``[its start, start of the next kept
epoch)`` and is dropped when it starts at or after that point (it was truncated away). Each offset is
then read from a segment that holds it under the lineage's epoch for it; when several copies of one
epoch hold it, the one reaching furthest (then the newest upload) wins, so reads stay sequential.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tieredlog.rlm.lineage import segment_epoch_bounds
from tieredlog.rsm.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tieredlog.rsm.keys import MANIFEST_SUFFIX, InvalidKeyError, SegmentObjectKey, uuid_from_base64
from tieredlog.rsm.objectstore import ObjectStoreRemoteStorageManager

log = logging.getLogger(__name__)

# Manifests are ~1 KiB GETs: latency bound, so many at once.
MANIFEST_READERS = 16


class CatalogError(Exception):
    """The remote tier cannot answer (missing topic, unreadable manifest). One line, no secrets."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One committed remote segment, from its manifest."""

    metadata: RemoteLogSegmentMetadata
    log_size: int
    # The manifest's object key, to name the segment in errors.
    manifest_key: str

    @property
    def start_offset(self) -> int:
        return self.metadata.start_offset

    @property
    def end_offset(self) -> int:
        """Inclusive, as in RemoteLogSegmentMetadata."""
        return self.metadata.end_offset


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """Offsets ``[from_offset, to_offset)`` of the log, read from ``segment``."""

    segment: Segment
    from_offset: int
    to_offset: int


def segment_from_manifest(key: SegmentObjectKey, manifest: Mapping[str, Any]) -> Segment:
    """The manifest checked against its own key: a manifest that names another segment is not trusted."""
    try:
        segment_id = uuid_from_base64(str(manifest["segment_id"]))
        topic_id = uuid_from_base64(str(manifest["topic_id"]))
        if (manifest["topic"], int(manifest["partition"]), int(manifest["start_offset"]), segment_id, topic_id) != (
                key.topic, key.partition, key.start_offset, key.segment_id, key.topic_id):
            raise CatalogError(f"manifest {key.key} describes another segment")
        epochs = {int(e): int(o) for e, o in manifest["segment_leader_epochs"]}
        metadata = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(TopicIdPartition(topic_id, key.topic, key.partition), segment_id),
            start_offset=key.start_offset,
            end_offset=int(manifest["end_offset"]),
            max_timestamp_ms=int(manifest["max_timestamp_ms"]),
            broker_id=int(manifest["broker_id"]),
            event_timestamp_ms=int(manifest["event_timestamp_ms"]),
            segment_size_in_bytes=int(manifest["segment_size_in_bytes"]),
            segment_leader_epochs=epochs,
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            tx_index_present=bool(manifest.get("tx_index_present", False)),
        )
        log_size = int(manifest["files"]["log"]["size"])
    except (KeyError, TypeError, ValueError, InvalidKeyError) as exc:
        raise CatalogError(f"manifest {key.key} is malformed: {type(exc).__name__}: {exc}") from None
    return Segment(metadata, log_size, key.key)


class Catalog:
    """Committed segments of one topic's partitions, read from the manifests under the RSM's prefix."""

    def __init__(self, rsm: ObjectStoreRemoteStorageManager) -> None:
        self.rsm = rsm

    def topics(self) -> list[str]:
        """Every topic with at least one committed segment (lists the whole prefix)."""
        return sorted({k.topic for k in self.rsm.list_segment_objects() if k.suffix == MANIFEST_SUFFIX})

    def committed_segments(self, topic: str) -> dict[int, list[Segment]]:
        """Partition -> its committed segments (any order). A topic recreated under the same name has
        several topic ids in the bucket; the one with the newest upload is the live one."""
        manifests = [k for k in self.rsm.list_topic_segment_objects(topic) if k.suffix == MANIFEST_SUFFIX]
        if not manifests:
            raise CatalogError(f"topic {topic!r} has no committed segments in the remote tier")
        with ThreadPoolExecutor(min(MANIFEST_READERS, len(manifests))) as pool:
            segments = list(pool.map(self._read_segment, manifests))
        newest: dict[uuid.UUID, int] = {}
        for s in segments:
            tid = s.metadata.topic_id_partition.topic_id
            newest[tid] = max(newest.get(tid, -1), s.metadata.event_timestamp_ms)
        live = max(newest, key=lambda tid: newest[tid])
        if len(newest) > 1:
            log.warning("topic %s has segments under %d topic ids; reading the newest, %s",
                        topic, len(newest), live)
        out: dict[int, list[Segment]] = {}
        for s in segments:
            if s.metadata.topic_id_partition.topic_id == live:
                out.setdefault(s.metadata.topic_id_partition.partition, []).append(s)
        return out

    def _read_segment(self, key: SegmentObjectKey) -> Segment:
        try:
            manifest = self.rsm.read_manifest(key)
        except Exception as exc:
            raise CatalogError(f"cannot read manifest {key.key}: {exc}") from None
        return segment_from_manifest(key, manifest)


def build_lineage(segments: Sequence[Segment]) -> list[tuple[int, int]]:
    """The log's ``(epoch, start offset)`` history as the segments show it, the highest epoch winning
    (see the module docstring). Increasing in both epoch and offset."""
    starts: dict[int, int] = {}
    for s in segments:
        for epoch, first, _last in segment_epoch_bounds(s.metadata):
            starts[epoch] = min(starts.get(epoch, first), first)
    lineage: list[tuple[int, int]] = []
    boundary: int | None = None
    for epoch in sorted(starts, reverse=True):
        if boundary is None or starts[epoch] < boundary:
            lineage.append((epoch, starts[epoch]))
            boundary = starts[epoch]
    return lineage[::-1]


def resolve_slices(segments: Sequence[Segment]) -> list[SegmentSlice]:
    """One segment per offset on the winning lineage: ordered, non-overlapping slices. Offsets no
    committed segment holds on the lineage are gaps between slices (the caller decides if that is loss)."""
    lineage = build_lineage(segments)
    owner_end = {epoch: (lineage[i + 1][1] if i + 1 < len(lineage) else None) for i, (epoch, _) in enumerate(lineage)}
    owner_start = dict(lineage)
    # (from, to exclusive, segment) pieces held under the lineage's epoch
    pieces: list[tuple[int, int, Segment]] = []
    for s in segments:
        for epoch, first, last in segment_epoch_bounds(s.metadata):
            if epoch not in owner_start:
                continue
            end = owner_end[epoch]
            lo, hi = max(first, owner_start[epoch]), last + 1 if end is None else min(last + 1, end)
            if lo < hi:
                pieces.append((lo, hi, s))
    # Earliest first; among copies starting together the one reaching furthest, then the newest upload.
    pieces.sort(key=lambda p: (p[0], -p[1], -p[2].metadata.event_timestamp_ms))
    out: list[SegmentSlice] = []
    cursor = -1
    for lo, hi, s in pieces:
        if hi <= cursor:
            continue
        lo = max(lo, cursor)
        if out and out[-1].segment is s and out[-1].to_offset == lo:
            out[-1] = SegmentSlice(s, out[-1].from_offset, hi)  # the next epoch of the same segment
        else:
            out.append(SegmentSlice(s, lo, hi))
        cursor = hi
    return out
