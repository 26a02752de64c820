"""What bounding request lengths (tieredlog/protocol/guard.py) costs on the produce and fetch paths.

Two figures per request shape, in one run:
- the guard's time per request, and kio's whole decode of the same frame (the guard runs before it),
  timed in this process over the exact frames sent below;
- the broker's CPU per request, from /proc of a real ``tieredlog broker`` process, while a raw-socket
  client sends the same frames one after another (Produce acks=1 of one 16 KiB batch to 1 and to 6
  partitions; Fetch of 1 and of 6 partitions returning 64 KiB each).
Printed ratio: guard time / broker CPU per request, the share of the broker's work the guard adds.

    python -m bench.bench_request_guard         (GUARD_BENCH_REQUESTS=3000 sets the request count)
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import tempfile
import timeit
from pathlib import Path

from bench.proc_cpu import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "tests" / "harness"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

REQUESTS = int(os.environ.get("GUARD_BENCH_REQUESTS", "3000"))
BATCH_BYTES = 16 * 1024
FETCH_BYTES = 64 * 1024


def _batch() -> bytes:
    from tieredlog.records.record import build_batch  # noqa: PLC0415

    return build_batch([(None, os.urandom(1024)) for _ in range(BATCH_BYTES // 1024)])


def _produce(topic: str, partitions: int, correlation_id: int, batch: bytes) -> bytes:
    from tieredlog.protocol.codec import encode_request

    return encode_request(0, 9, correlation_id, "bench", {
        "transactional_id": None, "acks": 1, "timeout": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": p, "records": batch} for p in range(partitions)]}],
    })  # fmt: skip


def _fetch(topic: str, partitions: int, correlation_id: int) -> bytes:
    from tieredlog.protocol.codec import encode_request

    return encode_request(1, 12, correlation_id, "bench", {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 64 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": FETCH_BYTES} for p in range(partitions)]}],
    })  # fmt: skip


def _recv_frame(s: socket.socket) -> None:
    head = b""
    while len(head) < 4:
        head += s.recv(4 - len(head))
    left = struct.unpack(">i", head)[0]
    while left:
        left -= len(s.recv(min(left, 1 << 20)))


def _cpu_s(pid: int) -> float:
    return cpu_seconds(pid)


def _broker_cpu_per_request(pid: int, port: int, frame: bytes, n: int) -> float:
    with socket.create_connection(("127.0.0.1", port)) as s:
        for _ in range(50):  # warm the codecs and the page cache
            s.sendall(frame)
            _recv_frame(s)
        before = _cpu_s(pid)
        for _ in range(n):
            s.sendall(frame)
            _recv_frame(s)
        return (_cpu_s(pid) - before) / n


def _guard_and_decode_us(frame: bytes) -> tuple[float, float]:
    from tieredlog.protocol.codec import _request_codec, decode_request

    payload = frame[4:]
    api_key, version = struct.unpack_from(">hh", payload, 0)
    _cls, check_header, check_body, *_ = _request_codec(api_key, version)
    end = len(payload)
    n = 20000
    guard = min(timeit.repeat(lambda: check_body(payload, check_header(payload, 0, end), end), number=n, repeat=3)) / n
    decode = min(timeit.repeat(lambda: decode_request(payload), number=n, repeat=3)) / n
    return guard * 1e6, decode * 1e6


def main() -> None:
    from broker_harness import BrokerProcess

    from tieredlog.clients.blocking import KafkaClient

    batch = _batch()
    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp) / "data", {"num.partitions": "6", "metrics.port": "0"}).start()
        try:
            with KafkaClient(b.bootstrap) as c:
                c.request(3, {"topics": [{"name": "guard"}], "allow_auto_topic_creation": True}, version=9)
            # enough data that every fetch returns FETCH_BYTES per partition
            fill = _produce("guard", 6, 1, batch)
            with socket.create_connection((b.host, b.port)) as s:
                for _ in range(8):
                    s.sendall(fill)
                    _recv_frame(s)
            cases = [
                ("Produce v9, 1 x 16 KiB batch", _produce("guard", 1, 7, batch)),
                ("Produce v9, 6 x 16 KiB batches", _produce("guard", 6, 7, batch)),
                ("Fetch v12, 1 partition x 64 KiB", _fetch("guard", 1, 7)),
                ("Fetch v12, 6 partitions x 64 KiB", _fetch("guard", 6, 7)),
            ]
            print(f"{'request':34} {'guard':>8} {'kio decode':>11} {'broker CPU':>11} {'guard/broker':>13}")
            for name, frame in cases:
                guard_us, decode_us = _guard_and_decode_us(frame)
                cpu_us = _broker_cpu_per_request(b.proc.pid, b.port, frame, REQUESTS) * 1e6
                print(f"{name:34} {guard_us:6.2f}us {decode_us:9.2f}us {cpu_us:9.1f}us {guard_us / cpu_us:12.1%}", flush=True)
        finally:
            b.stop()


if __name__ == "__main__":
    main()
