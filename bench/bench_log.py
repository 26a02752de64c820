"""Local log engine figures: append throughput of 1 MiB lz4 batches through PartitionLog.append_as_leader
(CRC check, offset patching, index maintenance) beside a raw sequential write of the same bytes to the
same disk, and random offset lookups over a 1,000-segment log. Target: append >= 60% of raw."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from tieredlog.log.config import LogConfig
from tieredlog.log.partition_log import PartitionLog
from tieredlog.records.batch import COMPRESSION_LZ4
from tieredlog.records.record import build_batch

BATCH_BYTES = 1 << 20
DISTINCT_BATCHES = 8
TOTAL_BATCHES = 256  # 256 MiB per side
SEGMENTS_FOR_LOOKUP = 1000
LOOKUP_SECONDS = 2.0


def _lz4_batches() -> list[bytes]:
    """~1 MiB lz4 batches; the payload is half random so the compressed size stays near 1 MiB."""
    rng = random.Random(1)
    out = []
    for _ in range(DISTINCT_BATCHES):
        recs = [(None, rng.randbytes(8192) + bytes(8192), [], 1_700_000_000_000 + i) for i in range(128)]
        b = build_batch(recs, codec=COMPRESSION_LZ4, producer_id=-1)
        out.append(b)
    return out


def _raw_write(path: Path, batches: list[bytes]) -> float:
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(TOTAL_BATCHES):
            os.write(fd, batches[i % len(batches)])
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def _log_append(d: Path, batches: list[bytes]) -> float:
    cfg = LogConfig(max_message_bytes=4 << 20, message_timestamp_after_max_ms=1 << 62)
    log = PartitionLog(d, cfg)
    t0 = time.perf_counter()
    for i in range(TOTAL_BATCHES):
        log.append_as_leader(batches[i % len(batches)], 0)
    log.flush()
    elapsed = time.perf_counter() - t0
    log.close()
    return elapsed


def _lookups(d: Path) -> tuple[float, int]:
    small = build_batch([(None, b"x" * 60, [], 1_700_000_000_000)] * 2)
    per_segment = 8
    cfg = LogConfig(segment_bytes=len(small) * per_segment, index_interval_bytes=len(small) * 2)
    log = PartitionLog(d, cfg)
    for _ in range(SEGMENTS_FOR_LOOKUP * per_segment):
        log.append_as_leader(small, 0)
    log.update_high_watermark(log.log_end_offset)
    segments = log.num_segments
    rng = random.Random(2)
    end = log.log_end_offset
    n = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(1000):
            info = log.read(rng.randrange(end), 1, min_one_message=True)
            assert info.records.size == len(small)
        n += 1000
        elapsed = time.perf_counter() - t0
        if elapsed >= LOOKUP_SECONDS:
            break
    log.close()
    return n / elapsed, segments


def main() -> None:
    batches = _lz4_batches()
    mib = sum(len(batches[i % len(batches)]) for i in range(TOTAL_BATCHES)) / (1 << 20)
    root = Path(tempfile.mkdtemp(prefix="bench_log_", dir=os.environ.get("BENCH_DIR")))
    try:
        # Alternate the two writers and keep each one's best run, so page-cache and writeback state
        # left by one does not favour the other.
        raws, apps = [], []
        for _ in range(2):
            raws.append(_raw_write(root / "raw.bin", batches))
            os.unlink(root / "raw.bin")
            apps.append(_log_append(root / "bench-0", batches))
            shutil.rmtree(root / "bench-0")
        raw, app = min(raws), min(apps)
        raw_mbs, app_mbs = mib / raw, mib / app
        print(f"raw sequential write:      {raw_mbs:8.1f} MiB/s ({mib:.0f} MiB, fsync at end)")
        print(f"append_as_leader (lz4 1MiB):{app_mbs:8.1f} MiB/s (CRC, offsets, indexes, fsync at end)")
        print(f"append / raw:              {100 * app_mbs / raw_mbs:8.1f} %  (target >= 60 %)")
        rate, segs = _lookups(root / "lookup-0")
        print(f"random offset lookups:     {rate:8.0f} /s over {segs} segments (read, min_one_message)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
