"""`tieredlog topics --bootstrap-server HOST:PORT create|delete|list|describe|alter-config`.

Speaks the Kafka protocol like any admin client (tieredlog.protocol.client), so it works against any
Kafka-compatible broker.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kio.schema.errors import ErrorCode

from tieredlog.protocol.api import CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, METADATA
from tieredlog.protocol.client import KafkaClient
from tieredlog.tools import run_tool

TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1


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


def cmd_describe(c: KafkaClient, a: argparse.Namespace) -> int:
    md = _metadata(c, [a.topic] if a.topic else None)
    rc = 0
    for t in sorted(md.topics, key=lambda t: t.name or ""):
        err = _err(t.error_code)
        if err:
            print(f"Error describing topic {t.name}: {err}", file=sys.stderr)
            rc = 1
            continue
        configs = [f"{e.name}={e.value}" for e in _describe_configs(c, t.name) if e.config_source == DYNAMIC_TOPIC_CONFIG]
        print(
            f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}\t"
            f"ReplicationFactor: {len(t.partitions[0].replica_nodes) if t.partitions else 0}\t"
            f"Configs: {','.join(configs)}"
        )
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            print(
                f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                f"Replicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}"
            )
    return rc


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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog topics")
    p.add_argument("--bootstrap-server", required=True, help="HOST:PORT of any broker")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create")
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=int, default=-1)
    c.add_argument("--replication-factor", type=int, default=-1)
    c.add_argument("--config", action="append", metavar="KEY=VALUE")
    c.add_argument("--validate-only", action="store_true")
    d = sub.add_parser("delete")
    d.add_argument("--topic", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("--include-internal", action="store_true")
    ds = sub.add_parser("describe")
    ds.add_argument("--topic")
    al = sub.add_parser("alter-config")
    al.add_argument("--topic", required=True)
    al.add_argument("--set", action="append", metavar="KEY=VALUE")
    al.add_argument("--delete", action="append", metavar="KEY")
    return p


COMMANDS = {"create": cmd_create, "delete": cmd_delete, "list": cmd_list, "describe": cmd_describe,
            "alter-config": cmd_alter_config}


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(sys.argv[1:] if argv is None else argv)

    def run() -> int:
        try:
            with KafkaClient(a.bootstrap_server) as client:
                return COMMANDS[a.command](client, a)
        except BrokenPipeError:
            raise  # our stdout, not the broker: run_tool ends quietly
        except (OSError, ConnectionError) as exc:
            print(f"tieredlog topics: cannot reach {a.bootstrap_server}: {exc}", file=sys.stderr)
            return 1

    return run_tool(run)


if __name__ == "__main__":
    sys.exit(main())
