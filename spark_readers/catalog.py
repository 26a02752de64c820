"""The remote tier as a broker-less reader sees it: which segments of a topic are committed, and which
copy of each offset belongs to the log.

Where the metadata comes from (a :class:`SegmentListing`): by default the segment **manifests**
(``<stem>.manifest``, see ``docs/tiered-storage.md``, :class:`ManifestListing`). The manifest is written
last by every RemoteStorageManager (S3, fsspec, LocalTieredStorage), so its presence is exactly
"COPY_SEGMENT_FINISHED" for the objects beside it, and it carries what a reader needs of each segment
(offsets, leader epochs, sizes, max timestamp); the log's lineage comes from one leader-epoch
checkpoint per partition (below). A deleted segment loses its manifest first, so a listing never shows
a half-deleted segment as committed. With ``metadataSource=brokers`` the segments come from
``__remote_log_metadata`` instead, read through the brokers
(:class:`spark_readers.remote_log_metadata.BrokerMetadataListing`), and are resolved the same way.

Overlapping uploads (the same offsets copied twice after a failover, a retried copy with a new segment
id, or copies of different histories after unclean elections, KIP-405 scenarios 3 to 5) are resolved by
the log's **leader-epoch lineage**, as the broker resolves them with its leader-epoch cache: one leader
wrote each (epoch, offset), once (KIP-101), so a copy holds the log's record at ``o`` exactly when it
puts ``o`` in the epoch the lineage gives ``o``.

The lineage is the leader-epoch checkpoint (``<stem>.leader_epoch_checkpoint``) uploaded with the
partition's **authoritative segment**: the one with the greatest (highest epoch in its epoch map, end
offset, upload time). Every copy carries the uploading leader's whole lineage up to the segment's end,
and no committed segment was written in a later epoch, so that checkpoint is the current history: a
lineage rebuilt from the segments' own maps cannot tell an epoch that was abandoned (a leader that lost
an unclean election, scenario 5) from one that was kept. Reading it costs one tiny GET per partition.

With that lineage each epoch owns ``[its start, start of the next epoch)``, the last one up to the
authoritative segment's end, which is the end of the tiered history (any copy reaching further was
written by another history). Offsets below the lineage's first start were below that leader's log start
offset (the broker cuts its cache there on retention and DeleteRecords) and are not read. Each offset is
read from a segment that holds it under the lineage's epoch, so a segment is cut where it leaves the
lineage; when several copies hold an offset, the one reaching furthest (then the newest upload) wins, so
reads stay sequential.

The partition's leader publishes its log start offset beside the segments
(:meth:`~tieredlog.rsm.listing.ListableRemoteStorageManager.write_log_start_offset`) when it moves past
a remote segment's start (DeleteRecords inside a segment, or before retention deletes the segments
below it); the slices start there, so records Kafka no longer has are never read.

When the checkpoint is missing, malformed, or disagrees with its own segment's epoch map, the lineage is
rebuilt from the segments' epoch maps instead (one warning): highest epoch first, each lower epoch owning
``[its start, start of the next kept epoch)`` and dropped when it starts at or after that point. That is
right after one unclean election, not after two. A store that fails while the checkpoint is read fails
the query instead, as an unreadable manifest does: guessing then could return another history's records.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from tieredlog.formats.checkpoints import CorruptCheckpointError, parse_leader_epoch_checkpoint
from tieredlog.formats.lineage import filtered_epochs, segment_epoch_bounds, segment_leader_epochs
from tieredlog.formats.manifest import ManifestError, manifest_fields
from tieredlog.kafka_uuid import uuid_to_kafka_str
from tieredlog.rsm.api import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from tieredlog.rsm.keys import INDEX_SUFFIXES, LOG_SUFFIX, MANIFEST_SUFFIX, SegmentObjectKey
from tieredlog.rsm.listing import ListableRemoteStorageManager

log = logging.getLogger(__name__)

# Manifests are ~1 KiB GETs: latency bound, so many at once.
MANIFEST_READERS = 16
# A leader-epoch checkpoint is one short line per epoch; anything this large is not one, and is not read whole.
MAX_CHECKPOINT_BYTES = 1024 * 1024


class CatalogError(Exception):
    """The remote tier cannot answer (missing topic, unreadable manifest). One line, no secrets."""


class NothingTiered(CatalogError):
    """The topic has nothing in the remote tier (not tiered yet, or unknown): the brokers may have it all."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One committed remote segment, from its manifest or from ``__remote_log_metadata``."""

    metadata: RemoteLogSegmentMetadata
    log_size: int
    # The manifest's object key, to name the segment in errors; "" when it was listed without one.
    manifest_key: str

    @property
    def stem(self) -> str:
        """What names the segment's objects in messages: its manifest's key without the suffix, or
        ``<topic>-<partition>/<segment id>`` for a segment listed without a manifest (its RSM's layout
        is the RSM's own)."""
        if self.manifest_key:
            return self.manifest_key.removesuffix(MANIFEST_SUFFIX).rstrip(".")
        tp = self.metadata.topic_id_partition
        return f"{tp.topic}-{tp.partition}/{uuid_to_kafka_str(self.metadata.remote_log_segment_id.id)}"

    def object_name(self, suffix: str) -> str:
        return f"{self.stem}.{suffix}"

    @property
    def start_offset(self) -> int:
        return self.metadata.start_offset

    @property
    def end_offset(self) -> int:
        """Inclusive, as in RemoteLogSegmentMetadata."""
        return self.metadata.end_offset


@dataclass(frozen=True, slots=True)
class Lineage:
    """The log's ``(epoch, start offset)`` history, increasing in both, and where the tiered part of it
    ends (exclusive; ``None``: not known, the last epoch reaches as far as any copy does)."""

    epochs: list[tuple[int, int]]
    end: int | None


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """Offsets ``[from_offset, to_offset)`` of the log, read from ``segment``."""

    segment: Segment
    from_offset: int
    to_offset: int


def segment_from_manifest(key: SegmentObjectKey, manifest: Mapping[str, Any]) -> Segment:
    """The manifest checked against its own key: a manifest that names another segment is not trusted."""
    try:
        m = manifest_fields(manifest)
        if LOG_SUFFIX not in m.file_sizes:
            raise KeyError(LOG_SUFFIX)
        # the segment's own size, not the stored object's: a plugin may store it chunked or encrypted,
        # and fetch_log_segment takes positions in the segment
        log_size = m.segment_size_in_bytes
    except (ManifestError, KeyError) as exc:
        raise CatalogError(f"manifest {key.key} is malformed: {exc}") from None
    if (m.topic, m.partition, m.start_offset, m.segment_id, m.topic_id) != (
            key.topic, key.partition, key.start_offset, key.segment_id, key.topic_id):
        raise CatalogError(f"manifest {key.key} describes another segment")
    try:
        metadata = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(TopicIdPartition(m.topic_id, m.topic, m.partition), m.segment_id),
            start_offset=m.start_offset,
            end_offset=m.end_offset,
            max_timestamp_ms=m.max_timestamp_ms,
            broker_id=m.broker_id,
            event_timestamp_ms=m.event_timestamp_ms,
            segment_size_in_bytes=m.segment_size_in_bytes,
            segment_leader_epochs=dict(m.segment_leader_epochs),
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            tx_index_present=m.tx_index_present,
        )
    except ValueError as exc:
        raise CatalogError(f"manifest {key.key} is malformed: {type(exc).__name__}: {exc}") from None
    return Segment(metadata, log_size, key.key)


class SegmentListing(Protocol):
    """Where a reader finds the committed segments: :class:`ManifestListing` (the bucket) or
    :class:`spark_readers.remote_log_metadata.BrokerMetadataListing` (``__remote_log_metadata``)."""

    def topics(self) -> list[str]:
        """Every topic the listing knows."""
        ...

    def committed_segments(self, topic: str) -> dict[int, list[Segment]]:
        """Partition -> its committed segments (any order) under the topic's live topic id; NothingTiered
        when the topic has none, CatalogError when the listing cannot answer."""
        ...

    def log_start_offset(self, tp: TopicIdPartition) -> int | None:
        """The log start offset published to the tier; None when there is none to go by."""
        ...


class ManifestListing:
    """Committed segments from the manifests under the RSM's prefix."""

    def __init__(self, rsm: ListableRemoteStorageManager) -> None:
        self.rsm = rsm

    def topics(self) -> list[str]:
        """Every topic with at least one committed segment (lists the whole prefix)."""
        return sorted({k.topic for k in self.rsm.list_segment_objects() if k.suffix == MANIFEST_SUFFIX})

    def committed_segments(self, topic: str) -> dict[int, list[Segment]]:
        """A topic recreated under the same name has several topic ids in the bucket; the one with the
        newest upload is the live one."""
        try:
            objects = self.rsm.list_topic_segment_objects(topic)
        except RemoteStorageException as exc:
            raise CatalogError(f"cannot list the segments of topic {topic!r} in the remote tier: {exc}") from None
        manifests = [k for k in objects if k.suffix == MANIFEST_SUFFIX]
        if not objects:
            raise NothingTiered(f"topic {topic!r} has no committed segments in the remote tier")
        if not manifests:
            raise CatalogError(f"topic {topic!r} has segment objects but no manifests in the remote tier, so "
                               "none of its segments is known to be committed (metadataSource=brokers lists them "
                               "from __remote_log_metadata)")
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

    def log_start_offset(self, tp: TopicIdPartition) -> int | None:
        try:
            return self.rsm.read_log_start_offset(tp)
        except Exception as exc:
            # as for the checkpoint: an outage now must not turn into rows Kafka no longer has
            raise CatalogError(f"cannot read the log start offset of {tp}: {exc}") from None

    def _read_segment(self, key: SegmentObjectKey) -> Segment:
        try:
            manifest = self.rsm.read_manifest(key)
        except Exception as exc:
            raise CatalogError(f"cannot read manifest {key.key}: {exc}") from None
        return segment_from_manifest(key, manifest)


class Catalog:
    """Committed segments of one topic's partitions, from a :class:`SegmentListing` (default: the
    manifests), resolved to one copy per offset."""

    def __init__(self, rsm: RemoteStorageManager, listing: SegmentListing | None = None) -> None:
        self.rsm = rsm
        if listing is None:
            if not isinstance(rsm, ListableRemoteStorageManager):
                raise CatalogError(f"the remote storage manager {type(rsm).__name__} cannot list segments "
                                   "(tieredlog.rsm.ListableRemoteStorageManager): metadataSource=brokers lists "
                                   "them from __remote_log_metadata")
            listing = ManifestListing(rsm)
        self.listing = listing

    def topics(self) -> list[str]:
        return self.listing.topics()

    def committed_segments(self, topic: str) -> dict[int, list[Segment]]:
        """Partition -> its committed segments (any order); NothingTiered when the topic has none."""
        return self.listing.committed_segments(topic)

    def resolve(self, segments: Sequence[Segment]) -> list[SegmentSlice]:
        """One partition's segments resolved to slices of its log (see the module docstring), from the
        log start offset its leader published on."""
        slices = resolve_slices(segments, self.lineage(segments))
        log_start = self.log_start_offset(segments[0].metadata.topic_id_partition) if segments else None
        return slices if log_start is None else above_log_start(slices, log_start)

    def log_start_offset(self, tp: TopicIdPartition) -> int | None:
        """The log start offset the partition's leader published to the tier, when it moved past a
        segment's start (DeleteRecords, retention); None when it published none."""
        return self.listing.log_start_offset(tp)

    def resolve_partitions(self, by_partition: Mapping[int, Sequence[Segment]]) -> dict[int, list[SegmentSlice]]:
        """:meth:`resolve` for every partition; the checkpoint GETs are latency bound, so many at once."""
        partitions = sorted(by_partition)
        if not partitions:
            return {}
        with ThreadPoolExecutor(min(MANIFEST_READERS, len(partitions))) as pool:
            return dict(zip(partitions, pool.map(lambda p: self.resolve(by_partition[p]), partitions)))

    def lineage(self, segments: Sequence[Segment]) -> Lineage:
        """The lineage from the authoritative segment's leader-epoch checkpoint; rebuilt from the
        segments' epoch maps (with a warning) when that checkpoint cannot be trusted."""
        auth = authoritative_segment(segments)
        try:
            return lineage_from_checkpoint(auth, self._read_checkpoint(auth))
        except (RemoteResourceNotFoundException, CorruptCheckpointError) as exc:
            log.warning("%s: cannot use its leader-epoch checkpoint (%s); resolving overlapping segments from "
                        "their own epoch maps, which cannot tell an abandoned epoch from a kept one",
                        auth.stem, str(exc)[:300])
            return Lineage(build_lineage(segments), None)

    def _read_checkpoint(self, segment: Segment) -> bytes:
        source = checkpoint_key(segment)
        try:
            with self.rsm.fetch_index(segment.metadata, IndexType.LEADER_EPOCH) as stream:
                data = stream.read(MAX_CHECKPOINT_BYTES + 1)
        except RemoteResourceNotFoundException:
            raise
        except Exception as exc:
            # The store answered the manifests a moment ago: a failure now is an outage, not a property
            # of the data, and guessing the lineage could return another history's records.
            raise CatalogError(f"cannot read {source}: {exc}") from None
        if len(data) > MAX_CHECKPOINT_BYTES:
            raise CorruptCheckpointError(source, None, f"larger than {MAX_CHECKPOINT_BYTES} bytes")
        return data


def above_log_start(slices: Sequence[SegmentSlice], log_start: int) -> list[SegmentSlice]:
    """``slices`` without the offsets below ``log_start``: Kafka no longer has them, though their
    segment may wait in the tier until retention deletes it whole."""
    return [s if s.from_offset >= log_start else SegmentSlice(s.segment, log_start, s.to_offset)
            for s in slices if s.to_offset > log_start]


def checkpoint_key(segment: Segment) -> str:
    """The key of the leader-epoch checkpoint uploaded with ``segment``, to name it in messages."""
    return segment.object_name(INDEX_SUFFIXES[IndexType.LEADER_EPOCH])


def authoritative_segment(segments: Sequence[Segment]) -> Segment:
    """The newest segment on the highest epoch: its leader-epoch checkpoint is the lineage."""
    return max(segments, key=lambda s: (max(s.metadata.segment_leader_epochs, default=-1), s.end_offset,
                                        s.metadata.event_timestamp_ms))


def lineage_from_checkpoint(segment: Segment, data: bytes) -> Lineage:
    """The lineage a segment's leader-epoch checkpoint gives, checked against the segment's own epoch
    map: a checkpoint that does not describe the segment it was uploaded with is not trusted."""
    source = checkpoint_key(segment)
    md = segment.metadata
    # The copier ships the entries below the segment's next offset; later ones would describe records
    # no tiered copy is known to hold on this history.
    entries = [(e, o) for e, o in parse_leader_epoch_checkpoint(data, source) if o <= md.end_offset]
    if not entries:
        raise CorruptCheckpointError(source, None, "no epoch starts at or below the segment's end")
    if any(e < 0 or o < 0 for e, o in entries) or any(
            e2 <= e1 or o2 < o1 for (e1, o1), (e2, o2) in zip(entries, entries[1:])):
        raise CorruptCheckpointError(source, None, "epochs and start offsets do not increase")
    expected = segment_leader_epochs(entries, md.start_offset, md.end_offset + 1)
    if expected != md.segment_leader_epochs:
        raise CorruptCheckpointError(source, None, f"gives the segment epochs {expected}, its manifest "
                                     f"{dict(md.segment_leader_epochs)}")
    return Lineage(filtered_epochs(entries), md.end_offset + 1)


def build_lineage(segments: Sequence[Segment]) -> list[tuple[int, int]]:
    """The fallback lineage, rebuilt from the segments' own epoch maps with the highest epoch winning
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


def resolve_slices(segments: Sequence[Segment], lineage: Lineage | None = None) -> list[SegmentSlice]:
    """One segment per offset on ``lineage`` (default: :func:`build_lineage`'s): ordered, non-overlapping
    slices. Offsets no committed segment holds on the lineage are gaps between slices (the caller
    decides if that is loss)."""
    if lineage is None:
        lineage = Lineage(build_lineage(segments), None)
    epochs = lineage.epochs
    owner_end = {epoch: (epochs[i + 1][1] if i + 1 < len(epochs) else lineage.end)
                 for i, (epoch, _) in enumerate(epochs)}
    owner_start = dict(epochs)
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
