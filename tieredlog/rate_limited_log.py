"""Log lines that repeat, rate-limited per key (a partition's task, a partition's reads).

An object store that is down fails every retry of every partition; a line per retry (with a
traceback) buries everything else in the log. A partition tiering a backlog copies hundreds of
segments a minute; a line per segment does the same. So each key gets at most ``burst`` lines per
``interval_s``; the events left out are counted, and the next line written says how many there were.

Failures have more: ``failed`` keeps when the key's run of failures began and its latest error,
writes the error as one line (the traceback goes to DEBUG only), and ``succeeded`` writes one INFO
line when a failing key works again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Hashable

# error text beyond this is cut: some stores put whole response bodies in their messages
MAX_ERROR_CHARS = 400


def one_line(exc: BaseException) -> str:
    """``exc`` as ``Type: message`` on a single line, cut to MAX_ERROR_CHARS."""
    text = " ".join(str(exc).split())
    out = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return out if len(out) <= MAX_ERROR_CHARS else out[: MAX_ERROR_CHARS - 3] + "..."


class _Window:
    __slots__ = ("start", "lines", "left_out")

    def __init__(self, now: float) -> None:
        self.start = now
        self.lines = 0
        self.left_out = 0


class _Failing:
    __slots__ = ("since", "failures", "last")

    def __init__(self, now: float, exc: BaseException) -> None:
        self.since = now
        self.failures = 0
        self.last = exc


class RateLimitedLog:
    """At most ``burst`` lines per key per ``interval_s``. Thread-safe; one lock, no I/O under it."""

    def __init__(self, logger: logging.Logger, interval_s: float, burst: int = 1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.burst = max(1, burst)
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[Hashable, _Window] = {}
        self._failing: dict[Hashable, _Failing] = {}

    def _admit(self, key: Hashable, now: float) -> int | None:
        """None when ``key`` has used its lines of this window (counted); else how many were left out
        since the last line written."""
        w = self._windows.get(key)
        if w is None or now - w.start >= self.interval_s:
            left_out = 0 if w is None else w.left_out
            w = self._windows[key] = _Window(now)
        elif w.lines >= self.burst:
            w.left_out += 1
            return None
        else:
            left_out, w.left_out = w.left_out, 0
        w.lines += 1
        return left_out

    def _suffix(self, left_out: int) -> str:
        return f" ({left_out} more in the last {self.interval_s:g} s)" if left_out else ""

    def log(self, key: Hashable, level: int, msg: str, *args: object) -> bool:
        """``msg % args`` unless ``key`` has had its lines this interval; True when written."""
        with self._lock:
            left_out = self._admit(key, self._clock())
        if left_out is None:
            return False
        self.logger.log(level, msg + "%s", *args, self._suffix(left_out))
        return True

    def failed(self, key: Hashable, exc: BaseException, msg: str, *args: object,
               level: int = logging.WARNING) -> bool:
        """``msg % args`` then ``: <one_line(exc)>``, rate-limited as :meth:`log`; the failure is
        counted and kept for :meth:`failing` either way."""
        now = self._clock()
        with self._lock:
            state = self._failing.get(key)
            if state is None:
                state = self._failing[key] = _Failing(now, exc)
            state.failures += 1
            state.last = exc
            left_out = self._admit(key, now)
        if left_out is None:
            return False
        self.logger.log(level, msg + ": %s%s", *args, one_line(exc), self._suffix(left_out))
        self.logger.debug("%s", one_line(exc), exc_info=exc)
        return True

    def succeeded(self, key: Hashable, msg: str, *args: object) -> None:
        """``key`` works again: one INFO line when it had failed, saying for how long and how often."""
        with self._lock:
            state = self._failing.pop(key, None)
            if state is not None:
                self._windows.pop(key, None)
        if state is not None:
            self.logger.info(msg + " again after %d failed attempt(s) over %.1f s", *args, state.failures,
                             self._clock() - state.since)

    def failing(self, key: Hashable) -> tuple[float, BaseException] | None:
        """(when ``key``'s current run of failures began, by the clock, and its latest error), or
        None when it is not failing."""
        with self._lock:
            state = self._failing.get(key)
            return None if state is None else (state.since, state.last)

    def forget(self, key: Hashable) -> None:
        """Drop ``key`` without a line (its task or partition went away)."""
        with self._lock:
            self._failing.pop(key, None)
            self._windows.pop(key, None)
