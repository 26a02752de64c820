"""`tieredlog configs`: kafka-configs.sh for topics, brokers and users.

    tieredlog configs --bootstrap-server H:P --entity-type topics --entity-name T --describe [--all]
    tieredlog configs --bootstrap-server H:P --entity-type topics --entity-name T --alter \\
        --add-config retention.ms=60000,cleanup.policy=[compact,delete] --delete-config local.retention.ms
    tieredlog configs --bootstrap-server H:P --entity-type brokers --entity-default --alter --add-config k=v
    tieredlog configs --bootstrap-server H:P --entity-type users --entity-name alice --alter \\
        --add-config 'SCRAM-SHA-256=[password=alice-secret]'

``--topic T``, ``--broker ID``, ``--broker-defaults`` and ``--user U`` are Kafka's shorthands. Topics
and brokers go through DescribeConfigs and IncrementalAlterConfigs (``--add-config`` sets,
``--delete-config`` returns to the default); a broker's own configs are asked of that broker, as
Kafka's admin client routes them. Users are SCRAM credentials: ``tieredlog users`` does that work.
The output is ConfigCommand's: "Dynamic configs for topic T are:" and one line per config with its
sensitivity and synonyms (``--all``: every config, not only the ones set for the entity).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient, KafkaProtocolError
from tieredlog.config import read_properties
from tieredlog.protocol.api import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from tieredlog.security.sasl.client import SaslClientError
from tieredlog.tools import add_version_argument, command_config, run_against_broker, users
from tieredlog.tools.cluster_admin import AdminCommandFailed, describe_cluster, exception_text
from tieredlog.tools.command_config import CommandConfigError, same_as

TOPIC, BROKER = 2, 4  # ConfigResource.Type
SET, DELETE = 0, 1  # AlterConfigOp.OpType
# DescribeConfigs' config_source, by Kafka's ConfigEntry.ConfigSource names
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER = 1, 2, 3
ENTITY_TYPES = ("topics", "brokers", "users")

_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


def parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=[a,b]`` -> {k: v, k2: "a,b"}, as ConfigCommand splits it (commas inside brackets stay)."""
    out: dict[str, str] = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        pair = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item, maxsplit=1)
        if len(pair) != 2 or not pair[0].strip():
            raise AdminCommandFailed('Invalid entity config: all configs to be added must be in the format '
                                     '"key=val" or "key=[val1,val2]"')
        out[pair[0].strip()] = re.sub(r"\[?\]?", "", pair[1]).strip()
    return out


def _entity(a: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, name) from --entity-type/--entity-name/--entity-default or a shorthand; name None:
    every entity of the type (--describe only), "" the brokers' cluster-wide default."""
    shorthand = [(t, n) for t, n in (("topics", a.topic), ("brokers", a.broker), ("users", a.user)) if n is not None]
    if a.broker_defaults:
        shorthand.append(("brokers", ""))
    if shorthand:
        if a.entity_type or a.entity_name is not None or a.entity_default or len(shorthand) > 1:
            raise AdminCommandFailed("Only one entity may be given: --entity-type/--entity-name or one of "
                                     "--topic, --broker, --broker-defaults, --user")
        return shorthand[0]
    if not a.entity_type:
        raise AdminCommandFailed("At least one of --entity-type, --topic, --broker, --broker-defaults or --user "
                                 "must be specified")
    if a.entity_default:
        if a.entity_type != "brokers":
            raise AdminCommandFailed(f"--entity-default is not supported for {a.entity_type} here")
        return a.entity_type, ""
    return a.entity_type, a.entity_name


def _describe_one(client: KafkaClient, rtype: int, name: str) -> list[Any]:
    r = client.request(DESCRIBE_CONFIGS, {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": True, "include_documentation": False}).results[0]
    if r.error_code != ErrorCode.none:
        raise AdminCommandFailed(exception_text(ErrorCode(r.error_code), r.error_message))
    return list(r.configs)


def _text(value: str | None) -> str:
    return "null" if value is None else value


def _print_configs(entries: list[Any], wanted_source: int | None) -> None:
    for e in sorted(entries, key=lambda e: e.name):
        if wanted_source is not None and e.config_source != wanted_source:
            continue
        synonyms = ", ".join(f"{SOURCES.get(s.source, 'UNKNOWN')}:{s.name}={_text(s.value)}" for s in e.synonyms)
        print(f"  {e.name}={_text(None if e.is_sensitive else e.value)} sensitive={str(e.is_sensitive).lower()} "
              f"synonyms={{{synonyms}}}")


def _broker_client(client: KafkaClient, broker: str) -> KafkaClient:
    """A client of broker ``broker`` (its own configs are answered by it alone); "" any broker."""
    if broker == "":
        return client
    try:
        node = describe_cluster(client, []).brokers.get(int(broker))
    except ValueError:
        raise AdminCommandFailed(f"The entity name for brokers must be a valid integer broker id, but it is: "
                                 f"{broker}") from None
    if node is None:
        raise AdminCommandFailed(f"Broker {broker} is not in the cluster")
    return same_as(client, node.address).connect()


def describe(client: KafkaClient, entity_type: str, name: str | None, describe_all: bool) -> int:
    if entity_type == "topics":
        existing = sorted(describe_cluster(client).topics)
        if name is not None and name not in existing:
            print(f"The topic '{name}' doesn't exist and doesn't have dynamic config.")
            return 0
        for topic in [name] if name is not None else existing:
            entries = _describe_one(client, TOPIC, topic)
            print(f"{'All' if describe_all else 'Dynamic'} configs for topic {topic} are:")
            _print_configs(entries, None if describe_all else DYNAMIC_TOPIC)
        return 0
    live = [str(b) for b in sorted(describe_cluster(client, []).brokers)]
    if name and name not in live:
        print(f"The broker '{name}' doesn't exist and doesn't have dynamic config.")
        return 0
    # Kafka's: every broker, then the cluster-wide default
    for broker in [name] if name is not None else [*live, ""]:
        target = _broker_client(client, broker)
        try:
            entries = _describe_one(target, BROKER, broker)
        finally:
            if target is not client:
                target.close()
        if broker == "":
            print("Default configs for brokers in the cluster are:")
            source = DYNAMIC_DEFAULT_BROKER
        else:
            print(f"{'All' if describe_all else 'Dynamic'} configs for broker {broker} are:")
            source = DYNAMIC_BROKER
        _print_configs(entries, None if describe_all else source)
    return 0


def alter(client: KafkaClient, entity_type: str, name: str, add: dict[str, str], delete: list[str]) -> int:
    ops = [{"name": k, "config_operation": SET, "value": v} for k, v in add.items()]
    ops += [{"name": k, "config_operation": DELETE, "value": None} for k in delete]
    rtype = TOPIC if entity_type == "topics" else BROKER
    target = client if rtype == TOPIC else _broker_client(client, name)
    try:
        r = target.request(INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": rtype, "resource_name": name, "configs": ops}],
            "validate_only": False}).responses[0]
    finally:
        if target is not client:
            target.close()
    if r.error_code != ErrorCode.none:
        raise AdminCommandFailed(exception_text(ErrorCode(r.error_code), r.error_message))
    if entity_type == "brokers" and name == "":
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {entity_type[:-1]} {name}.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog configs",
                                description="Describe and alter topic, broker and user configs (kafka-configs.sh).")
    p.add_argument("--bootstrap-server", required=True, help="HOST:PORT of any broker")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the entity's configs")
    action.add_argument("--alter", action="store_true", help="add, change or delete configs")
    p.add_argument("--entity-type", choices=ENTITY_TYPES, help="topics, brokers or users")
    p.add_argument("--entity-name", help="the topic, broker id or user")
    p.add_argument("--entity-default", action="store_true", help="the brokers' cluster-wide default")
    p.add_argument("--topic", help="short for --entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", help="short for --entity-type brokers --entity-name ID")
    p.add_argument("--broker-defaults", action="store_true", help="short for --entity-type brokers --entity-default")
    p.add_argument("--user", help="short for --entity-type users --entity-name USER")
    p.add_argument("--all", action="store_true", help="--describe: every config, not only the ones set")
    p.add_argument("--add-config", metavar="K=V,K2=[A,B]", help="configs to set")
    p.add_argument("--add-config-file", metavar="FILE", help="a properties file of configs to set")
    p.add_argument("--delete-config", action="append", default=[], metavar="K,K2", help="configs to delete")
    command_config.add_argument(p)
    add_version_argument(p)
    return p


def _run(a: argparse.Namespace, settings: command_config.ClientSettings, entity_type: str, name: str | None) -> int:
    delete = [n.strip() for v in a.delete_config for n in v.split(",") if n.strip()]
    with settings.client(a.bootstrap_server, client_id="tieredlog-configs") as client:
        if entity_type == "users":
            if a.describe:
                return users.describe(client, [] if name is None else [name])
            add = users.parse_add_config(a.add_config) if a.add_config else {}
            return users.alter(client, str(name), add, users.parse_delete_config(delete))
        if a.describe:
            return describe(client, entity_type, name, a.all)
        configs = parse_add_config(a.add_config) if a.add_config else {}
        if a.add_config_file:
            configs.update(read_properties(a.add_config_file))
        return alter(client, entity_type, str(name), configs, delete)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        entity_type, name = _entity(a)
    except AdminCommandFailed as exc:
        parser.error(str(exc))
    if a.alter:
        if name is None:
            parser.error("an entity name must be specified with --alter")
        if not (a.add_config or a.add_config_file or a.delete_config):
            parser.error("--alter needs --add-config, --add-config-file or --delete-config")
    elif a.add_config or a.add_config_file or a.delete_config:
        parser.error("--add-config and --delete-config go with --alter")
    settings = command_config.from_args(parser, a)

    def run() -> int:
        try:
            return _run(a, settings, entity_type, name)
        except (AdminCommandFailed, CommandConfigError) as exc:
            print(f"Error while executing config command: {exc}", file=sys.stderr)
            return 1
        except SaslClientError as exc:
            print(f"tieredlog configs: authentication with {a.bootstrap_server} failed: {exc}", file=sys.stderr)
            return 1

    return run_against_broker("configs", a.bootstrap_server, run,
                              unreachable=(OSError, ConnectionError, KafkaProtocolError))


if __name__ == "__main__":
    sys.exit(main())
