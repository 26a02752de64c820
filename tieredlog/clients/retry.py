"""Retry and backoff policy shared by the senders."""

from __future__ import annotations


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
