"""Byte-rate quotas for remote copy and remote fetch (KIP-956), as a token bucket.

Kafka measures the rate over ``window.num`` samples of ``window.size.seconds`` and throttles
while the measured rate is above the bound. A token bucket gives the same long-run bound with
O(1) state: tokens refill at ``rate`` bytes/s up to one window's worth (the allowed burst), a
recorded transfer takes its size from the bucket (the bucket may go negative, because a segment
is uploaded whole), and the caller is throttled until the bucket is back to zero.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from tieredlog.rlm.config import LONG_MAX


class RLMQuotaManager:
    def __init__(
        self,
        max_bytes_per_second: int = LONG_MAX,
        window_size_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        name: str = "quota",
    ) -> None:
        self.name = name
        self._clock = clock
        self._window = max(float(window_size_seconds), 0.001)
        self._cond = threading.Condition()
        self._rate = 0.0
        self._capacity = 0.0
        self._tokens = 0.0
        self._last = clock()
        self.throttle_time_total_ms = 0.0
        self.update_quota(max_bytes_per_second)

    @property
    def unlimited(self) -> bool:
        return self._rate <= 0

    @property
    def max_bytes_per_second(self) -> int:
        return LONG_MAX if self.unlimited else int(self._rate)

    def update_quota(self, max_bytes_per_second: int) -> None:
        """Dynamic update (Kafka: remote.log.manager.*.max.bytes.per.second are dynamic)."""
        with self._cond:
            self._refill()
            if max_bytes_per_second >= LONG_MAX or max_bytes_per_second <= 0:
                self._rate = 0.0  # no limit
            else:
                self._rate = float(max_bytes_per_second)
                self._capacity = self._rate * self._window
                self._tokens = min(self._tokens, self._capacity) if self._tokens else self._capacity
            self._cond.notify_all()

    def _refill(self) -> None:
        now = self._clock()
        if self._rate > 0:
            self._tokens = min(self._capacity, self._tokens + (now - self._last) * self._rate)
        self._last = now

    def throttle_time_ms(self) -> float:
        """How long a caller must wait before the next transfer is within the quota; 0 if none."""
        with self._cond:
            if self.unlimited:
                return 0.0
            self._refill()
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self._rate * 1000.0

    def is_quota_exceeded(self) -> bool:
        return self.throttle_time_ms() > 0

    def record(self, nbytes: int) -> None:
        with self._cond:
            if self.unlimited:
                return
            self._refill()
            self._tokens -= nbytes

    def acquire(self, nbytes: int, cancelled: Callable[[], bool] = lambda: False, max_wait_s: float = 1.0) -> bool:
        """Wait while throttled, then record ``nbytes``. Returns False if cancelled while waiting.

        Kafka waits in slices of at most one second so that shutdown and leadership changes are
        noticed; ``max_wait_s`` is that slice.
        """
        while True:
            if cancelled():
                return False
            wait_ms = self.throttle_time_ms()
            if wait_ms <= 0:
                self.record(nbytes)
                return True
            self.throttle_time_total_ms += wait_ms
            with self._cond:
                self._cond.wait(min(wait_ms / 1000.0, max_wait_s))
