"""One broker vs two brokers on this host (``tieredlog host``), loaded by a C producer (kcat).

For each N in (1, 2): a ZooKeeper, ``tieredlog host --brokers N`` on 127.0.0.1, a topic of
``HOST_BENCH_PARTITIONS`` partitions (RF 1, spread over the brokers), then ``HOST_BENCH_PRODUCERS``
kcat producers (librdkafka in C: the brokers, not the client, are what is measured) each writing its
share of ``HOST_BENCH_MB`` MB of 1 KiB records (lz4, acks=1, linger 5 ms, 1 MB batches). Printed side
by side: the aggregate produce rate (MB of record values per second, from the first kcat's start to
the last one's end), the brokers' CPU per MB (user + system of every broker process over the run,
read from /proc), the producers' CPU per MB, and the ratios 2 brokers / 1 broker.

    HOST_BENCH_MB=600 python -m bench bench_host

The ratio of rates is the scaling of one host's brokers; with fewer free cores than brokers plus
producers (a 2-core machine), the brokers share the cores with the clients and it stays below 2.
"""

from __future__ import annotations

import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.proc_cpu import cpu_seconds

MB = int(os.environ.get("HOST_BENCH_MB", "600"))
PARTITIONS = int(os.environ.get("HOST_BENCH_PARTITIONS", "4"))
PRODUCERS = int(os.environ.get("HOST_BENCH_PRODUCERS", "2"))
VALUE = 1024
READY_S = 180.0


def _records_file(path: Path, count: int) -> None:
    """``count`` newline-separated values of 1 KiB of random words (lz4 ratio ~2x, as compare.py's)."""
    rnd = random.Random(7)
    vocab = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 10))) for _ in range(2000)]
    values = [" ".join(rnd.choice(vocab) for _ in range(220)).encode()[:VALUE].ljust(VALUE, b".") for _ in range(4096)]
    with open(path, "wb") as f:
        for i in range(count):
            f.write(values[i & 4095] + b"\n")


def _cpu_s(pid: int) -> float:
    return cpu_seconds(pid)


def _children_cpu_s() -> float:
    """CPU of the child processes waited for so far: the kcat producers (the host runs until the end)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _free_base_port(n: int) -> int:
    import socket
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ok = True
        for p in range(port, port + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return port


def run(n: int, tmp: Path, zk_connect: str, data: list[Path], mb: float) -> dict[str, float]:
    base_port = _free_base_port(n)
    lines: list[str] = []
    proc = subprocess.Popen(
        [sys.executable, "-m", "tieredlog.cli", "host", "--brokers", str(n), "--zookeeper-connect", f"{zk_connect}/n{n}",
         "--base-port", str(base_port), "--dir", str(tmp / f"host{n}"), "--listen-host", "127.0.0.1",
         "--advertised-host", "127.0.0.1", "--override", "offsets.topic.replication.factor=1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()  # type: ignore[union-attr]
    try:
        deadline = time.monotonic() + READY_S
        while not any("registered" in x for x in lines):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"tieredlog host --brokers {n} did not start: {''.join(lines)[-2000:]}")
            time.sleep(0.2)
        pids = [int(m.group(1)) for x in lines if (m := re.match(r"broker \d+\s+pid (\d+)", x))]
        bootstrap = ",".join(f"127.0.0.1:{base_port + i}" for i in range(n))
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("load", PARTITIONS, 1)])["load"].result(60)
        del admin
        cpu0 = sum(_cpu_s(p) for p in pids)
        kcat0 = _children_cpu_s()
        t0 = time.perf_counter()
        producers = [subprocess.Popen(
            ["kcat", "-P", "-q", "-b", bootstrap, "-t", "load", "-l", str(f), "-X", "compression.codec=lz4",
             "-X", "acks=1", "-X", "linger.ms=5", "-X", "batch.size=1000000", "-X", "queue.buffering.max.kbytes=262144"],
            stderr=subprocess.PIPE) for f in data]
        for k in producers:
            _, err = k.communicate(timeout=600)
            if k.returncode != 0:
                raise SystemExit(f"kcat failed ({k.returncode}): {err[-500:]!r}")
        secs = time.perf_counter() - t0
        cpu = sum(_cpu_s(p) for p in pids) - cpu0
        kcat = _children_cpu_s() - kcat0
        return {"MBps": mb / secs, "cpu_ms_per_MB": 1000 * cpu / mb, "kcat_ms_per_MB": 1000 * kcat / mb,
                "secs": secs, "cpu_s": cpu}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(180)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    if shutil.which("kcat") is None:
        raise SystemExit("bench_host needs kcat (Debian package kcat; `make bench` installs it)")
    from tieredlog.tools.zookeeper_server import ZooKeeperServer

    print(f"command: python -m bench bench_host  (HOST_BENCH_MB={MB}, HOST_BENCH_PARTITIONS={PARTITIONS}, "
          f"HOST_BENCH_PRODUCERS={PRODUCERS}); kcat lz4 acks=1, 1 KiB records, {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        per = MB * 1_000_000 // VALUE // PRODUCERS
        data = [tmp / f"records{i}" for i in range(PRODUCERS)]
        for f in data:
            _records_file(f, per)
        zk = ZooKeeperServer(tmp / "zk").start()
        try:
            res = {n: run(n, tmp, zk.connect, data, PRODUCERS * per * VALUE / 1e6) for n in (1, 2)}
        finally:
            zk.stop()
    print("| brokers | produce MB/s | broker CPU ms/MB | kcat CPU ms/MB | secs |")
    print("|---|---|---|---|---|")
    for n, r in res.items():
        print(f"| {n} | {r['MBps']:.0f} | {r['cpu_ms_per_MB']:.2f} | {r['kcat_ms_per_MB']:.2f} | {r['secs']:.1f} |")
    print(f"ratio 2/1: produce rate {res[2]['MBps'] / res[1]['MBps']:.2f}, "
          f"CPU per MB {res[2]['cpu_ms_per_MB'] / res[1]['cpu_ms_per_MB']:.2f}", flush=True)


if __name__ == "__main__":
    main()
