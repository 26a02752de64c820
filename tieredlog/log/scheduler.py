"""Background threads for the log layer's disk work (Kafka's KafkaScheduler).

Retention, the flusher, checkpoints, the flush of a rolled segment and the deletion of removed
partition directories run here, never on the event loop, and never on a pool that remote-storage
work shares: a slow object store cannot starve local housekeeping, and a slow disk cannot stall
requests. Daemon threads, so an fsync that never returns (a dead disk) does not keep the process
alive at exit.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable, Protocol

from tieredlog.log.storage_errors import describe_os_error, storage_error_log

log = logging.getLogger(__name__)


class Scheduler(Protocol):
    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> None:
        """Run ``fn`` once, ``delay_ms`` from now, off the caller's thread."""


class InlineScheduler:
    """Runs every task at once in the caller's thread, whatever its delay. For a log used on its own
    (tests, tools): what a log schedules with a delay is clock-checked work it also offers to callers
    (``delete_expired_files``), so running it early does nothing wrong."""

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> None:
        _run(name, fn)


def _run(name: str, fn: Callable[[], object]) -> None:
    try:
        fn()
    except OSError as e:
        # A full or failing disk: one line per task per 10 s; the task's next run retries.
        storage_error_log.error(("task", name), "background task %s failed: %s", name, describe_os_error(e))
    except Exception:
        log.exception("background task %s failed", name)


class _Task:
    __slots__ = ("name", "fn", "period_s", "cancelled")

    def __init__(self, name: str, fn: Callable[[], object], period_s: float | None):
        self.name = name
        self.fn = fn
        self.period_s = period_s
        self.cancelled = False


class KafkaScheduler:
    """``threads`` daemon workers taking due tasks off one timer heap. A periodic task is scheduled again
    ``period_ms`` after its run ends, so it never runs twice at once. Threads start with the first task."""

    def __init__(self, threads: int = 10, name: str = "kafka-scheduler"):
        self.name = name
        self._threads = max(1, threads)
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Task]] = []
        self._seq = itertools.count()
        self._workers: list[threading.Thread] = []
        self._stopped = False
        self._periodic: list[_Task] = []

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: int = 0) -> None:
        self._push(_Task(name, fn, None), delay_ms / 1000.0)

    def schedule(self, name: str, fn: Callable[[], object], delay_ms: int, period_ms: int) -> None:
        task = _Task(name, fn, max(period_ms, 1) / 1000.0)
        with self._cond:
            self._periodic.append(task)
        self._push(task, delay_ms / 1000.0)

    def cancel_periodic(self) -> None:
        """Stop every periodic task (a run in progress finishes)."""
        with self._cond:
            for task in self._periodic:
                task.cancelled = True
            self._periodic.clear()

    def _push(self, task: _Task, delay_s: float) -> None:
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (time.monotonic() + max(delay_s, 0.0), next(self._seq), task))
            if len(self._workers) < self._threads:
                t = threading.Thread(target=self._work, name=f"{self.name}-{len(self._workers)}", daemon=True)
                self._workers.append(t)
                t.start()
            self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, task = heapq.heappop(self._heap)
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            if task.cancelled:
                continue
            _run(task.name, task.fn)
            if task.period_s is not None and not task.cancelled:
                self._push(task, task.period_s)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Drop queued tasks, then wait (at most ``timeout_s``) for the running ones to end."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify_all()
            workers = list(self._workers)
        deadline = time.monotonic() + timeout_s
        for t in workers:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
