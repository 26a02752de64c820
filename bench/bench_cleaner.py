"""The log cleaner's throughput beside a raw read-and-write of the same bytes, in one run.

A compacted partition of ``CLEANER_BENCH_KEYS`` keys (default 50,000) updated ``CLEANER_BENCH_UPDATES``
times each (default 10) with 100-byte values, 20 records a batch (uncompressed, then lz4), in
16 MiB segments, is cleaned by one round of the broker's Cleaner (the code a cleaner thread runs);
the baseline reads the same segment files and writes them to a new file in 512 KiB chunks with one
fsync, which is the least a rewrite of those bytes costs. Printed: MB of dirty log cleaned per second,
the baseline's MB/s and the ratio; records/s; the key map's bytes per key (24 per entry, over the
load factor).

    .venv/bin/python -m bench bench_cleaner      # or: make bench-cleaner
    CLEANER_BENCH_KEYS=10000 .venv/bin/python -m bench bench_cleaner
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

KEYS = int(os.environ.get("CLEANER_BENCH_KEYS", "50000"))
UPDATES = int(os.environ.get("CLEANER_BENCH_UPDATES", "10"))
VALUE = b"x" * 100
PER_BATCH = 20


def build(d: Path, codec: int):  # type: ignore[no-untyped-def]
    from tieredlog.log.config import LogConfig
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.records.record import build_batch

    cfg = LogConfig().with_overrides({"cleanup.policy": "compact", "segment.bytes": str(16 << 20),
                                      "min.cleanable.dirty.ratio": "0.01"})
    plog = UnifiedLog(d / "bench-0", cfg)
    ts = time.time_ns() // 1_000_000
    for u in range(UPDATES):
        for first in range(0, KEYS, PER_BATCH):
            recs = [(b"key-%09d" % k, VALUE + b"%d" % u, [], ts) for k in range(first, min(first + PER_BATCH, KEYS))]
            plog.append_as_leader(build_batch(recs, codec=codec), 0)
    plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    plog.flush()
    return plog


def raw_copy(paths: list[Path], out: Path) -> float:
    t0 = time.perf_counter()
    with open(out, "wb") as w:
        for p in paths:
            with open(p, "rb") as r:
                while chunk := r.read(512 * 1024):
                    w.write(chunk)
        w.flush()
        os.fsync(w.fileno())
    return time.perf_counter() - t0


def run(codec: int, name: str) -> None:
    from tieredlog.log.cleaner.log_cleaner import CleanerConfig, LogCleaner

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as t:
        d = Path(t)
        plog = build(d, codec)
        dirty = plog.size - plog.active_segment.size
        paths = [s.log_path for s in plog.segments[:-1]]
        raw_s = raw_copy(paths, d / "copy")
        cleaner = LogCleaner(CleanerConfig(), [d], lambda: [plog])
        t0 = time.perf_counter()
        assert cleaner.clean_once()
        clean_s = time.perf_counter() - t0
        stats = cleaner._last_stats[0]
        offset_map = cleaner.cleaners[0].offset_map
        assert offset_map is not None
        records = KEYS * UPDATES
        print(f"{name:5s}: {dirty / 1e6:7.1f} MB dirty, {records:,} records -> {plog.size / 1e6:6.1f} MB; "
              f"cleaner {dirty / 1e6 / clean_s:6.1f} MB/s ({records / clean_s:,.0f} records/s, map "
              f"{stats.map_done - stats.started:.2f} s of {clean_s:.2f} s); raw read+write "
              f"{dirty / 1e6 / raw_s:7.1f} MB/s; ratio {raw_s / clean_s:.3f}x")
        print(f"       key map: {offset_map.size:,} keys in {offset_map.memory_bytes / 1e6:.2f} MB = "
              f"{offset_map.memory_bytes / offset_map.size:.1f} bytes/key (24-byte entries, "
              f"{100 * offset_map.utilization:.0f}% of the slots used)")
        plog.close()


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    print(f"command: .venv/bin/python -m bench bench_cleaner  (CLEANER_BENCH_KEYS={KEYS}, "
          f"CLEANER_BENCH_UPDATES={UPDATES}); {os.cpu_count()} cores")
    run(0, "none")
    run(3, "lz4")


if __name__ == "__main__":
    main()
