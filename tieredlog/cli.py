"""`tieredlog` command: dispatches to one module per subcommand, imported only when used."""

from __future__ import annotations

import importlib
import sys

from tieredlog.tools import package_version

# subcommand -> (module, help). Each module exposes main(argv: list[str]) -> int.
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("tieredlog.server.main", "run a broker"),
    "topics": ("tieredlog.tools.topics", "create, delete, list, describe, alter-config topics"),
    "console-producer": ("tieredlog.tools.console_producer", "produce each line of stdin as a record (kafka-console-producer)"),
    "console-consumer": ("tieredlog.tools.console_consumer", "print a topic's records to stdout (kafka-console-consumer)"),
    "configs": ("tieredlog.tools.configs", "describe and alter topic, broker and user configs (kafka-configs)"),
    "log-dirs": ("tieredlog.tools.log_dirs", "the brokers' log dirs and partition sizes as JSON (kafka-log-dirs)"),
    "get-offsets": ("tieredlog.tools.get_offsets", "partitions' offsets for a time: earliest, latest, ... (kafka-get-offsets)"),
    "dump-log": ("tieredlog.tools.dump_log", "print batches, records and index entries of log files"),
    "remote": ("tieredlog.tools.remote", "inspect remote segments and __remote_log_metadata"),
    "reassign": ("tieredlog.tools.reassign", "move partition replicas between brokers (kafka-reassign-partitions)"),
    "transactions": ("tieredlog.tools.transactions", "list, describe and abort transactions, find hanging ones (kafka-transactions)"),
    "consumer-groups": ("tieredlog.tools.consumer_groups", "list, describe, reset offsets of and delete consumer groups (kafka-consumer-groups)"),
    "leader-election": ("tieredlog.tools.leader_election", "elect preferred or unclean leaders (kafka-leader-election)"),
    "users": ("tieredlog.tools.users", "describe, add, change and delete SCRAM users (kafka-configs --entity-type users)"),
    "host": ("tieredlog.tools.host", "run one broker per core of this host as one service, until SIGTERM"),
    "dev-cluster": ("tieredlog.tools.dev_cluster", "run a ZooKeeper and N brokers on 127.0.0.1 until Ctrl-C"),
    # lives beside the Spark reader, whose planner and decoder it shares (needs no Spark)
    "export": ("spark_readers.export", "write a tiered topic's history from the remote tier to Parquet"),
}


def _usage() -> str:
    lines = ["usage: tieredlog <command> [args]   (tieredlog --version, tieredlog <command> --help)", "",
             "commands:"]
    lines += [f"  {name:<16} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(package_version())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"tieredlog: unknown command {cmd!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    if "--version" in rest:
        # every tool's --version, as Kafka's scripts have it, the older tools' parsers included
        print(package_version())
        return 0
    module = importlib.import_module(COMMANDS[cmd][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
