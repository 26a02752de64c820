"""`__consumer_offsets` as the coordinator's durable store: real record batches in real partition logs.

Each group lives in partition abs(hashCode(group)) % offsets.topic.num.partitions, as in Kafka, so a
group's records stay in order. Appends go through UnifiedLog.append_as_leader like any produce; on
start-up every partition is read back from its log start to rebuild the coordinator's state.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

from tieredlog import errors
from tieredlog.coordinator.schema import partition_for
from tieredlog.log.types import FetchIsolation
from tieredlog.records.errors import CorruptRecordError
from tieredlog.records.record import build_batch, iter_batches_records

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
LEADER_EPOCH = 0  # one broker leads every partition forever
_READ_CHUNK = 1 << 20


class LogGroupStore:
    def __init__(self, get_log: Callable[[int], Any], num_partitions: int):
        """`get_log(partition)` returns the UnifiedLog of that `__consumer_offsets` partition."""
        self._get_log = get_log
        self.num_partitions = num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]], timestamp_ms: int) -> None:
        if not records:
            return
        plog = self._get_log(self.partition_for(group_id))
        if plog is None:
            raise errors.CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} partition for {group_id} has no log")
        batch = bytearray(build_batch([(key, value, [], timestamp_ms) for key, value in records]))
        plog.append_as_leader(batch, LEADER_EPOCH)
        # A single replica is the whole ISR: what is appended is committed.
        plog.update_high_watermark(plog.log_end_offset)

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        for partition in range(self.num_partitions):
            plog = self._get_log(partition)
            if plog is not None:
                yield from self._replay_partition(partition, plog)

    def _replay_partition(self, partition: int, plog: Any) -> Iterator[tuple[bytes, bytes | None]]:
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            info = plog.read(offset, _READ_CHUNK, FetchIsolation.LOG_END, min_one_message=True)
            data = info.records if isinstance(info.records, (bytes, bytearray, memoryview)) else info.records.read_bytes()
            if not data:
                break
            last = offset - 1
            try:
                for header, records in iter_batches_records(data, stop_at_partial=True):
                    last = header.last_offset
                    if header.is_control:
                        continue
                    for record in records:
                        if record.offset >= offset and record.key is not None:
                            yield bytes(record.key), None if record.value is None else bytes(record.value)
            except CorruptRecordError as exc:
                log.error("%s-%d: stopping load at a corrupt batch near offset %d: %s",
                          OFFSETS_TOPIC, partition, offset, exc)
                return
            if last < offset:
                break
            offset = last + 1
