"""`tieredlog console-producer`: kafka-console-producer.sh — each line of stdin becomes a record.

    tieredlog console-producer --bootstrap-server H:P --topic T [--property parse.key=true]
        [--property key.separator=:] [--request-required-acks -1|0|1] [--compression-codec lz4]
        [--producer-property k=v] [--producer.config FILE] [--command-config FILE]

Line properties are Kafka's LineMessageReader's: ``parse.key`` (``key.separator``, a tab by default),
``parse.headers`` (``headers.delimiter``, ``headers.separator``, ``headers.key.separator``),
``null.marker`` and ``ignore.error``. A record with a key goes to the partition Kafka's default
partitioner picks (murmur2 of the key); records without one go to one partition per batch, in turn.
Lines are sent as they arrive, in batches of up to ``batch.size`` bytes per partition; a failed send
is one line on stderr, the tool goes on and exits with 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from tieredlog.log.types import TopicPartition
from tieredlog.records.batch import COMPRESSION_NAMES
from tieredlog.records.record import build_batch
from tieredlog.rlmm.partitioner import murmur2, to_positive
from tieredlog.tools import add_version_argument, command_config, run_against_broker
from tieredlog.tools.client_properties import merged, settings
from tieredlog.tools.partition_admin import PartitionAdmin
from tieredlog.tools.transaction_admin import AdminApiError

CODECS = {name: codec for codec, name in COMPRESSION_NAMES.items()}
DEFAULT_BATCH_SIZE = 16384
READ_CHUNK = 64 * 1024


# key, value, headers
ParsedRecord = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


class LineFormatError(ValueError):
    pass


@dataclass(frozen=True)
class LineReader:
    """Kafka's LineMessageReader: how a line splits into headers, key and value."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "LineReader":
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        def sep(name: str, default: str) -> bytes:
            return props.get(name, default).encode()

        marker = props.get("null.marker")
        return cls(flag("parse.key"), sep("key.separator", "\t"), flag("parse.headers"),
                   sep("headers.delimiter", "\t"), sep("headers.separator", ","), sep("headers.key.separator", ":"),
                   None if marker is None else marker.encode(), flag("ignore.error"))

    def _nullable(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data

    def parse(self, line: bytes, number: int) -> ParsedRecord:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, found, after = rest.partition(self.headers_delimiter)
            if not found:
                if not self.ignore_error:
                    raise LineFormatError(f"No headers delimiter found on line number {number}: '{line.decode(errors='replace')}'")
            else:
                rest = after
                if head:
                    for item in head.split(self.headers_separator):
                        k, has, v = item.partition(self.headers_key_separator)
                        headers.append((k.decode(errors="replace"), self._nullable(v) if has else None))
        if not self.parse_key:
            return None, self._nullable(rest), headers
        key, found, value = rest.partition(self.key_separator)
        if not found:
            if self.ignore_error:
                return None, self._nullable(rest), headers
            raise LineFormatError(f"No key separator found on line number {number}: '{line.decode(errors='replace')}'")
        return self._nullable(key), self._nullable(value), headers


def read_lines(stream: BinaryIO) -> Iterator[list[bytes]]:
    """The complete lines of each read from ``stream`` (a line typed at a terminal goes at once; a
    pipe's lines go many at a time); the last line needs no newline."""
    fd = stream.fileno()
    pending = b""
    while True:
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            if pending:
                yield [pending.rstrip(b"\r")]
            return
        data = pending + chunk
        *lines, pending = data.split(b"\n")
        if lines:
            yield [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


class Sender:
    """Partitions records and sends them, one batch per partition per ``send``."""

    def __init__(self, admin: PartitionAdmin, topic: str, *, acks: int, timeout_ms: int, codec: int,
                 batch_size: int) -> None:
        self.admin, self.topic = admin, topic
        self.acks, self.timeout_ms, self.codec, self.batch_size = acks, timeout_ms, codec, batch_size
        self.partitions = len(admin.partitions_of([topic]))
        self._next = 0
        self.failed = 0

    def send(self, records: list[ParsedRecord]) -> None:
        keyed: dict[int, list[ParsedRecord]] = {}
        unkeyed: list[ParsedRecord] = []
        for rec in records:
            if rec[0] is None:
                unkeyed.append(rec)
            else:
                keyed.setdefault(to_positive(murmur2(rec[0])) % self.partitions, []).append(rec)
        for p, recs in sorted(keyed.items()):
            for chunk in self._chunks(recs):
                self._send_batch(TopicPartition(self.topic, p), chunk)
        for chunk in self._chunks(unkeyed):
            # as Kafka's sticky partitioning: a whole batch to one partition, the next batch to another
            self._send_batch(TopicPartition(self.topic, self._next % self.partitions), chunk)
            self._next += 1

    def _chunks(self, recs: list[ParsedRecord]) -> Iterator[list[ParsedRecord]]:
        chunk: list[ParsedRecord] = []
        size = 0
        for rec in recs:
            n = len(rec[0] or b"") + len(rec[1] or b"") + 16
            if chunk and size + n > self.batch_size:
                yield chunk
                chunk, size = [], 0
            chunk.append(rec)
            size += n
        if chunk:
            yield chunk

    def _send_batch(self, tp: TopicPartition, recs: list[ParsedRecord]) -> None:
        batch = build_batch(((k, v, h) for k, v, h in recs), codec=self.codec)
        try:
            self.admin.produce(tp, batch, self.acks, self.timeout_ms)
        except AdminApiError as exc:
            self.failed += len(recs)
            print(f"ERROR Error when sending {len(recs)} message(s) to topic {tp.topic} partition {tp.partition}: "
                  f"{exc}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog console-producer",
                                description="Read lines from stdin and produce each as a record "
                                            "(kafka-console-producer.sh).")
    p.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", required=True,
                   help="HOST:PORT of any broker")
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument("--property", action="append", metavar="KEY=VALUE",
                   help="line reader properties: parse.key, key.separator, parse.headers, headers.delimiter, "
                        "headers.separator, headers.key.separator, null.marker, ignore.error")
    p.add_argument("--producer-property", action="append", metavar="KEY=VALUE",
                   help="producer properties (acks, compression.type, batch.size, security.protocol, ...)")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE", help="producer properties file")
    p.add_argument("--request-required-acks", metavar="ACKS", help="-1 (all, the default), 0 or 1")
    p.add_argument("--request-timeout-ms", type=int, default=1500,
                   help="how long the leader waits for acks (default 1500, as Kafka's console producer)")
    p.add_argument("--compression-codec", nargs="?", const="gzip", choices=sorted(CODECS),
                   help="none, gzip (without a value), snappy, lz4 or zstd")
    p.add_argument("--batch-size", type=int, help="bytes per batch and partition (default 16384)")
    p.add_argument("--sync", action="store_true", help="accepted for kafka-console-producer.sh's sake: every "
                                                       "batch is sent and acknowledged before the next")
    command_config.add_argument(p)
    add_version_argument(p)
    return p


def _acks(text: str) -> int:
    return -1 if text.strip().lower() == "all" else int(text)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(sys.argv[1:] if argv is None else argv)
    props = merged(parser, [a.command_config, a.producer_config], a.producer_property, "--producer-property")
    try:
        reader = LineReader.from_properties(merged(parser, [], a.property, "--property"))
        acks = _acks(a.request_required_acks if a.request_required_acks is not None else props.get("acks", "-1"))
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks {acks}")
        codec_name = a.compression_codec or props.get("compression.type", "none")
        if codec_name not in CODECS:
            raise ValueError(f"compression.type {codec_name}")
        batch_size = a.batch_size or int(props.get("batch.size", DEFAULT_BATCH_SIZE))
    except ValueError as exc:
        parser.error(f"invalid value: {exc}")
    client_settings = settings(parser, props)

    def run() -> int:
        with PartitionAdmin(a.bootstrap_server, client_id=props.get("client.id", "console-producer"),
                            settings=client_settings) as admin:
            try:
                sender = Sender(admin, a.topic, acks=acks, timeout_ms=a.request_timeout_ms,
                                codec=CODECS[codec_name], batch_size=max(1, batch_size))
            except AdminApiError as exc:
                print(f"ERROR {exc}", file=sys.stderr)
                return 1
            number = 0
            try:
                for lines in read_lines(sys.stdin.buffer):
                    records = []
                    for line in lines:
                        number += 1
                        records.append(reader.parse(line, number))
                    sender.send(records)
            except LineFormatError as exc:
                print(f"ERROR {exc}", file=sys.stderr)
                return 1
            except KeyboardInterrupt:
                pass
            return 1 if sender.failed else 0

    return run_against_broker("console-producer", a.bootstrap_server, run)


if __name__ == "__main__":
    sys.exit(main())
