"""Kafka's LogCleaner: the cleaner threads, their shared throttler, and the figures Kafka reports.

Each of ``log.cleaner.threads`` threads loops: take the filthiest compacted log, clean it, write the
checkpoint; with nothing to do it sleeps ``log.cleaner.backoff.ms``. A round that fails on bad data
marks the partition uncleanable (one line, the broker and the other partitions carry on), as Kafka.

Reconfigurable as Kafka's (`reconfigure`): the throttle and the backoff apply at once; a new thread count
or buffer size replaces the threads with new ones built from the new settings. The replaced threads
finish the round they are in (the manager never gives a partition to two cleaners) and exit.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from tieredlog.log.cleaner.cleaner import Cleaner, CleanerStats, LogCleaningAbortedError
from tieredlog.log.cleaner.manager import LogCleanerManager
from tieredlog.log.cleaner.throttler import UNLIMITED, Throttler
from tieredlog.log.types import TopicPartition
from tieredlog.log.unified_log import UnifiedLog

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's log.cleaner.* settings, Kafka's names and defaults."""

    enable: bool = True
    num_threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    io_buffer_load_factor: float = 0.9
    max_io_bytes_per_second: float = UNLIMITED
    backoff_ms: int = 15_000


@dataclass(frozen=True, slots=True)
class CleanerMetrics:
    """Kafka's LogCleaner and LogCleanerManager gauges, at one moment."""

    max_dirty_percent: int
    cleaner_recopy_percent: int
    max_clean_time_secs: int
    max_buffer_utilization_percent: int
    time_since_last_run_ms: int
    uncleanable_partitions_count: int
    dead_thread_count: int


class LogCleaner:
    def __init__(self, config: CleanerConfig, log_dirs: Iterable[Path], logs: Callable[[], list[UnifiedLog]],
                 *, clock: Callable[[], int] | None = None) -> None:
        self.config = config
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.manager = LogCleanerManager(log_dirs, logs)
        self.throttler = Throttler(config.max_io_bytes_per_second)
        self.cleaners = self._make_cleaners(config, first_id=0)
        self._stop = threading.Event()
        # set when the current threads are replaced by a reconfiguration
        self._retire = threading.Event()
        self._wake = threading.Event()
        self._started = False
        self._threads: list[threading.Thread] = []
        # threads of an earlier configuration finishing their round
        self._retiring: list[threading.Thread] = []
        self._last_stats: dict[int, CleanerStats] = {}
        self._last_run_ms = self._clock()
        self.rounds = 0

    def _make_cleaners(self, config: CleanerConfig, first_id: int) -> list[Cleaner]:
        # a cleaner's key map is allocated on its first round, in its own thread
        per_thread = max(config.dedupe_buffer_size // max(config.num_threads, 1), 1024 * 1024)
        return [
            Cleaner(first_id + i, per_thread, io_buffer_size=config.io_buffer_size // 2 or 1,
                    load_factor=config.io_buffer_load_factor, throttler=self.throttler, clock=self._clock,
                    check_done=self.manager.check_done)
            for i in range(max(config.num_threads, 1))
        ]

    def startup(self) -> None:
        self._started = True
        if not self.config.enable:
            return
        self._start_threads()

    def _start_threads(self) -> None:
        retire = self._retire
        for cleaner in self.cleaners:
            t = threading.Thread(target=self._run, args=(cleaner, retire),
                                 name=f"kafka-log-cleaner-thread-{cleaner.id}", daemon=True)
            t.start()
            self._threads.append(t)

    @staticmethod
    def validate_reconfiguration(current: CleanerConfig, new: CleanerConfig) -> None:
        """Kafka's LogCleaner.validateReconfiguration: ValueError with Kafka's message for a thread count
        below 1, below half the current one or above double it."""
        threads, now = new.num_threads, current.num_threads
        if threads < 1:
            raise ValueError("Log cleaner threads should be at least 1")
        if threads < now // 2:
            raise ValueError(f"Log cleaner threads cannot be reduced to less than half the current value {now}")
        if threads > now * 2:
            raise ValueError(f"Log cleaner threads cannot be increased to more than double the current value {now}")

    def reconfigure(self, config: CleanerConfig) -> None:
        """Apply new settings without blocking (an event loop calls this): the throttle and the backoff at
        once, new threads for a new thread count or buffer size."""
        old, self.config = self.config, config
        self.throttler.rate = config.max_io_bytes_per_second
        if (old.num_threads, old.dedupe_buffer_size, old.io_buffer_size, old.io_buffer_load_factor) == \
                (config.num_threads, config.dedupe_buffer_size, config.io_buffer_size, config.io_buffer_load_factor):
            self._wake.set()  # a sleeping thread picks up the new backoff now
            return
        self._retire.set()
        self._retire = threading.Event()
        self._retiring = [t for t in self._retiring + self._threads if t.is_alive()]
        self._threads = []
        next_id = max((c.id for c in self.cleaners), default=-1) + 1
        self.cleaners = self._make_cleaners(config, first_id=next_id)
        log.info("log cleaner reconfigured: %d thread(s), dedupe buffer %d bytes, I/O buffer %d bytes, "
                 "load factor %s", config.num_threads, config.dedupe_buffer_size, config.io_buffer_size,
                 config.io_buffer_load_factor)
        self._wake.set()
        if self._started and config.enable and not self._stop.is_set():
            self._start_threads()

    @property
    def live_threads(self) -> int:
        """Threads of the current configuration that are running."""
        return sum(1 for t in self._threads if t.is_alive())

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self.manager.abort_all()
        self._wake.set()
        for t in self._retiring + self._threads:
            t.join(timeout_s)

    def wake(self) -> None:
        """Look for work now rather than after the backoff (a test, a config change)."""
        self._wake.set()

    def abort_cleaning(self, tp: TopicPartition) -> None:
        self.manager.abort_cleaning(tp)

    def _run(self, cleaner: Cleaner, retire: threading.Event) -> None:
        while not self._stop.is_set() and not retire.is_set():
            try:
                worked = self.clean_once(cleaner)
            except Exception:  # noqa: BLE001 - a cleaner thread must not die of one bad round
                log.exception("Cleaner %d: unexpected failure", cleaner.id)
                worked = False
            if not worked and not retire.is_set():
                self._wake.wait(self.config.backoff_ms / 1000)
                self._wake.clear()

    def clean_once(self, cleaner: Cleaner | None = None) -> bool:
        """One round of one cleaner on the filthiest log; False if no log needed cleaning."""
        cleaner = cleaner or self.cleaners[0]
        ltc = self.manager.grab_filthiest_log(self._clock())
        if ltc is None:
            return False
        plog = ltc.log
        tp = plog.topic_partition
        end_offset: int | None = None
        try:
            end_offset, stats = cleaner.clean(ltc)
            self._last_stats[cleaner.id] = stats
            self.rounds += 1
            log.info(
                "Cleaner %d: cleaned %s: %.1f MB of log in %.2f s (%.1f MB/s), %.1f%% of it kept; "
                "%d messages read, %d kept; map %d entries, %.1f%% full",
                cleaner.id, tp, stats.filter.bytes_read / 1e6, stats.elapsed_s,
                stats.filter.bytes_read / 1e6 / max(stats.elapsed_s, 1e-9), 100 * stats.recopy_ratio,
                stats.filter.messages_read, stats.filter.messages_retained, stats.map_entries,
                100 * stats.buffer_utilization)
        except LogCleaningAbortedError as e:
            log.info("Cleaner %d: %s", cleaner.id, e)
        except Exception as e:  # noqa: BLE001 - corrupt data, a failing disk: this partition only
            log.error("Cleaner %d: cannot clean %s, it is marked uncleanable: %s", cleaner.id, tp, e)
            self.manager.mark_uncleanable(tp)
        finally:
            self.manager.done_cleaning(plog, end_offset)
            self._last_run_ms = self._clock()
        return True

    def metrics(self) -> CleanerMetrics:
        stats = list(self._last_stats.values())
        recopy = sum(s.recopy_ratio for s in stats) / len(stats) if stats else 0.0
        dead = sum(1 for t in self._threads if not t.is_alive()) if not self._stop.is_set() else 0
        return CleanerMetrics(
            max_dirty_percent=int(100 * self.manager.dirtiest_ratio),
            cleaner_recopy_percent=int(100 * recopy),
            max_clean_time_secs=int(max((s.elapsed_s for s in stats), default=0.0)),
            max_buffer_utilization_percent=int(100 * max((s.buffer_utilization for s in stats), default=0.0)),
            time_since_last_run_ms=max(self._clock() - self._last_run_ms, 0),
            uncleanable_partitions_count=len(self.manager.uncleanable),
            dead_thread_count=dead,
        )
