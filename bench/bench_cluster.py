"""A replicated cluster: leader failover time and the produce cost of replication.

Three broker processes on one real ZooKeeper (Debian's package, as the cluster tests start it).

(a) Failover: a topic with replication factor 3 and min.insync.replicas=2, an acks=all producer
    (confluent-kafka) sending one record every 10 ms; the partition's leader is killed with SIGKILL.
    Measured from the kill: the first acks=all record acknowledged (the producer notices, the
    controller elects a new leader from the ISR, the producer finds it and the ISR acknowledges),
    and the first Metadata answer naming the new leader. The median over the repeats
    (``CLUSTER_BENCH_REPEATS``, default 5); the killed broker is started again between repeats.
    A SIGKILLed broker says nothing: the controller learns of it only when its ZooKeeper session
    expires, zookeeper.session.timeout.ms after the broker's last heartbeat. An idle client pings
    every third of the timeout, so the expiry comes between 2/3 of the timeout and the whole of it
    after the kill (give or take ZooKeeper's 500 ms tick): both figures are bounded below by the
    session timeout, less up to a third. The brokers run with 6000 ms (Kafka's default is 18000) so
    the repeats stay short, and without auto.leader.rebalance.enable, so only the kill moves the
    leader. The producer's first ack then lands on whole seconds after the kill, 0-2 s
    after Metadata names the new leader: librdkafka looks again for a partition whose leader is down
    on its once-a-second topic scan.
(b) Throughput: ``CLUSTER_BENCH_RECORDS`` (default 200 000) records of 1 KiB random bytes,
    uncompressed, acks=all, into 3 partitions with replication factor 1, then the same into 3
    partitions with replication factor 3 (min.insync.replicas=2), on the same cluster in the same run,
    ``CLUSTER_BENCH_ROUNDS`` times (default 5) alternating; the medians and their ratio, the cost of
    replication. On one machine the three brokers share its cores and disk.

    .venv/bin/python -m bench bench_cluster      # or: make bench-cluster
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SESSION_TIMEOUT_MS = 6000
REPEATS = int(os.environ.get("CLUSTER_BENCH_REPEATS", "5"))
RECORDS = int(os.environ.get("CLUSTER_BENCH_RECORDS", "200000"))
# throughput rounds, RF 1 and RF 3 alternating: a run takes seconds, and on a shared machine one
# round's ratio moves with whatever else runs; the medians and the ratio of the medians are printed
ROUNDS = int(os.environ.get("CLUSTER_BENCH_ROUNDS", "5"))
VALUE_SIZE = 1024
PARTITIONS = 3
WAIT_S = 120.0


def _wait(predicate: Any, what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = predicate()
        except (OSError, ConnectionError, TimeoutError):
            result = None
        if result:
            return result
        time.sleep(0.05)
    raise TimeoutError(f"no {what} within {timeout:.0f} s")


def partition_states(bootstrap: str, topic: str) -> list[tuple[int, int, list[int]]]:
    """(leader, leader epoch, ISR) per partition, from one broker's Metadata."""
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import METADATA

    with KafkaClient(bootstrap, timeout=5) as c:
        r = c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    (t,) = r.topics
    if t.error_code != 0:
        return []
    return [(p.leader_id, p.leader_epoch, sorted(p.isr_nodes)) for p in sorted(t.partitions, key=lambda p: p.partition_index)]


def full_isr_everywhere(brokers: dict[int, Any], topic: str, partitions: int, replicas: int) -> bool:
    # a broker that just started knows no topics until the controller's UpdateMetadata: ask each
    for b in brokers.values():
        s = partition_states(b.bootstrap, topic)
        if len(s) != partitions or any(len(isr) != replicas or leader < 0 for leader, _, isr in s):
            return False
    return True


def failover_once(brokers: dict[int, Any], topic: str, zk_connect: str) -> tuple[float, float, int, bool]:
    """Kill the leader of ``topic``-0; (seconds to the first acks=all ack, seconds to Metadata naming
    the new leader, the killed broker, whether it was also the controller)."""
    from confluent_kafka import Producer

    from tieredlog.cluster.zk import ZkClient

    _wait(lambda: full_isr_everywhere(brokers, topic, 1, 3), "full ISR before the kill")
    ((leader, epoch, _),) = partition_states(brokers[1].bootstrap, topic)
    with ZkClient(zk_connect) as zk:
        was_controller = zk.get_controller_id() == leader
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "message.timeout.ms": 120000,
                  "retry.backoff.ms": 50, "retry.backoff.max.ms": 200})
    p.produce(topic, value=b"warm-up", partition=0)
    if p.flush(30) != 0:
        raise RuntimeError("the warm-up record was not acknowledged")
    survivors = [b for i, b in brokers.items() if i != leader]
    acked: list[float] = []
    failed: list[str] = []
    seen_meta: list[float] = []
    stop = threading.Event()

    def watch_metadata() -> None:
        while not stop.is_set() and not seen_meta:
            for b in survivors:
                try:
                    s = partition_states(b.bootstrap, topic)
                except (OSError, ConnectionError, TimeoutError):
                    continue
                if s and s[0][0] not in (leader, -1) and s[0][1] > epoch:
                    seen_meta.append(time.perf_counter())
                    return
            time.sleep(0.02)

    def delivered(err: Any, _msg: Any) -> None:
        if err is None:
            acked.append(time.perf_counter())
        else:
            failed.append(err.name())

    killed_at = time.perf_counter()
    brokers[leader].kill9()
    watcher = threading.Thread(target=watch_metadata, daemon=True)
    watcher.start()
    deadline = time.monotonic() + WAIT_S
    i = 0
    while not acked and time.monotonic() < deadline:
        p.produce(topic, value=b"%d" % i, partition=0, on_delivery=delivered)
        i += 1
        p.poll(0.01)
    watcher.join(WAIT_S)
    stop.set()
    p.flush(60)
    if not acked or not seen_meta:
        raise RuntimeError(f"no failover within {WAIT_S:.0f} s (delivery errors: {failed[:3]})")
    brokers[leader].start()
    return acked[0] - killed_at, seen_meta[0] - killed_at, leader, was_controller


def throughput(bootstrap: str, topic: str) -> tuple[float, float]:
    """(records/s, MiB/s) of RECORDS acks=all records of VALUE_SIZE bytes."""
    from bench.bench_clients import produce_run

    _mb, rps = produce_run(bootstrap, topic, PARTITIONS, "all", "none", RECORDS)
    return rps, rps * VALUE_SIZE / (1 << 20)


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, NewTopic

    from tieredlog.cluster.zk import ZkClient
    from tieredlog.tools.zookeeper_server import ZooKeeperServer

    print(f"command: .venv/bin/python -m bench bench_cluster  (CLUSTER_BENCH_REPEATS={REPEATS}, "
          f"CLUSTER_BENCH_RECORDS={RECORDS}, CLUSTER_BENCH_ROUNDS={ROUNDS}); 3 brokers, zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}, "
          f"auto.leader.rebalance.enable=false, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        zk = ZooKeeperServer(tmp / "zk").start()
        connect = zk.connect + "/bench"
        brokers: dict[int, BrokerProcess] = {}
        try:
            for i in (1, 2, 3):
                brokers[i] = BrokerProcess(tmp / f"data{i}", {
                    "zookeeper.connect": connect, "broker.id": str(i),
                    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    "remote.log.storage.system.enable": "false", "log.segment.bytes": str(256 << 20),
                    # no preferred-leader election of its own: a controller that just took office
                    # runs one after 5 s, and a leader moved that way mid-repeat is no failover
                    "auto.leader.rebalance.enable": "false",
                }).start()
            with ZkClient(connect) as zkc:
                _wait(lambda: zkc.get_all_broker_ids() == [1, 2, 3], "three registered brokers")
                _wait(lambda: zkc.get_controller_id() is not None, "an elected controller")
            bootstrap = ",".join(b.bootstrap for b in brokers.values())
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for f in admin.create_topics([NewTopic("failover", 1, 3, config={"min.insync.replicas": "2"})]).values():
                f.result(30)

            print(f"\n(a) failover: RF 3, min.insync.replicas=2, acks=all, leader SIGKILLed; {REPEATS} repeats")
            to_ack: list[float] = []
            to_meta: list[float] = []
            for r in range(REPEATS):
                ack_s, meta_s, killed, was_controller = failover_once(brokers, "failover", connect)
                to_ack.append(ack_s)
                to_meta.append(meta_s)
                role = "leader and controller" if was_controller else "leader"
                print(f"  repeat {r + 1}: killed broker {killed} ({role}): first acks=all ack after {ack_s:6.2f} s, "
                      f"new leader in Metadata after {meta_s:6.2f} s")
            print(f"  median: first acks=all ack after {statistics.median(to_ack):.2f} s, new leader in Metadata "
                  f"after {statistics.median(to_meta):.2f} s")
            print(f"  (bounded below by zookeeper.session.timeout.ms = {SESSION_TIMEOUT_MS / 1000:.1f} s, run short here: "
                  "the controller learns of a SIGKILLed broker when its ZooKeeper session expires, the timeout after "
                  "its last heartbeat, which came up to a third of the timeout before the kill; the producer finds the new "
                  "leader on librdkafka's once-a-second topic scan)")

            _wait(lambda: full_isr_everywhere(brokers, "failover", 1, 3), "full ISR after the last repeat")
            topics = [NewTopic("tput-rf3", PARTITIONS, 3, config={"min.insync.replicas": "2"}),
                      NewTopic("tput-rf1", PARTITIONS, 1)]
            for f in admin.create_topics(topics).values():
                f.result(30)
            _wait(lambda: full_isr_everywhere(brokers, "tput-rf3", PARTITIONS, 3), "tput-rf3's full ISR")
            _wait(lambda: full_isr_everywhere(brokers, "tput-rf1", PARTITIONS, 1), "tput-rf1's leaders")
            print(f"\n(b) produce throughput: {RECORDS} records of {VALUE_SIZE} B, uncompressed, acks=all, "
                  f"{PARTITIONS} partitions, same cluster, {ROUNDS} rounds")
            print(f"  {'run':<40}{'records/s':>12}{'MiB/s':>9}")
            rates: dict[str, list[float]] = {"tput-rf1": [], "tput-rf3": []}
            labels = {"tput-rf1": "RF 1", "tput-rf3": "RF 3 (min.insync.replicas=2)"}
            for r in range(ROUNDS):
                for topic in ("tput-rf1", "tput-rf3"):
                    rps, mib = throughput(bootstrap, topic)
                    rates[topic].append(rps)
                    print(f"  {f'round {r + 1}: {labels[topic]}':<40}{rps:12.0f}{mib:9.1f}")
            med1, med3 = statistics.median(rates["tput-rf1"]), statistics.median(rates["tput-rf3"])
            for topic, med in (("tput-rf1", med1), ("tput-rf3", med3)):
                print(f"  {f'median: {labels[topic]}':<40}{med:12.0f}{med * VALUE_SIZE / (1 << 20):9.1f}")
            isr_after = [len(isr) for _, _, isr in partition_states(brokers[1].bootstrap, "tput-rf3")]
            print(f"  RF 3 / RF 1 (medians): {med3 / med1:.2f}x  (ISR sizes after the RF 3 runs: {isr_after})")
        finally:
            for b in brokers.values():
                b.stop()
            zk.stop()


if __name__ == "__main__":
    main()
