"""Transactions beside their baselines, in one run against one broker process.

1. Produce: ``TXN_BENCH_RECORDS`` (default 200,000) records of 512 B with confluent-kafka, as an
   idempotent producer (acks=all), then as a transactional producer committing every 100 records,
   then every 1,000 records; records/s of each and the ratio to idempotent.
2. Consume from the remote tier: a topic written in transactions of 1,000 records, one in ten aborted,
   tiered to a remote folder (LocalTieredStorage) and deleted locally; the tiered offsets read from 0
   with isolation.level read_uncommitted and read_committed (which skips the aborted records with the
   aborted-transaction lists the broker answers from the remote transaction indexes).

    .venv/bin/python -m bench bench_transactions      # or: make bench-transactions
    TXN_BENCH_RECORDS=50000 .venv/bin/python -m bench bench_transactions
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

RECORDS = int(os.environ.get("TXN_BENCH_RECORDS", "200000"))
VALUE = b"v" * 512
TIERED_TOPIC = "tiered-txns"
TXN_SIZE_TIERED = 1000


def produce_idempotent(bootstrap: str, topic: str) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "queue.buffering.max.kbytes": 1 << 20})
    p.produce(topic, value=VALUE)  # connections and metadata before the clock starts, as for the others
    p.flush(30)
    t0 = time.perf_counter()
    for _ in range(RECORDS):
        while True:
            try:
                p.produce(topic, value=VALUE)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300):
        raise RuntimeError("records not delivered")
    return time.perf_counter() - t0


def produce_transactional(bootstrap: str, topic: str, per_txn: int, abort_every: int = 0,
                          txn_id: str | None = None) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id or f"bench-{topic}", "linger.ms": 5,
                  "queue.buffering.max.kbytes": 1 << 20})
    p.init_transactions(60)
    p.begin_transaction()  # connections and metadata before the clock starts
    p.produce(topic, value=VALUE)
    p.commit_transaction(60)
    t0 = time.perf_counter()
    for n in range(RECORDS // per_txn):
        p.begin_transaction()
        for _ in range(per_txn):
            while True:
                try:
                    p.produce(topic, value=VALUE)
                    break
                except BufferError:
                    p.poll(0.01)
        if abort_every and n % abort_every == abort_every - 1:
            p.flush(60)
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
    return time.perf_counter() - t0


def tiered_end(bootstrap: str, topic: str) -> int:
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import LIST_OFFSETS

    with KafkaClient(bootstrap, timeout=10) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -5}]}]},
            version=9)
    return r.topics[0].partitions[0].offset + 1


def consume(bootstrap: str, topic: str, end: int, isolation: str) -> tuple[float, int]:
    """(seconds, records) of reading [0, end) of partition 0."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.max.bytes": 50 << 20,
                  "max.partition.fetch.bytes": 10 << 20})
    c.assign([TopicPartition(topic, 0, 0)])
    rows = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 300
    # the position, not the last record: the range may end in markers and aborted records
    while c.position([TopicPartition(topic, 0)])[0].offset < end and time.monotonic() < deadline:
        for m in c.consume(num_messages=10000, timeout=0.5):
            if m.error() is None and m.offset() < end:
                rows += 1
    dt = time.perf_counter() - t0
    c.close()
    return dt, rows


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, NewTopic

    print(f"command: .venv/bin/python -m bench bench_transactions  (TXN_BENCH_RECORDS={RECORDS}); 512 B records, "
          f"one partition per topic, confluent-kafka, one broker, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as d:
        tmp = Path(d)
        remote = tmp / "remote"
        broker = BrokerProcess(tmp / "data", {"rsm.config.dir": str(remote), "remote.log.manager.task.interval.ms": "500",
                                              "log.retention.check.interval.ms": "1000",
                                              "transaction.state.log.num.partitions": "3"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topics = {"idempotent": {}, "txn-100": {}, "txn-1000": {},
                      TIERED_TOPIC: {"remote.storage.enable": "true", "segment.bytes": str(8 << 20),
                                     "local.retention.ms": "1000"}}
            for f in admin.create_topics([NewTopic(t, 1, 1, config=c) for t, c in topics.items()]).values():
                f.result(30)

            base = produce_idempotent(broker.bootstrap, "idempotent")
            t100 = produce_transactional(broker.bootstrap, "txn-100", 100)
            t1000 = produce_transactional(broker.bootstrap, "txn-1000", 1000)
            print(f"\n  {'produce':<44}{'seconds':>9}{'records/s':>12}{'vs idempotent':>15}")
            for name, s in (("idempotent (acks=all)", base), ("transactional, 100 records per transaction", t100),
                            ("transactional, 1,000 records per transaction", t1000)):
                print(f"  {name:<44}{s:9.2f}{RECORDS / s:12.0f}{base / s:14.2f}x")

            produce_transactional(broker.bootstrap, TIERED_TOPIC, TXN_SIZE_TIERED, abort_every=10)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and tiered_end(broker.bootstrap, TIERED_TOPIC) < RECORDS * 0.8:
                time.sleep(1)
            time.sleep(2)
            end = tiered_end(broker.bootstrap, TIERED_TOPIC)
            local = sorted((broker.data_dir / f"{TIERED_TOPIC}-0").glob("*.log"))
            print(f"\n  tiered: offsets [0, {end}) in {len(list(remote.glob(f'{TIERED_TOPIC}-*/*/*.log')))} remote "
                  f"segments; first local segment starts at {int(local[0].stem) if local else '-'}")
            uncommitted = consume(broker.bootstrap, TIERED_TOPIC, end, "read_uncommitted")
            committed = consume(broker.bootstrap, TIERED_TOPIC, end, "read_committed")
            print(f"\n  {'consume from the remote tier':<44}{'seconds':>9}{'records':>10}{'records/s':>12}")
            for name, (s, n) in (("read_uncommitted", uncommitted), ("read_committed (aborted skipped)", committed)):
                print(f"  {name:<44}{s:9.2f}{n:10d}{n / s:12.0f}")
            print(f"\n  read_committed / read_uncommitted time: {committed[0] / uncommitted[0]:.2f}x; records "
                  f"delivered {committed[1]} of {uncommitted[1]} (one transaction in ten aborted)")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
