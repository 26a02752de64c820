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
from tieredlog.records.errors import RecordError
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
        end = plog.log_end_offset
        skipped: list[tuple[int, RecordError]] = []  # (offset near which, why)
        stopped: tuple[int, Exception] | None = None
        while offset < end:
            try:
                info = plog.read(offset, _READ_CHUNK, FetchIsolation.LOG_END, min_one_message=True)
                data = info.records if isinstance(info.records, (bytes, bytearray, memoryview)) else info.records.read_bytes()
            except (OSError, errors.KafkaError, RecordError) as exc:
                # the groups of this partition load up to here; the broker still starts
                stopped = (offset, exc)
                break
            if not data:
                break
            last = offset - 1

            def corrupt(pos: int, header: Any, exc: RecordError) -> None:
                # A bad batch is skipped (Kafka's load would stop there and lose every later commit);
                # its own offsets move the cursor only when they are plausible for this log.
                nonlocal last
                skipped.append((max(offset, last + 1), exc))
                if header is not None and offset <= header.base_offset <= header.last_offset < end:
                    last = max(last, header.last_offset)

            for header, records in iter_batches_records(data, stop_at_partial=True, on_corrupt=corrupt):
                last = header.last_offset
                if header.is_control:
                    continue
                for record in records:
                    if record.offset >= offset and record.key is not None:
                        yield bytes(record.key), None if record.value is None else bytes(record.value)
            if last < offset:
                if skipped:
                    stopped = skipped[-1]
                break
            offset = last + 1
        if skipped or stopped:
            # one line per partition, however much of it is damaged
            parts = []
            if skipped:
                parts.append(f"skipped {len(skipped)} corrupt batch(es), the first near offset {skipped[0][0]}: {skipped[0][1]}")
            if stopped:
                parts.append(f"stopped at offset {stopped[0]} of {end}: {stopped[1]}")
            log.error("%s-%d: loading %s", OFFSETS_TOPIC, partition, "; ".join(parts))
