"""How long a consumer group takes to settle after one member leaves, per group protocol, in one run.

A group of 6 confluent-kafka consumers on a 24-partition topic (4 partitions each) settles; then one member
closes (it leaves the group) and the clock runs until the 5 others together own all 24 partitions again,
each exactly once, balanced (4 or 5 each), as the consumers themselves report them. Three protocols:
- classic, eager (partition.assignment.strategy=range): every member gives up everything and rejoins;
- classic, cooperative (cooperative-sticky): two rebalances, only the moved partitions are revoked;
- KIP-848 (group.protocol=consumer, server-side uniform assignor): no rebalance barrier, members
  converge one heartbeat at a time.
Heartbeat intervals are each protocol's Kafka default (classic heartbeat.interval.ms 3000, the broker's
group.consumer.heartbeat.interval.ms 5000) unless REBALANCE_HEARTBEAT_MS sets both; the broker's
group.initial.rebalance.delay.ms is 0. The leave comes at a random moment of the heartbeat cycle (after
1 s plus a uniform draw over one heartbeat interval), since the others learn of it at their next heartbeat.
REBALANCE_BENCH_REPEATS (default 5) leaves per protocol; the median is printed with the min and max.

    .venv/bin/python -m bench bench_rebalance      # or: make bench-rebalance
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

MEMBERS = 6
PARTITIONS = 24
REPEATS = int(os.environ.get("REBALANCE_BENCH_REPEATS", "5"))
HEARTBEAT_MS = os.environ.get("REBALANCE_HEARTBEAT_MS")
TIMEOUT_S = 120.0


class Member(threading.Thread):
    def __init__(self, config: dict, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(config)
        self.consumer.subscribe([topic])
        self.assigned: frozenset[int] = frozenset()
        self.leave = threading.Event()
        self.closed = threading.Event()

    def run(self) -> None:
        c = self.consumer
        while not self.leave.is_set():
            c.poll(0.02)
            self.assigned = frozenset(tp.partition for tp in c.assignment())
        c.close()
        self.closed.set()


def settled(members: list[Member]) -> bool:
    owned = [m.assigned for m in members]
    total = sum(len(a) for a in owned)
    union = frozenset().union(*owned)
    sizes = [len(a) for a in owned]
    return total == PARTITIONS and len(union) == PARTITIONS and max(sizes) - min(sizes) <= 1


def wait_settled(members: list[Member]) -> float:
    t0 = time.perf_counter()
    while not settled(members):
        if time.perf_counter() - t0 > TIMEOUT_S:
            raise RuntimeError(f"group did not settle within {TIMEOUT_S}s: {[sorted(m.assigned) for m in members]}")
        time.sleep(0.005)
    return time.perf_counter() - t0


def one_leave(bootstrap: str, topic: str, group: str, config: dict, interval_s: float) -> float:
    base = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **config}
    members = [Member(base, topic) for _ in range(MEMBERS)]
    for m in members:
        m.start()
    wait_settled(members)
    time.sleep(1.0 + random.uniform(0, interval_s))  # settled for good; then any phase of the heartbeats
    leaving = members.pop()
    t0 = time.perf_counter()
    leaving.leave.set()
    while not settled(members) or not leaving.closed.is_set() and any(
            p in leaving.assigned for m in members for p in m.assigned):
        if time.perf_counter() - t0 > TIMEOUT_S:
            raise RuntimeError("group did not settle after the leave")
        time.sleep(0.005)
    elapsed = time.perf_counter() - t0
    for m in members:
        m.leave.set()
    for m in members + [leaving]:
        m.join(60)
    return elapsed


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, NewTopic

    classic_hb = HEARTBEAT_MS or "3000"
    overrides = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
    if HEARTBEAT_MS:
        overrides["group.consumer.heartbeat.interval.ms"] = HEARTBEAT_MS
    modes = {
        "classic eager (range)": {"partition.assignment.strategy": "range", "heartbeat.interval.ms": classic_hb,
                                  "session.timeout.ms": "45000"},
        "classic cooperative (cooperative-sticky)": {"partition.assignment.strategy": "cooperative-sticky",
                                                     "heartbeat.interval.ms": classic_hb, "session.timeout.ms": "45000"},
        "KIP-848 consumer (uniform)": {"group.protocol": "consumer"},
    }
    print(f"command: .venv/bin/python -m bench bench_rebalance  (REBALANCE_BENCH_REPEATS={REPEATS}, "
          f"REBALANCE_HEARTBEAT_MS={HEARTBEAT_MS or 'defaults: classic 3000, consumer 5000'}); {MEMBERS} members, "
          f"{PARTITIONS} partitions, one leaves; confluent-kafka, one broker, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as d:
        broker = BrokerProcess(Path(d) / "data", overrides).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("rebalance", PARTITIONS, 1)])["rebalance"].result(30)
            print(f"\n  {'protocol':<44}{'median s':>10}{'min s':>8}{'max s':>8}")
            for i, (name, config) in enumerate(modes.items()):
                interval_s = int(HEARTBEAT_MS or config.get("heartbeat.interval.ms") or 5000) / 1000
                times = [one_leave(broker.bootstrap, "rebalance", f"bench-{i}-{r}", config, interval_s)
                         for r in range(REPEATS)]
                print(f"  {name:<44}{statistics.median(times):10.2f}{min(times):8.2f}{max(times):8.2f}", flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
