"""Kafka's ZooKeeper JSON, zookeeper.connect parsing, meta.properties checks and controller-epoch
fencing: the parts of tieredlog.cluster that need no ZooKeeper."""

from __future__ import annotations

import json
import socket
import time
import uuid
from pathlib import Path

import pytest

from tieredlog.cluster import znodes
from tieredlog.cluster.controller_election import ControllerEpochFence
from tieredlog.cluster.errors import (
    InconsistentBrokerIdError,
    InconsistentClusterIdError,
    InvalidZkConnectError,
    MalformedZnodeError,
    ZkConnectionTimeoutError,
)
from tieredlog.cluster.membership import ZkClusterConfig
from tieredlog.cluster.meta_properties import check_meta_properties, read_meta_properties, write_meta_properties
from tieredlog.cluster.zk import ZkClient, ZkConnectString
from tieredlog.cluster.znodes import (
    BrokerInfo,
    EndPoint,
    LeaderIsrAndControllerEpoch,
    PartitionReassignment,
    ReplicaAssignment,
    TopicAssignment,
)
from tieredlog.config import BrokerConfig, BrokerConfigError
from tieredlog.errors import StaleControllerEpochError
from tieredlog.kafka_uuid import uuid_to_kafka_str


def test_broker_registration_json_is_kafkas_version_4() -> None:
    info = BrokerInfo(1, (EndPoint("PLAINTEXT", "10.0.0.1", 9092), EndPoint("SSL", "10.0.0.1", 9093, "SSL")), rack="r1")
    data = info.encode(timestamp_ms=1700000000000)
    assert data == (b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},'
                    b'"endpoints":["PLAINTEXT://10.0.0.1:9092","SSL://10.0.0.1:9093"],"rack":"r1","jmx_port":-1,'
                    b'"host":"10.0.0.1","timestamp":"1700000000000","port":9092,"version":4}')
    assert BrokerInfo.decode(1, data) == BrokerInfo(1, info.endpoints, "r1", -1, 4, 1700000000000)


def test_broker_registration_without_rack_or_plaintext() -> None:
    js = json.loads(BrokerInfo(2, (EndPoint("INTERNAL", "b2", 9094, "SASL_SSL"),)).encode())
    assert "rack" not in js, "Kafka writes no rack key for a broker without broker.rack"
    assert (js["host"], js["port"]) == (None, -1), "host/port name only a PLAINTEXT endpoint, as in Kafka"
    assert js["listener_security_protocol_map"] == {"INTERNAL": "SASL_SSL"}


def test_decodes_what_kafka_brokers_write() -> None:
    # a Kafka 3.x registration (version 5, features) and a 0.9 one (version 1)
    v5 = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":'
          b'["PLAINTEXT://kafka-1:9092"],"jmx_port":-1,"host":"kafka-1","timestamp":"1660000000000","port":9092,"version":5}')
    assert BrokerInfo.decode(7, v5).endpoints == (EndPoint("PLAINTEXT", "kafka-1", 9092),)
    v1 = b'{"jmx_port":9999,"timestamp":"2233345666","host":"localhost","version":1,"port":9092}'
    assert BrokerInfo.decode(0, v1) == BrokerInfo(0, (EndPoint("PLAINTEXT", "localhost", 9092),), None, 9999, 1, 2233345666)
    # Kafka 3.4+'s controller znode (version 2) still names the broker in "brokerid"
    assert znodes.decode_controller(b'{"version":2,"brokerid":3,"timestamp":"1","kraftControllerEpoch":-1}') == 3
    with pytest.raises(MalformedZnodeError, match="Failed to parse ZooKeeper registration for broker 4"):
        BrokerInfo.decode(4, b"not json")


def test_controller_cluster_id_and_epoch_json() -> None:
    assert znodes.encode_controller(2, 1234) == b'{"version":1,"brokerid":2,"timestamp":"1234"}'
    assert znodes.encode_controller_epoch(12) == b"12" and znodes.decode_controller_epoch(b"12") == 12
    assert znodes.encode_cluster_id("abc") == b'{"version":"1","id":"abc"}'
    assert znodes.decode_cluster_id(b'{"version":"1","id":"abc"}') == "abc"
    cid = znodes.generate_cluster_id()
    assert len(cid) == 22 and "=" not in cid, "Kafka's base64 UUID: 22 URL-safe characters"


def test_topic_assignment_json_with_topic_id() -> None:
    tid = uuid.uuid4()
    a = TopicAssignment({0: ReplicaAssignment((1, 2)), 1: ReplicaAssignment((2, 3), adding_replicas=(3,))}, tid)
    data = a.encode()
    assert json.loads(data) == {"partitions": {"0": [1, 2], "1": [2, 3]}, "topic_id": uuid_to_kafka_str(tid),
                                "adding_replicas": {"1": [3]}, "removing_replicas": {}, "version": 3}
    assert TopicAssignment.decode("t", data) == a
    # Kafka 2.x (version 1/2, no topic id) still reads
    assert TopicAssignment.decode("t", b'{"version":1,"partitions":{"0":[5]}}') == TopicAssignment.of({0: [5]})


def test_partition_state_json() -> None:
    s = LeaderIsrAndControllerEpoch(leader=1, leader_epoch=4, isr=(1, 2), controller_epoch=3)
    assert s.encode() == b'{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2]}'
    assert LeaderIsrAndControllerEpoch.decode(s.encode()) == s
    recovering = LeaderIsrAndControllerEpoch(1, 5, (1,), 3, leader_recovery_state=1)
    assert json.loads(recovering.encode())["leader_recovery_state"] == 1
    assert LeaderIsrAndControllerEpoch.decode(recovering.encode()) == recovering


def test_topic_config_and_reassignment_json() -> None:
    assert znodes.encode_topic_config({"retention.ms": "1000"}) == b'{"version":1,"config":{"retention.ms":"1000"}}'
    assert znodes.decode_topic_config(b'{"version":1,"config":{"retention.ms":"1000"}}') == {"retention.ms": "1000"}
    r = PartitionReassignment({("t", 1): (4, 5), ("t", 0): (6,)})
    assert r.encode() == (b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[6]},'
                          b'{"topic":"t","partition":1,"replicas":[4,5]}]}')
    assert PartitionReassignment.decode(r.encode()) == r


def test_paths_are_kafkas() -> None:
    assert znodes.broker_id_path(3) == "/brokers/ids/3"
    assert znodes.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert znodes.topic_config_path("t") == "/config/topics/t"
    assert znodes.delete_topic_path("t") == "/admin/delete_topics/t"
    assert znodes.REASSIGN_PARTITIONS_PATH == "/admin/reassign_partitions"


def test_zookeeper_connect_parsing() -> None:
    assert ZkConnectString.parse("zk1:2181,zk2:2181/kafka/prod") == ZkConnectString("zk1:2181,zk2:2181", "/kafka/prod")
    assert ZkConnectString.parse("127.0.0.1:2181") == ZkConnectString("127.0.0.1:2181", None)
    assert ZkConnectString.parse("127.0.0.1:2181/") == ZkConnectString("127.0.0.1:2181", None)
    for bad in ("", "/kafka", "h:notaport", "h:2181/kafka/", "h:2181//x", "h:2181/a/../b"):
        with pytest.raises(InvalidZkConnectError, match="Invalid zookeeper.connect"):
            ZkConnectString.parse(bad)


def test_cluster_config_from_broker_config() -> None:
    assert ZkClusterConfig.from_broker_config(BrokerConfig.from_props({})) is None, \
        "no zookeeper.connect: the broker runs alone, nothing of the cluster starts"
    cfg = ZkClusterConfig.from_broker_config(BrokerConfig.from_props({
        "zookeeper.connect": "127.0.0.1:2181/kafka", "broker.id": "3", "broker.rack": "r2",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CLIENT://127.0.0.1:9093",
        "advertised.listeners": "PLAINTEXT://b3:9092,CLIENT://b3.example:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SSL", "log.dirs": "/d1,/d2"}))
    assert cfg is not None
    assert cfg.broker_id == 3 and cfg.rack == "r2" and cfg.log_dirs == (Path("/d1"), Path("/d2"))
    assert cfg.endpoints == (EndPoint("PLAINTEXT", "b3", 9092), EndPoint("CLIENT", "b3.example", 9093, "SSL"))
    client = ZkClient(cfg.connect, session_timeout_ms=cfg.session_timeout_ms,
                      connection_timeout_ms=cfg.connection_timeout_ms)
    try:
        # Kafka's defaults: an 18 s session, and a connection timeout that defaults to it
        assert (client.session_timeout_ms, client.connection_timeout_ms) == (18000, 18000)
    finally:
        client.close()
    with pytest.raises(BrokerConfigError, match="No security protocol defined for listener CLIENT"):
        ZkClusterConfig.from_broker_config(BrokerConfig.from_props({
            "zookeeper.connect": "h:2181", "listeners": "CLIENT://h:9093"}))


def test_connection_timeout_is_one_line_and_closes(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = ZkClient(f"127.0.0.1:{port}", session_timeout_ms=2000, connection_timeout_ms=400)
    t0 = time.monotonic()
    with pytest.raises(ZkConnectionTimeoutError) as err:
        client.start()
    assert time.monotonic() - t0 < 5
    assert "Timed out waiting for connection to ZooKeeper at 127.0.0.1" in str(err.value) and "\n" not in str(err.value)
    assert client.closed, "a failed start leaves no session or thread behind"


def test_meta_properties_checks(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, 1, "clusterA")
    meta = read_meta_properties(tmp_path)
    assert meta is not None and (meta.version, meta.broker_id, meta.cluster_id) == (0, 1, "clusterA")
    assert "version=0\nbroker.id=1\ncluster.id=clusterA\n" in (tmp_path / "meta.properties").read_text()
    check_meta_properties([tmp_path], "clusterA", 1)
    with pytest.raises(InconsistentClusterIdError) as err:
        check_meta_properties([tmp_path], "clusterB", 1)
    assert str(err.value) == ("The Cluster ID clusterB doesn't match stored clusterId Some(clusterA) in meta.properties. "
                              "The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong.")
    with pytest.raises(InconsistentBrokerIdError, match=r"^Configured broker.id 2 doesn't match stored broker.id Some\(1\)"):
        check_meta_properties([tmp_path], "clusterA", 2)
    # a standalone broker's meta.properties (version 1, node.id) reads the same way
    (tmp_path / "meta.properties").write_text("version=1\ncluster.id=solo\nnode.id=0\n")
    meta = read_meta_properties(tmp_path)
    assert meta is not None and (meta.broker_id, meta.cluster_id) == (0, "solo")
    assert read_meta_properties(tmp_path / "nowhere") is None


def test_controller_epoch_fence() -> None:
    fence = ControllerEpochFence()
    fence.check(2, controller_id=1)
    fence.check(2)
    fence.check(3)
    with pytest.raises(StaleControllerEpochError) as err:
        fence.check(2, controller_id=1)
    assert err.value.code == 11, "Kafka's STALE_CONTROLLER_EPOCH"
    assert str(err.value) == ("Request from controller 1 with controller epoch 2 is older than the latest known "
                              "controller epoch 3")
    fence.observe(5)
    with pytest.raises(StaleControllerEpochError):
        fence.check(4)
    assert fence.latest == 5
