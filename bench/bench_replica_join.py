"""A new replica joining a partition whose history is mostly in the remote tier.

Two broker processes on one real ZooKeeper, sharing one remote tier (a LocalTieredStorage folder, as
they would share a bucket). Three one-partition topics, each written to broker 1 alone, then given a
second replica on broker 2 with AlterPartitionReassignments ([1] -> [1, 2]); measured from the request
to the Metadata answer listing broker 2 in the ISR:

- ``tiered``: ``REPLICA_JOIN_REMOTE_GIB`` (default 4) GiB in the remote tier and about
  ``REPLICA_JOIN_LOCAL_MIB`` (default 200) MiB local (``local.retention.bytes``). Broker 2 gets
  OFFSET_MOVED_TO_TIERED_STORAGE, rebuilds its leader-epoch cache from the remote tier and copies
  only the local part;
- ``local-part``: a topic holding only as many bytes as the tiered topic keeps local, without
  tiering: the time to copy the local part alone, the target's yardstick (within 2x);
- ``full-history``: the whole history (remote + local bytes) without tiering: what joining costs when
  every byte is copied broker to broker.

Records are 16 KiB of random bytes, uncompressed; the segments are 32 MiB. Broker 2's local bytes for
each partition are printed beside the leader's.

    .venv/bin/python -m bench bench_replica_join          # or: make bench-replica-join
    REPLICA_JOIN_REMOTE_GIB=1 .venv/bin/python -m bench bench_replica_join
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REMOTE_GIB = float(os.environ.get("REPLICA_JOIN_REMOTE_GIB", "4"))
LOCAL_MIB = int(os.environ.get("REPLICA_JOIN_LOCAL_MIB", "200"))
SEGMENT_BYTES = 32 << 20
VALUE_SIZE = 16 << 10
WAIT_S = 1800.0


def _wait(predicate: Any, what: str, timeout: float = WAIT_S, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = predicate()
        except (OSError, ConnectionError, TimeoutError):
            result = None
        if result:
            return result
        time.sleep(interval)
    raise TimeoutError(f"no {what} within {timeout:.0f} s")


def produce(bootstrap: str, topic: str, total_bytes: int) -> float:
    """Write ``total_bytes`` of records to partition 0; MiB/s."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "compression.type": "none", "linger.ms": 5,
                  "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20, "message.max.bytes": 1 << 20})
    values = [os.urandom(VALUE_SIZE) for _ in range(64)]
    failed: list[Any] = []
    n = total_bytes // VALUE_SIZE
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=values[i % 64], partition=0,
                          on_delivery=lambda err, _m: failed.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(300)
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, first: {failed[0]}")
    return n * VALUE_SIZE / (1 << 20) / (time.perf_counter() - t0)


def local_bytes(data_dir: Path, topic: str) -> int:
    return sum(p.stat().st_size for p in (data_dir / f"{topic}-0").glob("*.log"))


def remote_bytes(remote_dir: Path, topic: str) -> int:
    return sum(p.stat().st_size for p in remote_dir.glob(f"{topic}-*/0/*") if p.is_file())


def isr(bootstrap: str, topic: str) -> list[int]:
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import METADATA

    with KafkaClient(bootstrap, timeout=5) as c:
        r = c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    (t,) = r.topics
    return sorted(t.partitions[0].isr_nodes) if t.error_code == 0 and t.partitions else []


def add_replica(bootstrap: str, topic: str) -> float:
    """Reassign ``topic``-0 from [1] to [1, 2]; seconds until broker 2 is in the ISR."""
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import ALTER_PARTITION_REASSIGNMENTS

    t0 = time.perf_counter()
    with KafkaClient(bootstrap, timeout=30) as c:
        r = c.request(ALTER_PARTITION_REASSIGNMENTS, {"timeout_ms": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "replicas": [1, 2]}]}]}, version=0)
    errors = [p.error_code for t in r.responses for p in t.partitions]
    if r.error_code or any(errors):
        raise RuntimeError(f"reassignment of {topic} refused: {r.error_code} {errors}")
    _wait(lambda: isr(bootstrap, topic) == [1, 2], f"{topic}-0 with ISR [1, 2]", interval=0.02)
    return time.perf_counter() - t0


def controller_bootstrap(brokers: dict[int, Any]) -> str:
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import METADATA

    with KafkaClient(brokers[1].bootstrap, timeout=5) as c:
        cid = int(c.request(METADATA, {"topics": [], "allow_auto_topic_creation": False}).controller_id)
    return brokers[cid].bootstrap


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from broker_harness import BrokerProcess

    from tieredlog.cluster.zk import ZkClient
    from tieredlog.cluster.znodes import TopicAssignment
    from tieredlog.tools.zookeeper_server import ZooKeeperServer

    remote_total = int(REMOTE_GIB * (1 << 30))
    local_total = LOCAL_MIB << 20
    print(f"command: .venv/bin/python -m bench bench_replica_join  (REPLICA_JOIN_REMOTE_GIB={REMOTE_GIB:g}, "
          f"REPLICA_JOIN_LOCAL_MIB={LOCAL_MIB}); 2 brokers, segment.bytes={SEGMENT_BYTES >> 20} MiB, "
          f"{VALUE_SIZE >> 10} KiB records, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as d:
        tmp = Path(d)
        remote = tmp / "remote"
        zk = ZooKeeperServer(tmp / "zk").start()
        connect = zk.connect + "/bench"
        brokers: dict[int, BrokerProcess] = {}
        try:
            for i in (1, 2):
                brokers[i] = BrokerProcess(tmp / f"data{i}", {
                    "zookeeper.connect": connect, "broker.id": str(i), "auto.leader.rebalance.enable": "false",
                    "remote.log.storage.system.enable": "true", "rsm.config.dir": str(remote),
                    "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "1000",
                    "log.segment.delete.delay.ms": "1000", "message.max.bytes": str(2 << 20),
                    "rlmm.config.remote.log.metadata.topic.replication.factor": "2",
                }).start()
            with ZkClient(connect) as zkc:
                _wait(lambda: zkc.get_all_broker_ids() == [1, 2], "two registered brokers", 60)
            seg = {"segment.bytes": str(SEGMENT_BYTES), "min.insync.replicas": "1"}
            topics = {
                "tiered": {**seg, "remote.storage.enable": "true", "local.retention.bytes": str(local_total)},
                "local-part": seg,
                "full-history": seg,
            }
            with ZkClient(connect) as zkc:
                # written as Kafka's tools write a chosen placement: broker 1 alone holds each topic
                for t, c in topics.items():
                    zkc.set_topic_config(t, c)
                    zkc.create_topic_assignment(t, TopicAssignment.of({0: [1]}, uuid.uuid4()))
            leader = brokers[1].bootstrap
            _wait(lambda: all(isr(leader, t) == [1] for t in topics), "the topics led by broker 1", 60)

            rate = produce(leader, "tiered", remote_total + local_total)
            print(f"\nwrote {(remote_total + local_total) / (1 << 30):.2f} GiB to tiered at {rate:.0f} MiB/s; "
                  "waiting for the tiering and the local retention")
            t0 = time.perf_counter()
            _wait(lambda: local_bytes(brokers[1].data_dir, "tiered") <= local_total + 2 * SEGMENT_BYTES,
                  "tiered's local log down to local.retention.bytes", interval=0.5)
            print(f"  tiered in {time.perf_counter() - t0:.0f} s: {remote_bytes(remote, 'tiered') / (1 << 30):.2f} GiB "
                  f"remote, {local_bytes(brokers[1].data_dir, 'tiered') / (1 << 20):.0f} MiB local")
            local_now = local_bytes(brokers[1].data_dir, "tiered")
            produce(leader, "local-part", local_now)
            rate = produce(leader, "full-history", remote_total + local_total)
            print(f"wrote local-part ({local_now / (1 << 20):.0f} MiB) and full-history "
                  f"({(remote_total + local_total) / (1 << 30):.2f} GiB, {rate:.0f} MiB/s)")

            print("\nbroker 2 added as a replica of each topic, one at a time "
                  "(seconds from AlterPartitionReassignments to broker 2 in the ISR)")
            print(f"  {'topic':<14}{'join s':>9}{'leader local MiB':>18}{'new replica local MiB':>23}")
            took: dict[str, float] = {}
            for topic in ("local-part", "tiered", "full-history"):
                took[topic] = add_replica(controller_bootstrap(brokers), topic)
                print(f"  {topic:<14}{took[topic]:9.2f}{local_bytes(brokers[1].data_dir, topic) / (1 << 20):18.0f}"
                      f"{local_bytes(brokers[2].data_dir, topic) / (1 << 20):23.0f}", flush=True)
            print(f"  tiered / local-part: {took['tiered'] / took['local-part']:.2f}x (target: within 2x); "
                  f"full-history / tiered: {took['full-history'] / took['tiered']:.1f}x")
        finally:
            for b in brokers.values():
                b.stop()
            zk.stop()


if __name__ == "__main__":
    main()
