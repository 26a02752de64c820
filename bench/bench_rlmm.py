"""RLMM start-up: a broker with 100,000 remote segments must be ready within 5 s.

Builds the metadata of SEGMENTS segments (COPY_SEGMENT_STARTED then FINISHED, over 100 user
partitions) through the TopicBasedRemoteLogMetadataManager into ``__remote_log_metadata`` on real
partition logs, closes, then times (a) a cold start that replays the whole topic and (b) a start
from the on-disk snapshots. Prints both and their ratio.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tieredlog.log.config import LogConfig
from tieredlog.log.types import TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.rlmm.snapshot import SNAPSHOT_DIR
from tieredlog.rlmm.topic import LogMetadataTopic
from tieredlog.rlmm.topic_based import TopicBasedRemoteLogMetadataManager
from tieredlog.rsm.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

SEGMENTS = int(os.environ.get("BENCH_RLMM_SEGMENTS", "100000"))
USER_PARTITIONS = 100
METADATA_PARTITIONS = 50
TARGET_S = 5.0


class _Logs:
    """The slice of a LogManager the metadata topic needs: partition logs in one folder."""

    def __init__(self, root: Path):
        self.root = root
        self.config = LogConfig()
        self.logs: dict[TopicPartition, UnifiedLog] = {}
        for d in sorted(root.glob("__remote_log_metadata-*")):
            if d.is_dir() and d.name.rsplit("-", 1)[1].isdigit():
                plog = UnifiedLog(d, self.config)
                self.logs[plog.topic_partition] = plog

    def create_topic(self, name: str, num_partitions: int, replication_factor: int, configs: dict) -> int:
        existing = [t for t in self.logs if t.topic == name]
        if existing:
            return len(existing)
        topic_id = uuid.uuid4()
        for p in range(num_partitions):
            t = TopicPartition(name, p)
            self.logs[t] = UnifiedLog(self.root / str(t), self.config, topic_id=topic_id)
        return num_partitions

    def get_log(self, t: TopicPartition):
        return self.logs.get(t)

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()


def _manager(root: Path, snapshots: bool) -> tuple[TopicBasedRemoteLogMetadataManager, _Logs]:
    logs = _Logs(root)
    m = TopicBasedRemoteLogMetadataManager(
        LogMetadataTopic(logs, logs.create_topic),
        {
            "remote.log.metadata.topic.num.partitions": METADATA_PARTITIONS,
            "broker.id": 0,
            "log.dir": str(root),
            "remote.log.metadata.snapshot.enable": str(snapshots).lower(),
            "remote.log.metadata.snapshot.interval.ms": 0,
        },
    )
    return m, logs


def _user_partitions() -> list[TopicIdPartition]:
    ids = [uuid.UUID(int=i + 1) for i in range(USER_PARTITIONS // 10)]
    return [TopicIdPartition(ids[i // 10], f"bench-{i // 10}", i % 10) for i in range(USER_PARTITIONS)]


def _start(root: Path, snapshots: bool, tps: list[TopicIdPartition]) -> tuple[float, int]:
    t0 = time.perf_counter()
    m, logs = _manager(root, snapshots)
    m.on_partition_leadership_changes(tps, [])
    m.wait_until_ready(tps)
    elapsed = time.perf_counter() - t0
    count = sum(len(list(m.list_remote_log_segments(tp))) for tp in tps)
    m._closed.set()  # measure only; do not write snapshots from the cold-start instance
    m._loader.shutdown(wait=True)
    logs.close()
    return elapsed, count


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-rlmm-"))
    try:
        tps = _user_partitions()
        m, logs = _manager(root, snapshots=True)
        m.on_partition_leadership_changes(tps, [])
        m.wait_until_ready(tps)
        per_tp = SEGMENTS // len(tps)
        t0 = time.perf_counter()
        for i in range(per_tp):
            for tp in tps:
                start = i * 1000
                md = RemoteLogSegmentMetadata(
                    RemoteLogSegmentId(tp, uuid.uuid4()), start, start + 999, 1_700_000_000_000 + i, 0,
                    1_700_000_000_000 + i, 1 << 20, {i // 100: start},
                )
                m.add_remote_log_segment_metadata(md)
                m.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, 1_700_000_000_001 + i, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0
                ))
        build = time.perf_counter() - t0
        total = per_tp * len(tps)
        print(f"built {total} segments ({2 * total} metadata records) in {build:.1f} s "
              f"({2 * total / build:.0f} records/s through add+update)")
        t0 = time.perf_counter()
        m.close()
        print(f"close (snapshot of {METADATA_PARTITIONS} partitions) took {time.perf_counter() - t0:.2f} s")
        logs.close()

        cold, n_cold = _start(root, snapshots=False, tps=tps)
        warm, n_warm = _start(root, snapshots=True, tps=tps)
        assert n_cold == n_warm == total, (n_cold, n_warm, total)
        snap_bytes = sum(p.stat().st_size for p in (root / SNAPSHOT_DIR).glob("*.snapshot"))
        print(f"cold start, replaying the whole topic: {cold:.2f} s")
        print(f"start from snapshot ({snap_bytes / 1e6:.1f} MB): {warm:.2f} s "
              f"({'within' if warm <= TARGET_S else 'OVER'} the {TARGET_S:.0f} s target)")
        print(f"ratio cold/snapshot: {cold / warm:.1f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
