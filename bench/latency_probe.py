"""What the latency benchmarks share: the load producer, and the quiet-partition prober (one small
acks=1 Produce at a time to a topic nothing else writes, each round trip timed)."""

from __future__ import annotations

import os
import statistics
import threading
import time

PROBE_INTERVAL_S = 0.005


def probe(bootstrap: str, topic: str, stop: threading.Event, out: list[float]) -> None:
    """Append each round trip in milliseconds to ``out`` until ``stop`` is set."""
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import PRODUCE
    from tieredlog.records.record import build_batch

    with KafkaClient(bootstrap) as c:
        while not stop.is_set():
            body = {"transactional_id": None, "acks": 1, "timeout": 30000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": build_batch([(None, b"probe")])}]}]}
            t0 = time.perf_counter()
            r = c.request(PRODUCE, body, version=9).responses[0].partition_responses[0]
            out.append((time.perf_counter() - t0) * 1000)
            if r.error_code.value != 0:
                raise RuntimeError(f"probe produce failed: {r.error_code}")
            time.sleep(PROBE_INTERVAL_S)


def p50_p99_max(lat: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(lat, n=100, method="inclusive")  # never above the max on small samples
    return q[49], q[98], max(lat)


def produce_load(bootstrap: str, topic: str, count: int, value_size: int, partitions: int = 1) -> list[object]:
    """Write ``count`` incompressible values round-robin over ``partitions`` as fast as the broker
    takes them; returns the delivery errors. Run it in its own process: no GIL shared with the prober."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "compression.type": "none", "linger.ms": 5,
                  "batch.size": 1 << 20, "message.max.bytes": 2 << 20, "queue.buffering.max.kbytes": 256 << 10})
    values = [os.urandom(value_size) for _ in range(16)]
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for i in range(count):
        while True:
            try:
                p.produce(topic, value=values[i % len(values)], partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(300)
    if left:
        failed.append(f"{left} messages still undelivered after 300 s")
    return failed
