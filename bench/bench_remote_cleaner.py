"""Remote cleaning of a compacted tiered partition beside the local cleaner on the same data, in one run.

A compacted partition of ``REMOTE_CLEANER_BENCH_KEYS`` keys (default 20,000) updated
``REMOTE_CLEANER_BENCH_UPDATES`` times each (default 10) with 100-byte values, 20 records a batch, in
``REMOTE_CLEANER_BENCH_SEGMENT_BYTES`` segments (default 1 MiB), is written twice: once cleaned by one
round of the local Cleaner, once copied by the copy task into a LocalTieredStorage (a folder on the
same disk: no network), its local segments deleted, and cleaned by one remote cleaning round (fetch,
map, rewrite, merge of adjacent cleaned segments within segment.bytes, upload of the replacements,
deletion of the old copies), its reads and writes, downloads
included, held to ``REMOTE_CLEANER_BENCH_IO_BYTES_PER_SECOND`` (log.cleaner.io.max.bytes.per.second,
default no limit). Printed: MB of log cleaned per second for each, and the remote round's object-store
requests per GiB of remote segments cleaned.

    .venv/bin/python -m bench bench_remote_cleaner      # or: make bench-remote-cleaner
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

KEYS = int(os.environ.get("REMOTE_CLEANER_BENCH_KEYS", "20000"))
UPDATES = int(os.environ.get("REMOTE_CLEANER_BENCH_UPDATES", "10"))
SEGMENT_BYTES = int(os.environ.get("REMOTE_CLEANER_BENCH_SEGMENT_BYTES", str(1 << 20)))
# log.cleaner.io.max.bytes.per.second for the remote round (default: Kafka's, no limit)
IO_RATE = float(os.environ.get("REMOTE_CLEANER_BENCH_IO_BYTES_PER_SECOND", "1.7976931348623157e308"))
VALUE = b"x" * 100
PER_BATCH = 20


def build(d: Path, tiered: bool) -> Any:
    from tieredlog.log.config import LogConfig
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.records.record import build_batch

    overrides = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES), "min.cleanable.dirty.ratio": "0.01",
                 "file.delete.delay.ms": "0"}
    if tiered:
        overrides |= {"remote.storage.enable": "true", "local.retention.bytes": "1"}
    plog = UnifiedLog(d / "bench-0", LogConfig().with_overrides(overrides), topic_id=uuid.uuid4())
    ts = time.time_ns() // 1_000_000
    for u in range(UPDATES):
        for first in range(0, KEYS, PER_BATCH):
            recs = [(b"key-%09d" % k, VALUE + b"%d" % u, [], ts) for k in range(first, min(first + PER_BATCH, KEYS))]
            plog.append_as_leader(build_batch(recs), 0)
    plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    plog.flush()
    return plog


def local_round(d: Path) -> tuple[float, float]:
    """(MB of dirty log, seconds) of one local cleaning round."""
    from tieredlog.log.cleaner.log_cleaner import CleanerConfig, LogCleaner

    plog = build(d, tiered=False)
    dirty = plog.size - plog.active_segment.size
    cleaner = LogCleaner(CleanerConfig(), [d], lambda: [plog])
    t0 = time.perf_counter()
    assert cleaner.clean_once()
    took = time.perf_counter() - t0
    plog.close()
    return dirty / 1e6, took


class OneLog:
    """The RLM's LogProvider over the one benchmark log."""

    def __init__(self, plog: Any) -> None:
        self.plog = plog

    def get_log(self, tp: Any) -> Any:
        return self.plog if tuple(tp) == tuple(self.plog.topic_partition) else None

    def all_logs(self) -> list[Any]:
        return [self.plog]


def remote_round(d: Path) -> None:
    from tieredlog.log.cleaner.cleaner import Cleaner
    from tieredlog.log.cleaner.throttler import Throttler
    from tieredlog.rlm.config import RemoteLogManagerConfig
    from tieredlog.rlm.manager import RemoteLogManager
    from tieredlog.rlm.partition_state import PartitionState
    from tieredlog.rlm.pool import TaskContext
    from tieredlog.rlm.remote_cleaner import RemoteCleaner, plan_remote_clean, served_segments
    from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager
    from tieredlog.rsm.local import LocalTieredStorage

    plog = build(d / "logs", tiered=True)
    rsm = LocalTieredStorage(d / "remote")
    rsm.configure({"broker.id": 0})
    rlm = RemoteLogManager(RemoteLogManagerConfig(log_dirs=(str(d / "logs"),)), OneLog(plog), rsm,
                           InMemoryRemoteLogMetadataManager())
    rlm.start()
    try:
        state = PartitionState(plog.topic_partition, rlm._tip(plog.topic_partition, plog))
        rlm.copy_task(state).run(TaskContext())
        plog.delete_old_segments()
        served = served_segments(rlm.lifecycle, plog, state)
        remote_before = sum(m.segment_size_in_bytes for m in served)
        plan = plan_remote_clean(served, 0, 0, 1 << 62, 0.0, time.time_ns() // 1_000_000)
        assert plan is not None
        topic = plog.topic_partition.topic
        before = rlm.metrics.object_store.snapshot().get(topic, {})
        throttler = Throttler(IO_RATE)
        cleaner = RemoteCleaner(rlm.lifecycle, Cleaner(0, 128 << 20, throttler=throttler), d / "scratch", 0, 128)
        t0 = time.perf_counter()
        stats = cleaner.clean(state, plog, plan, lambda: False)
        took = time.perf_counter() - t0
        used = {op: n - before.get(op, 0) for op, n in rlm.metrics.object_store.snapshot()[topic].items()}
        after = served_segments(rlm.lifecycle, plog, state)
        remote_after = sum(m.segment_size_in_bytes for m in after)
        gib = stats.bytes_read / (1 << 30)
        print(f"remote: {stats.bytes_read / 1e6:7.1f} MB in {stats.segments_read} segments -> "
              f"{remote_after / 1e6:.1f} MB in {len(after)} (from {remote_before / 1e6:.1f}); "
              f"{stats.bytes_read / 1e6 / took:6.1f} MB/s ({took:.2f} s, {stats.segments_replaced} replaced by "
              f"{stats.segments_written}, {throttler.throttled_s:.2f} s throttled)")
        print("        requests per cleaned GiB: " + ", ".join(
            f"{op} {n / gib:,.0f}" for op, n in sorted(used.items()) if not op.startswith("bytes_")))
    finally:
        rlm.shutdown()
        plog.close()


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    print(f"command: .venv/bin/python -m bench bench_remote_cleaner  (REMOTE_CLEANER_BENCH_KEYS={KEYS}, "
          f"REMOTE_CLEANER_BENCH_UPDATES={UPDATES}, REMOTE_CLEANER_BENCH_SEGMENT_BYTES={SEGMENT_BYTES}, "
          f"REMOTE_CLEANER_BENCH_IO_BYTES_PER_SECOND={IO_RATE:g}); "
          f"{os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as t:
        mb, took = local_round(Path(t))
        print(f"local:  {mb:7.1f} MB cleaned by one local round: {mb / took:6.1f} MB/s ({took:.2f} s)")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as t:
        remote_round(Path(t))


if __name__ == "__main__":
    main()
