"""`tieredlog log-dirs`: kafka-log-dirs.sh — each broker's log dirs and the size of every partition in
them, as Kafka's tool prints them (JSON, after two lines saying whom it asked).

    tieredlog log-dirs --bootstrap-server H:P --describe [--broker-list 0,1] [--topic-list t1,t2]

DescribeLogDirs goes to every broker of ``--broker-list`` (default: every broker Metadata lists).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kio.schema.errors import ErrorCode

from tieredlog.tools import add_version_argument, command_config, run_against_broker
from tieredlog.tools.cluster_admin import exception_name
from tieredlog.tools.partition_admin import PartitionAdmin
from tieredlog.tools.transaction_admin import AdminApiError


def _ints(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be comma-separated broker ids, not {text!r}") from None


def log_dirs_json(answers: dict[int, Any], topics: set[str] | None) -> dict[str, Any]:
    """Kafka's LogDirsCommand JSON of the DescribeLogDirs answers (broker id -> answer)."""
    brokers = []
    for broker, answer in sorted(answers.items()):
        dirs = []
        for d in answer.results:
            partitions: list[dict[str, Any]] = [{"partition": f"{t.name}-{p.partition_index}", "size": int(p.partition_size),
                           "offsetLag": int(p.offset_lag), "isFuture": bool(p.is_future_key)}
                          for t in d.topics if topics is None or t.name in topics for p in t.partitions]
            error = None if d.error_code == ErrorCode.none else \
                f"org.apache.kafka.common.errors.{exception_name(ErrorCode(d.error_code))}"
            dirs.append({"partitions": sorted(partitions, key=lambda p: str(p["partition"])), "error": error,
                         "logDir": d.log_dir})
        brokers.append({"broker": broker, "logDirs": dirs})
    return {"brokers": brokers, "version": 1}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog log-dirs",
                                description="Describe the brokers' log dirs and partition sizes (kafka-log-dirs.sh).")
    p.add_argument("--bootstrap-server", required=True, help="HOST:PORT of any broker")
    p.add_argument("--describe", action="store_true", required=True, help="describe the log dirs")
    p.add_argument("--broker-list", type=lambda s: _ints(s, "--broker-list"), metavar="0,1,2",
                   help="the brokers to ask (default: every broker)")
    p.add_argument("--topic-list", metavar="T1,T2", help="only these topics' partitions (default: every topic)")
    command_config.add_argument(p)
    add_version_argument(p)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(sys.argv[1:] if argv is None else argv)
    settings = command_config.from_args(parser, a)
    topics = None if not a.topic_list else {t.strip() for t in a.topic_list.split(",") if t.strip()}

    def run() -> int:
        with PartitionAdmin(a.bootstrap_server, client_id="tieredlog-log-dirs", settings=settings) as admin:
            live = sorted(admin.cluster([]).brokers)
            wanted = a.broker_list or live
            missing = sorted(set(wanted) - set(live))
            if missing:
                print(f"ERROR: The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
                      f"Current existent brokers: {','.join(map(str, live))}", file=sys.stderr)
                return 1
            print("Querying brokers for log directories information")
            try:
                answers = {b: admin.describe_log_dirs(b, None) for b in wanted}
            except AdminApiError as exc:
                print(f"ERROR: {exc}", file=sys.stderr)
                return 1
            print(f"Received log directory information from brokers {','.join(map(str, wanted))}")
            print(json.dumps(log_dirs_json(answers, topics), separators=(",", ":")))
            return 0

    return run_against_broker("log-dirs", a.bootstrap_server, run)


if __name__ == "__main__":
    sys.exit(main())
