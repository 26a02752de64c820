"""Client throughput against a real broker, beside a bare asyncio socket-to-file baseline.

confluent-kafka, 1 KiB random values (so lz4 cannot shrink them), lz4, 1 and 6 partitions, acks=1 and
acks=all; then consume everything back by assignment; then end-to-end latency at a fixed 20 MB/s.
Consume rows also give the time to the first record (consumer start-up, first fetch, and consume()
filling its first 10 000-message batch) and the rate after it; 200 MB topics (lz4 and uncompressed,
10 MiB and librdkafka's default 1 MiB per partition) show the steady catch-up rate and what lz4
decompression costs the client; "client alone" times only the Python poll loop over 50 MB that
librdkafka has already fetched and decompressed: the ceiling any broker sees from this client;
"broker alone" reads Fetch responses with a raw socket and decodes nothing: the broker's own rate.
The baseline is the same number of bytes sent to an asyncio server that only appends them to a file:
the ceiling for a Python broker on this machine.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

VALUE_SIZE = 1024
RECORDS = 50_000  # 50 MiB per produce run
BIG_RECORDS = 200_000  # 200 MiB topics for the steady catch-up rate (lz4 and uncompressed)
LATENCY_RATE_MB_S = 20
LATENCY_SECONDS = 4


def _baseline_server(port: int, path: str, ready) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with open(path, "ab") as f:
            while True:
                data = await reader.read(1 << 20)
                if not data:
                    break
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        writer.write(b"k")
        await writer.drain()
        writer.close()

    async def main() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", port)
        ready.set()
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())


def baseline(total_bytes: int, tmp: Path) -> float:
    """MB/s of a bare asyncio socket-to-file server receiving ``total_bytes``."""
    from broker_harness import free_port

    port = free_port()
    ready = multiprocessing.Event()
    proc = multiprocessing.Process(target=_baseline_server, args=(port, str(tmp / "baseline.bin"), ready), daemon=True)
    proc.start()
    ready.wait(10)
    chunk = os.urandom(1 << 20)
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        sent = 0
        while sent < total_bytes:
            s.sendall(chunk)
            sent += len(chunk)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
    dt = time.perf_counter() - t0
    proc.terminate()
    return total_bytes / dt / 1e6


def produce_run(bootstrap: str, topic: str, partitions: int, acks: str, compression: str = "lz4",
                records: int | None = None) -> tuple[float, float]:
    from confluent_kafka import Producer

    records = records or RECORDS
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "compression.type": compression, "linger.ms": 5,
                  "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})
    values = [os.urandom(VALUE_SIZE) for _ in range(256)]
    failed: list = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failed.append(err)

    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=values[i % 256], partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    dt = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, first: {failed[0]}")
    return records * VALUE_SIZE / dt / 1e6, records / dt


CONSUMER_CONFIG = {"group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
                   "max.partition.fetch.bytes": 10 << 20}


def consume_run(bootstrap: str, topic: str, partitions: int, expected: int, **overrides) -> dict[str, float]:
    """Consume ``expected`` records by assignment from offset 0. ``mb_s``/``rps`` count from assign()
    (connections, metadata and the first fetch included: what a 50 MB catch-up costs), ``first_ms``
    is the time to the first record and ``steady_mb_s`` the rate after it."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG, **overrides})
    n = 0
    nbytes = 0
    first = None
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    while n < expected:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                if first is None:
                    first = time.perf_counter()
                    first_bytes = len(m.value())
                n += 1
                nbytes += len(m.value())
        if time.perf_counter() - t0 > 120:
            break
    t1 = time.perf_counter()
    c.close()
    first = first or t1
    steady = (nbytes - first_bytes) / (t1 - first) / 1e6 if t1 > first else float("nan")
    return {"mb_s": nbytes / (t1 - t0) / 1e6, "rps": n / (t1 - t0), "first_ms": (first - t0) * 1000,
            "steady_mb_s": steady}


def client_only_run(bootstrap: str, topic: str, partitions: int, expected: int) -> float:
    """MB/s of the consumer's Python poll loop alone: librdkafka first fetches and decompresses
    everything into its local queue (50 MB fits in queued.max.messages.kbytes), then only the
    consume() loop is timed. The ceiling the Python client puts on any broker."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG, "queued.min.messages": 10_000_000,
                  "queued.max.messages.kbytes": 1 << 20})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    # librdkafka fetches in its own threads without consume() calls: let it fill the local queue
    # (50 MB at the rates measured above takes well under a second), then time only the Python loop
    time.sleep(1.5)
    n = 0
    nbytes = 0
    t0 = time.perf_counter()
    while n < expected:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                n += 1
                nbytes += len(m.value())
        if time.perf_counter() - t0 > 60:
            break
    dt = time.perf_counter() - t0
    c.close()
    return nbytes / dt / 1e6


def broker_only_run(bootstrap: str, topic: str, partitions: int, partition_max: int, fetches: int = 300) -> float:
    """MB/s the broker serves to a raw-socket client that only reads Fetch v12 responses into one
    buffer (no decode, no decompression): the broker alone, beside "client alone" above."""
    from tieredlog.protocol.codec import encode_request

    def request(correlation_id: int, offset: int) -> bytes:
        return encode_request(1, 12, correlation_id, "bench-raw", {
            "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": partition_max,
                 "current_leader_epoch": -1, "log_start_offset": -1} for p in range(partitions)]}],
        })

    per_partition = RECORDS // partitions
    step = max(1, min(per_partition // 2, partition_max // VALUE_SIZE))
    requests = [request(i, (i * step) % (per_partition - step)) for i in range(8)]
    host, port = bootstrap.rsplit(":", 1)
    buf = bytearray(64 << 20)
    view = memoryview(buf)

    def read_exact(sock: socket.socket, n: int) -> None:
        got = 0
        while got < n:
            k = sock.recv_into(view[got:n])
            if not k:
                raise ConnectionError("broker closed the connection")
            got += k

    total = 0
    with socket.create_connection((host, int(port))) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        for i in range(fetches):
            s.sendall(requests[i % len(requests)])
            read_exact(s, 4)
            (size,) = struct.unpack_from(">i", buf)
            read_exact(s, size)
            total += size + 4
        dt = time.perf_counter() - t0
    return total / dt / 1e6


def latency_run(bootstrap: str, topic: str) -> tuple[float, float, int]:
    """p50/p99 (ms) from produce() call to consumer receipt at a fixed 20 MB/s."""
    import threading

    from confluent_kafka import Consumer, Producer, TopicPartition

    lat: list[float] = []
    done = threading.Event()

    def consume() -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
        c.assign([TopicPartition(topic, 0, 0)])
        while not done.is_set():
            for m in c.consume(64, 0.005):  # small batches: consume() waits to fill them
                if m.error() is None:
                    (ts,) = struct.unpack_from(">d", m.value())
                    lat.append((time.time() - ts) * 1000)
        c.close()

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(1.0)  # consumer assigned before the load starts
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "compression.type": "lz4", "linger.ms": 1})
    pad = os.urandom(VALUE_SIZE - 8)
    per_sec = LATENCY_RATE_MB_S * 1_000_000 // VALUE_SIZE
    interval = 0.01
    per_tick = max(1, int(per_sec * interval))
    sent = 0
    start = time.perf_counter()
    while time.perf_counter() - start < LATENCY_SECONDS:
        tick = time.perf_counter()
        for _ in range(per_tick):
            p.produce(topic, value=struct.pack(">d", time.time()) + pad, partition=0)
            sent += 1
        p.poll(0)
        time.sleep(max(0.0, interval - (time.perf_counter() - tick)))
    p.flush(30)
    deadline = time.perf_counter() + 10
    while len(lat) < sent and time.perf_counter() < deadline:
        time.sleep(0.05)
    done.set()
    t.join()
    if not lat:
        return float("nan"), float("nan"), 0
    q = statistics.quantiles(lat, n=100)
    return q[49], q[98], len(lat)


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base = baseline(RECORDS * VALUE_SIZE, tmp)
        print(f"baseline asyncio socket->file: {base:8.1f} MB/s")
        b = BrokerProcess(tmp / "data", {"offsets.topic.num.partitions": "1", "log.segment.bytes": str(256 << 20),
                                         "rlmm.config.remote.log.metadata.topic.num.partitions": "1"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            runs = [(1, "1"), (1, "all"), (6, "1"), (6, "all")]
            topics = [NewTopic(f"bench-{n}-{a}", n, 1) for n, a in runs] + [NewTopic("bench-lat", 1, 1)]
            for f in admin.create_topics(topics).values():
                f.result(30)
            print(f"{'run':<30}{'MB/s':>9}{'records/s':>12}{'vs baseline':>13}")
            for n, a in runs:
                mb, rps = produce_run(b.bootstrap, f"bench-{n}-{a}", n, a)
                print(f"{f'produce p={n} acks={a} lz4':<30}{mb:9.1f}{rps:12.0f}{mb / base:12.2f}x")
            for codec in ("lz4", "none"):
                admin.create_topics([NewTopic(f"bench-big-{codec}", 1, 1)])[f"bench-big-{codec}"].result(30)
                mb, rps = produce_run(b.bootstrap, f"bench-big-{codec}", 1, "1", codec, BIG_RECORDS)
                print(f"{f'produce p=1 acks=1 {codec} 200MB':<30}{mb:9.1f}{rps:12.0f}{mb / base:12.2f}x")
            print(f"{'':<64}{'first rec':>10}{'after it':>10}")
            consumes = [(f"consume p={n}", f"bench-{n}-1", n, RECORDS, {}) for n in (1, 6)] + [
                (f"consume p=1 {codec} 200MB{suffix}", f"bench-big-{codec}", 1, BIG_RECORDS, overrides)
                for codec in ("lz4", "none")
                for suffix, overrides in (("", {}), (" 1MiB/p", {"max.partition.fetch.bytes": 1 << 20}))
            ]
            for label, topic, n, count, overrides in consumes:
                r = consume_run(b.bootstrap, topic, n, count, **overrides)
                print(f"{label:<30}{r['mb_s']:9.1f}{r['rps']:12.0f}{r['mb_s'] / base:12.2f}x"
                      f"{r['first_ms']:8.1f} ms{r['steady_mb_s']:7.0f} MB/s")
            for n, pmax in ((1, 10 << 20), (1, 1 << 20), (6, 1 << 20)):
                mb = broker_only_run(b.bootstrap, f"bench-{n}-1", n, pmax)
                label = f"broker alone p={n} {pmax >> 20}MiB/p"
                print(f"{label:<30}{mb:9.1f}{'':12}{mb / base:12.2f}x  (Fetch v12 read into a buffer, no decode)")
            mb = client_only_run(b.bootstrap, "bench-1-1", 1, RECORDS)
            print(f"{'client alone: poll loop':<30}{mb:9.1f}{mb * 1e6 / VALUE_SIZE:12.0f}{mb / base:12.2f}x"
                  "  (50 MB already fetched+decompressed by librdkafka)")
            p50, p99, count = latency_run(b.bootstrap, "bench-lat")
            print(f"end-to-end latency at {LATENCY_RATE_MB_S} MB/s: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({count} records)")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
