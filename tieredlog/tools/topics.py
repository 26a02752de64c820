"""`tieredlog topics`: kafka-topics.sh, with its flags or with subcommands.

    tieredlog topics --bootstrap-server H:P --create --topic T --partitions 3 --config retention.ms=60000
    tieredlog topics --describe --topic T --bootstrap-server H:P          (options in any order)
    tieredlog topics --bootstrap-server H:P --alter --topic T --partitions 6
    tieredlog topics --bootstrap-server H:P --list | --delete --topic T
    tieredlog topics [--bootstrap-server H:P] create|delete|list|describe|alter-config ... [--bootstrap-server H:P]

`describe` prints what kafka-topics.sh --describe prints, in its format, with its filters
(`--under-replicated-partitions`, `--under-min-isr-partitions`, `--at-min-isr-partitions`,
`--unavailable-partitions`). For a topic with remote.storage.enable=true each partition line goes on
with where its records are: the remote and local offset ranges and their sizes (topic_tiers).

Speaks the Kafka protocol like any admin client (tieredlog.clients.blocking), so it works against any
Kafka-compatible broker.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient, KafkaProtocolError
from tieredlog.kafka_uuid import uuid_to_kafka_str
from tieredlog.log.types import TopicPartition as TopicPartitionKey
from tieredlog.protocol.api import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_PARTITION_REASSIGNMENTS,
    METADATA,
)
from tieredlog.rsm.api import TopicIdPartition
from tieredlog.tools import add_version_argument, command_config, run_against_broker
from tieredlog.tools.cluster_admin import AdminCommandFailed, PartitionInfo, controller_request, describe_cluster
from tieredlog.tools.partition_admin import PartitionAdmin
from tieredlog.tools.topic_tiers import PartitionTiers, TierReader
from tieredlog.tools.transaction_admin import AdminApiError

TOPIC_RESOURCE = 2
DEFAULT_CONFIG = 5  # DescribeConfigs' config_source of a value nobody set; Kafka's describe leaves those out


def _kv(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"tieredlog topics: expected key=value, got {item!r}")
        out[k.strip()] = v.strip()
    return out


def _err(code: ErrorCode, message: str | None = None) -> str | None:
    if code == ErrorCode.none:
        return None
    return f"{code.name} ({code.value})" + (f": {message}" if message else "")


def cmd_create(c: KafkaClient, a: argparse.Namespace) -> int:
    body = {
        "topics": [{
            "name": a.topic,
            "num_partitions": a.partitions,
            "replication_factor": a.replication_factor,
            "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in _kv(a.config).items()],
        }],
        "timeout": 30000,
        "validate_only": a.validate_only,
    }
    r = c.request(CREATE_TOPICS, body).topics[0]
    if r.error_code == ErrorCode.topic_already_exists and a.if_not_exists:
        return 0
    err = _err(r.error_code, r.error_message)
    if err:
        print(f"Error while creating topic {a.topic}: {err}", file=sys.stderr)
        return 1
    print(f"{'Validated' if a.validate_only else 'Created'} topic {a.topic}.")
    return 0


def cmd_delete(c: KafkaClient, a: argparse.Namespace) -> int:
    v = c.version_for(DELETE_TOPICS)
    body: dict[str, Any] = {"timeout": 30000}
    if v >= 6:
        body["topics"] = [{"name": a.topic, "topic_id": None}]
    else:
        body["topic_names"] = [a.topic]
    r = c.request(DELETE_TOPICS, body, version=v).responses[0]
    if r.error_code == ErrorCode.unknown_topic_or_partition and a.if_exists:
        return 0
    err = _err(r.error_code, getattr(r, "error_message", None))
    if err:
        print(f"Error while deleting topic {a.topic}: {err}", file=sys.stderr)
        return 1
    print(f"Deleted topic {a.topic}.")
    return 0


def _metadata(c: KafkaClient, topics: list[str] | None) -> Any:
    req = {"topics": None if topics is None else [{"name": t} for t in topics], "allow_auto_topic_creation": False}
    return c.request(METADATA, req)


def cmd_list(c: KafkaClient, a: argparse.Namespace) -> int:
    md = _metadata(c, None)
    for t in sorted(md.topics, key=lambda t: t.name or ""):
        if t.is_internal and not a.include_internal:
            continue
        print(t.name)
    return 0


def _describe_configs(c: KafkaClient, topic: str) -> list[Any]:
    r = c.request(DESCRIBE_CONFIGS, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": None}],
        "include_synonyms": False,
        "include_documentation": False,
    }).results[0]
    if _err(r.error_code):
        return []
    return list(r.configs)


def _min_isr(c: KafkaClient, topic: str) -> int | None:
    """The topic's effective min.insync.replicas; None when its configs cannot be read."""
    for e in _describe_configs(c, topic):
        if e.name == "min.insync.replicas" and e.value is not None:
            try:
                return int(e.value)
            except ValueError:
                return None
    return None


def _reassignments(c: KafkaClient) -> dict[tuple[str, int], Any]:
    """The reassignments in progress, from the controller; none when it cannot tell (a standalone
    broker, a broker without the API), as Kafka's TopicCommand carries on without them."""
    try:
        r = controller_request(c, LIST_PARTITION_REASSIGNMENTS, {"timeout": 30000, "topics": None}, wait_s=0)
    except (AdminCommandFailed, KafkaProtocolError, OSError):
        return {}
    if r.error_code != ErrorCode.none:
        return {}
    return {(t.name, p.partition_index): p for t in r.topics for p in t.partitions}


def _replication_factor(p: PartitionInfo, reassignment: Any) -> int:
    """Kafka's: while a reassignment still moves replicas, the target set without the replicas being added
    (so a partition growing from 2 to 3 replicas is not reported under-replicated meanwhile)."""
    if reassignment is not None:
        changing = set(reassignment.adding_replicas) | set(reassignment.removing_replicas)
        if changing & set(p.replicas):
            return len([r for r in reassignment.replicas if r not in set(reassignment.adding_replicas)])
    return len(p.replicas)


def _selected_topics(c: KafkaClient, a: argparse.Namespace) -> list[str] | None:
    """Topic names --topic selects (Kafka accepts a regular expression there); None: --topic names a
    topic that does not exist."""
    everything = describe_cluster(c)
    names = sorted(n for n, t in everything.topics.items() if not (a.exclude_internal and t.is_internal))
    if not a.topic:
        return names
    try:
        pattern = re.compile(a.topic)
    except re.error:
        return [a.topic] if a.topic in names else None
    chosen = [n for n in names if pattern.fullmatch(n)]
    return chosen or None


TiersOf = Callable[[list[TopicIdPartition]], dict[TopicPartitionKey, PartitionTiers]]


def cmd_describe(c: KafkaClient, a: argparse.Namespace, tiers_of: TiersOf | None = None) -> int:
    topics = _selected_topics(c, a)
    if topics is None:
        print(f"Error while executing topic command : Topic '{a.topic}' does not exist as expected", file=sys.stderr)
        return 1
    if not topics:
        return 0
    view = describe_cluster(c, topics)
    reassignments = _reassignments(c)
    # Kafka: with a partition filter only the matching partition lines are printed, without the topic line
    filtered = (a.under_replicated_partitions or a.unavailable_partitions or a.under_min_isr_partitions
                or a.at_min_isr_partitions)
    rc = 0
    for name in topics:
        t = view.topics.get(name)
        if t is None:
            continue  # deleted between the two Metadata answers
        err = _err(t.error_code)
        if err:
            print(f"Error describing topic {name}: {err}", file=sys.stderr)
            rc = 1
            continue
        entries = _describe_configs(c, name)
        tiers = _tiers(tiers_of, t, entries)
        if not filtered:
            first = t.partitions[0] if t.partitions else None
            rf = _replication_factor(first, reassignments.get((name, 0))) if first else 0
            configs = [f"{e.name}={e.value}" for e in entries
                       if e.config_source != DEFAULT_CONFIG and not e.is_sensitive]
            topic_id = f"\tTopicId: {uuid_to_kafka_str(t.topic_id)}" if t.topic_id and t.topic_id.int else ""
            print(f"Topic: {name}{topic_id}\tPartitionCount: {len(t.partitions)}\tReplicationFactor: {rf}\t"
                  f"Configs: {','.join(configs)}")
        min_isr = _min_isr(c, name) if a.under_min_isr_partitions or a.at_min_isr_partitions else None
        for p in t.partitions:
            ra = reassignments.get((name, p.partition))
            has_leader = p.leader >= 0
            under_replicated = _replication_factor(p, ra) - len(p.isr) > 0
            unavailable = not has_leader or p.leader not in view.brokers
            # Kafka's: a partition without a leader counts as under its min ISR
            under_min_isr = not has_leader or (min_isr is not None and len(p.isr) < min_isr)
            at_min_isr = min_isr is not None and len(p.isr) == min_isr
            if filtered and not ((a.under_replicated_partitions and under_replicated)
                                 or (a.unavailable_partitions and unavailable)
                                 or (a.under_min_isr_partitions and under_min_isr)
                                 or (a.at_min_isr_partitions and at_min_isr)):
                continue
            line = (f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader if has_leader else 'none'}\t"
                    f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
            if ra is not None:
                line += (f"\tAdding Replicas: {','.join(map(str, ra.adding_replicas))}"
                         f"\tRemoving Replicas: {','.join(map(str, ra.removing_replicas))}")
            found = tiers.get(TopicPartitionKey(name, p.partition))
            if found is not None:
                line += found.columns()
            print(line)
    return rc


def _tiers(tiers_of: TiersOf | None, t: Any, entries: list[Any]) -> dict[TopicPartitionKey, PartitionTiers]:
    """The tier columns of a topic whose remote.storage.enable is true, for its partitions with a
    leader; none when they cannot be read (the lines stay Kafka's)."""
    tiered = any(e.name == "remote.storage.enable" and (e.value or "").lower() == "true" for e in entries)
    if tiers_of is None or not tiered or not (t.topic_id and t.topic_id.int):
        return {}
    led = [TopicIdPartition(t.topic_id, t.name, p.partition) for p in t.partitions if p.leader >= 0]
    try:
        return tiers_of(led)
    except (AdminApiError, KafkaProtocolError, OSError) as exc:
        print(f"Could not read the tiers of topic {t.name}: {exc}", file=sys.stderr)
        return {}


def cmd_alter(c: KafkaClient, a: argparse.Namespace) -> int:
    """kafka-topics.sh --alter: more partitions (CreatePartitions), and here also --config / --delete-config
    (what kafka-configs.sh --alter does for a topic)."""
    if a.partitions is None and not a.config and not a.delete_config:
        print("tieredlog topics --alter: nothing to change (use --partitions, --config or --delete-config)",
              file=sys.stderr)
        return 2
    if a.partitions is not None:
        r = c.request(CREATE_PARTITIONS, {"topics": [{"name": a.topic, "count": a.partitions, "assignments": None}],
                                          "timeout_ms": 30000, "validate_only": False}).results[0]
        if r.error_code == ErrorCode.unknown_topic_or_partition and a.if_exists:
            return 0
        err = _err(r.error_code, r.error_message)
        if err:
            print(f"Error while executing topic command : {err}", file=sys.stderr)
            return 1
    if a.config or a.delete_config:
        a.set, a.delete = a.config, a.delete_config
        return cmd_alter_config(c, a)
    return 0


def cmd_alter_config(c: KafkaClient, a: argparse.Namespace) -> int:
    ops = [{"name": k, "config_operation": 0, "value": v} for k, v in _kv(a.set).items()]
    ops += [{"name": k, "config_operation": 1, "value": None} for k in a.delete or []]
    if not ops:
        print("tieredlog topics alter-config: nothing to change (use --set key=value or --delete key)", file=sys.stderr)
        return 2
    r = c.request(INCREMENTAL_ALTER_CONFIGS, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": a.topic, "configs": ops}],
        "validate_only": False,
    }).responses[0]
    err = _err(r.error_code, r.error_message)
    if err:
        print(f"Error altering configs of topic {a.topic}: {err}", file=sys.stderr)
        return 1
    print(f"Completed updating config for topic {a.topic}.")
    return 0


ACTIONS = ("create", "delete", "list", "describe", "alter")
SUBCOMMANDS = ("create", "delete", "list", "describe", "alter-config")
# options that take a value: a subcommand's name after one of them is that value, not the subcommand
_VALUED = {"--bootstrap-server", "--command-config", "--topic", "--partitions", "--replication-factor", "--config",
           "--set", "--delete", "--delete-config", "--replica-assignment"}


def _connection_arguments(p: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """--bootstrap-server and --command-config, accepted before and after a subcommand (``suppress``: a
    subcommand's copy leaves the value given before it alone when not given again)."""
    default = argparse.SUPPRESS if suppress else None
    p.add_argument("--bootstrap-server", default=default, help="HOST:PORT of any broker")
    p.add_argument("--command-config", metavar="FILE", default=default,
                   help="client properties file (Kafka's names): security.protocol, sasl.mechanism, ...")


def _describe_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--exclude-internal", action="store_true", help="leave internal topics out")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="only partitions whose ISR is smaller than their replica set")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="only partitions whose ISR is smaller than min.insync.replicas (or without a leader)")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="only partitions whose ISR is exactly min.insync.replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="only partitions without a leader, or whose leader is not a live broker")


def subcommand_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog topics")
    _connection_arguments(p)
    add_version_argument(p)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create")
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=int, default=-1)
    c.add_argument("--replication-factor", type=int, default=-1)
    c.add_argument("--config", action="append", metavar="KEY=VALUE")
    c.add_argument("--validate-only", action="store_true")
    c.add_argument("--if-not-exists", action="store_true", help="no error when the topic exists")
    d = sub.add_parser("delete")
    d.add_argument("--topic", required=True)
    d.add_argument("--if-exists", action="store_true", help="no error when the topic does not exist")
    ls = sub.add_parser("list")
    ls.add_argument("--include-internal", action="store_true")
    ds = sub.add_parser("describe")
    ds.add_argument("--topic", help="a topic name or a regular expression")
    _describe_filters(ds)
    al = sub.add_parser("alter-config")
    al.add_argument("--topic", required=True)
    al.add_argument("--set", action="append", metavar="KEY=VALUE")
    al.add_argument("--delete", action="append", metavar="KEY")
    for s in (c, d, ls, ds, al):
        _connection_arguments(s, suppress=True)
    return p


def kafka_parser() -> argparse.ArgumentParser:
    """kafka-topics.sh's flags: one action flag, the options in any order."""
    p = argparse.ArgumentParser(prog="tieredlog topics", description="Create, delete, describe, list or alter "
                                "topics (kafka-topics.sh's flags).",
                                epilog="The subcommand form works too: tieredlog topics "
                                       "create|delete|list|describe|alter-config --help")
    _connection_arguments(p)
    add_version_argument(p)
    action = p.add_mutually_exclusive_group(required=True)
    for name in ACTIONS:
        action.add_argument(f"--{name}", dest="action", action="store_const", const=name)
    p.add_argument("--topic", help="the topic (--describe: a name or a regular expression)")
    p.add_argument("--partitions", type=int, help="--create: the partition count; --alter: the new, larger one")
    p.add_argument("--replication-factor", type=int, default=-1, help="--create: replicas per partition")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="--create, --alter: a topic config")
    p.add_argument("--delete-config", action="append", metavar="KEY", help="--alter: a topic config to delete")
    p.add_argument("--if-exists", action="store_true", help="--alter, --delete: no error when the topic is missing")
    p.add_argument("--if-not-exists", action="store_true", help="--create: no error when the topic exists")
    p.add_argument("--validate-only", action="store_true", help="--create: only check that it could be created")
    _describe_filters(p)
    return p


def _kafka_style(argv: list[str]) -> bool:
    """kafka-topics.sh's flags rather than a subcommand: no subcommand word in a place one could be."""
    return not any(arg in SUBCOMMANDS and (i == 0 or argv[i - 1] not in _VALUED) for i, arg in enumerate(argv))


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Either form of the command line, as one namespace (``command`` names the subcommand)."""
    if _kafka_style(argv):
        parser = kafka_parser()
        a = parser.parse_args(argv)
        if a.action in ("create", "delete", "alter") and not a.topic:
            parser.error(f"--{a.action} needs --topic")
        if a.action != "alter" and a.delete_config:
            parser.error("--delete-config goes with --alter")
        a.command = "alter" if a.action == "alter" else a.action
        if a.action == "create" and a.partitions is None:
            a.partitions = -1
        a.include_internal = not a.exclude_internal  # kafka-topics.sh --list shows internal topics
    else:
        parser = subcommand_parser()
        a = parser.parse_args(argv)
        for name in ("if_exists", "if_not_exists", "exclude_internal"):
            setattr(a, name, getattr(a, name, False))
    if not a.bootstrap_server:
        parser.error("--bootstrap-server is required")
    a.parser = parser
    return a


COMMANDS = {"create": cmd_create, "delete": cmd_delete, "list": cmd_list, "alter-config": cmd_alter_config,
            "alter": cmd_alter}


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    settings = command_config.from_args(a.parser, a)

    def run() -> int:
        with settings.client(a.bootstrap_server) as client:
            if a.command != "describe":
                return COMMANDS[a.command](client, a)
            with PartitionAdmin(a.bootstrap_server, client_id="tieredlog-topics", settings=settings) as admin:
                return cmd_describe(client, a, TierReader(admin))

    return run_against_broker("topics", a.bootstrap_server, run)


if __name__ == "__main__":
    sys.exit(main())
