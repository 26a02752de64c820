"""`tieredlog leader-election`: elect partition leaders, like Kafka's kafka-leader-election.sh (KIP-460).

    tieredlog leader-election --bootstrap-server H:P --election-type PREFERRED --topic t --partition 0
    tieredlog leader-election --bootstrap-server H:P --election-type PREFERRED --all-topic-partitions
    tieredlog leader-election --bootstrap-server H:P --election-type UNCLEAN --path-to-json-file f.json

The JSON file is Kafka's: `{"partitions":[{"topic":"t","partition":0}]}`. The request is ElectLeaders to
the active controller. PREFERRED moves leadership back to the first replica when it is live and in the
ISR; UNCLEAN elects a leader for a partition that has none, out of the ISR if it must (data may be
lost). Kafka's output: the partitions elected, those whose leader was already the right one, and an
error per partition that could not be elected (exit code 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient, KafkaProtocolError
from tieredlog.protocol.api import ELECT_LEADERS
from tieredlog.tools import command_config, run_tool
from tieredlog.tools.cluster_admin import AdminCommandFailed, controller_request, exception_text, tp_name

ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
REQUEST_TIMEOUT_MS = 30000
TP = tuple[str, int]


def parse_partitions_file(path: str) -> list[TP]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise AdminCommandFailed(f"Cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise AdminCommandFailed(f"{path} is not valid JSON: {exc}") from exc
    try:
        partitions = [(str(e["topic"]), int(e["partition"])) for e in data["partitions"]]
    except (TypeError, KeyError, ValueError) as exc:
        raise AdminCommandFailed(f"{path}: expected {{\"partitions\":[{{\"topic\":...,\"partition\":...}}]}}") from exc
    duplicates = sorted(tp for tp, n in Counter(partitions).items() if n > 1)
    if duplicates:
        raise AdminCommandFailed("Replica election data contains duplicate partitions: "
                                 + ",".join(tp_name(*tp) for tp in duplicates))
    return partitions


def elect(c: KafkaClient, election_type: str, partitions: list[TP] | None) -> dict[TP, tuple[ErrorCode, str | None]]:
    """ElectLeaders to the controller; ``partitions`` None: every partition. -> each partition's outcome."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        topics = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
    version = c.version_for(ELECT_LEADERS)
    body: dict[str, Any] = {"topic_partitions": topics, "timeout": REQUEST_TIMEOUT_MS}
    if version >= 1:
        body["election_type"] = ELECTION_TYPES[election_type]
    elif election_type != "PREFERRED":
        raise AdminCommandFailed("The broker's ElectLeaders v0 elects preferred leaders only")
    r = controller_request(c, ELECT_LEADERS, body, version=version)
    code = getattr(r, "error_code", ErrorCode.none)
    if code != ErrorCode.none:
        raise AdminCommandFailed(exception_text(code, getattr(r, "error_message", None)))
    return {(t.topic, p.partition_id): (p.error_code, p.error_message)
            for t in r.replica_election_results for p in t.partition_result}


def run_election(c: KafkaClient, a: argparse.Namespace) -> int:
    if a.path_to_json_file:
        partitions: list[TP] | None = parse_partitions_file(a.path_to_json_file)
    elif a.topic is not None:
        partitions = [(a.topic, a.partition)]
    else:
        partitions = None
    election_type = a.election_type.upper()
    results = elect(c, election_type, partitions)
    succeeded = sorted(tp for tp, (code, _) in results.items() if code == ErrorCode.none)
    noop = sorted(tp for tp, (code, _) in results.items() if code == ErrorCode.election_not_needed)
    failed = sorted(tp for tp, (code, _) in results.items() if code not in (ErrorCode.none, ErrorCode.election_not_needed))
    if succeeded:
        print(f"Successfully completed leader election ({election_type}) for partitions "
              + ", ".join(tp_name(*tp) for tp in succeeded))
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(tp_name(*tp) for tp in noop))
    if failed:
        for tp in failed:
            code, message = results[tp]
            print(f"Error completing leader election ({election_type}) for partition: {tp_name(*tp)}: "
                  f"{exception_text(code, message)}")
        raise AdminCommandFailed(f"{len(failed)} replica(s) could not be elected")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tieredlog leader-election",
                                description="Elect partition leaders (kafka-leader-election.sh).")
    p.add_argument("--bootstrap-server", required=True, help="HOST:PORT of any broker")
    command_config.add_argument(p)
    p.add_argument("--election-type", required=True, type=str.upper, choices=sorted(ELECTION_TYPES),
                   help="PREFERRED: the first replica leads again; UNCLEAN: elect a leader out of the ISR if needed")
    p.add_argument("--topic", help="with --partition: the one partition to elect")
    p.add_argument("--partition", type=int)
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    p.add_argument("--path-to-json-file", metavar="FILE", help='{"partitions":[{"topic":"t","partition":0}]}')
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(sys.argv[1:] if argv is None else argv)
    sources = [a.topic is not None, a.all_topic_partitions, a.path_to_json_file is not None]
    if sum(sources) != 1:
        parser.error("One and only one of the following options is required: "
                     "--all-topic-partitions, --topic, --path-to-json-file")
    if (a.topic is None) != (a.partition is None):
        parser.error("--topic and --partition go together")
    settings = command_config.from_args(parser, a)

    def run() -> int:
        try:
            with settings.client(a.bootstrap_server) as client:
                return run_election(client, a)
        except AdminCommandFailed as exc:
            print(f"Error while making request\n{exc}", file=sys.stderr)
            return 1
        except BrokenPipeError:
            raise  # our stdout, not the broker: run_tool ends quietly
        except (OSError, ConnectionError, KafkaProtocolError) as exc:
            print(f"tieredlog leader-election: cannot reach {a.bootstrap_server}: {exc}", file=sys.stderr)
            return 1

    return run_tool(run)


if __name__ == "__main__":
    sys.exit(main())
