"""Helpers of the consumer-group tests on a cluster: FindCoordinator asked of one broker, records
produced to the three partitions of ``TOPIC``, and group members polled until they received a set of
values."""

from __future__ import annotations

from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer
from zk_harness import wait_until

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import FIND_COORDINATOR

TOPIC = "orders"


def find_coordinator(b: BrokerProcess, group: str) -> tuple[int, int]:
    """(error code, node id) of FindCoordinator v3 for ``group``, asked of ``b``."""
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(FIND_COORDINATOR, {"key": group, "key_type": 0}, version=3)
    return r.error_code, r.node_id


def produce(servers: str, values: range) -> None:
    p = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 2})
    for i in values:
        p.produce(TOPIC, value=b"%d" % i, partition=i % 3)
    assert p.flush(60) == 0


def consume_until(consumers: list[Consumer], got: dict[tuple[int, int], bytes], expected: set[bytes],
                  timeout: float) -> None:
    """Poll every consumer (a group needs all of its members polling to rebalance) until the values
    received include ``expected``; ``got`` maps (partition, offset) to the value."""
    def step() -> bool:
        for c in consumers:
            for m in c.consume(num_messages=500, timeout=0.2):
                if m.error() is None:
                    got[(m.partition(), m.offset())] = m.value()
        return expected <= set(got.values())

    wait_until(step, timeout=timeout, message=f"{len(expected)} records consumed")
