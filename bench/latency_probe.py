"""The quiet-partition produce prober the latency benchmarks share: one small acks=1 Produce at a
time to a topic nothing else writes, each round trip timed."""

from __future__ import annotations

import statistics
import threading
import time

PROBE_INTERVAL_S = 0.005


def probe(bootstrap: str, topic: str, stop: threading.Event, out: list[float]) -> None:
    """Append each round trip in milliseconds to ``out`` until ``stop`` is set."""
    from tieredlog.protocol.api import PRODUCE
    from tieredlog.protocol.client import KafkaClient
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
