"""Retry and backoff policy shared by the senders."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


class ExponentialBackoff:
    """Waits that start at ``initial_s`` and double after each failure up to ``max_s``; a success
    starts again from ``initial_s`` (Kafka's reconnect.backoff.ms / reconnect.backoff.max.ms, without
    jitter). ``initial_s == max_s`` is a fixed backoff."""

    __slots__ = ("initial_s", "max_s", "_current")

    def __init__(self, initial_s: float, max_s: float) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self._current = initial_s

    @property
    def current_s(self) -> float:
        """The wait before the next attempt."""
        return self._current

    def failed(self) -> float:
        """The wait to make now; the next one is twice as long (bounded)."""
        wait = self._current
        self._current = min(self._current * 2, self.max_s)
        return wait

    def reset(self) -> None:
        self._current = self.initial_s


def retry_until(attempt: Callable[[], T], *, timeout_s: float, backoff_s: float,
                retriable: Callable[[Exception], bool]) -> T:
    """``attempt()`` until it answers; an exception ``retriable`` accepts means try again after
    ``backoff_s``, until ``timeout_s`` has passed, when the last one is raised (as Kafka's admin client
    retries a call until default.api.timeout.ms). Any other exception is raised at once. Blocking."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except Exception as exc:
            if not retriable(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(backoff_s)
