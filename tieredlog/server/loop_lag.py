"""The event loop's own delay: a task that sleeps a fixed interval and measures how late it woke.

Everything a broker serves runs on one asyncio loop, so a handler that computes too long (or a
wait that slipped onto the loop) delays every client at once; this is the figure that shows it.
Exported as tieredlog_event_loop_lag_seconds (a histogram) and its maximum over the last minute.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left

LAG_BUCKETS_S: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
INTERVAL_S = 0.25
WINDOW_S = 30.0  # a one-off stall (start-up) leaves the maximum within a minute, before an alert's `for: 2m`


class EventLoopLag:
    """``run`` on the loop; the other methods may be called from the scrape thread (ints, floats and
    a list copied whole)."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.buckets = [0] * (len(LAG_BUCKETS_S) + 1)  # per bucket, not cumulative
        self.sum_s = 0.0
        self._max_now = 0.0  # the current window's
        self._max_before = 0.0  # the previous window's
        self._window_start = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._window_start = loop.time()
        while True:
            t0 = loop.time()
            await asyncio.sleep(self.interval_s)
            now = loop.time()
            self.record(max(0.0, now - t0 - self.interval_s), now)

    def record(self, lag_s: float, now: float) -> None:
        self.buckets[bisect_left(LAG_BUCKETS_S, lag_s)] += 1
        self.sum_s += lag_s
        if now - self._window_start >= WINDOW_S:
            self._max_before, self._max_now, self._window_start = self._max_now, 0.0, now
        self._max_now = max(self._max_now, lag_s)

    @property
    def max_s(self) -> float:
        """The largest lag of the last 30 to 60 seconds."""
        return max(self._max_now, self._max_before)
