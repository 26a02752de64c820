"""A good client's produce latency during a flood of bad connections, beside the same client alone, in
one run against one broker.

A real broker (``tieredlog broker`` subprocess) with ``max.connections.per.ip=20``. A prober sends one
small acks=1 Produce at a time to a quiet topic and times each round trip, first for
``FLOOD_BENCH_SECONDS`` (default 10) with nothing else running, then for as long again while
``FLOOD_BENCH_PROCESSES`` (default 2) flood processes open ``FLOOD_BENCH_RATE`` (default 500) bad
connections a second between them from 127.0.0.2-127.0.0.6, then once more with the flood as fast as the
processes go. Each bad connection sends one of: a garbage frame, an oversized or negative size prefix, random bytes then
EOF, half a frame then EOF; or they open 25 connections at once from one address, 5 beyond its limit
(refused at accept), and close them. Printed: the prober's p50 / p99 / max in both phases with their ratios, and the bad
connections the broker took and closed per second.

    .venv/bin/python -m bench bench_flood      # or: make bench-flood
    FLOOD_BENCH_SECONDS=5 .venv/bin/python -m bench bench_flood

The flood and the prober share the machine's cores with the broker, so part of any latency change is the
flood's own CPU; the figure says what a client sees, not what the broker alone costs.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.latency_probe import p50_p99_max, probe

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "tests" / "harness"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

SECONDS = float(os.environ.get("FLOOD_BENCH_SECONDS", "10"))
PROCESSES = int(os.environ.get("FLOOD_BENCH_PROCESSES", "2"))
RATE = float(os.environ.get("FLOOD_BENCH_RATE", "500"))
KINDS = ("garbage", "oversized", "random", "half", "surplus")
PER_IP = 20


def _connect(port: int, source: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close: no TIME_WAIT
    return s


def _surplus(port: int, source: str) -> int:
    """More connections from one address than max.connections.per.ip allows, then all closed."""
    held = []
    try:
        for _ in range(PER_IP + 5):
            held.append(_connect(port, source))
    finally:
        for s in held:
            s.close()
    return len(held)


def _one_bad_connection(port: int, source: str, kind: str, rnd: random.Random) -> int:
    if kind == "surplus":
        return _surplus(port, source)
    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close: no TIME_WAIT
    try:
        if kind == "garbage":
            s.sendall(struct.pack(">i", 40) + rnd.randbytes(40))
        elif kind == "oversized":
            s.sendall(struct.pack(">i", rnd.choice([0x7FFFFFFF, 200 << 20, -1, 3])) + rnd.randbytes(16))
        elif kind == "random":
            s.sendall(rnd.randbytes(rnd.randint(1, 300)))
        elif kind == "half":
            s.sendall(struct.pack(">i", 1000) + rnd.randbytes(100))
        s.shutdown(socket.SHUT_WR)
        try:
            while s.recv(65536):  # until the broker closes it
                pass
        except OSError:
            pass
    finally:
        s.close()
    return 1


def _flood(port: int, seed: int, deadline: float, rate: float,
           count: "multiprocessing.Value") -> None:  # type: ignore[type-arg]
    rnd = random.Random(seed)
    done = 0
    start = time.monotonic()
    while time.monotonic() < deadline:
        if rate and done > rate * (time.monotonic() - start):
            time.sleep(0.002)
            continue
        source = f"127.0.0.{rnd.randint(2, 6)}"
        try:
            done += _one_bad_connection(port, source, rnd.choice(KINDS), rnd)
        except OSError:
            pass  # refused or reset: the broker defending itself is the point
    with count.get_lock():
        count.value += done


def _phase(bootstrap: str, port: int, rate: float | None) -> tuple[list[float], float]:
    """The prober's round trips alone (``rate`` None) or during a flood of ``rate`` bad connections a
    second (0: as fast as the flood processes go)."""
    lat: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=probe, args=(bootstrap, "quiet", stop, lat), daemon=True)
    count = multiprocessing.Value("q", 0)
    procs = []
    prober.start()
    time.sleep(0.5)  # the prober's connection and first round trips before the clock starts
    warm = len(lat)
    if rate is not None:
        deadline = time.monotonic() + SECONDS
        procs = [multiprocessing.Process(target=_flood, args=(port, i, deadline, rate / PROCESSES, count), daemon=True)
                 for i in range(PROCESSES)]
        for proc in procs:
            proc.start()
    time.sleep(SECONDS)
    for proc in procs:
        proc.join(30)
    stop.set()
    prober.join(30)
    return lat[warm:], count.value / SECONDS


def main() -> None:
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory() as d:
        b = BrokerProcess(Path(d) / "data", {"offsets.topic.num.partitions": "1",
                                             "remote.log.storage.system.enable": "false",
                                             "max.connections.per.ip": str(PER_IP)}).start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            admin.create_topics([NewTopic("quiet", 1, 1)])["quiet"].result(30)
            del admin
            print(f"{SECONDS:.0f} s per phase, {PROCESSES} flood processes, max.connections.per.ip={PER_IP}")
            print(f"{'good producer':<22}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'probes':>8}{'bad conn/s':>12}")
            results = {}
            phases = (("alone", None), (f"flood {RATE:.0f}/s", RATE), ("flood, unthrottled", 0.0))
            for label, rate in phases:
                lat, done = _phase(b.bootstrap, b.port, rate)
                results[label] = p50_p99_max(lat)
                p50, p99, mx = results[label]
                print(f"{label:<22}{p50:9.2f}{p99:9.2f}{mx:9.1f}{len(lat):8d}{done:12.0f}")
            a50, a99, amax = results["alone"]
            for label, _ in phases[1:]:
                f50, f99, fmax = results[label]
                print(f"{label} / alone: p50 {f50 / a50:.2f}x, p99 {f99 / a99:.2f}x, max {fmax / amax:.2f}x")
            if not b.alive():
                raise RuntimeError("the broker died during the flood")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
