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
    """``defer_s``: a wait up to this long is not slept where the bytes are charged but left owed, for the
    caller to take between its steps (:meth:`take_debt`) and wait out off its thread."""

    def __init__(self, bytes_per_second: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, defer_s: float = 0.0) -> None:
        self.rate = bytes_per_second
        self.defer_s = defer_s
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
            if 0 < wait <= self.defer_s:
                return  # owed: the caller takes it between its steps
            self._period_start = self._clock()
            self._observed = 0.0
        if wait > 0:
            self.throttled_s += wait
            self._sleep(wait)
            with self._lock:
                self._period_start = self._clock()

    def take_debt(self) -> float:
        """How long the bytes charged so far are ahead of the rate, counted as waited from now on: the
        caller waits it out elsewhere (a task that runs again after it) before charging more."""
        if self.rate >= UNLIMITED:
            return 0.0
        with self._lock:
            now = self._clock()
            # a period starting later is a debt handed out before: what was charged since comes after it
            wait = self._observed / self.rate - max(0.0, now - self._period_start)
            if wait <= 0:
                return 0.0
            self._period_start = max(now, self._period_start) + wait
            self._observed = 0.0
        self.throttled_s += wait
        return wait
