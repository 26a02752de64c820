"""The cluster tools against one real three-broker cluster (broker processes on a real ZooKeeper):
`topics describe` and its filters, `reassign` generate / execute / verify, `leader-election` after the
preferred leader came back, and `dev-cluster` started as a user would, then stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from broker_harness import REPO, BrokerProcess
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import consecutive_free_ports, port_free
from kio.schema.errors import ErrorCode
from zk_harness import ZooKeeperServer, free_port, wait_until, zookeeper  # noqa: F401

from tieredlog import cli
from tieredlog.clients.blocking import KafkaClient
from tieredlog.clients.routing import (
    ControllerNotFound,
    CoordinatorType,
    call_controller,
    find_controller,
    find_coordinators,
)
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import TopicAssignment
from tieredlog.kafka_uuid import uuid_to_kafka_str
from tieredlog.protocol.api import LIST_PARTITION_REASSIGNMENTS, METADATA

pytestmark = pytest.mark.integration

BROKER_IDS = (1, 2, 3)


class Cluster:
    def __init__(self, connect: str, brokers: dict[int, BrokerProcess]) -> None:
        self.connect = connect
        self.brokers = brokers

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive())

    def any_live(self) -> BrokerProcess:
        return next(b for b in self.brokers.values() if b.alive())


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # noqa: F811
    connect = f"{zookeeper.connect}/tools"
    base = tmp_path_factory.mktemp("cluster")
    brokers: dict[int, BrokerProcess] = {}
    try:
        for i in BROKER_IDS:
            brokers[i] = BrokerProcess(base / f"data{i}", {
                "zookeeper.connect": connect, "broker.id": str(i), "zookeeper.session.timeout.ms": "6000",
                "replica.lag.time.max.ms": "4000", "replica.fetch.backoff.ms": "200",
                "remote.log.storage.system.enable": "false",
                # leadership moves back to a preferred replica only when the tool asks for it
                "auto.leader.rebalance.enable": "false"}).start()
        with ZkClient(connect) as zk:
            wait_until(lambda: zk.get_all_broker_ids() == list(BROKER_IDS), timeout=30, message="every broker registered")
            wait_until(lambda: zk.get_controller_id() is not None, timeout=30, message="a controller elected")
        yield Cluster(connect, brokers)
    finally:
        for b in brokers.values():
            b.stop()


def tool(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    """Run `tieredlog ARGV` in this process -> (exit code, stdout lines, stderr)."""
    capsys.readouterr()
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def metadata(b: BrokerProcess, topic: str) -> Any:
    """One broker's Metadata for ``topic``: (topic id, partitions in order), or None while unknown."""
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    (t,) = r.topics
    if t.error_code != 0:
        return None
    return t.topic_id, sorted(t.partitions, key=lambda p: p.partition_index)


def states(b: BrokerProcess, topic: str) -> list[tuple[int, list[int], list[int]]]:
    """(leader, replicas, isr) per partition as ``b`` answers, replicas and ISR in the broker's order."""
    md = metadata(b, topic)
    return [] if md is None else [(p.leader_id, list(p.replica_nodes), list(p.isr_nodes)) for p in md[1]]


def everywhere(c: Cluster, topic: str, ok: Any) -> bool:
    """``ok(states)`` holds on every live broker (a broker learns of changes from the controller's
    UpdateMetadata, so each is asked)."""
    return all((s := states(b, topic)) and ok(s) for b in c.brokers.values() if b.alive())


def create_with_assignment(c: Cluster, topic: str, assignment: dict[int, list[int]]) -> None:
    """A topic with a chosen replica assignment, written to ZooKeeper as a broker writes a new topic
    (CreateTopics in a cluster places replicas itself); the controller then creates its partitions."""
    with ZkClient(c.connect) as zk:
        zk.set_topic_config(topic, {})
        zk.create_topic_assignment(topic, TopicAssignment.of(assignment, uuid.uuid4()))
    wait_until(lambda: everywhere(c, topic, lambda s: all(len(isr) == len(r) for _, r, isr in s)), timeout=60,
               message=f"{topic}: a leader and a full ISR on every broker")


def partition_line(topic: str, partition: int, leader: int, replicas: list[int], isr: list[int]) -> str:
    return (f"\tTopic: {topic}\tPartition: {partition}\tLeader: {leader if leader >= 0 else 'none'}\t"
            f"Replicas: {','.join(map(str, replicas))}\tIsr: {','.join(map(str, isr))}")


def expected_lines(b: BrokerProcess, topic: str) -> list[str]:
    return [partition_line(topic, i, *s) for i, s in enumerate(states(b, topic))]


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for v in values:
        if partition is None:
            p.produce(topic, value=v)
        else:
            p.produce(topic, value=v, partition=partition)
    assert p.flush(60) == 0


def consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 60) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tools-test", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([CkTopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s  # a hang guard
    try:
        while len(out) < expected and time.monotonic() < deadline:
            out += [m.value() for m in c.consume(num_messages=1000, timeout=0.5) if m.error() is None]
    finally:
        c.close()
    return out


def test_describe_prints_kafka_format_and_filters_under_replicated_and_unavailable(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = tool(capsys, "topics", "--bootstrap-server", cluster.bootstrap, "create", "--topic", "described",
                        "--partitions", "3", "--replication-factor", "3", "--config", "retention.ms=123456")
    assert rc == 0, err
    wait_until(lambda: everywhere(cluster, "described", lambda s: len(s) == 3 and all(len(i) == 3 for _, _, i in s)),
               timeout=60, message="described: full ISRs")
    create_with_assignment(cluster, "lonely", {0: [3]})
    rc, out, err = tool(capsys, "topics", "--bootstrap-server", cluster.bootstrap, "create", "--topic", "strict",
                        "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=3")
    assert rc == 0, err
    wait_until(lambda: everywhere(cluster, "strict", lambda s: len(s) == 1 and len(s[0][2]) == 3),
               timeout=60, message="strict: full ISR")
    b1 = cluster.brokers[1]

    rc, out, err = tool(capsys, "topics", "--bootstrap-server", b1.bootstrap, "describe", "--topic", "described")
    assert rc == 0, err
    topic_id = uuid_to_kafka_str(metadata(b1, "described")[0])
    assert out == [f"Topic: described\tTopicId: {topic_id}\tPartitionCount: 3\tReplicationFactor: 3\t"
                   "Configs: retention.ms=123456", *expected_lines(b1, "described")]
    # a healthy cluster: both filters print nothing
    mine = ("--topic", "described|lonely|strict")  # the module's other tests create topics of their own
    for flags in (("--under-replicated-partitions",), ("--unavailable-partitions",),
                  (*mine, "--under-min-isr-partitions")):
        rc, out, err = tool(capsys, "topics", "--bootstrap-server", b1.bootstrap, "describe", *flags)
        assert (rc, out) == (0, []), err
    # min.insync.replicas is 1 by default: strict's ISR is exactly its minimum of 3, lonely's its 1 of 1
    rc, out, err = tool(capsys, "topics", "--bootstrap-server", b1.bootstrap, "describe", *mine, "--at-min-isr-partitions")
    assert rc == 0, err
    assert out == expected_lines(b1, "lonely") + expected_lines(b1, "strict")

    cluster.brokers[3].kill9()
    wait_until(lambda: states(b1, "lonely") and states(b1, "lonely")[0][0] == -1
               and all(3 not in isr for _, _, isr in states(b1, "described")),
               timeout=60, message="broker 3's failure handled by the controller")
    rc, out, err = tool(capsys, "topics", "--bootstrap-server", b1.bootstrap, "describe", "--under-replicated-partitions")
    assert rc == 0, err
    # only partition lines (no topic line), only partitions missing an ISR member; lonely's one replica is its ISR
    assert [line for line in out if "\tTopic: described\t" in line] == expected_lines(b1, "described")
    assert all(line.startswith("\tTopic: ") for line in out) and not any("lonely" in line for line in out)
    rc, out, err = tool(capsys, "topics", "--bootstrap-server", b1.bootstrap, "describe", "--unavailable-partitions")
    assert rc == 0, err
    assert out == expected_lines(b1, "lonely") and out[0].startswith("\tTopic: lonely\tPartition: 0\tLeader: none\t")
    # under its minimum: strict (2 of 3 in sync) and lonely (no leader, as Kafka counts it)
    wait_until(lambda: everywhere(cluster, "strict", lambda s: len(s[0][2]) == 2), timeout=30,
               message="strict's ISR without broker 3")
    rc, out, err = tool(capsys, "topics", "--bootstrap-server", b1.bootstrap, "describe", *mine, "--under-min-isr-partitions")
    assert rc == 0, err
    assert out == expected_lines(b1, "lonely") + expected_lines(b1, "strict")

    rc, _, err = tool(capsys, "topics", "--bootstrap-server", b1.bootstrap, "describe", "--topic", "absent")
    assert rc == 1 and "Topic 'absent' does not exist as expected" in err

    cluster.brokers[3].start()
    wait_until(lambda: everywhere(cluster, "described", lambda s: all(len(i) == 3 for _, _, i in s))
               and everywhere(cluster, "lonely", lambda s: s[0][0] == 3),
               timeout=60, message="broker 3 back in every ISR")


def test_reassign_generate_execute_verify_moves_a_partition_from_1_2_to_2_3(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    create_with_assignment(cluster, "moving", {0: [1, 2]})
    values = [b"m%d" % i for i in range(200)]
    produce(cluster.bootstrap, "moving", values, partition=0)
    server = cluster.bootstrap

    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": "moving"}]}))
    rc, out, err = tool(capsys, "reassign", "--bootstrap-server", server, "--generate",
                        "--topics-to-move-json-file", str(topics_file), "--broker-list", "2,3")
    assert rc == 0, err
    assert out[0] == "Current partition replica assignment"
    assert out[1] == '{"version":1,"partitions":[{"topic":"moving","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}'
    assert out[2:4] == ["", "Proposed partition reassignment configuration"]
    proposal = json.loads(out[4])
    assert [(p["topic"], p["partition"], sorted(p["replicas"]), p["log_dirs"]) for p in proposal["partitions"]] == \
        [("moving", 0, [2, 3], ["any", "any"])]

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moving", "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]}]}))
    rc, out, err = tool(capsys, "reassign", "--bootstrap-server", server, "--execute", "--reassignment-json-file", str(plan))
    assert (rc, err) == (0, ""), f"{out}\n{err}"
    assert out == ["Current partition replica assignment", "",
                   '{"version":1,"partitions":[{"topic":"moving","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}',
                   "", "Save this to use as the --reassignment-json-file option during rollback",
                   "Successfully started partition reassignment for moving-0"]

    def verified() -> bool:
        rc, out, err = tool(capsys, "reassign", "--bootstrap-server", server, "--verify", "--reassignment-json-file",
                            str(plan))
        assert rc == 0, err
        assert out[0] == "Status of partition reassignment:"
        # the replica set comes from a broker's metadata, which learns the end of the reassignment just after
        # the controller (as in Kafka): for a moment it still shows the replicas being removed
        lagging = "There is no active reassignment of partition moving-0, but replica set is 2,3,1 rather than 2,3."
        assert out[1] in ("Reassignment of partition moving-0 is completed.",
                          "Reassignment of partition moving-0 is still in progress.", lagging), out
        return out[1].endswith("completed.")

    wait_until(verified, timeout=90, message="verify says the reassignment completed")
    wait_until(lambda: everywhere(cluster, "moving", lambda s: sorted(s[0][1]) == [2, 3] and sorted(s[0][2]) == [2, 3]),
               timeout=60, message="replicas and ISR 2,3 on every broker")
    assert consume(server, "moving", 1, len(values)) == values
    rc, out, _ = tool(capsys, "reassign", "--bootstrap-server", server, "--list")
    assert (rc, out) == (0, ["No partition reassignments found."])
    rc, out, _ = tool(capsys, "reassign", "--bootstrap-server", server, "--cancel", "--reassignment-json-file", str(plan))
    assert (rc, out[0], out[2:]) == (0, "None of the specified partition reassignments are active.",
                                     ["Clearing topic-level throttles on topic moving"])
    assert out[1].startswith("Clearing broker-level throttles on brokers "), out


def test_preferred_leader_election_returns_leadership_to_the_restarted_preferred_replica(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    create_with_assignment(cluster, "elect", {0: [1, 2, 3]})
    wait_until(lambda: everywhere(cluster, "elect", lambda s: s[0][0] == 1), timeout=30, message="broker 1 leads")

    cluster.brokers[1].restart()
    # automatic rebalancing is off: broker 1 is back in the ISR but another broker still leads
    wait_until(lambda: everywhere(cluster, "elect", lambda s: len(s[0][2]) == 3), timeout=60,
               message="broker 1 back in the ISR")
    assert states(cluster.brokers[1], "elect")[0][0] in (2, 3)

    rc, out, err = tool(capsys, "leader-election", "--bootstrap-server", cluster.bootstrap,
                        "--election-type", "PREFERRED", "--topic", "elect", "--partition", "0")
    assert (rc, out) == (0, ["Successfully completed leader election (PREFERRED) for partitions elect-0"]), err
    wait_until(lambda: everywhere(cluster, "elect", lambda s: s[0][0] == 1), timeout=30,
               message="broker 1 leads again on every broker")

    partitions = tmp_path / "partitions.json"
    partitions.write_text(json.dumps({"partitions": [{"topic": "elect", "partition": 0}]}))
    rc, out, err = tool(capsys, "leader-election", "--bootstrap-server", cluster.bootstrap,
                        "--election-type", "preferred", "--path-to-json-file", str(partitions))
    assert (rc, out) == (0, ["Valid replica already elected for partitions elect-0"]), err


def test_routing_finds_the_controller_and_the_coordinator_through_any_broker(cluster: Cluster) -> None:
    """What the tools route by: a controller-only request sent through a broker that is not the
    controller reaches the controller; an answer that keeps saying NOT_CONTROLLER ends with the last
    reason once the wait is over; FindCoordinator one key at a time (v3) and batched (v4) agree."""
    with ZkClient(cluster.connect) as zk:
        controller = zk.get_controller_id()
    other = next(i for i, b in cluster.brokers.items() if i != controller and b.alive())
    with KafkaClient(cluster.brokers[other].bootstrap, timeout=10) as c:
        body = {"timeout": 30000, "topics": None}
        assert c.request(LIST_PARTITION_REASSIGNMENTS, body, version=0).error_code == ErrorCode.not_controller
        assert find_controller(c) == (controller, cluster.brokers[controller].bootstrap)
        answer = call_controller(c, LIST_PARTITION_REASSIGNMENTS, body, version=0, wait_s=30, backoff_s=0.2)
        assert answer.error_code == ErrorCode.none

        with pytest.raises(ControllerNotFound) as refused:
            call_controller(c, LIST_PARTITION_REASSIGNMENTS, body, version=0, wait_s=0, backoff_s=0.2,
                            not_controller=lambda a: True)
        assert refused.value.reason == f"broker {controller} is no longer the controller"

        def coordinators(version: int) -> list[tuple[str, ErrorCode, int]]:
            found = find_coordinators(c, CoordinatorType.GROUP, ["routing-a", "routing-b"], version=version)
            return [(f.key, f.error_code, f.node_id) for f in found]

        wait_until(lambda: all(code == ErrorCode.none for _, code, _ in coordinators(3)), timeout=30,
                   message="the group coordinators are up")
        one_by_one = coordinators(3)
        assert one_by_one == coordinators(4)
        assert {node for _, _, node in one_by_one} <= set(BROKER_IDS)


def test_dev_cluster_serves_clients_and_sigterm_stops_every_process_it_started(tmp_path: Path) -> None:
    base_port, zk_port, metrics_port = consecutive_free_ports(3), free_port(), consecutive_free_ports(3)
    err_log = open(tmp_path / "dev-cluster.stderr", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "tieredlog.cli", "dev-cluster", "--dir", str(tmp_path / "cluster"),
                             "--base-port", str(base_port), "--zookeeper-port", str(zk_port),
                             "--metrics-port", str(metrics_port)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=err_log, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(lambda: any(x.startswith("bootstrap.servers=") for x in lines) or proc.poll() is not None,
                   timeout=120, message="dev-cluster prints its bootstrap servers")
        err_log.seek(0)
        assert proc.poll() is None, f"dev-cluster exited with {proc.returncode}: {err_log.read()}"
        bootstrap = next(x for x in lines if x.startswith("bootstrap.servers=")).strip().split("=", 1)[1]
        assert bootstrap == ",".join(f"127.0.0.1:{base_port + i}" for i in range(3))
        assert f"zookeeper.connect=127.0.0.1:{zk_port}\n" in lines
        pids = [int(m.group(1)) for x in lines if (m := re.match(r"(?:zookeeper|broker \d+)\s+pid (\d+)", x))]
        assert len(pids) == 4, lines
        # each broker's console, printed beside it, sees the whole cluster
        consoles = [m.group(1) for x in lines if (m := re.search(r"console (http://\S+)", x))]
        assert consoles == [f"http://127.0.0.1:{metrics_port + i}/console" for i in range(3)], lines
        page = urllib.request.urlopen(consoles[0], timeout=10).read().decode()
        assert '<div class="num" data-field="brokers">3</div>' in page

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("dev", 3, 3)])["dev"].result(60)
        values = [b"d%d" % i for i in range(300)]
        produce(bootstrap, "dev", values)
        assert sorted(consume(bootstrap, "dev", 3, len(values))) == sorted(values)

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=180) == 0  # a hang guard: the brokers' orderly shutdowns, then ZooKeeper
        reader.join(10)
        assert lines[-1] == "stopped\n", lines
        wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), timeout=30,
                   message="every process dev-cluster started is gone")
        assert all(port_free(base_port + i) for i in range(3)) and port_free(zk_port), "a port still listened on"
    finally:
        if proc.poll() is None:
            proc.kill()  # its children die with it (PR_SET_PDEATHSIG)
            proc.wait()
        err_log.close()
