"""`tieredlog console-consumer`: kafka-console-consumer.sh — print a topic's records to stdout.

    tieredlog console-consumer --bootstrap-server H:P --topic T [--from-beginning]
        [--partition P [--offset earliest|latest|N]] [--max-messages N] [--timeout-ms MS]
        [--group G] [--isolation-level read_committed] [--property print.key=true ...]

The output is Kafka's DefaultMessageFormatter's: per record, the parts ``print.timestamp``,
``print.partition``, ``print.offset``, ``print.headers``, ``print.key`` and ``print.value`` (the only
one on by default) ask for, in that order, ``key.separator`` between them and ``line.separator``
after; "Processed a total of N messages" on stderr at the end.

It reads every partition of the topic (or ``--partition``) from its leader. With ``--group`` it starts
where the group committed (``auto.offset.reset`` otherwise: earliest with ``--from-beginning``) and
commits its position when it ends, as a consumer assigned the partitions would (it does not join the
group: no rebalance shares the partitions among several consumers).
read_committed leaves out the records of aborted transactions, as Kafka's consumer does.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from typing import BinaryIO

from kio.schema.errors import ErrorCode

from tieredlog.formats.errors import RecordError
from tieredlog.log.types import TopicPartition
from tieredlog.records.record import Record, iter_batches_records
from tieredlog.tools import add_version_argument, command_config, run_against_broker
from tieredlog.tools.client_properties import merged, settings
from tieredlog.tools.partition_admin import EARLIEST, LATEST, READ_COMMITTED, READ_UNCOMMITTED, PartitionAdmin
from tieredlog.tools.transaction_admin import RETRIABLE, AdminApiError

ISOLATION = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
FETCH_WAIT_MS = 500
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class Formatter:
    """Kafka's DefaultMessageFormatter."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "Formatter":
        def flag(name: str, default: bool = False) -> bool:
            return props.get(name, str(default)).strip().lower() == "true"

        def text(name: str, default: str) -> bytes:
            return props.get(name, default).encode()

        return cls(flag("print.timestamp"), flag("print.partition"), flag("print.offset"), flag("print.headers"),
                   flag("print.key"), flag("print.value", True), text("key.separator", "\t"),
                   text("line.separator", "\n"), text("headers.separator", ","), text("null.literal", "null"))

    def write(self, out: BinaryIO, partition: int, timestamp_type: int, r: Record) -> None:
        parts: list[bytes] = []
        if self.print_timestamp:
            parts.append(f"{TIMESTAMP_TYPES[timestamp_type]}:{r.timestamp}".encode())  # v2: never NO_TIMESTAMP
        if self.print_partition:
            parts.append(b"Partition:%d" % partition)
        if self.print_offset:
            parts.append(b"Offset:%d" % r.offset)
        if self.print_headers:
            parts.append(self.headers_separator.join(
                k.encode() + b":" + (self.null_literal if v is None else v) for k, v in r.headers)
                if r.headers else b"NO_HEADERS")
        if self.print_key:
            parts.append(self.null_literal if r.key is None else r.key)
        if self.print_value:
            parts.append(self.null_literal if r.value is None else r.value)
        if parts:  # Kafka's: with every part off, not even the line separator
            out.write(self.key_separator.join(parts) + self.line_separator)


class Stop(Exception):
    pass


class ConsoleConsumer:
    def __init__(self, admin: PartitionAdmin, formatter: Formatter, out: BinaryIO, *, isolation_level: int,
                 max_messages: int | None, timeout_ms: int | None, reset: str, skip_errors: bool) -> None:
        self.admin, self.formatter, self.out = admin, formatter, out
        self.isolation_level, self.max_messages, self.timeout_ms = isolation_level, max_messages, timeout_ms
        self.reset, self.skip_errors = reset, skip_errors
        self.positions: dict[TopicPartition, int] = {}
        self.count = 0

    def seek(self, starts: dict[TopicPartition, int | str]) -> None:
        """Each partition's first offset: a number, or "earliest" / "latest" asked of its leader."""
        named = {tp: EARLIEST if s == "earliest" else LATEST for tp, s in starts.items() if isinstance(s, str)}
        found = self.admin.offsets_for(named, self.isolation_level) if named else {}
        for tp, s in starts.items():
            self.positions[tp] = found[tp][0] if isinstance(s, str) else s

    def run(self) -> None:
        last = time.monotonic()
        while True:
            got = 0
            for node_id, positions in sorted(self._by_leader().items()):
                got += self._fetch(node_id, positions)
            self.out.flush()
            if got:
                last = time.monotonic()
            elif self.timeout_ms is not None and (time.monotonic() - last) * 1000 >= self.timeout_ms:
                raise Stop("timed out")

    def _by_leader(self) -> dict[int, dict[TopicPartition, int]]:
        out: dict[int, dict[TopicPartition, int]] = {}
        for tp, node_id in self.admin.current_leaders(self.positions).items():
            out.setdefault(node_id, {})[tp] = self.positions[tp]
        return out

    def _fetch(self, node_id: int, positions: dict[TopicPartition, int]) -> int:
        got = 0
        try:
            answer = self.admin.fetch(node_id, positions, max_wait_ms=FETCH_WAIT_MS, isolation_level=self.isolation_level)
        except (OSError, ConnectionError):
            self.admin.reconnect()  # the leader went away: Metadata names the next one
            time.sleep(0.2)
            return 0
        for tp, p in sorted(answer.items()):
            if p.error_code == ErrorCode.offset_out_of_range:
                self.seek({tp: self.reset})
            elif p.error_code in RETRIABLE or p.error_code == ErrorCode.unknown_topic_or_partition:
                time.sleep(0.1)  # a leader moving: the next round asks Metadata again
            elif p.error_code != ErrorCode.none:
                raise AdminApiError(p.error_code, f"Fetch of {tp}", retriable=False)
            else:
                got += self._emit(tp, p.records, p.aborted)
        return got

    def _emit(self, tp: TopicPartition, data: bytes, aborted: tuple[tuple[int, int], ...]) -> int:
        position, got = self.positions[tp], 0
        aborting: set[int] = set()
        pending = sorted(aborted, key=lambda a: a[1])

        def corrupt(pos: int, header: object, exc: RecordError) -> None:
            if not self.skip_errors:
                raise AdminApiError(ErrorCode.corrupt_message, f"{tp} at byte {pos}: {exc}", retriable=False)
            print(f"ERROR skipping a batch of {tp} that does not decode: {exc}", file=sys.stderr)

        for header, records in iter_batches_records(data, stop_at_partial=True, on_corrupt=corrupt):
            while pending and pending[0][1] <= header.last_offset:
                aborting.add(pending.pop(0)[0])
            if header.is_control:
                aborting.discard(header.producer_id)  # the marker ends that producer's aborted transaction
            elif not (header.is_transactional and header.producer_id in aborting):
                for r in records:
                    if r.offset < position:
                        continue
                    self.formatter.write(self.out, tp.partition, header.timestamp_type, r)
                    self.count += 1
                    got += 1
                    self.positions[tp] = r.offset + 1
                    if self.max_messages is not None and self.count >= self.max_messages:
                        raise Stop("max messages")
            self.positions[tp] = max(self.positions[tp], header.next_offset)
        return got


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog console-consumer",
                                description="Print a topic's records to stdout (kafka-console-consumer.sh).")
    p.add_argument("--bootstrap-server", required=True, help="HOST:PORT of any broker")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic to read")
    which.add_argument("--include", "--whitelist", dest="include", metavar="REGEX",
                       help="read every topic whose name matches the regular expression")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", help="with --partition: earliest, latest (the default) or an offset")
    p.add_argument("--from-beginning", action="store_true",
                   help="start with the earliest record when there is no committed offset")
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, help="exit when no record came for this long")
    p.add_argument("--group", help="the consumer group whose committed offsets to start from and commit")
    p.add_argument("--isolation-level", choices=sorted(ISOLATION), default=None,
                   help="read_uncommitted (the default) or read_committed")
    p.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="formatter properties: print.timestamp, print.partition, print.offset, print.headers, "
                        "print.key, print.value, key.separator, line.separator, headers.separator, null.literal")
    p.add_argument("--consumer-property", action="append", metavar="KEY=VALUE",
                   help="consumer properties (group.id, isolation.level, auto.offset.reset, security.protocol, ...)")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE", help="consumer properties file")
    p.add_argument("--skip-message-on-error", action="store_true", help="skip a batch that does not decode")
    command_config.add_argument(p)
    add_version_argument(p)
    return p


def _starts(a: argparse.Namespace, admin: PartitionAdmin, group: str | None,
            reset: str) -> dict[TopicPartition, int | str]:
    if a.topic is not None:
        topics = [a.topic]
    else:
        pattern = re.compile(a.include)
        topics = sorted(n for n, t in admin.cluster().topics.items() if pattern.fullmatch(n) and not t.is_internal)
    partitions = [tp for tp in admin.partitions_of(topics) if a.partition is None or tp.partition == a.partition]
    if a.partition is not None and not partitions:
        raise AdminApiError(ErrorCode.unknown_topic_or_partition, f"Partition {a.topic}-{a.partition} does not exist",
                            retriable=False)
    if a.offset is not None:
        start: int | str = a.offset if a.offset in ("earliest", "latest") else int(a.offset)
        return {tp: start for tp in partitions}
    committed = admin.committed_offsets(group) if group else {}
    return {tp: committed.get(tp, reset) for tp in partitions}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if a.offset is not None:
        if a.partition is None:
            parser.error("The partition is required when offset is specified.")
        if a.from_beginning:
            parser.error("Options from-beginning and offset cannot be specified together.")
        if a.offset not in ("earliest", "latest") and not a.offset.lstrip("-").isdigit():
            parser.error(f"The provided offset value '{a.offset}' is incorrect. Valid values are 'earliest', "
                         "'latest', or a non-negative long.")
    if a.partition is not None and a.topic is None:
        parser.error("The topic is required when partition is specified.")
    props = merged(parser, [a.command_config, a.consumer_config], a.consumer_property, "--consumer-property")
    formatter = Formatter.from_properties(merged(parser, [], a.property, "--property"))
    group = a.group or props.get("group.id")
    if group and a.partition is not None:
        parser.error("Options group and partition cannot be specified together.")
    isolation = a.isolation_level or props.get("isolation.level", "read_uncommitted")
    if isolation not in ISOLATION:
        parser.error(f"invalid isolation.level {isolation}")
    reset = "earliest" if a.from_beginning else props.get("auto.offset.reset", "latest")
    client_settings = settings(parser, props)

    def run() -> int:
        with PartitionAdmin(a.bootstrap_server, client_id=props.get("client.id", "console-consumer"),
                            settings=client_settings) as admin:
            consumer = ConsoleConsumer(admin, formatter, sys.stdout.buffer, isolation_level=ISOLATION[isolation],
                                       max_messages=a.max_messages, timeout_ms=a.timeout_ms, reset=reset,
                                       skip_errors=a.skip_message_on_error)
            rc = 0
            try:
                consumer.seek(_starts(a, admin, group, reset))
                consumer.run()
            except Stop:
                pass
            except KeyboardInterrupt:
                pass
            except AdminApiError as exc:
                print(f"ERROR Error processing message, terminating consumer process: {exc}", file=sys.stderr)
                rc = 1
            sys.stdout.flush()
            if group and consumer.positions:
                admin.commit_offsets(group, consumer.positions)
            print(f"Processed a total of {consumer.count} messages", file=sys.stderr)
            return rc

    return run_against_broker("console-consumer", a.bootstrap_server, run)


if __name__ == "__main__":
    sys.exit(main())
