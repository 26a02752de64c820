"""Produce latency on a quiet partition while another partition of the same broker rolls big segments.

A real broker (``tieredlog broker`` subprocess). A load process (confluent-kafka, acks=1, 64 KiB random
values) writes ``ROLL_BENCH_SEGMENT_MB`` x ``ROLL_BENCH_SEGMENTS`` MiB to one partition; meanwhile a
prober sends one small acks=1 Produce request at a time to a partition of another topic that nothing
else writes to, and times each round trip. The same load runs twice in one broker: once into a topic
whose segments never fill (no roll), once into a topic with ``segment.bytes`` = the segment size, so it
rolls ``ROLL_BENCH_SEGMENTS`` times. Printed: p50 / p99 / max of the prober in both runs and the ratio.
Target: max with rolls within 3x of the max without.

    ROLL_BENCH_SEGMENT_MB=256 ROLL_BENCH_SEGMENTS=3 python -m bench.bench_roll_latency

A roll fsyncs the whole rolled segment (hundreds of MiB of dirty page cache); when that runs on the
event loop, every partition of the broker waits for it.
"""

from __future__ import annotations

import multiprocessing
import os
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

SEGMENT_MB = int(os.environ.get("ROLL_BENCH_SEGMENT_MB", "256"))
SEGMENTS = int(os.environ.get("ROLL_BENCH_SEGMENTS", "3"))
VALUE_SIZE = 64 * 1024
NO_ROLL_SEGMENT_BYTES = (1 << 31) - 1  # segment.bytes' maximum (an int32)


def _load(bootstrap: str, topic: str, total_bytes: int, done) -> None:
    failed = produce_load(bootstrap, topic, total_bytes // VALUE_SIZE, VALUE_SIZE)
    if failed:
        print(f"load: {len(failed)} deliveries failed, first: {failed[0]}", flush=True)
    done.set()




def _segments(data: Path, topic: str) -> int:
    return len(list((data / f"{topic}-0").glob("*.log")))


def run(bootstrap: str, data: Path, load_topic: str, quiet_topic: str, total_bytes: int) -> tuple[list[float], float, int]:
    lat: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=probe, args=(bootstrap, quiet_topic, stop, lat), daemon=True)
    prober.start()
    time.sleep(0.5)
    warm = len(lat)
    done = multiprocessing.Event()
    t0 = time.perf_counter()
    loader = multiprocessing.Process(target=_load, args=(bootstrap, load_topic, total_bytes, done), daemon=True)
    loader.start()
    loader.join(600)
    elapsed = time.perf_counter() - t0
    time.sleep(0.5)  # a roll's flush that outlives the load still counts
    stop.set()
    prober.join(30)
    if not done.is_set():
        raise RuntimeError("the load process did not finish")
    return lat[warm:], total_bytes / elapsed / 1e6, _segments(data, load_topic)




def main() -> None:
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, NewTopic

    total = SEGMENT_MB * SEGMENTS << 20
    seg_bytes = SEGMENT_MB << 20
    with tempfile.TemporaryDirectory() as d:
        data = Path(d) / "data"
        b = BrokerProcess(data, {"offsets.topic.num.partitions": "1", "remote.log.storage.system.enable": "false",
                                 "message.max.bytes": str(2 << 20)}).start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            topics = [NewTopic("quiet", 1, 1),
                      NewTopic("load-noroll", 1, 1, config={"segment.bytes": str(NO_ROLL_SEGMENT_BYTES)}),
                      NewTopic("load-roll", 1, 1, config={"segment.bytes": str(seg_bytes)})]
            for f in admin.create_topics(topics).values():
                f.result(30)
            del admin  # its background thread would log every reconnect after the broker stops
            print(f"{SEGMENT_MB} MiB segments, {total >> 20} MiB per run, {VALUE_SIZE >> 10} KiB values, acks=1")
            print(f"{'quiet partition produce':<28}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'probes':>8}{'load MB/s':>11}{'segments':>10}")
            results = {}
            for label, topic in (("no roll", "load-noroll"), ("rolling", "load-roll")):
                lat, mb_s, segs = run(b.bootstrap, data, topic, "quiet", total)
                p50, p99, mx = p50_p99_max(lat)
                results[label] = (p50, p99, mx)
                print(f"{label:<28}{p50:9.1f}{p99:9.1f}{mx:9.1f}{len(lat):8d}{mb_s:11.1f}{segs:10d}")
            (a50, a99, amax), (r50, r99, rmax) = results["no roll"], results["rolling"]
            verdict = "ok" if rmax <= 3 * amax else "over target"
            print(f"rolling / no roll: p50 {r50 / a50:.2f}x, p99 {r99 / a99:.2f}x, max {rmax / amax:.2f}x "
                  f"(target: max within 3x: {verdict})")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
