"""Where a tiered partition's records are, for `topics describe`: the remote and the local offset range
and the bytes in each, from what any Kafka broker answers.

- Offsets: ListOffsets of the leader with EARLIEST (-2, the log start), EARLIEST_LOCAL (-4, the first
  offset still on the leader's disk), LATEST_TIERED (-5, the last offset copied to the remote tier,
  KIP-1005) and LATEST (-1, the high watermark).
- Local size: the leader's DescribeLogDirs.
- Remote size: the segments whose copy finished, read from ``__remote_log_metadata`` (fetched as a
  consumer from each partition's leader, only the metadata partitions the described partitions map to)
  and replayed with the RLMM's own serde and state machine, as `tieredlog remote` does from a log dir.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from kio.schema.errors import ErrorCode

from tieredlog.log.types import TopicPartition
from tieredlog.records.record import iter_batches_records
from tieredlog.rlmm import serde
from tieredlog.rlmm.cache import RemotePartitionMetadataStore
from tieredlog.rlmm.partitioner import metadata_partition
from tieredlog.rlmm.topic import METADATA_TOPIC
from tieredlog.rsm.api import RemoteLogSegmentState, TopicIdPartition
from tieredlog.tools.partition_admin import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    READ_UNCOMMITTED,
    PartitionAdmin,
)
from tieredlog.tools.remote import apply_event
from tieredlog.tools.transaction_admin import AdminApiError

FETCH_WAIT_MS = 0


@dataclass(frozen=True, slots=True)
class PartitionTiers:
    log_start: int
    local_start: int
    latest_tiered: int  # -1: nothing in the remote tier
    end: int  # the high watermark
    local_bytes: int | None  # None: the leader's log dirs did not say
    remote_bytes: int | None  # None: __remote_log_metadata could not be read

    def columns(self) -> str:
        remote = f"{self.log_start}-{self.latest_tiered}" if self.latest_tiered >= self.log_start >= 0 else "none"
        local = f"{self.local_start}-{self.end - 1}" if self.end > self.local_start >= 0 else "none"
        return (f"\tRemoteOffsets: {remote}\tRemoteSize: {_size(self.remote_bytes)}"
                f"\tLocalOffsets: {local}\tLocalSize: {_size(self.local_bytes)}")


def _size(n: int | None) -> str:
    return "unknown" if n is None else str(n)


def _local_sizes(admin: PartitionAdmin, leaders: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    by_node: dict[int, dict[str, list[int]]] = {}
    for tp, node in leaders.items():
        by_node.setdefault(node, {}).setdefault(tp.topic, []).append(tp.partition)
    out: dict[TopicPartition, int] = {}
    for node, topics in by_node.items():
        answer = admin.describe_log_dirs(node, topics)
        for d in answer.results:
            if d.error_code != ErrorCode.none:
                continue
            for t in d.topics:
                for p in t.partitions:
                    if not p.is_future_key:
                        tp = TopicPartition(t.name, p.partition_index)
                        out[tp] = out.get(tp, 0) + int(p.partition_size)
    return out


def read_metadata(admin: PartitionAdmin, partitions: Iterable[int], store: RemotePartitionMetadataStore) -> None:
    """Replay the given ``__remote_log_metadata`` partitions into ``store``, from their start to their
    high watermark."""
    wanted = [TopicPartition(METADATA_TOPIC, p) for p in sorted(set(partitions))]
    if not wanted:
        return
    starts = admin.offsets_for({tp: EARLIEST for tp in wanted})
    ends = admin.offsets_for({tp: LATEST for tp in wanted})
    positions = {tp: starts[tp][0] for tp in wanted if starts[tp][0] < ends[tp][0]}
    while positions:
        for node, mine in sorted(_group(admin.current_leaders(positions), positions).items()):
            answer = admin.fetch(node, mine, max_wait_ms=FETCH_WAIT_MS, isolation_level=READ_UNCOMMITTED)
            for tp, p in answer.items():
                if p.error_code != ErrorCode.none:
                    raise AdminApiError(p.error_code, f"Fetch of {tp}", retriable=False)
                for header, records in iter_batches_records(p.records, stop_at_partial=True):
                    for r in records:
                        if r.offset >= positions[tp] and r.value is not None:
                            try:
                                apply_event(store, serde.deserialize(bytes(r.value)))
                            except serde.MetadataSerdeError:
                                pass  # the broker skips an event it cannot read too
                    positions[tp] = max(positions[tp], header.next_offset)
                if positions[tp] >= ends[tp][0] or positions[tp] == mine[tp]:
                    del positions[tp]  # read to the end (or no progress: nothing more to read)


def _group(leaders: dict[TopicPartition, int], positions: dict[TopicPartition, int]) -> dict[int, dict[TopicPartition, int]]:
    out: dict[int, dict[TopicPartition, int]] = {}
    for tp, node in leaders.items():
        out.setdefault(node, {})[tp] = positions[tp]
    return out


class TierReader:
    """`topics describe`'s tier columns, one partition list at a time; each metadata partition is read
    once per run however many topics map to it."""

    def __init__(self, admin: PartitionAdmin) -> None:
        self.admin = admin
        self._store = RemotePartitionMetadataStore()
        self._read: set[int] = set()

    def remote_sizes(self, partitions: list[TopicIdPartition], metadata_partitions: int) -> dict[TopicPartition, int]:
        """Bytes of each partition's segments whose copy to the remote tier finished."""
        needed = {metadata_partition(tp, metadata_partitions) for tp in partitions}
        read_metadata(self.admin, needed - self._read, self._store)
        self._read |= needed
        out = {}
        for tp in partitions:
            cache = self._store.caches.get(tp)
            segments = cache.list_remote_log_segments() if cache is not None else []
            out[TopicPartition(tp.topic, tp.partition)] = sum(
                md.segment_size_in_bytes for md in segments if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
        return out

    def __call__(self, partitions: list[TopicIdPartition]) -> dict[TopicPartition, PartitionTiers]:
        """The tier columns of each partition (all of them led by a live broker)."""
        admin = self.admin
        tps = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        offsets = {ts: admin.offsets_for({tp: ts for tp in tps})
                   for ts in (EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST)}
        local = _local_sizes(admin, admin.current_leaders(tps))
        meta = admin.cluster([METADATA_TOPIC]).topics.get(METADATA_TOPIC)
        remote: dict[TopicPartition, int] | None = None
        if meta is not None and meta.error_code == ErrorCode.none and meta.partitions:
            try:
                remote = self.remote_sizes(partitions, len(meta.partitions))
            except AdminApiError:
                remote = None
        return {tp: PartitionTiers(offsets[EARLIEST][tp][0], offsets[EARLIEST_LOCAL][tp][0],
                                   offsets[LATEST_TIERED][tp][0], offsets[LATEST][tp][0], local.get(tp),
                                   None if remote is None else remote.get(tp, 0))
                for tp in tps}
