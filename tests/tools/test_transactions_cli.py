"""`tieredlog transactions` against real broker processes.

- A hanging transaction made by hand (a transactional batch under a producer id no coordinator
  allocated, stamped an hour ago): describe-producers shows it, find-hanging names it (by topic, by
  partition, by broker; not with a timeout longer than its silence), abort by start offset ends it and
  the last stable offset moves past it.
- A confluent-kafka transactional producer whose transaction is left open: list (with its filters)
  and describe show it at its coordinator, find-hanging leaves it out although it is an hour old
  (its coordinator still lists the partition), abort ends it on the partition as Kafka's
  Admin.abortTransaction does, and the last stable offset moves past it.
"""

from __future__ import annotations

from typing import Callable

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Producer
from txn_helpers import HOUR_MS, create_topic, idempotent_batch, now_ms, open_transaction, produce_batch

from tieredlog import cli
from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import LIST_OFFSETS
from tieredlog.tools.hanging_transactions import HEADERS as HANGING_HEADERS

pytestmark = pytest.mark.integration

OVERRIDES = {"remote.log.storage.system.enable": "false", "transaction.state.log.num.partitions": "1"}
READ_COMMITTED = 1
LATEST = -1


def tool(capsys: pytest.CaptureFixture[str], b: BrokerProcess, *argv: str) -> tuple[int, list[list[str]], str]:
    """Exit code, the printed table (header first, cells stripped) and stderr."""
    capsys.readouterr()
    rc = cli.main(["transactions", "--bootstrap-server", b.bootstrap, *argv])
    out = capsys.readouterr()
    return rc, [[c.strip() for c in line.split("\t")[:-1]] for line in out.out.splitlines()], out.err


def last_stable_offset(b: BrokerProcess, topic: str, partition: int = 0) -> int:
    with KafkaClient(b.bootstrap, timeout=30) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": READ_COMMITTED, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": LATEST,
                                            "current_leader_epoch": -1}]}]})
    return int(r.topics[0].partitions[0].offset)


def test_a_hand_made_hanging_transaction_is_described_found_and_aborted(
        broker_factory: Callable[..., BrokerProcess], capsys: pytest.CaptureFixture[str]) -> None:
    b = broker_factory(OVERRIDES)
    create_topic(b.bootstrap, "hang", partitions=2)
    silent_since = now_ms() - HOUR_MS
    produce_batch(b.bootstrap, "hang", 0, idempotent_batch(6000, 0, 0, 2, timestamp_ms=silent_since))
    start = open_transaction(b.bootstrap, "hang", 0, producer_id=6001, producer_epoch=4, records=3,
                             timestamp_ms=silent_since)
    open_transaction(b.bootstrap, "hang", 1, producer_id=6002)  # open, but its producer wrote just now
    assert last_stable_offset(b, "hang") == start

    rc, table, _ = tool(capsys, b, "describe-producers", "--topic", "hang", "--partition", "0")
    assert rc == 0
    assert table == [["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                      "CurrentTransactionStartOffset"],
                     ["6000", "0", "-1", "1", str(silent_since), "None"],
                     ["6001", "4", "-1", "2", str(silent_since), str(start)]]
    rc, _, err = tool(capsys, b, "describe-producers", "--topic", "hang", "--partition", "7")
    assert rc == 1 and err.startswith("Failed to describe producers for partition hang-7 on leader: ")

    expected = [list(HANGING_HEADERS), ["hang", "0", "6001", "4", "-1", str(start), str(silent_since), "60"]]
    rc, table, _ = tool(capsys, b, "find-hanging", "--topic", "hang")
    assert rc == 0
    assert table[0] == expected[0] and len(table) == 2
    assert table[1][:7] == expected[1][:7] and int(table[1][7]) >= 60  # minutes since it last wrote
    assert tool(capsys, b, "find-hanging", "--broker-id", "0")[1][1][:7] == expected[1][:7]
    assert tool(capsys, b, "find-hanging", "--topic", "hang", "--partition", "1")[1] == [list(HANGING_HEADERS)]
    assert tool(capsys, b, "find-hanging", "--topic", "hang", "--max-transaction-timeout", "1440")[1] == \
        [list(HANGING_HEADERS)]

    assert tool(capsys, b, "abort", "--topic", "hang", "--partition", "0", "--start-offset", str(start)) == (0, [], "")
    rc, table, _ = tool(capsys, b, "describe-producers", "--topic", "hang", "--partition", "0")
    assert table[2][0] == "6001" and table[2][2] == "0" and table[2][5] == "None"  # the marker's coordinator epoch
    assert tool(capsys, b, "find-hanging", "--topic", "hang")[1] == [list(HANGING_HEADERS)]
    assert last_stable_offset(b, "hang") == start + 3 + 1  # past its records and the ABORT marker
    rc, _, err = tool(capsys, b, "abort", "--topic", "hang", "--partition", "0", "--start-offset", str(start))
    assert rc == 1 and err == f"Could not find any open transactions starting at offset {start} on partition hang-0\n"

    # as for a broker without DescribeProducers: the producer named, coordinator epoch -1 taken as 0
    other_start = last_stable_offset(b, "hang", 1)
    assert tool(capsys, b, "abort", "--topic", "hang", "--partition", "1", "--producer-id", "6002",
                "--producer-epoch", "0", "--coordinator-epoch", "-1") == (0, [], "")
    assert last_stable_offset(b, "hang", 1) == other_start + 2 + 1


def test_a_real_open_transaction_is_listed_described_not_hanging_and_aborted(
        broker_factory: Callable[..., BrokerProcess], capsys: pytest.CaptureFixture[str]) -> None:
    b = broker_factory(OVERRIDES)
    create_topic(b.bootstrap, "real", partitions=1)
    # so the transaction does not start at 0 (under a producer id far from those the broker allocates)
    produce_batch(b.bootstrap, "real", 0, idempotent_batch(900_001, 0, 0, 2))
    idle = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-idle"})
    idle.init_transactions(60)
    # a transaction timeout long enough that the coordinator never ends it during the test
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-open", "transaction.timeout.ms": 900000,
                  "linger.ms": 0})
    p.init_transactions(60)
    p.begin_transaction()
    stamped = now_ms() - HOUR_MS  # CreateTime an hour ago: find-hanging's age test passes, its coordinator's does not
    for i in range(3):
        p.produce("real", value=b"open-%d" % i, partition=0, timestamp=stamped)
    assert p.flush(30) == 0
    start = 2
    assert last_stable_offset(b, "real") == start

    rc, table, _ = tool(capsys, b, "list")
    assert rc == 0 and table[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    rows = {r[0]: r for r in table[1:]}
    assert rows["tx-open"][1] == "0" and rows["tx-open"][3] == "Ongoing"
    assert rows["tx-idle"][3] == "Empty"
    producer_id = rows["tx-open"][2]
    assert [r[0] for r in tool(capsys, b, "list", "--state", "Ongoing")[1][1:]] == ["tx-open"]
    assert [r[0] for r in tool(capsys, b, "list", "--producer-id", producer_id)[1][1:]] == ["tx-open"]
    assert tool(capsys, b, "list", "--state", "CompleteCommit")[1][1:] == []
    assert tool(capsys, b, "list", "--duration-filter", str(24 * HOUR_MS))[1][1:] == []  # none open for a day
    rc, _, err = tool(capsys, b, "list", "--transactional-id-pattern", "tx-.*")
    assert rc == 1 and err == "Failed to list transactions: Broker 0 does not serve ListTransactions v2 or later\n"

    rc, table, _ = tool(capsys, b, "describe", "--transactional-id", "tx-open")
    assert rc == 0
    coordinator, tid, pid, _epoch, state, timeout, started, duration, partitions = table[1]
    assert (coordinator, tid, pid, state, timeout, partitions) == ("0", "tx-open", producer_id, "Ongoing", "900000",
                                                                   "real-0")
    assert int(started) > 0 and int(duration) >= 0
    rc, table, _ = tool(capsys, b, "describe", "--transactional-id", "tx-idle")
    assert rc == 0 and (table[1][4], table[1][6], table[1][7]) == ("Empty", "None", "None")  # no transaction begun
    rc, _, err = tool(capsys, b, "describe", "--transactional-id", "tx-never")
    assert rc == 1 and err.startswith("Failed to describe transaction state of transactional-id `tx-never`: ")

    # silent for an hour by its records' timestamps, but its coordinator will still write real-0's marker
    assert tool(capsys, b, "find-hanging", "--topic", "real")[1] == [list(HANGING_HEADERS)]

    assert tool(capsys, b, "abort", "--topic", "real", "--partition", "0", "--start-offset", str(start)) == (0, [], "")
    assert last_stable_offset(b, "real") == start + 3 + 1
    rc, table, _ = tool(capsys, b, "describe-producers", "--topic", "real", "--partition", "0")
    assert [r[5] for r in table[1:] if r[0] == producer_id] == ["None"]
