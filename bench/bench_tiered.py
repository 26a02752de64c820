"""Tiered storage throughput, in one run:

- catch-up consumer: the same offsets read from local segments (PartitionLog.read), from the remote
  tier through the RemoteLogManager (index cache, ranged fetch, whole batches, read-ahead), and the
  same remote objects read directly as plain files (the floor for LocalTieredStorage);
- RLM copy (metadata + upload of segment and indexes) vs a plain file copy of the same segments.

``TIERED_BENCH_MB`` scales the data (default 1024 MiB).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from tieredlog.log.config import LogConfig
from tieredlog.log.partition_log import PartitionLog
from tieredlog.log.types import TopicPartition
from tieredlog.records.record import build_batch
from tieredlog.rlm import copier
from tieredlog.rlm.config import RemoteLogManagerConfig
from tieredlog.rlm.manager import PartitionState, RemoteLogManager
from tieredlog.rlm.pool import TaskContext
from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager
from tieredlog.rsm.local import LocalTieredStorage

FETCH = 1 << 20


class _Logs:
    def __init__(self, lg):
        self.lg = lg

    def get_log(self, tp):
        return self.lg


def _rate(nbytes: int, secs: float) -> str:
    return f"{nbytes / (1 << 20) / secs:8.1f} MiB/s ({secs:.2f} s)"


def main() -> None:
    total = int(os.environ.get("TIERED_BENCH_MB", "1024")) << 20
    root = Path(tempfile.mkdtemp(prefix="bench-tiered-"))
    try:
        cfg = LogConfig(segment_bytes=64 << 20, remote_storage_enable=True, local_retention_bytes=1, retention_ms=-1,
                        file_delete_delay_ms=0, message_timestamp_after_max_ms=1 << 62,
                        message_timestamp_before_max_ms=1 << 62)
        lg = PartitionLog(root / "logs" / "bench-0", cfg, topic_id=uuid.uuid4())
        value = os.urandom(1000)
        batch = build_batch([(b"k%d" % i, value, [], None) for i in range(100)])
        while lg.log_end_offset * 0 + lg.size < total:
            lg.append_as_leader(batch, 0)
        lg.roll()
        lg.update_high_watermark(lg.log_end_offset)
        rolled = lg.segments[:-1]
        nbytes = sum(s.size for s in rolled)
        end = lg.next_segment_base_offset(rolled[-1])
        print(f"data: {nbytes / (1 << 20):.0f} MiB in {len(rolled)} segments")

        # plain file copy of the same files (log + indexes)
        plain = root / "plain"
        plain.mkdir()
        t0 = time.perf_counter()
        for s in rolled:
            for p in (s.log_path, s.offset_index_path, s.time_index_path):
                shutil.copyfile(p, plain / p.name)
        t_plain = time.perf_counter() - t0

        rsm = LocalTieredStorage(root / "remote")
        rsm.configure({"broker.id": 0})
        rlm = RemoteLogManager({}, _Logs(lg), rsm, InMemoryRemoteLogMetadataManager(),
                               config=RemoteLogManagerConfig(log_dirs=(str(root / "logs"),)))
        rlm.start()
        state = PartitionState(TopicPartition("bench", 0), rlm._tip(lg.topic_partition, lg))
        t0 = time.perf_counter()
        copier.copy_task(rlm, state, TaskContext())
        t_copy = time.perf_counter() - t0
        print(f"copy  plain file copy : {_rate(nbytes, t_plain)}")
        print(f"copy  RLM copy task   : {_rate(nbytes, t_copy)}   ratio {t_plain / t_copy:.2f}x of plain")

        # catch-up reads from local segments
        t0 = time.perf_counter()
        off, got = 0, 0
        while off < end:
            info = lg.read(off, FETCH, "high_watermark")
            data = info.records.read_bytes() if hasattr(info.records, "read_bytes") else bytes(info.records)
            got += len(data)
            from tieredlog.records.batch import iter_headers
            last = None
            for _, h in iter_headers(data):
                last = h
            off = last.next_offset
        t_local = time.perf_counter() - t0

        # the remote objects read directly as files
        t0 = time.perf_counter()
        direct = 0
        for p in sorted((root / "remote").rglob("*.log")):
            with open(p, "rb") as f:
                while chunk := f.read(FETCH):
                    direct += len(chunk)
        t_direct = time.perf_counter() - t0

        lg.delete_old_segments()
        t0 = time.perf_counter()
        off, remote = 0, 0
        from tieredlog.records.batch import iter_headers as ih
        while off < end:
            data = rlm.read(TopicPartition("bench", 0), off, FETCH, timeout=60)
            remote += len(data)
            *_, (_, h) = ih(data)
            off = h.next_offset
        t_remote = time.perf_counter() - t0
        rlm.shutdown()
        print(f"read  local segments  : {_rate(got, t_local)}")
        print(f"read  remote (direct) : {_rate(direct, t_direct)}")
        print(f"read  remote via RLM  : {_rate(remote, t_remote)}   "
              f"{t_local / t_remote:.2f}x of local, {t_direct / t_remote:.2f}x of direct file reads")
        print(f"bytes: segments {nbytes}, local read {got}, remote read {remote}, direct {direct}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
