"""In-memory remote log metadata: Kafka's RemoteLogMetadataCache, RemoteLogLeaderEpochState and
RemotePartitionMetadataStore, with the same state rules.

Which segments each query sees (Kafka's table):

    query                                  STARTED  FINISHED  DELETE_STARTED  DELETE_FINISHED
    remote_log_segment_metadata(epoch, o)    no       yes         no              no
    list_remote_log_segments([epoch])        yes      yes         yes             no

Invalid state transitions are logged and the event dropped, never raised: the same record can be
replayed from the metadata topic any number of times and every broker must end in the same state.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable

from tieredlog.rsm.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

S = RemoteLogSegmentState


def is_valid_segment_transition(old: RemoteLogSegmentState | None, new: RemoteLogSegmentState) -> bool:
    if old is None:
        return new == S.COPY_SEGMENT_STARTED
    return old.is_valid_transition(new)


_PARTITION_FORWARD = {
    RemotePartitionDeleteState.DELETE_PARTITION_MARKED: RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
    RemotePartitionDeleteState.DELETE_PARTITION_STARTED: RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
}


def is_valid_partition_delete_transition(
    old: RemotePartitionDeleteState | None, new: RemotePartitionDeleteState
) -> bool:
    if old is None:
        return new == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    return old == new or _PARTITION_FORWARD.get(old) == new


def epoch_end_offset(md: RemoteLogSegmentMetadata, epoch: int) -> int:
    """Last offset of ``epoch`` inside the segment: the next epoch's start - 1, or the segment end."""
    higher = [e for e in md.segment_leader_epochs if e > epoch]
    if not higher:
        return md.end_offset
    return md.segment_leader_epochs[min(higher)] - 1


@dataclass(slots=True)
class LeaderEpochState:
    """Segments of one leader epoch. ``offset_to_id`` holds FINISHED segments keyed by the epoch's
    start offset inside each segment; ``unreferenced`` the STARTED, DELETE_STARTED and superseded ones."""

    offsets: list[int] = field(default_factory=list)  # sorted keys of offset_to_id
    offset_to_id: dict[int, RemoteLogSegmentId] = field(default_factory=dict)
    unreferenced: set[RemoteLogSegmentId] = field(default_factory=set)
    highest_log_offset: int | None = None

    def floor(self, offset: int) -> RemoteLogSegmentId | None:
        i = bisect.bisect_right(self.offsets, offset)
        return self.offset_to_id[self.offsets[i - 1]] if i else None

    def _put(self, start: int, sid: RemoteLogSegmentId) -> None:
        if start not in self.offset_to_id:
            if not self.offsets or start > self.offsets[-1]:
                self.offsets.append(start)  # the usual case: segments arrive in offset order
            else:
                bisect.insort(self.offsets, start)
        self.offset_to_id[start] = sid

    def _remove(self, start: int) -> None:
        del self.offset_to_id[start]
        i = bisect.bisect_left(self.offsets, start)
        del self.offsets[i]

    def on_copy_started(self, sid: RemoteLogSegmentId) -> None:
        self.unreferenced.add(sid)

    def on_copy_finished(self, start: int, sid: RemoteLogSegmentId, epoch_end: int,
                         end_of: Callable[[RemoteLogSegmentId], int]) -> None:
        """``end_of``: the last offset of this epoch in a mapped segment."""
        # A new leader may re-upload a superset of what the previous leader uploaded: every mapped
        # segment starting at or after this one is superseded and becomes unreferenced (left for
        # retention to delete), so reads go to the newest copy.
        while (
            self.offsets
            and self.offsets[-1] >= start
            and self.highest_log_offset is not None
            and self.highest_log_offset <= epoch_end
        ):
            last = self.offsets[-1]
            self.unreferenced.add(self.offset_to_id[last])
            self._remove(last)
        # A copy covering several mapped segments whole (the remote cleaner's merge of adjacent cleaned
        # segments): each of them is superseded by it, as the one starting with it is below. A segment
        # reaching past this copy's end keeps its entry, so every offset still has exactly one copy.
        i = bisect.bisect_right(self.offsets, start)
        covered = []
        while i < len(self.offsets) and self.offsets[i] <= epoch_end:
            covered.append(self.offsets[i])
            i += 1
        for inner in covered:
            if end_of(self.offset_to_id[inner]) <= epoch_end:
                self.unreferenced.add(self.offset_to_id[inner])
                self._remove(inner)
        replaced = self.offset_to_id.get(start)
        if replaced is not None and replaced != sid:
            # another copy of the epoch from the same offset (the other side of an unclean election):
            # still listed under the epoch, so retention finds and deletes it (Kafka's oldEntry)
            self.unreferenced.add(replaced)
        self._put(start, sid)
        self.unreferenced.discard(sid)
        if self.highest_log_offset is None or epoch_end > self.highest_log_offset:
            self.highest_log_offset = epoch_end

    def on_delete_started(self, start: int, sid: RemoteLogSegmentId) -> None:
        if self.offset_to_id.get(start) == sid:
            self._remove(start)
        self.unreferenced.add(sid)

    def on_delete_finished(self, sid: RemoteLogSegmentId) -> None:
        self.unreferenced.discard(sid)

    def segment_ids(self) -> list[RemoteLogSegmentId]:
        return [self.offset_to_id[o] for o in self.offsets] + list(self.unreferenced)


class RemoteLogMetadataCache:
    """The remote segments of one user partition. Not thread safe: the owner serialises access."""

    def __init__(self) -> None:
        self.id_to_metadata: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, LeaderEpochState] = {}
        self.initialized = False

    def mark_initialized(self) -> None:
        self.initialized = True

    # -- queries ------------------------------------------------------------------------------

    def remote_log_segment_metadata(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        state = self.epochs.get(leader_epoch)
        if state is None:
            return None
        sid = state.floor(offset)
        if sid is None:
            return None
        md = self.id_to_metadata[sid]
        return md if offset <= epoch_end_offset(md, leader_epoch) else None

    def next_segment_with_txn_index(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """KIP-1058: the first FINISHED segment of ``leader_epoch`` whose slice ends at or after
        ``offset`` and whose transaction index is not empty."""
        state = self.epochs.get(leader_epoch)
        if state is None:
            return None
        i = max(0, bisect.bisect_right(state.offsets, offset) - 1)
        for start in state.offsets[i:]:
            md = self.id_to_metadata[state.offset_to_id[start]]
            if md.tx_index_present and epoch_end_offset(md, leader_epoch) >= offset:
                return md
        return None

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        state = self.epochs.get(leader_epoch)
        return None if state is None else state.highest_log_offset

    def list_remote_log_segments(self, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """Segments in STARTED, FINISHED or DELETE_STARTED state, sorted by start offset."""
        if leader_epoch is None:
            mds = list(self.id_to_metadata.values())
        else:
            state = self.epochs.get(leader_epoch)
            if state is None:
                return []
            mds = []
            for sid in state.segment_ids():
                md = self.id_to_metadata.get(sid)
                if md is None:
                    raise RemoteResourceNotFoundException(f"no remote log segment metadata for {sid}")
                mds.append(md)
        mds.sort(key=lambda m: m.start_offset)
        return mds

    def readable_segments(self) -> list[RemoteLogSegmentMetadata]:
        """The segments reads go to, sorted by start offset: COPY_SEGMENT_FINISHED and still mapped under
        at least one of their epochs, so neither being deleted nor superseded there by a newer copy of
        the same offsets (what :meth:`remote_log_segment_metadata` can return). For readers without a
        broker's leader-epoch cache, which resolve the epochs themselves."""
        ids = {sid for state in self.epochs.values() for sid in state.offset_to_id.values()}
        mds = [self.id_to_metadata[sid] for sid in ids]
        mds.sort(key=lambda m: (m.start_offset, m.end_offset))
        return mds

    def segment(self, sid: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        return self.id_to_metadata.get(sid)

    # -- events -------------------------------------------------------------------------------

    def add_copy_in_progress_segment(self, md: RemoteLogSegmentMetadata) -> bool:
        """Add a COPY_SEGMENT_STARTED segment. Returns False when the event is dropped."""
        if md.state != S.COPY_SEGMENT_STARTED:
            raise ValueError(f"a new segment must be {S.COPY_SEGMENT_STARTED.name}, not {md.state.name}")
        sid = md.remote_log_segment_id
        existing = self.id_to_metadata.get(sid)
        if not self._check(existing.state if existing else None, md.state, sid):
            return False
        for epoch in md.segment_leader_epochs:
            self.epochs.setdefault(epoch, LeaderEpochState()).on_copy_started(sid)
        self.id_to_metadata[sid] = md
        return True

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> bool:
        """Apply a state change. Returns False when the event is dropped; raises
        RemoteResourceNotFoundException for an unknown segment once the cache is initialized."""
        sid = update.remote_log_segment_id
        existing = self.id_to_metadata.get(sid)
        if existing is None:
            if not self.initialized:
                # During replay the segment's first record may already be gone by topic retention.
                log.debug("dropping %s: segment %s is unknown", update.state.name, sid)
                return False
            raise RemoteResourceNotFoundException(f"no remote log segment metadata for {sid}")
        if update.state == S.COPY_SEGMENT_STARTED:
            raise ValueError("COPY_SEGMENT_STARTED is added, not updated")
        if not self._check(existing.state, update.state, sid):
            return False
        md = existing.create_with_updates(update)
        if update.state == S.COPY_SEGMENT_FINISHED:
            for epoch, start in md.segment_leader_epochs.items():
                self.epochs.setdefault(epoch, LeaderEpochState()).on_copy_finished(
                    start, sid, epoch_end_offset(md, epoch), self._epoch_end_of(epoch))
            self.id_to_metadata[sid] = md
        elif update.state == S.DELETE_SEGMENT_STARTED:
            for epoch, start in md.segment_leader_epochs.items():
                self.epochs.setdefault(epoch, LeaderEpochState()).on_delete_started(start, sid)
            self.id_to_metadata[sid] = md
        else:  # DELETE_SEGMENT_FINISHED: the segment is gone for good
            for epoch in md.segment_leader_epochs:
                self.epochs.setdefault(epoch, LeaderEpochState()).on_delete_finished(sid)
            del self.id_to_metadata[sid]
        return True

    def _epoch_end_of(self, epoch: int) -> Callable[[RemoteLogSegmentId], int]:
        return lambda sid: epoch_end_offset(self.id_to_metadata[sid], epoch)

    @staticmethod
    def _check(old: RemoteLogSegmentState | None, new: RemoteLogSegmentState, sid: RemoteLogSegmentId) -> bool:
        if is_valid_segment_transition(old, new):
            return True
        log.error("segment %s cannot go from %s to %s: dropping the event", sid.id,
                  old.name if old else None, new.name)
        return False


class RemotePartitionMetadataStore:
    """The caches of every user partition whose metadata this broker has read, plus their partition
    delete states. Not thread safe: the owner serialises access."""

    def __init__(self) -> None:
        self.caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self.delete_metadata: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    def cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        c = self.caches.get(tp)
        if c is None:
            c = self.caches[tp] = RemoteLogMetadataCache()
        return c

    def partitions(self) -> Iterable[TopicIdPartition]:
        return self.caches.keys()

    def handle_segment_metadata(self, md: RemoteLogSegmentMetadata) -> bool:
        return self.cache(md.topic_id_partition).add_copy_in_progress_segment(md)

    def handle_segment_update(self, update: RemoteLogSegmentMetadataUpdate) -> bool:
        return self.cache(update.topic_id_partition).update_remote_log_segment_metadata(update)

    def apply(self, md: object) -> bool:
        """One decoded ``__remote_log_metadata`` event, to the handler its kind goes to; False when it
        is dropped or of a kind the store does not keep (a snapshot record). Raises as the handlers do."""
        if isinstance(md, RemoteLogSegmentMetadata):
            return self.handle_segment_metadata(md)
        if isinstance(md, RemoteLogSegmentMetadataUpdate):
            return self.handle_segment_update(md)
        if isinstance(md, RemotePartitionDeleteMetadata):
            return self.handle_partition_delete(md)
        return False

    def handle_partition_delete(self, md: RemotePartitionDeleteMetadata) -> bool:
        tp = md.topic_id_partition
        old = self.delete_metadata.get(tp)
        if not is_valid_partition_delete_transition(old.state if old else None, md.state):
            log.error("partition %s cannot go from %s to %s: dropping the event", tp,
                      old.state.name if old else None, md.state.name)
            return False
        if md.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            # The partition's remote data is gone: forget it entirely, as Kafka does.
            self.delete_metadata.pop(tp, None)
            self.caches.pop(tp, None)
        else:
            self.delete_metadata[tp] = md
        return True
