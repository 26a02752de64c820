"""`tieredlog transactions --bootstrap-server HOST:PORT list|describe|describe-producers|abort|find-hanging`:
Apache Kafka's kafka-transactions.sh (KIP-664) with its options, its output columns and its table
format (each column padded to its widest value, then a tab), so scripts written for one read the other.

    list                 ListTransactions on every broker: TransactionalId, Coordinator, ProducerId, TransactionState
    describe             DescribeTransactions at the transactional id's coordinator
    describe-producers   DescribeProducers at the partition's leader (or --broker-id)
    abort                an ABORT marker for the open transaction starting at --start-offset (WriteTxnMarkers)
    find-hanging         open transactions older than --max-transaction-timeout that no coordinator will end

Beyond Kafka's tool, `list` also takes ListTransactions' other filters, `--state` and `--producer-id`
(Kafka's Admin has them as ListTransactionsOptions, its tool does not). Errors are printed as Kafka's
tool prints them ("Failed to ...: <reason>") with exit code 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Sequence, TextIO

from kio.schema.errors import ErrorCode

from tieredlog.log.types import TopicPartition
from tieredlog.tools import command_config, run_against_broker
from tieredlog.tools import hanging_transactions as hanging
from tieredlog.tools.transaction_admin import (
    AbortTransactionSpec,
    Admin,
    AdminApiError,
    ListTransactionsFilter,
    TransactionDescription,
    TransactionsAdmin,
    TransactionState,
    flatten,
)

Clock = Callable[[], int]

# kafka-transactions.sh asks DescribeProducers about this many partitions at a time
MAX_BATCH_SIZE = 500

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset")


class CommandFailed(Exception):
    """Kafka's printErrorAndExit: the message goes to stderr and the tool exits with 1."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(f"{message}: {cause}" if cause is not None else message)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pretty_print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Kafka's ToolsUtils.prettyPrintTable: every cell left-aligned to its column's width, then a tab."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [list(headers), *rows]:
        out.write("".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths)) + "\n")


# ---- list ---------------------------------------------------------------------------------------------


def cmd_list(admin: Admin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    filters = ListTransactionsFilter(
        states=tuple(TransactionState(s) for s in a.state or ()), producer_ids=tuple(a.producer_id or ()),
        duration_ms=-1 if a.duration_filter is None else a.duration_filter,
        transactional_id_pattern=a.transactional_id_pattern)
    by_broker = admin.list_transactions(filters)
    failed = next((e for e in by_broker.values() if isinstance(e, AdminApiError)), None)
    if failed is not None:
        raise CommandFailed("Failed to list transactions", failed)
    rows = [[t.transactional_id, str(broker_id), str(t.producer_id), str(t.state)]
            for broker_id, listings in sorted(by_broker.items()) if not isinstance(listings, AdminApiError)
            for t in listings]
    pretty_print_table(LIST_HEADERS, rows, out)
    return 0


# ---- describe -----------------------------------------------------------------------------------------


def cmd_describe(admin: Admin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    tid = a.transactional_id
    try:
        d = admin.describe_transactions([tid])[tid]
        if isinstance(d, AdminApiError):
            raise d
    except AdminApiError as exc:
        raise CommandFailed(f"Failed to describe transaction state of transactional-id `{tid}`", exc) from None
    start = d.transaction_start_time_ms
    row = [str(d.coordinator_id), tid, str(d.producer_id), str(d.producer_epoch), str(d.state),
           str(d.transaction_timeout_ms), "None" if start is None else str(start),
           "None" if start is None else str(clock() - start),
           ",".join(str(tp) for tp in sorted(d.topic_partitions))]
    pretty_print_table(DESCRIBE_HEADERS, [row], out)
    return 0


# ---- describe-producers -------------------------------------------------------------------------------


def cmd_describe_producers(admin: Admin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    tp = TopicPartition(a.topic, a.partition)
    try:
        states = admin.describe_producers([tp], a.broker_id)[tp]
    except AdminApiError as exc:
        where = "leader" if a.broker_id is None else f"broker {a.broker_id}"
        raise CommandFailed(f"Failed to describe producers for partition {tp} on {where}", exc) from None
    rows = [[str(p.producer_id), str(p.producer_epoch), str(-1 if p.coordinator_epoch is None else p.coordinator_epoch),
             str(p.last_sequence), str(p.last_timestamp),
             "None" if p.current_transaction_start_offset is None else str(p.current_transaction_start_offset)]
            for p in states]
    pretty_print_table(PRODUCERS_HEADERS, rows, out)
    return 0


# ---- abort --------------------------------------------------------------------------------------------


def abort_spec(admin: Admin, a: argparse.Namespace) -> AbortTransactionSpec:
    """The marker to write: from the producer whose open transaction starts at --start-offset, or as
    given (for brokers before 3.0, which have no DescribeProducers)."""
    tp = TopicPartition(a.topic, a.partition)
    if a.start_offset is None and a.producer_id is None:
        raise CommandFailed("The transaction to abort must be identified either with --start-offset (for brokers "
                            "on 3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch "
                            "(for older brokers)")
    if a.start_offset is None:
        if a.producer_epoch is None:
            raise CommandFailed("Missing required argument --producer-epoch")
        if a.coordinator_epoch is None:
            raise CommandFailed("Missing required argument --coordinator-epoch")
        # A transaction begun by a new producer id that hung before its first marker shows coordinator
        # epoch -1 in DescribeProducers; 0 is at most any coordinator epoch (Kafka's tool does the same).
        return AbortTransactionSpec(tp, a.producer_id, a.producer_epoch, max(a.coordinator_epoch, 0))
    try:
        states = admin.describe_producers([tp])[tp]
    except AdminApiError as exc:
        raise CommandFailed(f"Failed to validate producer state for partition {tp}", exc) from None
    found = next((p for p in states if p.current_transaction_start_offset == a.start_offset), None)
    if found is None:
        raise CommandFailed(f"Could not find any open transactions starting at offset {a.start_offset} "
                            f"on partition {tp}")
    return AbortTransactionSpec(tp, found.producer_id, found.producer_epoch,
                                0 if found.coordinator_epoch is None else found.coordinator_epoch)


def cmd_abort(admin: Admin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    spec = abort_spec(admin, a)
    try:
        admin.abort_transaction(spec)
    except AdminApiError as exc:
        raise CommandFailed(f"Failed to abort transaction {spec}", exc) from None
    return 0  # as Kafka's tool: silent when the marker is written


# ---- find-hanging -------------------------------------------------------------------------------------


def _partitions_to_search(admin: Admin, topic: str | None, partition: int | None,
                          broker_id: int | None) -> list[TopicPartition]:
    """Kafka's collectTopicPartitionsToSearch: one named partition as is; else the partitions of the
    topic, or of every (non-internal) topic, that have a replica on --broker-id when it is given."""
    if topic is not None and partition is not None:
        return [TopicPartition(topic, partition)]
    try:
        names = [topic] if topic is not None else sorted(n for n, t in admin.cluster().topics.items() if not t.is_internal)
    except AdminApiError as exc:
        raise CommandFailed("Failed to list topics", exc) from None
    out: list[TopicPartition] = []
    for i in range(0, len(names), MAX_BATCH_SIZE):
        batch = names[i:i + MAX_BATCH_SIZE]
        view = admin.cluster(batch)
        for name in batch:
            t = view.topics.get(name)
            if t is None or t.error_code != ErrorCode.none:
                code = ErrorCode.unknown_topic_or_partition if t is None else t.error_code
                raise CommandFailed(f"Failed to describe {len(batch)} topics",
                                    AdminApiError(code, f"Topic {name} cannot be described"))
            out += [TopicPartition(name, p.partition) for p in t.partitions
                    if broker_id is None or broker_id in p.replicas]
    return out


def _descriptions(admin: Admin, ids: list[str]) -> dict[str, TransactionDescription | None]:
    """Kafka's describeTransactions step: an unknown transactional id (expired) describes nothing."""
    out: dict[str, TransactionDescription | None] = {}
    for tid, d in admin.describe_transactions(ids).items():
        if isinstance(d, AdminApiError):
            if d.code != ErrorCode.transactional_id_not_found:
                raise CommandFailed(f"Failed to describe {len(ids)} transactions", d)
            out[tid] = None
        else:
            out[tid] = d
    return out


def find_hanging(admin: Admin, topic: str | None, partition: int | None, broker_id: int | None,
                 max_transaction_timeout_ms: int, clock: Clock, warn: TextIO) -> list[hanging.OpenTransaction]:
    partitions = _partitions_to_search(admin, topic, partition, broker_id)
    producers = {}
    for i in range(0, len(partitions), MAX_BATCH_SIZE):
        batch = partitions[i:i + MAX_BATCH_SIZE]
        try:
            producers.update(admin.describe_producers(batch, broker_id))
        except AdminApiError as exc:
            where = "their leaders" if broker_id is None else f"broker {broker_id}"
            raise CommandFailed(f"Failed to describe producers for {len(batch)} partitions on {where}", exc) from None
    candidates = hanging.candidate_open_transactions(producers, clock(), max_transaction_timeout_ms)
    if not candidates:
        return []
    by_producer = hanging.group_by_producer_id(candidates)
    by_broker = admin.list_transactions(ListTransactionsFilter(producer_ids=tuple(sorted(by_producer))))
    for broker, result in sorted(by_broker.items()):
        if isinstance(result, AdminApiError):
            if result.code != ErrorCode.unsupported_version:
                raise CommandFailed(f"Failed to list transactions for {len(by_producer)} producers", result)
            # no transaction coordinator there, so none there knows these producers
            print(f"Broker {broker} has no transaction coordinator ({result}); counting none of its transactions",
                  file=warn)
    ids = hanging.transactional_ids(flatten(by_broker), by_producer)
    descriptions = _descriptions(admin, sorted(set(ids.values()))) if ids else {}
    return hanging.hanging_transactions(by_producer, ids, descriptions)


def cmd_find_hanging(admin: Admin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock) -> int:
    if a.topic is None and a.broker_id is None:
        raise CommandFailed("The `find-hanging` command requires either --topic or --broker-id to limit the scope "
                            "of the search")
    if a.partition is not None and a.topic is None:
        raise CommandFailed("The --partition argument requires --topic to be provided")
    found = find_hanging(admin, a.topic, a.partition, a.broker_id,
                         a.max_transaction_timeout * hanging.MS_PER_MINUTE, clock, err)
    pretty_print_table(hanging.HEADERS, hanging.rows(found, clock()), out)
    return 0


# ---- the command line ---------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tieredlog transactions",
        description="This tool is used to analyze the transactional state of producers in the cluster. "
                    "It can be used to detect and recover from hanging transactions.")
    p.add_argument("--bootstrap-server", required=True, metavar="host:port",
                   help="hostname and port for the broker to connect to")
    command_config.add_argument(p)
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    ls = sub.add_parser("list", help="list transactions")
    ls.add_argument("--duration-filter", type=int, metavar="MS",
                    help="Duration (in millis) to filter by: if < 0, all transactions will be returned; otherwise, "
                         "only transactions running longer than this duration will be returned")
    ls.add_argument("--transactional-id-pattern", metavar="REGEX",
                    help="Transactional id regular expression pattern to filter by")
    ls.add_argument("--state", action="append", metavar="STATE",
                    choices=[s.value for s in TransactionState if s is not TransactionState.UNKNOWN],
                    help="only transactions in this state (repeatable; tieredlog's, not in kafka-transactions.sh)")
    ls.add_argument("--producer-id", action="append", type=int, metavar="ID",
                    help="only transactions of this producer id (repeatable; tieredlog's, not in kafka-transactions.sh)")

    d = sub.add_parser("describe", help="describe the state of an active transactional-id",
                       description="Describe the state of an active transactional-id.")
    d.add_argument("--transactional-id", required=True, help="transactional id")

    dp = sub.add_parser("describe-producers", help="describe the states of active producers for a topic partition")
    dp.add_argument("--broker-id", type=int, help="optional broker id to describe the producer state on a specific "
                                                  "replica")
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", required=True, type=int, help="partition number")

    ab = sub.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    ab.add_argument("--topic", required=True, help="topic name")
    ab.add_argument("--partition", required=True, type=int, help="partition number")
    new = ab.add_argument_group("Brokers on versions 3.0 and above",
                                "For newer brokers, only the start offset of the transaction to be aborted is required")
    new.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    old = ab.add_argument_group("Brokers on versions older than 3.0",
                                "For older brokers, you must provide all of these arguments")
    old.add_argument("--producer-id", type=int, help="producer id")
    old.add_argument("--producer-epoch", type=int, help="producer epoch")
    old.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")

    fh = sub.add_parser("find-hanging", help="find hanging transactions")
    fh.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    fh.add_argument("--max-transaction-timeout", type=int, default=hanging.DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
                    metavar="MINUTES", help="maximum transaction timeout in minutes to limit the scope of the search "
                                            f"(default {hanging.DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN})")
    fh.add_argument("--topic", help="topic name to limit search to")
    fh.add_argument("--partition", type=int, help="partition number")
    return p


COMMANDS: dict[str, Callable[[Admin, argparse.Namespace, TextIO, TextIO, Clock], int]] = {
    "list": cmd_list,
    "describe": cmd_describe,
    "describe-producers": cmd_describe_producers,
    "abort": cmd_abort,
    "find-hanging": cmd_find_hanging,
}



build_parser = parser  # the name every tool module exposes

def execute(admin: Admin, a: argparse.Namespace, out: TextIO, err: TextIO, clock: Clock = now_ms) -> int:
    """Run the parsed command against ``admin``: 0, or 1 with Kafka's message on ``err``."""
    try:
        return COMMANDS[a.command](admin, a, out, err, clock)
    except CommandFailed as exc:
        print(exc, file=err)
        return 1


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    settings = command_config.from_args(p, a)

    def run() -> int:
        with TransactionsAdmin(a.bootstrap_server, settings=settings) as admin:
            return execute(admin, a, sys.stdout, sys.stderr)

    return run_against_broker("transactions", a.bootstrap_server, run)


if __name__ == "__main__":
    sys.exit(main())
