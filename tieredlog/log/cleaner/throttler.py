"""Kafka's Throttler: holds the cleaner's reads and writes to log.cleaner.io.max.bytes.per.second,
shared by every cleaner thread, so compaction does not starve the reads of old segments."""

from __future__ import annotations

import threading
import time
from typing import Callable

# Kafka's default, Double.MaxValue: no limit.
UNLIMITED = 1.7976931348623157e308
_CHECK_INTERVAL_S = 0.3


class Throttler:
    def __init__(self, bytes_per_second: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0
        self.throttled_s = 0.0

    def maybe_throttle(self, nbytes: int) -> None:
        if self.rate >= UNLIMITED:
            return
        with self._lock:
            self._observed += nbytes
            elapsed = self._clock() - self._period_start
            if elapsed < _CHECK_INTERVAL_S:
                return
            wait = self._observed / self.rate - elapsed
            self._period_start = self._clock()
            self._observed = 0.0
        if wait > 0:
            self.throttled_s += wait
            self._sleep(wait)
            with self._lock:
                self._period_start = self._clock()
