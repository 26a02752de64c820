"""The parts of the Kafka-style tools that need no broker: the console producer's line reader, the
console consumer's formatter, kafka-configs' --add-config syntax, kafka-get-offsets' partition rules,
and which form of `tieredlog topics` a command line is."""

from __future__ import annotations

import argparse
import io

import pytest

from tieredlog.records.record import Record
from tieredlog.tools import configs, console_consumer, get_offsets, topics
from tieredlog.tools.cluster_admin import AdminCommandFailed
from tieredlog.tools.console_consumer import Formatter
from tieredlog.tools.console_producer import LineFormatError, LineReader


def test_line_reader_keys_headers_null_marker_and_errors() -> None:
    assert LineReader.from_properties({}).parse(b"a:b", 1) == (None, b"a:b", [])
    keyed = LineReader.from_properties({"parse.key": "true", "key.separator": ":"})
    assert keyed.parse(b"k:v:w", 1) == (b"k", b"v:w", [])
    with pytest.raises(LineFormatError, match="No key separator found on line number 7: 'novalue'"):
        keyed.parse(b"novalue", 7)
    lenient = LineReader.from_properties({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse(b"novalue", 1) == (None, b"novalue", [])
    full = LineReader.from_properties({"parse.key": "true", "parse.headers": "true", "null.marker": "NULL"})
    assert full.parse(b"h1:x,h2:NULL,h3\tNULL\tv", 1) == (None, b"v", [("h1", b"x"), ("h2", None), ("h3", None)])


def test_formatter_prints_kafkas_parts_in_kafkas_order() -> None:
    r = Record(offset=5, timestamp=1700000000000, key=None, value=b"v", headers=[("h", b"1"), ("n", None)])
    out = io.BytesIO()
    Formatter.from_properties({}).write(out, 3, 0, r)
    every = {"print.timestamp": "true", "print.partition": "true", "print.offset": "true", "print.headers": "true",
             "print.key": "true", "key.separator": "|"}
    Formatter.from_properties(every).write(out, 3, 1, r)
    Formatter.from_properties({"print.value": "false"}).write(out, 3, 0, r)  # nothing at all
    assert out.getvalue() == b"v\nLogAppendTime:1700000000000|Partition:3|Offset:5|h:1,n:null|null|v\n"


def test_add_config_splits_outside_brackets() -> None:
    assert configs.parse_add_config("retention.ms=1000, cleanup.policy=[compact,delete],a = b") == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete", "a": "b"}
    with pytest.raises(AdminCommandFailed, match="key=val"):
        configs.parse_add_config("novalue")


def test_get_offsets_rules_and_times() -> None:
    rules = get_offsets.parse_rules("t1:1,t2:0-3,t3,t4:5-,t5:-3,:2")
    accepted = {(name, p) for name in ("t1", "t2", "t3", "t4", "t5", "x") for p in range(8)
                if any(pat.fullmatch(name) and ok(p) for pat, ok in rules)}
    assert accepted == ({("t1", 1)} | {("t2", p) for p in range(3)} | {("t3", p) for p in range(8)}
                        | {("t4", p) for p in range(5, 8)} | {("t5", p) for p in range(3)}
                        | {(n, 2) for n in ("t1", "t2", "t3", "t4", "t5", "x")})
    assert [get_offsets.parse_time(t) for t in ("latest", "-2", "earliest-local", "-5", "1700000000000")] == [
        -1, -2, -4, -5, 1700000000000]
    with pytest.raises(argparse.ArgumentTypeError, match="Malformed time argument yesterday"):
        get_offsets.parse_time("yesterday")


@pytest.mark.parametrize("argv,command", [
    (["--bootstrap-server", "h:1", "--describe", "--topic", "list"], "describe"),  # a topic named like a subcommand
    (["--create", "--topic", "t", "--bootstrap-server", "h:1"], "create"),
    (["--topic", "t", "--alter", "--partitions", "4", "--bootstrap-server", "h:1"], "alter"),
    (["--bootstrap-server", "h:1", "alter-config", "--topic", "t", "--delete", "k"], "alter-config"),
    (["list", "--bootstrap-server", "h:1"], "list"),
    (["--bootstrap-server", "h:1", "describe", "--topic", "create"], "describe"),
])
def test_topics_takes_either_form(argv: list[str], command: str) -> None:
    assert topics.parse_args(argv).command == command


def test_topics_kafka_form_defaults_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    a = topics.parse_args(["--list", "--bootstrap-server", "h:1"])
    assert a.include_internal  # kafka-topics.sh --list shows internal topics
    assert topics.parse_args(["--create", "--topic", "t", "--bootstrap-server", "h:1"]).partitions == -1
    for argv in (["--create", "--bootstrap-server", "h:1"], ["--list", "--describe", "--bootstrap-server", "h:1"],
                 ["--list"], ["describe"]):
        with pytest.raises(SystemExit) as exc:
            topics.parse_args(argv)
        assert exc.value.code == 2
    assert "--bootstrap-server is required" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--topic", "t", "--offset", "3"], "The partition is required when offset is specified."),
    (["--topic", "t", "--partition", "0", "--offset", "3", "--from-beginning"],
     "Options from-beginning and offset cannot be specified together."),
    (["--topic", "t", "--partition", "0", "--group", "g"], "Options group and partition cannot be specified together."),
    (["--topic", "t", "--partition", "0", "--offset", "soon"], "The provided offset value 'soon' is incorrect."),
])
def test_console_consumer_refuses_kafkas_invalid_combinations(argv: list[str], message: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        console_consumer.main(["--bootstrap-server", "127.0.0.1:1", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err
