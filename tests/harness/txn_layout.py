"""Partitions with transactions laid out by hand, tiered to a LocalTieredStorage folder.

    p = TxnPartition(UnifiedLog(...))
    p.txn(1); p.plain(); p.end(1, ABORT); p.roll()     # one transactional batch, a record batch, a marker
    rlm = tier(p.plog, tmp_path / "remote", tmp_path / "logs")   # every rolled segment copied, deleted locally

Markers are appended as the transaction coordinator appends them (AppendOrigin.COORDINATOR), and the
partition's own code writes the txn indexes, producer snapshots and LSO; ``aborted`` lists what Kafka
says each aborted transaction covers, from what was appended.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from helpers import Logs

from tieredlog.log.config import LogConfig
from tieredlog.log.types import AppendOrigin
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.record import build_batch, build_control_batch
from tieredlog.rlm.config import RemoteLogManagerConfig
from tieredlog.rlm.manager import RemoteLogManager
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pool import TaskContext
from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager
from tieredlog.rsm.local import LocalTieredStorage

TS = 1_700_000_000_000
ABORT, COMMIT = 0, 1


def tiered_log(log_dir: Path, topic: str = "txn") -> UnifiedLog:
    """Partition 0 of a tiered topic whose segments roll only when told to."""
    cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=64, remote_storage_enable=True, retention_ms=-1,
                    local_retention_bytes=1, file_delete_delay_ms=0, message_timestamp_after_max_ms=1 << 62,
                    message_timestamp_before_max_ms=1 << 62)
    return UnifiedLog(log_dir / f"{topic}-0", cfg, topic_id=uuid.uuid4())


class TxnPartition:
    def __init__(self, plog: UnifiedLog) -> None:
        self.plog = plog
        self.seq: dict[int, int] = {}
        self.first: dict[int, int] = {}
        self.aborted: list[tuple[int, int, int]] = []  # (producer id, first offset, marker offset)
        self.segments: list[tuple[int, int]] = []  # [start, end] of the rolled segments
        self.values: dict[int, bytes] = {}  # offset -> value of every data record
        self.kept: set[int] = set()  # offsets of the records a read_committed reader gets

    def txn(self, pid: int, n: int = 2) -> None:
        """A transactional batch of ``n`` records (begins the producer's transaction if none is open)."""
        seq = self.seq.get(pid, 0)
        recs = [(b"p%d" % pid, b"txn-%d-%d" % (pid, seq + i), [], TS) for i in range(n)]
        info = self.plog.append_as_leader(
            build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True), 0)
        self.seq[pid] = seq + n
        self.first.setdefault(pid, info.first_offset)
        self.values.update({info.first_offset + i: r[1] for i, r in enumerate(recs)})

    def plain(self, n: int = 2) -> None:
        recs = [(b"k", b"plain-%d" % (self.plog.log_end_offset + i), [], TS) for i in range(n)]
        info = self.plog.append_as_leader(build_batch(recs), 0)
        self.values.update({info.first_offset + i: r[1] for i, r in enumerate(recs)})
        self.kept.update(range(info.first_offset, info.first_offset + n))

    def end(self, pid: int, control: int) -> None:
        """The coordinator's marker ending ``pid``'s transaction; the high watermark follows."""
        info = self.plog.append_as_leader(build_control_batch(control, pid, 0, 0, TS), 0,
                                          origin=AppendOrigin.COORDINATOR)
        first = self.first.pop(pid)
        if control == ABORT:
            self.aborted.append((pid, first, info.first_offset))
        else:
            self.kept.update(o for o, v in self.values.items() if first <= o and v.startswith(b"txn-%d-" % pid))
        self.plog.update_high_watermark(self.plog.log_end_offset)

    def roll(self) -> None:
        self.segments.append((self.plog.active_segment.base_offset, self.plog.log_end_offset - 1))
        self.plog.roll()

    def expected(self, start: int, end_exclusive: int) -> set[tuple[int, int, int]]:
        """Kafka's answer for returned batches ``[start, end_exclusive)``: every aborted transaction
        whose range [first offset, marker] overlaps them."""
        return {t for t in self.aborted if t[2] >= start and t[1] < end_exclusive}


def tier(plog: UnifiedLog, remote_dir: Path, log_dir: Path, **rlm_config: int) -> RemoteLogManager:
    """An RLM over ``plog`` and a LocalTieredStorage in ``remote_dir`` that copied every rolled segment,
    which local retention then deleted. The caller shuts it down."""
    plog.update_high_watermark(plog.log_end_offset)
    rsm = LocalTieredStorage(remote_dir)
    rsm.configure({"broker.id": 0})
    cfg = RemoteLogManagerConfig(log_dirs=(str(log_dir),), **{"reader_threads": 2, "reader_max_pending_tasks": 32,
                                                               **rlm_config})
    rlm = RemoteLogManager(cfg, Logs(plog), rsm, InMemoryRemoteLogMetadataManager())
    rlm.start()
    rlm.copy_task(PartitionState(plog.topic_partition, rlm._tip(plog.topic_partition, plog))).run(TaskContext())
    plog.delete_old_segments()
    return rlm
