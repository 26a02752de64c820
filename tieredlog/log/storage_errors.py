"""Reporting disk failures (a full disk, EIO) without flooding the broker log.

Shared by the log layer and the broker's periodic tasks (see docs/operations.md, "Full disk").
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


class RateLimitedLog:
    """One line per key per ``interval_s``: a producer retrying against a full disk, or a periodic task
    failing every run, must not flood the broker log. Repeats in between are counted and the count
    is appended to the next line that gets through."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[object, float] = {}
        self._suppressed: dict[object, int] = {}

    def error(self, key: object, msg: str, *args: object) -> bool:
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            self._last[key] = now
            n = self._suppressed.pop(key, 0)
        if n:
            msg += " (%d more since the last report)"
            args = (*args, n)
        log.error(msg, *args)
        return True

    def reset(self, clock: Callable[[], float] | None = None) -> None:
        """Forget every key (tests start from a clean limiter, on their own clock if given)."""
        with self._lock:
            self._last.clear()
            self._suppressed.clear()
            if clock is not None:
                self._clock = clock


storage_error_log = RateLimitedLog()


def describe_os_error(e: BaseException) -> str:
    """``No space left on device`` rather than ``[Errno 28] No space left on device: '/path'``."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__
