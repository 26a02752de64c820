"""`tieredlog get-offsets`: kafka-get-offsets.sh (GetOffsetShell) — each partition's offset for a time,
one ``topic:partition:offset`` line per partition.

    tieredlog get-offsets --bootstrap-server H:P [--topic REGEX] [--partitions 0,1] [--time -1]
    tieredlog get-offsets --bootstrap-server H:P --topic-partitions 't1:0,t2:0-3,t3' --time earliest-local

``--time``: -1 or latest (the default), -2 or earliest, -3 or max-timestamp, -4 or earliest-local
(the first offset still on the broker's disk), -5 or latest-tiered (the last offset in the remote
tier), or a timestamp in ms (the first offset at or after it). A partition without such an offset is
left out, as Kafka's tool leaves it out.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Callable

from tieredlog.log.types import TopicPartition
from tieredlog.tools import add_version_argument, command_config, run_against_broker
from tieredlog.tools.partition_admin import (
    EARLIEST,
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    MAX_TIMESTAMP,
    PartitionAdmin,
)
from tieredlog.tools.transaction_admin import AdminApiError

TIMES = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP, "earliest-local": EARLIEST_LOCAL,
         "latest-tiered": LATEST_TIERED}


def parse_time(text: str) -> int:
    if text in TIMES:
        return TIMES[text]
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest "
                                         "/ -3 or max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a "
                                         "specified long format timestamp") from None
    if value < LATEST_TIERED:
        raise argparse.ArgumentTypeError(f"Malformed time argument {text}")
    return value


def parse_partitions(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--partitions expects comma-separated partition ids, not {text!r}") from None


# Kafka's rule: an optional topic regex, then ":" and a partition, a range "lo-hi" (hi exclusive), "lo-" or "-hi"
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")

Rule = tuple[re.Pattern[str], Callable[[int], bool]]


def parse_rules(text: str) -> list[Rule]:
    """--topic-partitions ``t1:1,t2:0-3,t3,t4:5-,t5:-3`` as Kafka's GetOffsetShell reads it."""
    rules: list[Rule] = []
    for spec in text.split(","):
        m = _RULE.fullmatch(spec)
        if m is None:
            raise argparse.ArgumentTypeError(f"Invalid rule specification: {spec}")
        topic, one, low, high = (g or None for g in m.groups())
        if one is not None:
            lo, hi = int(one), int(one) + 1
        else:
            lo, hi = int(low or 0), int(high) if high is not None else 2**31 - 1
        rules.append((re.compile(topic or ".*"), _in_range(lo, hi)))
    return rules


def _in_range(lo: int, hi: int) -> Callable[[int], bool]:
    return lambda p: lo <= p < hi


def topic_partition_filter(a: argparse.Namespace) -> list[Rule]:
    if a.topic_partitions:
        return a.topic_partitions
    wanted = set(a.partitions or ())
    return [(re.compile(a.topic or ".*"), lambda p: not wanted or p in wanted)]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog get-offsets",
                                description="Print partitions' offsets for a time (kafka-get-offsets.sh).")
    p.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", required=True,
                   help="HOST:PORT of any broker")
    p.add_argument("--topic", metavar="REGEX", help="the topics (a regular expression; default: every topic)")
    p.add_argument("--partitions", type=parse_partitions, metavar="0,1", help="only these partitions")
    p.add_argument("--topic-partitions", type=parse_rules, metavar="RULES",
                   help="topic regex and partition rules, e.g. 'topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3'")
    p.add_argument("--time", type=parse_time, default=LATEST,
                   help="-1/latest (default), -2/earliest, -3/max-timestamp, -4/earliest-local, -5/latest-tiered "
                        "or a timestamp in ms")
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave internal topics out")
    command_config.add_argument(p)
    add_version_argument(p)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if a.topic_partitions and (a.topic or a.partitions):
        parser.error("--topic-partitions cannot be used with --topic or --partitions")
    settings = command_config.from_args(parser, a)
    filters = topic_partition_filter(a)

    def run() -> int:
        with PartitionAdmin(a.bootstrap_server, client_id="tieredlog-get-offsets", settings=settings) as admin:
            view = admin.cluster()
            wanted = [TopicPartition(name, p.partition) for name, t in sorted(view.topics.items())
                      if not (a.exclude_internal_topics and t.is_internal) for p in t.partitions
                      if any(pat.fullmatch(name) and accepts(p.partition) for pat, accepts in filters)]
            if not wanted:
                print("Could not match any topic-partitions with the specified filters", file=sys.stderr)
                return 1
            try:
                found = admin.offsets_for({tp: a.time for tp in wanted})
            except AdminApiError as exc:
                print(f"Error occurred: {exc}", file=sys.stderr)
                return 1
            # Kafka's order (by "topic-partition" as text); a partition without such an offset is left out
            for tp in sorted(wanted, key=lambda tp: f"{tp.topic}-{tp.partition}"):
                if found[tp][0] >= 0:
                    print(f"{tp.topic}:{tp.partition}:{found[tp][0]}")
            return 0

    return run_against_broker("get-offsets", a.bootstrap_server, run)


if __name__ == "__main__":
    sys.exit(main())
