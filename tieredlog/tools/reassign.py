"""`tieredlog reassign`: move partition replicas between brokers, like Kafka's kafka-reassign-partitions.sh.

    tieredlog reassign --bootstrap-server H:P --generate --topics-to-move-json-file topics.json --broker-list 1,2,3
    tieredlog reassign --bootstrap-server H:P --execute --reassignment-json-file plan.json
    tieredlog reassign --bootstrap-server H:P --verify --reassignment-json-file plan.json
    tieredlog reassign --bootstrap-server H:P --cancel --reassignment-json-file plan.json
    tieredlog reassign --bootstrap-server H:P --list

Kafka's modes, JSON files and messages. `--generate` only proposes (Kafka's replica placement over the
brokers listed, `tieredlog.controller.placement`); `--execute` and `--cancel` send
AlterPartitionReassignments and `--verify` / `--list` ListPartitionReassignments to the active
controller (KIP-455), so the tool never writes ZooKeeper itself. `--execute --throttle R` sets the
replication throttles (KIP-73) and `--verify` clears them once the moves are done
(`tieredlog.tools.reassign_throttle`). Not supported: moves between log directories (`log_dirs` other
than "any", `--replica-alter-log-dirs-throttle`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any, Iterable

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient, KafkaProtocolError
from tieredlog.controller.placement import AdminOperationError, RackAwareMode, assign_replicas
from tieredlog.errors import KafkaError
from tieredlog.protocol.api import ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS
from tieredlog.tools import command_config, run_tool
from tieredlog.tools.cluster_admin import (
    AdminCommandFailed,
    controller_request,
    describe_cluster,
    exception_message,
    exception_text,
    tp_name,
)
from tieredlog.tools.reassign_throttle import VERIFY_WARNING, clear_throttles, set_throttles

TP = tuple[str, int]
ANY_LOG_DIR = "any"
REQUEST_TIMEOUT_MS = 30000
EXISTING_REASSIGNMENT = ("Cannot execute because there is an existing partition assignment. Use --additional to "
                         "override this and create a new partition assignment in addition to the existing one.")


# ---- the JSON files ---------------------------------------------------------------------------------

def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise AdminCommandFailed(f"Cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise AdminCommandFailed(f"{path} is not valid JSON: {exc}") from exc


def _check_version(data: Any, path: str) -> None:
    if not isinstance(data, dict):
        raise AdminCommandFailed(f"{path}: expected a JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise AdminCommandFailed(f"Not supported version field value {version}")


def parse_topics_to_move(path: str) -> list[str]:
    """`{"version":1,"topics":[{"topic":"t"}]}` -> the topic names."""
    data = _read_json(path)
    _check_version(data, path)
    try:
        topics = [str(t["topic"]) for t in data.get("topics", [])]
    except (TypeError, KeyError) as exc:
        raise AdminCommandFailed(f"{path}: every entry of \"topics\" needs a \"topic\"") from exc
    duplicates = sorted(t for t, n in Counter(topics).items() if n > 1)
    if duplicates:
        raise AdminCommandFailed(f"List of topics to reassign contains duplicate entries: {','.join(duplicates)}")
    return topics


def parse_reassignment(path: str) -> dict[TP, tuple[list[int], list[str]]]:
    """The reassignment JSON -> (topic, partition) -> (replicas, log dirs), with Kafka's checks."""
    data = _read_json(path)
    _check_version(data, path)
    entries = data.get("partitions")
    if not isinstance(entries, list):
        raise AdminCommandFailed(f"{path}: expected a \"partitions\" list")
    out: dict[TP, tuple[list[int], list[str]]] = {}
    duplicates: list[str] = []
    for e in entries:
        try:
            tp = (str(e["topic"]), int(e["partition"]))
            replicas = [int(r) for r in e["replicas"]]
        except (TypeError, KeyError, ValueError) as exc:
            raise AdminCommandFailed(f"{path}: every partition needs \"topic\", \"partition\" and \"replicas\"") from exc
        log_dirs = [str(d) for d in e.get("log_dirs", [ANY_LOG_DIR] * len(replicas))]
        if len(log_dirs) != len(replicas):
            raise AdminCommandFailed(f"Size of replicas list {replicas} is different from size of log dirs list "
                                     f"{log_dirs} for partition {tp_name(*tp)}")
        if tp in out:
            duplicates.append(tp_name(*tp))
        out[tp] = (replicas, log_dirs)
    if not out:
        raise AdminCommandFailed("Partition reassignment list cannot be empty")
    if duplicates:
        raise AdminCommandFailed(f"Partition reassignment contains duplicate topic partitions: {','.join(duplicates)}")
    repeated = [f"{tp_name(*tp)} contains multiple entries for {','.join(str(r) for r, n in Counter(rs).items() if n > 1)}"
                for tp, (rs, _) in sorted(out.items()) if len(set(rs)) != len(rs)]
    if repeated:
        raise AdminCommandFailed(f"Partition replica lists may not contain duplicate entries: {'. '.join(repeated)}")
    return out


def format_reassignment_json(assignment: dict[TP, list[int]]) -> str:
    """Kafka's compact reassignment JSON, partitions in topic-partition order, every log dir "any"."""
    partitions = [{"topic": t, "partition": p, "replicas": list(r), "log_dirs": [ANY_LOG_DIR] * len(r)}
                  for (t, p), r in sorted(assignment.items())]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _names(tps: Iterable[TP]) -> str:
    return ",".join(tp_name(*tp) for tp in sorted(tps))


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


# ---- what the cluster says ---------------------------------------------------------------------------

def current_assignment(c: KafkaClient, partitions: Iterable[TP]) -> dict[TP, list[int]]:
    wanted = sorted(set(partitions))
    view = describe_cluster(c, {t for t, _ in wanted})
    out: dict[TP, list[int]] = {}
    for topic, partition in wanted:
        t = view.topics.get(topic)
        found = None if t is None or t.error_code != ErrorCode.none else \
            next((p for p in t.partitions if p.partition == partition), None)
        if found is None:
            raise AdminCommandFailed(exception_text(ErrorCode.unknown_topic_or_partition,
                                                    f"Unable to find partition: {tp_name(topic, partition)}"))
        out[(topic, partition)] = list(found.replicas)
    return out


def list_reassignments(c: KafkaClient, partitions: Iterable[TP] | None = None) -> dict[TP, Any]:
    """The reassignments in progress (of ``partitions``; None: all) -> their replicas, adding, removing."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(set(partitions)):
            by_topic.setdefault(t, []).append(p)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    r = controller_request(c, LIST_PARTITION_REASSIGNMENTS, {"timeout": REQUEST_TIMEOUT_MS, "topics": topics})
    if r.error_code != ErrorCode.none:
        raise AdminCommandFailed(exception_text(r.error_code, r.error_message))
    return {(t.name, p.partition_index): p for t in r.topics for p in t.partitions}


def alter_reassignments(c: KafkaClient, targets: dict[TP, list[int] | None]) -> dict[TP, str]:
    """AlterPartitionReassignments (None cancels) -> the partitions that failed and why."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), replicas in sorted(targets.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    r = controller_request(c, ALTER_PARTITION_REASSIGNMENTS, {
        "timeout": REQUEST_TIMEOUT_MS, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    if r.error_code != ErrorCode.none:
        return {tp: exception_message(r.error_code, r.error_message) for tp in targets}
    errors = {(t.name, p.partition_index): exception_message(p.error_code, p.error_message)
              for t in r.responses for p in t.partitions if p.error_code != ErrorCode.none}
    answered = {(t.name, p.partition_index) for t in r.responses for p in t.partitions}
    for tp in targets.keys() - answered:
        errors[tp] = "The controller did not answer for this partition"
    return errors


# ---- the modes ----------------------------------------------------------------------------------------

def generate(c: KafkaClient, a: argparse.Namespace) -> int:
    if not a.topics_to_move_json_file or not a.broker_list:
        raise AdminCommandFailed("--generate needs --topics-to-move-json-file and --broker-list")
    topics = parse_topics_to_move(a.topics_to_move_json_file)
    try:
        brokers = [int(b) for b in a.broker_list.split(",") if b.strip()]
    except ValueError as exc:
        raise AdminCommandFailed(f"--broker-list must be broker ids separated by commas, got {a.broker_list!r}") from exc
    duplicates = sorted(b for b, n in Counter(brokers).items() if n > 1)
    if duplicates:
        raise AdminCommandFailed(f"Broker list contains duplicate entries: {','.join(map(str, duplicates))}")
    view = describe_cluster(c, topics)
    current: dict[TP, list[int]] = {}
    for topic in topics:
        t = view.topics.get(topic)
        if t is None or t.error_code != ErrorCode.none or not t.partitions:
            raise AdminCommandFailed(exception_text(ErrorCode.unknown_topic_or_partition,
                                                    f"Topic {topic} not found."))
        current.update({(topic, p.partition): list(p.replicas) for p in t.partitions})
    # as Kafka: brokers of the list the cluster does not know are left out of the placement
    nodes = {b: view.brokers[b].rack if not a.disable_rack_aware else None for b in brokers if b in view.brokers}
    racked = sum(1 for r in nodes.values() if r is not None)
    if 0 < racked < len(nodes):
        raise AdminCommandFailed("Not all brokers have rack information. Add --disable-rack-aware in command line "
                                 "to make replica assignment without rack information.")
    proposed: dict[TP, list[int]] = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        mode = RackAwareMode.DISABLED if a.disable_rack_aware else RackAwareMode.ENFORCED
        try:
            placed = assign_replicas(nodes, len(parts), len(current[(topic, parts[0])]), rack_aware_mode=mode)
        except (KafkaError, AdminOperationError) as exc:
            raise AdminCommandFailed(str(exc)) from exc
        proposed.update({(topic, p): placed[p] for p in parts})
    print(f"Current partition replica assignment\n{format_reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{format_reassignment_json(proposed)}")
    return 0


def execute(c: KafkaClient, a: argparse.Namespace) -> int:
    plan = parse_reassignment(_reassignment_file(a))
    moved_dirs = sorted(tp for tp, (_, dirs) in plan.items() if any(d != ANY_LOG_DIR for d in dirs))
    if moved_dirs:
        raise AdminCommandFailed(f"log_dirs other than \"{ANY_LOG_DIR}\" (moves between log directories) are not "
                                 f"supported by tieredlog: {_names(moved_dirs)}")
    ongoing = list_reassignments(c)
    if ongoing and not a.additional:
        raise AdminCommandFailed(EXISTING_REASSIGNMENT)
    live = describe_cluster(c, []).brokers
    for replicas, _ in plan.values():
        unknown = next((b for b in replicas if b not in live), None)
        if unknown is not None:
            raise AdminCommandFailed(f"Unknown broker id {unknown}")
    current = current_assignment(c, plan)
    print(f"Current partition replica assignment\n\n{format_reassignment_json(current)}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    if a.throttle >= 0:
        print(VERIFY_WARNING)
        # a partition already moving copies from its original replicas, not from those being added
        sources = {tp: [b for b in r if b not in ongoing[tp].adding_replicas] if tp in ongoing else r
                   for tp, r in current.items()}
        set_throttles(c, sources, {tp: replicas for tp, (replicas, _) in plan.items()}, a.throttle)
    errors = alter_reassignments(c, {tp: replicas for tp, (replicas, _) in plan.items()})
    if errors:
        lines = "\n".join(f"{tp_name(*tp)}: {errors[tp]}" for tp in sorted(errors))
        raise AdminCommandFailed(f"Error reassigning partition(s):\n{lines}")
    print(f"Successfully started partition reassignment{_plural(len(plan))} for {_names(plan)}")
    return 0


def verify(c: KafkaClient, a: argparse.Namespace) -> int:
    plan = parse_reassignment(_reassignment_file(a))
    ongoing = list_reassignments(c, plan)
    settled = current_assignment(c, [tp for tp in plan if tp not in ongoing])
    lines = ["Status of partition reassignment:"]
    for tp in sorted(plan):
        name = tp_name(*tp)
        target = plan[tp][0]
        if tp in ongoing:
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif settled[tp] == target:
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {name}, but replica set is "
                         f"{','.join(map(str, settled[tp]))} rather than {','.join(map(str, target))}.")
    print("\n".join(lines))
    if not ongoing and not a.preserve_throttles:
        print()
        clear_throttles(c, plan)
    return 0


def cancel(c: KafkaClient, a: argparse.Namespace) -> int:
    plan = parse_reassignment(_reassignment_file(a))
    active = sorted(list_reassignments(c, plan))
    if active:
        errors = alter_reassignments(c, {tp: None for tp in active})
        if errors:
            lines = "\n".join(f"{tp_name(*tp)}: {errors[tp]}" for tp in sorted(errors))
            raise AdminCommandFailed(f"Error cancelling partition reassignment{_plural(len(errors))} for:\n{lines}")
        print(f"Successfully cancelled partition reassignment{_plural(len(active))} for: {_names(active)}")
    else:
        print("None of the specified partition reassignments are active.")
    if not a.preserve_throttles:
        clear_throttles(c, plan)
    return 0


def list_mode(c: KafkaClient, a: argparse.Namespace) -> int:
    current = list_reassignments(c)
    if not current:
        print("No partition reassignments found.")
        return 0
    lines = ["Current partition reassignments:"]
    for tp in sorted(current):
        r = current[tp]
        adding = f" adding: {','.join(map(str, r.adding_replicas))}." if r.adding_replicas else ""
        removing = f" removing: {','.join(map(str, r.removing_replicas))}." if r.removing_replicas else ""
        lines.append(f"{tp_name(*tp)}: replicas: {','.join(map(str, r.replicas))}.{adding}{removing}")
    print("\n".join(lines))
    return 0


def _reassignment_file(a: argparse.Namespace) -> str:
    if not a.reassignment_json_file:
        raise AdminCommandFailed("Missing required argument \"[reassignment-json-file]\"")
    return str(a.reassignment_json_file)


MODES = {"generate": generate, "execute": execute, "verify": verify, "cancel": cancel, "list": list_mode}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog reassign",
                                description="Move partition replicas between brokers (kafka-reassign-partitions.sh).")
    p.add_argument("--bootstrap-server", required=True, help="HOST:PORT of any broker")
    for mode, help_ in (("generate", "propose a reassignment of the topics to move over the brokers listed"),
                        ("execute", "start the reassignment of --reassignment-json-file"),
                        ("verify", "tell whether the reassignment of --reassignment-json-file is complete"),
                        ("cancel", "cancel the reassignments of --reassignment-json-file still in progress"),
                        ("list", "list every reassignment in progress")):
        p.add_argument(f"--{mode}", action="store_true", help=help_)
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"version":1,"topics":[{"topic":"t"}]}')
    p.add_argument("--broker-list", metavar="1,2,3", help="the brokers --generate places replicas on")
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}')
    p.add_argument("--disable-rack-aware", action="store_true", help="--generate ignores broker racks")
    p.add_argument("--additional", action="store_true", help="--execute while other reassignments are in progress")
    p.add_argument("--timeout", type=int, default=10000, help="accepted for Kafka compatibility")
    command_config.add_argument(p)
    p.add_argument("--preserve-throttles", action="store_true", help="--verify leaves the throttles in place")
    p.add_argument("--throttle", type=int, default=-1, metavar="B/s",
                   help="--execute: replication throttle of the moving replicas (KIP-73), bytes/s; --verify removes it")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(sys.argv[1:] if argv is None else argv)
    chosen = [m for m in MODES if getattr(a, m)]
    if len(chosen) != 1:
        parser.error("Command must include exactly one action: --generate, --execute, --verify, --cancel, or --list")
    settings = command_config.from_args(parser, a)

    def run() -> int:
        try:
            with settings.client(a.bootstrap_server) as client:
                return MODES[chosen[0]](client, a)
        except AdminCommandFailed as exc:
            print(exc, file=sys.stderr)
            return 1
        except BrokenPipeError:
            raise  # our stdout, not the broker: run_tool ends quietly
        except (OSError, ConnectionError, KafkaProtocolError) as exc:
            print(f"tieredlog reassign: cannot reach {a.bootstrap_server}: {exc}", file=sys.stderr)
            return 1

    return run_tool(run)


if __name__ == "__main__":
    sys.exit(main())
