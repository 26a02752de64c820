"""Produce latency on a quiet partition while a consumer catches up on a topic whose segments are not
in the page cache, beside the same catch-up with a warm cache.

A real broker (``tieredlog broker`` subprocess, no remote tier). A load process (confluent-kafka)
writes ``COLD_BENCH_MB`` MiB to a topic of ``COLD_BENCH_PARTITIONS`` partitions. Then, twice in one
broker, a catch-up consumer (Debian's kcat: librdkafka in C, so the broker is the bottleneck) reads
the whole topic from offset 0 while a prober sends one small acks=1 Produce at a time to a partition
of another topic nothing else writes to and times each round trip:

- warm: the segment files are in the page cache (as written);
- cold: each ``.log`` file is fsynced and dropped from the page cache first
  (``posix_fadvise(POSIX_FADV_DONTNEED)``; the dirty pages of a file are not dropped, hence the fsync).

The share of the topic's pages that are resident is checked before each run with ``preadv(...,
RWF_NOWAIT)`` of one byte every MiB (EAGAIN: not cached; such a read never waits for the disk, and
brings in at most the page it probes: 1/256 of the file) and printed. Printed: p50 / p99 / max of the prober in both runs, the catch-up rate, and the ratio;
beside them the broker's own event-loop lag (a ``sitecustomize`` on the broker's PYTHONPATH adds a
callback every 2 ms to its loop and logs how late each ran): its max and how many times it ran more
than 10 ms late during the catch-up. The prober's figures also hold its own process's and the
network's delays; the loop lag is the stall alone.

    COLD_BENCH_MB=1024 COLD_BENCH_PARTITIONS=4 python -m bench.bench_cold_reads

``COLD_BENCH_MB`` (default 1024), ``COLD_BENCH_PARTITIONS`` (default 4: one Fetch carries a region of
each), ``COLD_BENCH_VALUE`` (bytes per record, default 16384), ``COLD_BENCH_SEGMENT_MB`` (segment.bytes,
default 128), ``COLD_BENCH_RUNS`` (warm/cold pairs, default 1). kcat uses librdkafka's fetch defaults
(max.partition.fetch.bytes 1 MiB, fetch.max.bytes 50 MiB).

When the broker reads uncached pages on its event-loop thread (``sendfile`` of a cold region), every
other connection waits for the disk: the cold run's max (and p99) rise above the warm run's.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.latency_probe import p50_p99_max, probe, produce_load

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "tests" / "harness"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

MIB = 1 << 20
TOTAL_MB = int(os.environ.get("COLD_BENCH_MB", "1024"))
PARTITIONS = int(os.environ.get("COLD_BENCH_PARTITIONS", "4"))
VALUE_SIZE = int(os.environ.get("COLD_BENCH_VALUE", "16384"))
SEGMENT_MB = int(os.environ.get("COLD_BENCH_SEGMENT_MB", "128"))
RUNS = int(os.environ.get("COLD_BENCH_RUNS", "1"))
SAMPLE_STEP = MIB


LAG_TICK_S = 0.002
LAG_SHIM = f'''
import asyncio
import os
import time

_path = os.environ.get("COLD_BENCH_LOOP_LAG_FILE")
if _path:
    _run_forever = asyncio.base_events.BaseEventLoop.run_forever

    def _run_forever_timed(self):
        out = open(_path, "a", buffering=1)
        out.write(f"# loop of {{os.getpid()}}\\n")

        def tick(due):
            now = time.monotonic()
            if now - due > 0.001:
                out.write(f"{{now:.6f}} {{(now - due) * 1000:.3f}}\\n")
            self.call_at(now + {LAG_TICK_S}, tick, now + {LAG_TICK_S})

        self.call_at(self.time() + {LAG_TICK_S}, tick, time.monotonic() + {LAG_TICK_S})
        return _run_forever(self)

    asyncio.base_events.BaseEventLoop.run_forever = _run_forever_timed
'''


def _loop_lag(path: Path, start: float, end: float) -> tuple[float, int]:
    """(max lag ms, ticks more than 10 ms late) of the broker's event loop between two monotonic times."""
    lags = []
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        t, lag = line.split()
        if start <= float(t) <= end:
            lags.append(float(lag))
    return max(lags, default=0.0), sum(1 for x in lags if x > 10)


def _load(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    failed = produce_load(bootstrap, topic, count, VALUE_SIZE, partitions)
    if failed:
        raise SystemExit(f"load: {len(failed)} deliveries failed, first: {failed[:1]}")




def _log_files(data: Path, topic: str) -> list[Path]:
    return sorted(data.glob(f"{topic}-*/*.log"))


def resident_share(paths: list[Path]) -> float:
    """Share of sampled pages (one every MiB) in the page cache: ``preadv`` with RWF_NOWAIT fails
    with EAGAIN instead of waiting for the disk."""
    buf = bytearray(1)
    hit = total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            for off in range(0, size, SAMPLE_STEP):
                total += 1
                try:
                    os.preadv(fd, [buf], off, os.RWF_NOWAIT)
                    hit += 1
                except BlockingIOError:
                    pass
        finally:
            os.close(fd)
    return hit / total if total else 0.0


def evict(paths: list[Path]) -> None:
    """fsync each file (DONTNEED drops only clean pages), then drop it from the page cache."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _kcat(bootstrap: str, topic: str, records: int) -> float:
    """Seconds for kcat to read every partition from offset 0 to the end; checks the record count."""
    t0 = time.perf_counter()
    proc = subprocess.run(["kcat", "-C", "-q", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-f", "%o\\n"],
                          capture_output=True, timeout=900)
    t = time.perf_counter() - t0
    got = proc.stdout.count(b"\n")
    if proc.returncode != 0 or got != records:
        raise SystemExit(f"kcat on {topic} read {got} of {records} records (rc {proc.returncode}): {proc.stderr[-500:]!r}")
    return t


def run(bootstrap: str, topic: str, quiet: str, records: int) -> tuple[list[float], float, float, float]:
    """(prober latencies ms, catch-up seconds, monotonic start and end of the catch-up)."""
    lat: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=probe, args=(bootstrap, quiet, stop, lat), daemon=True)
    prober.start()
    time.sleep(0.5)
    first = len(lat)
    start = time.monotonic()
    try:
        secs = _kcat(bootstrap, topic, records)
    finally:
        end = time.monotonic()
        stop.set()
        prober.join(30)
    return lat[first:], secs, start, end




def main() -> None:
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, NewTopic

    if shutil.which("kcat") is None:
        raise SystemExit("bench_cold_reads needs kcat (Debian package kcat; `make bench` installs it)")
    if not hasattr(os, "RWF_NOWAIT"):
        raise SystemExit("bench_cold_reads needs os.RWF_NOWAIT (Linux 4.14+) to check page-cache residency")
    records = (TOTAL_MB * MIB) // VALUE_SIZE
    with tempfile.TemporaryDirectory() as d:
        data = Path(d) / "data"
        shim = Path(d) / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(LAG_SHIM)
        lag_file = Path(d) / "loop-lag.txt"
        lag_file.touch()
        saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "COLD_BENCH_LOOP_LAG_FILE")}
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), saved["PYTHONPATH"]) if p)
        os.environ["COLD_BENCH_LOOP_LAG_FILE"] = str(lag_file)
        try:
            b = BrokerProcess(data, {"offsets.topic.num.partitions": "1", "remote.log.storage.system.enable": "false",
                                     "message.max.bytes": str(2 << 20)}).start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        if not lag_file.read_text().startswith("#"):
            b.stop()
            raise SystemExit("the broker did not load the loop-lag sitecustomize (another one first on its path?)")
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            topics = [NewTopic("quiet", 1, 1),
                      NewTopic("catchup", PARTITIONS, 1, config={"segment.bytes": str(SEGMENT_MB * MIB)})]
            for f in admin.create_topics(topics).values():
                f.result(30)
            del admin  # its background thread would log every reconnect after the broker stops
            t0 = time.perf_counter()
            loader = multiprocessing.Process(target=_load, args=(b.bootstrap, "catchup", records, PARTITIONS))
            loader.start()
            loader.join(900)
            if loader.exitcode != 0:
                raise RuntimeError(f"the load process failed ({loader.exitcode})")
            files = _log_files(data, "catchup")
            size = sum(f.stat().st_size for f in files)
            print(f"{size / MIB:.0f} MiB in {len(files)} segment files over {PARTITIONS} partition(s), "
                  f"{VALUE_SIZE >> 10} KiB values, written in {time.perf_counter() - t0:.1f} s; "
                  f"catch-up with kcat from offset 0")
            print(f"{'':<10}{'':>9}{'quiet partition produce':^34}{'':>16}{'broker event loop':^22}")
            print(f"{'catch-up':<10}{'resident':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'probes':>7}"
                  f"{'MiB/s':>16}{'max lag ms':>12}{'>10 ms':>10}")
            results: dict[str, list[tuple[float, ...]]] = {"warm": [], "cold": []}
            for _ in range(RUNS):
                for label in ("warm", "cold"):
                    if label == "cold":
                        evict(files)
                    share = resident_share(files)
                    lat, secs, start, end = run(b.bootstrap, "catchup", "quiet", records)
                    p50, p99, mx = p50_p99_max(lat)
                    rate = size / MIB / secs
                    lag_max, late = _loop_lag(lag_file, start, end)
                    results[label].append((p50, p99, mx, rate, lag_max, late))
                    print(f"{label:<10}{share:9.0%}{p50:9.1f}{p99:9.1f}{mx:9.1f}{len(lat):7d}{rate:16.1f}"
                          f"{lag_max:12.1f}{late:10d}")
            (w50, w99, wmax, wrate, wlag, _), (c50, c99, cmax, crate, clag, _) = (
                tuple(statistics.median(r[i] for r in results[k]) for i in range(6)) for k in ("warm", "cold"))
            if RUNS > 1:
                print(f"{'medians':<10}")
                for k in ("warm", "cold"):
                    m = [statistics.median(r[i] for r in results[k]) for i in range(6)]
                    print(f"{k:<10}{'':>9}{m[0]:9.1f}{m[1]:9.1f}{m[2]:9.1f}{'':>7}{m[3]:16.1f}{m[4]:12.1f}{m[5]:10.0f}")
            print(f"cold / warm: p50 {c50 / w50:.2f}x, p99 {c99 / w99:.2f}x, max {cmax / wmax:.2f}x, "
                  f"loop max lag {clag / max(wlag, 0.001):.2f}x, catch-up rate {crate / wrate:.2f}x")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
