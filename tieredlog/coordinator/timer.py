"""Clocks and timers for the coordinator: the asyncio loop in the broker, a hand-driven one in tests.

The state machine only asks for `now_ms`, `wall_clock_ms` and `call_later`, so unit tests can step time
deterministically instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Callable, Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def now_ms(self) -> int: ...

    def wall_clock_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...


class LoopScheduler:
    """Timers on the running asyncio loop (no threads)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self._loop = loop

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def now_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def wall_clock_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        return self._get_loop().call_later(max(delay_ms, 0) / 1000.0, callback)


class _ManualHandle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """A clock that only moves when told to; timers due at or before the new time fire in order."""

    def __init__(self, start_ms: int = 1_000_000):
        self._now = start_ms
        self._seq = itertools.count()
        self._heap: list[tuple[int, int, _ManualHandle, Callable[[], None]]] = []

    def now_ms(self) -> int:
        return self._now

    def wall_clock_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        handle = _ManualHandle()
        heapq.heappush(self._heap, (self._now + max(delay_ms, 0), next(self._seq), handle, callback))
        return handle

    def advance(self, delta_ms: int = 0) -> None:
        target = self._now + delta_ms
        while self._heap and self._heap[0][0] <= target:
            due, _, handle, callback = heapq.heappop(self._heap)
            self._now = max(self._now, due)
            if not handle.cancelled:
                callback()
        self._now = target

    def pending(self) -> int:
        return sum(1 for entry in self._heap if not entry[2].cancelled)
