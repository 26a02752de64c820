"""The cluster tools' file formats, checks and naming without a cluster: Kafka's reassignment JSON both
ways, the refusals kafka-reassign-partitions.sh and kafka-leader-election.sh make before any request,
and the exception names printed for a failed partition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tieredlog.tools import leader_election, reassign
from tieredlog.tools.cluster_admin import AdminCommandFailed, exception_name, exception_text


def write(tmp_path: Path, body: object) -> str:
    path = tmp_path / "f.json"
    path.write_text(json.dumps(body))
    return str(path)


def test_reassignment_json_is_kafkas_compact_form_in_topic_partition_order() -> None:
    text = reassign.format_reassignment_json({("b", 0): [3, 1], ("a", 10): [1], ("a", 2): [2, 3]})
    assert text == ('{"version":1,"partitions":[{"topic":"a","partition":2,"replicas":[2,3],"log_dirs":["any","any"]},'
                    '{"topic":"a","partition":10,"replicas":[1],"log_dirs":["any"]},'
                    '{"topic":"b","partition":0,"replicas":[3,1],"log_dirs":["any","any"]}]}')


def test_reassignment_file_round_trips_and_log_dirs_default_to_any(tmp_path: Path) -> None:
    path = write(tmp_path, {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}]})
    assert reassign.parse_reassignment(path) == {("t", 0): ([2, 3], ["any", "any"])}
    generated = reassign.format_reassignment_json({("t", 0): [2, 3]})
    (tmp_path / "g.json").write_text(generated)
    assert reassign.parse_reassignment(str(tmp_path / "g.json")) == {("t", 0): ([2, 3], ["any", "any"])}


@pytest.mark.parametrize("body, message", [
    ({"version": 1, "partitions": []}, "Partition reassignment list cannot be empty"),
    ({"version": 2, "partitions": []}, "Not supported version field value 2"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2},
     "Partition reassignment contains duplicate topic partitions: t-0"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 1]}]},
     "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]},
     "Size of replicas list [1, 2] is different from size of log dirs list ['any'] for partition t-0"),
    ({"partitions": [{"topic": "t", "replicas": [1]}]}, "every partition needs"),
])
def test_reassignment_file_refusals(tmp_path: Path, body: object, message: str) -> None:
    with pytest.raises(AdminCommandFailed) as caught:
        reassign.parse_reassignment(write(tmp_path, body))
    assert message in str(caught.value)


def test_topics_to_move_and_election_files(tmp_path: Path) -> None:
    assert reassign.parse_topics_to_move(write(tmp_path, {"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]})) \
        == ["a", "b"]
    with pytest.raises(AdminCommandFailed, match="List of topics to reassign contains duplicate entries: a"):
        reassign.parse_topics_to_move(write(tmp_path, {"topics": [{"topic": "a"}, {"topic": "a"}]}))
    assert leader_election.parse_partitions_file(write(tmp_path, {"partitions": [{"topic": "t", "partition": 1}]})) \
        == [("t", 1)]
    with pytest.raises(AdminCommandFailed, match="Replica election data contains duplicate partitions: t-1"):
        leader_election.parse_partitions_file(write(tmp_path, {"partitions": [{"topic": "t", "partition": 1}] * 2}))


def test_command_lines_kafka_refuses_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    # nothing listens on port 1: each of these must fail on its arguments, before any connection
    for argv in (["--bootstrap-server", "127.0.0.1:1", "--election-type", "PREFERRED"],
                 ["--bootstrap-server", "127.0.0.1:1", "--election-type", "PREFERRED", "--topic", "t"],
                 ["--bootstrap-server", "127.0.0.1:1", "--election-type", "OTHER", "--all-topic-partitions"]):
        with pytest.raises(SystemExit) as exit_:
            leader_election.main(argv)
        assert exit_.value.code == 2
    with pytest.raises(SystemExit):
        reassign.main(["--bootstrap-server", "127.0.0.1:1", "--verify", "--execute"])
    assert "Command must include exactly one action" in capsys.readouterr().err


def test_exception_names_are_kafkas_classes() -> None:
    assert exception_name(ErrorCode.preferred_leader_not_available) == "PreferredLeaderNotAvailableException"
    assert exception_name(ErrorCode.eligible_leaders_not_available) == "EligibleLeadersNotAvailableException"
    assert exception_name(ErrorCode.unknown_topic_or_partition) == "UnknownTopicOrPartitionException"
    assert exception_name(ErrorCode.invalid_topic_exception) == "InvalidTopicException"
    assert exception_text(ErrorCode.unknown_server_error, "boom") == \
        "org.apache.kafka.common.errors.UnknownServerException: boom"
