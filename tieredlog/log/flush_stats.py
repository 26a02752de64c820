"""Kafka's LogFlushStats (``kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs``): how many log
flushes ran and how long their fsyncs took, process-wide as in Kafka. Flushes run on the log
manager's threads; a metrics scrape reads a copy."""

from __future__ import annotations

import threading
from bisect import bisect_left

# upper bounds in ms: a page-cache flush of a small segment up to a slow disk's multi-second fsync
FLUSH_TIME_BUCKETS_MS: tuple[float, ...] = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class LogFlushStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets = [0] * (len(FLUSH_TIME_BUCKETS_MS) + 1)  # per bucket, not cumulative
        self._sum_ms = 0.0

    def record(self, ms: float) -> None:
        with self._lock:
            self._buckets[bisect_left(FLUSH_TIME_BUCKETS_MS, ms)] += 1
            self._sum_ms += ms

    def snapshot(self) -> tuple[list[int], float]:
        """(per-bucket counts, the last one past every bound; the sum of the times in ms)."""
        with self._lock:
            return list(self._buckets), self._sum_ms


LOG_FLUSH_STATS = LogFlushStats()
