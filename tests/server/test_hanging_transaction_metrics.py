"""The hanging-transaction gauges (tieredlog/server/broker_metrics.py, open_transactions.py): scraped
from a real broker whose partitions hold transactions left open by hand (one begun an hour ago, one
now), and the open-transaction view over a real producer state as transactions begin and end."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from broker_harness import BrokerProcess
from helpers import free_port
from metrics_harness import scrape, value
from txn_helpers import HOUR_MS, create_topic, now_ms, open_transaction

from tieredlog.log.producer_state import ProducerStateManager
from tieredlog.records.batch import BatchHeader
from tieredlog.records.record import CONTROL_ABORT, ControlRecord
from tieredlog.server.open_transactions import LATE_TRANSACTION_BUFFER_MS, has_late_transaction, open_transactions

RM = "kafka_server_replicamanager_"
LOG = "kafka_log_log_"


def test_open_transactions_per_partition_and_late_partitions(broker_factory: Callable[..., BrokerProcess]) -> None:
    port = free_port()
    b = broker_factory({"metrics.port": str(port), "remote.log.storage.system.enable": "false"})
    create_topic(b.bootstrap, "txm", partitions=3)
    before = scrape(port)
    assert value(before, RM + "partitionswithlatetransactionscount") == 0
    assert value(before, LOG + "opentransactioncount", topic="txm", partition="0") is None  # none open: absent

    begun = now_ms() - HOUR_MS  # past transaction.max.timeout.ms (15 min) plus Kafka's 5 min buffer
    open_transaction(b.bootstrap, "txm", 0, producer_id=5001, timestamp_ms=begun)
    open_transaction(b.bootstrap, "txm", 0, producer_id=5002)
    open_transaction(b.bootstrap, "txm", 1, producer_id=5003)

    s = scrape(port)
    assert value(s, LOG + "opentransactioncount", topic="txm", partition="0") == 2
    assert value(s, LOG + "opentransactioncount", topic="txm", partition="1") == 1
    assert value(s, LOG + "opentransactioncount", topic="txm", partition="2") is None
    age0 = value(s, LOG + "oldestopentransactionagems", topic="txm", partition="0")
    assert age0 is not None and age0 >= HOUR_MS  # the hour-old one, not the one begun now
    age1 = value(s, LOG + "oldestopentransactionagems", topic="txm", partition="1")
    assert age1 is not None and 0 <= age1 < HOUR_MS
    assert value(s, RM + "partitionswithlatetransactionscount") == 1  # only partition 0's is late


def _txn(pid: int, seq: int, count: int = 1) -> BatchHeader:
    return BatchHeader(0, 0, 0, 2, 0, 0x10, count - 1, 0, 0, pid, 0, seq, count)


def _marker(pid: int) -> BatchHeader:
    return BatchHeader(0, 0, 0, 2, 0, 0x30, 0, 0, 0, pid, 0, -1, 1)


def test_open_transaction_view_follows_the_producer_state(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    assert open_transactions(ps) == []
    ps.update(_txn(1, 0), 0, 1_000)
    ps.update(_txn(2, 0), 1, 5_000)
    for i in range(1, 8):  # producer 1's transaction outgrows the 5 batches the state keeps
        ps.update(_txn(1, i), 1 + i, 1_000 + i * 100)
    (one, two) = open_transactions(ps)
    assert (one.producer_id, one.start_offset, two.producer_id, two.start_offset) == (1, 0, 2, 1)
    assert two.start_timestamp == 5_000  # its first batch is still held
    assert one.start_timestamp == 1_300  # the oldest batch still held: the age is then a lower bound
    assert one.last_timestamp == 1_700
    timeout = 60_000
    assert not has_late_transaction([one, two], 1_700 + timeout + LATE_TRANSACTION_BUFFER_MS, timeout)
    assert has_late_transaction([one, two], 1_701 + timeout + LATE_TRANSACTION_BUFFER_MS, timeout)

    ps.update(_marker(1), 9, 9_000, ControlRecord(0, CONTROL_ABORT, 0))
    assert [t.producer_id for t in open_transactions(ps)] == [2]
    ps.update(_marker(2), 10, 9_000, ControlRecord(0, CONTROL_ABORT, 0))
    assert open_transactions(ps) == []
