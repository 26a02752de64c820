"""`tieredlog transactions` without a broker: kafka-transactions.sh's options and table format, each
command run against given cluster answers (a fake Admin, as Kafka's TransactionsCommandTest mocks its
Admin), Kafka's FindHangingTransactions rules, and the DescribeTransactions decoder reading Kafka's -1
start time from a frame the broker's codec wrote."""

from __future__ import annotations

import io
from typing import Iterable

import pytest
from kio.schema.errors import ErrorCode

from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import DESCRIBE_TRANSACTIONS
from tieredlog.protocol.codec import encode_response
from tieredlog.tools import hanging_transactions as hanging
from tieredlog.tools.cluster_admin import ClusterView, Node, PartitionInfo, TopicInfo
from tieredlog.tools.describe_transactions_wire import decode_describe_transactions
from tieredlog.tools.transaction_admin import (
    AbortTransactionSpec,
    AdminApiError,
    ListTransactionsFilter,
    ProducerState,
    TransactionDescription,
    TransactionListing,
    TransactionState,
)
from tieredlog.tools.transactions import execute, parser, pretty_print_table

NOW = 1_700_000_000_000
MINUTE = 60_000
HOUR_MS = 60 * MINUTE
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def producer(pid: int, start: int | None, last_ts: int, epoch: int = 0, coordinator_epoch: int | None = None,
             seq: int = 4) -> ProducerState:
    return ProducerState(pid, epoch, seq, last_ts, coordinator_epoch, start)


class FakeAdmin:
    """Answers as a cluster of brokers 1 and 2 would; records what the tool asked."""

    def __init__(self) -> None:
        self.producers: dict[TopicPartition, list[ProducerState]] = {}
        self.listings: dict[int, list[TransactionListing] | AdminApiError] = {1: [], 2: []}
        self.descriptions: dict[str, TransactionDescription | AdminApiError] = {}
        self.topics = {
            "t": TopicInfo("t", None, False, ErrorCode.none, (
                PartitionInfo("t", 0, 1, (1, 2), (1, 2), ()), PartitionInfo("t", 1, 2, (2,), (2,), ()))),
            "u": TopicInfo("u", None, False, ErrorCode.none, (PartitionInfo("u", 0, 2, (2,), (2,), ()),)),
            "__transaction_state": TopicInfo("__transaction_state", None, True, ErrorCode.none,
                                             (PartitionInfo("__transaction_state", 0, 1, (1, 2), (1, 2), ()),)),
        }
        self.asked_producers: list[tuple[list[TopicPartition], int | None]] = []
        self.asked_listings: list[ListTransactionsFilter] = []
        self.aborted: list[AbortTransactionSpec] = []

    def cluster(self, topics: Iterable[str] | None = None) -> ClusterView:
        names = list(self.topics) if topics is None else list(topics)
        known = {n: self.topics.get(n) or TopicInfo(n, None, False, ErrorCode.unknown_topic_or_partition, ())
                 for n in names}
        return ClusterView({i: Node(i, "h", 9000 + i, None) for i in (1, 2)}, 1, known)

    def describe_producers(self, partitions: Iterable[TopicPartition],
                           broker_id: int | None = None) -> dict[TopicPartition, list[ProducerState]]:
        tps = list(partitions)
        self.asked_producers.append((tps, broker_id))
        missing = [tp for tp in tps if tp not in self.producers]
        if missing:
            raise AdminApiError(ErrorCode.unknown_topic_or_partition, f"Partition {missing[0]} does not exist")
        return {tp: self.producers[tp] for tp in tps}

    def list_transactions(self, filters: ListTransactionsFilter) -> dict[int, list[TransactionListing] | AdminApiError]:
        self.asked_listings.append(filters)
        return self.listings

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription | AdminApiError]:
        return {t: self.descriptions.get(t, AdminApiError(ErrorCode.transactional_id_not_found))
                for t in transactional_ids}

    def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        self.aborted.append(spec)


def run(admin: FakeAdmin, *args: str) -> tuple[int, list[list[str]], str]:
    """Exit code, the table (header first, cells stripped) and stderr."""
    out, err = io.StringIO(), io.StringIO()
    rc = execute(admin, parser().parse_args(["--bootstrap-server", "b:9092", *args]), out, err, clock=lambda: NOW)
    table = [[c.strip() for c in line.split("\t")[:-1]] for line in out.getvalue().splitlines()]
    return rc, table, err.getvalue()


# ---- output and options -------------------------------------------------------------------------------


def test_table_pads_each_column_to_its_widest_cell_then_a_tab() -> None:
    out = io.StringIO()
    pretty_print_table(("A", "Longer"), [["wide cell", "x"], ["y", "z"]], out)
    assert out.getvalue() == "A        \tLonger\t\nwide cell\tx     \t\ny        \tz     \t\n"


def test_kafka_transactions_options_parse() -> None:
    p = parser()
    a = p.parse_args(["--bootstrap-server", "b:1", "find-hanging", "--broker-id", "3"])
    assert (a.command, a.broker_id, a.max_transaction_timeout, a.topic, a.partition) == ("find-hanging", 3, 15, None, None)
    a = p.parse_args(["--bootstrap-server", "b:1", "abort", "--topic", "t", "--partition", "2", "--producer-id", "9",
                      "--producer-epoch", "1", "--coordinator-epoch", "-1"])
    assert (a.start_offset, a.producer_id, a.producer_epoch, a.coordinator_epoch) == (None, 9, 1, -1)
    a = p.parse_args(["--bootstrap-server", "b:1", "list", "--duration-filter", "5000", "--state", "Ongoing",
                      "--state", "PrepareAbort", "--producer-id", "7", "--transactional-id-pattern", "pay.*"])
    assert (a.duration_filter, a.state, a.producer_id, a.transactional_id_pattern) == (
        5000, ["Ongoing", "PrepareAbort"], [7], "pay.*")
    for bad in (["list", "--state", "Hanging"], ["describe"], ["describe-producers", "--topic", "t"], ["nope"]):
        with pytest.raises(SystemExit):
            p.parse_args(["--bootstrap-server", "b:1", *bad])


# ---- each command against given answers -----------------------------------------------------------------


def test_list_prints_every_brokers_transactions_and_passes_the_filters() -> None:
    admin = FakeAdmin()
    admin.listings = {2: [TransactionListing("pay", 12345, TransactionState.ONGOING)],
                      1: [TransactionListing("ship", 98765, TransactionState.PREPARE_ABORT),
                          TransactionListing("x", 1, TransactionState.parse("SomethingNew"))]}
    rc, table, _ = run(admin, "list", "--duration-filter", "60000", "--state", "Ongoing", "--producer-id", "12345")
    assert rc == 0
    assert table == [["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                     ["ship", "1", "98765", "PrepareAbort"], ["x", "1", "1", "Unknown"], ["pay", "2", "12345", "Ongoing"]]
    assert admin.asked_listings == [ListTransactionsFilter((TransactionState.ONGOING,), (12345,), 60000, None)]
    assert admin.asked_listings[0].min_version == 1

    admin.listings[2] = AdminApiError(ErrorCode.coordinator_not_available)
    rc, table, err = run(admin, "list")
    assert (rc, table) == (1, [])
    assert err == "Failed to list transactions: Coordinator not available\n"


def test_describe_prints_the_coordinators_description_or_kafkas_failure() -> None:
    admin = FakeAdmin()
    admin.descriptions["pay"] = TransactionDescription(
        2, TransactionState.ONGOING, 12345, 15, 60000, NOW - 5000, frozenset({T1, T0, TopicPartition("u", 0)}))
    admin.descriptions["idle"] = TransactionDescription(1, TransactionState.EMPTY, 7, 0, 60000, None, frozenset())
    rc, table, _ = run(admin, "describe", "--transactional-id", "pay")
    assert rc == 0 and table == [
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs",
         "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
        ["2", "pay", "12345", "15", "Ongoing", "60000", str(NOW - 5000), "5000", "t-0,t-1,u-0"]]
    assert run(admin, "describe", "--transactional-id", "idle")[1][1][6:8] == ["None", "None"]
    rc, table, err = run(admin, "describe", "--transactional-id", "gone")
    assert (rc, table) == (1, [])
    assert err == "Failed to describe transaction state of transactional-id `gone`: Transactional id not found\n"


def test_describe_producers_prints_kafkas_columns() -> None:
    admin = FakeAdmin()
    admin.producers[T0] = [producer(12345, 990, 1599509565, epoch=15, coordinator_epoch=20, seq=1300),
                           producer(98765, None, 1599509599, epoch=30, seq=2300)]
    rc, table, _ = run(admin, "describe-producers", "--topic", "t", "--partition", "0", "--broker-id", "2")
    assert rc == 0 and table == [
        ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
         "CurrentTransactionStartOffset"],
        ["12345", "15", "20", "1300", "1599509565", "990"], ["98765", "30", "-1", "2300", "1599509599", "None"]]
    assert admin.asked_producers == [([T0], 2)]
    rc, _, err = run(admin, "describe-producers", "--topic", "t", "--partition", "1")
    assert rc == 1 and err == "Failed to describe producers for partition t-1 on leader: Partition t-1 does not exist\n"


def test_abort_finds_the_producer_by_start_offset_or_takes_it_as_given() -> None:
    admin = FakeAdmin()
    admin.producers[T0] = [producer(5, 100, NOW, epoch=3, coordinator_epoch=None), producer(6, 200, NOW, epoch=1,
                                                                                            coordinator_epoch=4)]
    assert run(admin, "abort", "--topic", "t", "--partition", "0", "--start-offset", "100") == (0, [], "")
    assert run(admin, "abort", "--topic", "t", "--partition", "0", "--start-offset", "200")[0] == 0
    # no marker yet from any coordinator: epoch 0, which no coordinator epoch is below
    assert admin.aborted == [AbortTransactionSpec(T0, 5, 3, 0), AbortTransactionSpec(T0, 6, 1, 4)]
    assert str(admin.aborted[0]) == \
        "AbortTransactionSpec(topicPartition=t-0, producerId=5, producerEpoch=3, coordinatorEpoch=0)"

    rc, _, err = run(admin, "abort", "--topic", "t", "--partition", "0", "--start-offset", "150")
    assert rc == 1 and err == "Could not find any open transactions starting at offset 150 on partition t-0\n"
    assert run(admin, "abort", "--topic", "t", "--partition", "0", "--producer-id", "9", "--producer-epoch", "2",
               "--coordinator-epoch", "-1")[0] == 0
    assert admin.aborted[-1] == AbortTransactionSpec(T0, 9, 2, 0)
    for args, message in (
            ([], "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or "
                 "above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)"),
            (["--producer-id", "9"], "Missing required argument --producer-epoch"),
            (["--producer-id", "9", "--producer-epoch", "1"], "Missing required argument --coordinator-epoch")):
        assert run(admin, "abort", "--topic", "t", "--partition", "0", *args) == (1, [], message + "\n")
    assert len(admin.aborted) == 3


# ---- find-hanging ---------------------------------------------------------------------------------------


def test_candidates_are_open_transactions_whose_producer_is_silent_past_the_timeout() -> None:
    timeout = 15 * MINUTE
    producers = {T0: [producer(1, 10, NOW - timeout - 1), producer(2, 20, NOW - timeout), producer(3, None, 0)],
                 T1: [producer(1, 5, NOW - 2 * timeout)]}
    found = hanging.candidate_open_transactions(producers, NOW, timeout)
    assert [(t.topic_partition, t.producer.producer_id) for t in found] == [(T0, 1), (T1, 1)]
    assert sorted(hanging.group_by_producer_id(found)) == [1]


def test_hanging_unless_a_coordinator_lists_the_producer_and_describes_the_partition() -> None:
    old = NOW - HOUR_MS
    by_pid = hanging.group_by_producer_id([
        hanging.OpenTransaction(T0, producer(1, 10, old)),  # no transactional id at all
        hanging.OpenTransaction(T0, producer(2, 11, old)),  # its id is unknown to its coordinator
        hanging.OpenTransaction(T0, producer(3, 12, old)),  # its coordinator still writes T0's marker
        hanging.OpenTransaction(T1, producer(3, 13, old)),  # ... but not T1's
    ])
    listings = [TransactionListing("b", 2, TransactionState.ONGOING), TransactionListing("c", 3, TransactionState.PREPARE_ABORT),
                TransactionListing("z", 99, TransactionState.ONGOING)]  # not asked for: left out
    ids = hanging.transactional_ids(listings, by_pid)
    assert ids == {2: "b", 3: "c"}
    described = TransactionDescription(1, TransactionState.PREPARE_ABORT, 3, 0, 60000, old, frozenset({T0}))
    found = hanging.hanging_transactions(by_pid, ids, {"b": None, "c": described})
    assert [(t.producer.producer_id, t.topic_partition) for t in found] == [(1, T0), (2, T0), (3, T1)]
    assert hanging.rows(found[:1], NOW) == [["t", "0", "1", "0", "-1", "10", str(old), "60"]]


def test_find_hanging_searches_a_brokers_replicas_and_asks_the_coordinators() -> None:
    admin = FakeAdmin()
    old = NOW - HOUR_MS
    admin.producers = {T0: [producer(1, 10, old), producer(2, 11, NOW)], T1: [producer(3, 12, old, coordinator_epoch=7)],
                       TopicPartition("u", 0): [producer(4, 3, old)]}
    admin.listings = {1: [TransactionListing("live", 4, TransactionState.ONGOING)],
                      2: AdminApiError(ErrorCode.unsupported_version, "Broker 2 does not serve ListTransactions")}
    admin.descriptions["live"] = TransactionDescription(1, TransactionState.ONGOING, 4, 0, 60000, old,
                                                        frozenset({TopicPartition("u", 0)}))
    rc, table, err = run(admin, "find-hanging", "--broker-id", "2")
    assert rc == 0
    assert table == [list(hanging.HEADERS), ["t", "0", "1", "0", "-1", "10", str(old), "60"],
                     ["t", "1", "3", "0", "7", "12", str(old), "60"]]
    # broker 2 hosts t-0, t-1 and u-0 (not the internal topic); asked there, not at the leaders
    assert admin.asked_producers == [([T0, T1, TopicPartition("u", 0)], 2)]
    assert admin.asked_listings[-1].producer_ids == (1, 3, 4)
    assert "Broker 2 has no transaction coordinator" in err

    rc, table, _ = run(admin, "find-hanging", "--topic", "t", "--partition", "1", "--max-transaction-timeout", "61")
    assert (rc, table) == (0, [list(hanging.HEADERS)])  # silent for 60 minutes only
    assert admin.asked_producers[-1] == ([T1], None)

    admin.listings[2] = AdminApiError(ErrorCode.coordinator_not_available)
    rc, _, err = run(admin, "find-hanging", "--topic", "t")
    assert rc == 1 and err == "Failed to list transactions for 2 producers: Coordinator not available\n"
    rc, _, err = run(admin, "find-hanging", "--topic", "absent")
    assert rc == 1 and err.startswith("Failed to describe 1 topics: ")
    assert run(admin, "find-hanging")[2] == \
        "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search\n"
    assert run(admin, "find-hanging", "--broker-id", "1", "--partition", "0")[2] == \
        "The --partition argument requires --topic to be provided\n"


# ---- DescribeTransactions decoding ------------------------------------------------------------------------


def test_describe_transactions_decoder_reads_kafkas_minus_one_start_time() -> None:
    frame = encode_response(DESCRIBE_TRANSACTIONS, 0, 77, {"throttle_time": 0, "transaction_states": [
        {"error_code": 0, "transactional_id": "idle", "transaction_state": "Empty", "transaction_timeout": 60000,
         "transaction_start_time": -1, "producer_id": 5, "producer_epoch": 2, "topics": []},
        {"error_code": 0, "transactional_id": "pay", "transaction_state": "Ongoing", "transaction_timeout": 900000,
         "transaction_start_time": NOW, "producer_id": 6, "producer_epoch": 0,
         "topics": [{"topic": "t", "partitions": [0, 1]}, {"topic": "u", "partitions": [3]}]},
        {"error_code": ErrorCode.transactional_id_not_found, "transactional_id": "gone", "transaction_state": "",
         "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1, "producer_epoch": -1, "topics": []},
    ]})
    cid, states = decode_describe_transactions(bytes(frame)[4:])
    assert cid == 77
    assert [(s["transactional_id"], s["transaction_state"], s["transaction_start_time_ms"], s["producer_id"],
             s["topics"]) for s in states] == [
        ("idle", "Empty", -1, 5, []), ("pay", "Ongoing", NOW, 6, [("t", [0, 1]), ("u", [3])]), ("gone", "", -1, -1, [])]
    assert states[1]["transaction_timeout_ms"] == 900000 and states[2]["error_code"] == 105
