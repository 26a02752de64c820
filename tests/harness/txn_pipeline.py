"""A consume-transform-produce loop with exactly-once semantics, run as its own process by
tests/coordinator/test_txn_clients.py: reads `input` (read_committed, offsets from the group), writes
`out-<value>` to `output` and commits the consumed offsets inside the same transaction.

    python tests/harness/txn_pipeline.py BOOTSTRAP INPUT OUTPUT TRANSACTIONAL_ID GROUP TOTAL [CRASH_AFTER]

With CRASH_AFTER, once that many transactions are committed it opens one more, writes its outputs,
flushes them to the broker, prints CRASHPOINT and waits to be killed. Without it, it stops once the
group's committed offset reaches TOTAL and prints DONE.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

BATCH = 7


def main() -> None:
    bootstrap, input_topic, output_topic, txn_id, group, total = sys.argv[1:7]
    crash_after = int(sys.argv[7]) if len(sys.argv) > 7 else -1
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(input_topic, 0)])  # from the group's committed offset
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    producer.init_transactions(60)
    committed = 0
    position = 0
    deadline = time.monotonic() + 120
    while position < int(total) and time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(num_messages=BATCH, timeout=1.0) if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(output_topic, value=b"out-" + m.value())
        position = msgs[-1].offset() + 1
        if committed == crash_after:
            producer.flush(30)
            print("CRASHPOINT", flush=True)
            time.sleep(600)
        producer.send_offsets_to_transaction([TopicPartition(input_topic, 0, position)],
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        committed += 1
    print("DONE", position, flush=True)
    consumer.close()


if __name__ == "__main__":
    main()
