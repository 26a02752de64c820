"""Thread pools for remote I/O: a bounded reader pool and a fixed-delay task scheduler.

Both use daemon threads: an RSM call that never returns (a hung object store) must not keep the
broker process alive at exit, which ``concurrent.futures.ThreadPoolExecutor`` would. Both can be
resized while they run (dynamic broker configs, as Kafka's ``resizeThreadPool``): new threads start
at once; a shrink queues one stop signal per thread too many, taken by workers once they are free,
so work already running or queued finishes first.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import random
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from tieredlog.errors import RequestTimedOutError
from tieredlog.rate_limited_log import RateLimitedLog

log = logging.getLogger(__name__)


class RemoteReaderQueueFullError(RequestTimedOutError):
    """``remote.log.reader.max.pending.tasks`` reached: the fetch is rejected, the client retries
    (Kafka rejects with RejectedExecutionException; we answer with a retriable error code)."""


class _IdleMeter:
    """Fraction of thread-time spent idle since the previous sample (Kafka's AvgIdlePercent)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._busy = 0.0
        self._busy_since: dict[int, float] = {}
        self._lock = threading.Lock()
        self._last = time.monotonic()

    def begin(self) -> None:
        with self._lock:
            self._busy_since[threading.get_ident()] = time.monotonic()

    def end(self) -> None:
        with self._lock:
            t0 = self._busy_since.pop(threading.get_ident(), None)
            if t0 is not None:
                self._busy += time.monotonic() - max(t0, self._last)

    def sample(self) -> float:
        with self._lock:
            now = time.monotonic()
            busy = self._busy + sum(now - max(t0, self._last) for t0 in self._busy_since.values())
            # in-flight work up to now is counted in this window; start the next window at now
            for k in self._busy_since:
                self._busy_since[k] = now
            elapsed = max(now - self._last, 1e-9) * self.threads
            self._busy = 0.0
            self._last = now
            return max(0.0, min(1.0, 1.0 - busy / elapsed))


class RemoteReaderPool:
    """``remote.log.reader.threads`` workers over a queue bounded by ``remote.log.reader.max.pending.tasks``."""

    def __init__(self, threads: int = 10, max_pending_tasks: int = 100, name: str = "remote-log-reader") -> None:
        # unbounded underneath: the bound is the tasks' (submit checks it), so stop signals always fit
        self._queue: "queue.Queue[tuple[Future, Callable, tuple] | None]" = queue.Queue()
        self._max_pending = max(1, max_pending_tasks)
        self._name = name
        self._lock = threading.Lock()
        self._size = 0
        self._started = itertools.count()
        self._threads: set[threading.Thread] = set()
        self.idle = _IdleMeter(max(1, threads))
        self._shutdown = False
        self.resize(threads)

    @property
    def queue_size(self) -> int:
        return self._queue.qsize()

    @property
    def size(self) -> int:
        """The threads asked for (``remote.log.reader.threads``)."""
        return self._size

    @property
    def live_threads(self) -> int:
        """The worker threads running now: above ``size`` while a shrink waits for busy workers."""
        with self._lock:
            return len(self._threads)

    def resize(self, threads: int) -> None:
        """Grow at once; shrink as workers become free (what runs or is queued finishes)."""
        threads = max(1, threads)
        with self._lock:
            if self._shutdown:
                return
            delta, self._size = threads - self._size, threads
            self.idle.threads = threads
            for _ in range(delta):
                t = threading.Thread(target=self._work, name=f"{self._name}-{next(self._started)}", daemon=True)
                self._threads.add(t)
                t.start()
        for _ in range(-delta):
            self._queue.put(None)

    def has_room(self, fraction: float = 1.0) -> bool:
        return self._queue.qsize() < self._max_pending * fraction

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Queue ``fn``; raises RemoteReaderQueueFullError at once when the queue is full."""
        if self._shutdown:
            raise RemoteReaderQueueFullError("remote log reader pool is shut down")
        fut: Future = Future()
        with self._lock:
            if self._queue.qsize() >= self._max_pending:
                raise RemoteReaderQueueFullError(
                    f"remote log reader queue is full ({self._max_pending} pending tasks)")
            self._queue.put_nowait((fut, fn, args))
        return fut

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                with self._lock:
                    self._threads.discard(threading.current_thread())
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue  # the fetch gave up (timed out) before its turn: skip the remote read
            self.idle.begin()
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:
                fut.set_exception(exc)
            finally:
                self.idle.end()

    def shutdown(self, timeout: float = 5.0) -> None:
        self._shutdown = True
        # drain queued work (their futures are cancelled) and wake every worker
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._queue.put_nowait(None)
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


_TASK_NAMES = {"copy": "segment copy", "expire": "remote retention", "follower": "remote offset sync",
               "delete": "remote partition deletion", "disable": "remote data deletion"}


def describe_task(key: Any) -> str:
    """``("copy", tp)`` -> ``segment copy of t-0``: a task key as the log names it."""
    if isinstance(key, tuple) and len(key) == 2:
        return f"{_TASK_NAMES.get(key[0], key[0])} of {key[1]}"
    return str(key)


class TaskContext:
    """Handed to a scheduled task: lets long work notice cancellation, and a run that stopped half way
    (to free its thread while it waits) ask to run again sooner than its interval."""

    def __init__(self) -> None:
        self.cancelled = False
        self.run_again_in_s: float | None = None  # read (and cleared) once the run returns


class _Scheduled:
    __slots__ = ("key", "fn", "interval_s", "ctx", "running", "failures", "due", "seq")

    def __init__(self, key: Any, fn: Callable[[TaskContext], Any], interval_s: float) -> None:
        self.key = key
        self.fn = fn
        self.interval_s = interval_s
        self.ctx = TaskContext()
        self.running = False
        self.failures = 0
        self.due = 0.0
        self.seq = 0


class FixedDelayScheduler:
    """Runs each keyed task repeatedly on ``threads`` daemon workers: first at once, then
    ``interval`` after the previous run ended (Kafka's scheduleWithFixedDelay). A run that raises
    is retried after an exponential backoff with jitter (KIP-405's
    ``remote.log.manager.task.retry.*``), capped at the interval if that is shorter than the cap.
    A task never runs twice at once; a cancelled task finishes its current run and stops.
    Failures are logged one line per task per ``log_interval_s`` (an object store that is down
    fails every retry), and once when the task works again.
    """

    def __init__(
        self,
        name: str,
        threads: int,
        backoff_ms: int = 500,
        backoff_max_ms: int = 30_000,
        jitter: float = 0.2,
        log_interval_s: float = 30.0,
    ) -> None:
        self.name = name
        self.failures_log = RateLimitedLog(log, log_interval_s)
        self._backoff_s = backoff_ms / 1000.0
        self._backoff_max_s = backoff_max_ms / 1000.0
        self._jitter = jitter
        self._tasks: dict[Any, _Scheduled] = {}
        self._heap: list[tuple[float, int, _Scheduled]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._ready: "queue.Queue[_Scheduled | None]" = queue.Queue()
        self._stopped = False
        self.idle = _IdleMeter(max(1, threads))
        self._timer = threading.Thread(target=self._timer_loop, name=f"{name}-timer", daemon=True)
        self._size = 0
        self._started = itertools.count()
        self._workers: set[threading.Thread] = set()
        self._timer.start()
        self.resize(threads)

    @property
    def size(self) -> int:
        """The worker threads asked for."""
        return self._size

    @property
    def live_threads(self) -> int:
        """The worker threads running now: above ``size`` while a shrink waits for busy workers."""
        with self._cond:
            return len(self._workers)

    def resize(self, threads: int) -> None:
        """Grow at once; shrink as workers finish their current run (no run is cut short)."""
        threads = max(1, threads)
        with self._cond:
            if self._stopped:
                return
            delta, self._size = threads - self._size, threads
            self.idle.threads = threads
            for _ in range(delta):
                t = threading.Thread(target=self._work, name=f"{self.name}-{next(self._started)}", daemon=True)
                self._workers.add(t)
                t.start()
        for _ in range(-delta):
            self._ready.put(None)

    def schedule(self, key: Any, fn: Callable[[TaskContext], Any], interval_ms: float) -> None:
        """Start ``fn`` now and then every interval; a task already scheduled under ``key`` stays."""
        with self._cond:
            if self._stopped or key in self._tasks:
                return
            task = _Scheduled(key, fn, interval_ms / 1000.0)
            self._tasks[key] = task
            self._push(task, time.monotonic())

    def run_now(self, key: Any) -> None:
        """Bring the next run of ``key`` forward (tests, config changes)."""
        with self._cond:
            task = self._tasks.get(key)
            if task is not None and not task.running:
                self._push(task, time.monotonic())

    def is_scheduled(self, key: Any) -> bool:
        return key in self._tasks

    def keys(self) -> list[Any]:
        with self._cond:
            return list(self._tasks)

    def cancel(self, key: Any) -> None:
        with self._cond:
            task = self._tasks.pop(key, None)
            if task is not None:
                task.ctx.cancelled = True

    def _push(self, task: _Scheduled, due: float) -> None:
        task.due = due
        task.seq = next(self._seq)
        heapq.heappush(self._heap, (due, task.seq, task))
        self._cond.notify_all()

    def _timer_loop(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, seq, task = heapq.heappop(self._heap)
                    # stale heap entries (rescheduled or cancelled tasks) are skipped
                    if seq != task.seq or task.ctx.cancelled or task.running:
                        continue
                    task.running = True
                    self._ready.put(task)
                timeout = (self._heap[0][0] - now) if self._heap else None
                self._cond.wait(timeout)

    def _work(self) -> None:
        while True:
            task = self._ready.get()
            if task is None:
                with self._cond:
                    self._workers.discard(threading.current_thread())
                return
            self.idle.begin()
            failure: Exception | None = None
            try:
                task.fn(task.ctx)
            except Exception as exc:
                failure = exc
            finally:
                self.idle.end()
            with self._cond:
                task.running = False
                cancelled = task.ctx.cancelled or self._stopped
                if failure is None:
                    task.failures = 0
                    delay = task.interval_s if task.ctx.run_again_in_s is None else task.ctx.run_again_in_s
                else:
                    task.failures += 1
                    delay = self.backoff_s(task.failures, task.interval_s)
                task.ctx.run_again_in_s = None
                if not cancelled:
                    self._push(task, time.monotonic() + delay)
            self._report(task, failure, delay, cancelled)

    def _report(self, task: _Scheduled, failure: Exception | None, delay: float, cancelled: bool) -> None:
        what = describe_task(task.key)
        if cancelled:
            self.failures_log.forget(task.key)
        elif failure is None:
            self.failures_log.succeeded(task.key, "%s succeeded", what)
        else:
            self.failures_log.failed(task.key, failure, "%s failed (attempt %d, next in %.1f s)", what,
                                     task.failures, delay)

    def backoff_s(self, failures: int, interval_s: float) -> float:
        base = min(self._backoff_max_s, self._backoff_s * (2 ** (failures - 1)))
        base = min(base, max(interval_s, self._backoff_s))
        return max(0.0, base * (1 + random.uniform(-self._jitter, self._jitter)))

    def shutdown(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopped = True
            for task in self._tasks.values():
                task.ctx.cancelled = True
            self._tasks.clear()
            self._cond.notify_all()
            workers = list(self._workers)
        for _ in workers:
            self._ready.put(None)
        deadline = time.monotonic() + timeout
        for t in workers:
            t.join(max(0.0, deadline - time.monotonic()))
