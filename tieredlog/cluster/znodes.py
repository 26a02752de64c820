"""Kafka's ZooKeeper layout: every path and the JSON stored at it (Kafka's ``kafka.zk.ZkData``).

Pure codecs, no ZooKeeper calls. The bytes are what a Kafka broker in ZooKeeper mode writes (compact
JSON, the same keys and versions), so ``zkCli.sh get /brokers/ids/0`` reads the same on both, and a
Kafka tool pointed at our ZooKeeper finds what it expects.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from tieredlog.cluster.errors import MalformedZnodeError
from tieredlog.kafka_uuid import kafka_str_to_uuid, uuid_to_kafka_str

CLUSTER_ID_PATH = "/cluster/id"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
CONFIG_TOPICS_PATH = "/config/topics"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"

# Kafka's ZkData.PersistentZkPaths: created at start-up by every broker, so watches and tools that list
# them never meet a missing parent.
PERSISTENT_PATHS: tuple[str, ...] = (
    "/consumers",
    BROKER_IDS_PATH,
    TOPICS_PATH,
    "/config/changes",
    DELETE_TOPICS_PATH,
    "/brokers/seqid",
    "/isr_change_notification",
    "/latest_producer_id_block",
    "/log_dir_event_notification",
    CONFIG_TOPICS_PATH,
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
)

SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def topic_partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{topic_partition_path(topic, partition)}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def now_ms() -> int:
    return int(time.time() * 1000)


def encode_json(value: Mapping[str, Any]) -> bytes:
    # Jackson's compact form, as Kafka's Json.encodeAsBytes writes it
    return json.dumps(value, separators=(",", ":")).encode()


def decode_json(data: bytes | None, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict):
        shown = (data or b"").decode("utf-8", "replace")
        raise MalformedZnodeError(f"Failed to parse {what}: {shown!r}")
    return value


# ---- /cluster/id ---------------------------------------------------------------------------------

PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"


def encode_producer_id_block(broker_id: int, block_start: int, block_end: int) -> bytes:
    """Kafka's ProducerIdBlockZNode: the last block handed out, its bounds as strings, end inclusive."""
    return encode_json({"version": 1, "broker": broker_id, "block_start": str(block_start), "block_end": str(block_end)})


def decode_producer_id_block_end(data: bytes) -> int:
    """The last producer id of the block stored at /latest_producer_id_block (-1: none handed out yet)."""
    if not data:
        return -1
    value = decode_json(data, f"the producer id block at {PRODUCER_ID_BLOCK_PATH}").get("block_end")
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise MalformedZnodeError(f"{PRODUCER_ID_BLOCK_PATH} has no block_end: {data!r}") from None


def encode_cluster_id(cluster_id: str) -> bytes:
    return encode_json({"version": "1", "id": cluster_id})  # the version is a string in Kafka's JSON


def decode_cluster_id(data: bytes) -> str:
    value = decode_json(data, f"the cluster id at {CLUSTER_ID_PATH}").get("id")
    if not isinstance(value, str) or not value:
        raise MalformedZnodeError(f"Failed to parse the cluster id at {CLUSTER_ID_PATH}: no id in {data!r}")
    return value


def generate_cluster_id() -> str:
    """Kafka's CoreUtils.generateUuidAsBase64: a random UUID as 22 URL-safe base64 characters."""
    return uuid_to_kafka_str(uuid.uuid4())


# ---- /brokers/ids/<id> ---------------------------------------------------------------------------

@dataclass(frozen=True)
class EndPoint:
    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


def parse_security_protocol_map(value: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...``."""
    out: dict[str, str] = {}
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        if not sep or proto.strip().upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"Invalid listener.security.protocol.map entry {item!r}")
        out[name.strip().upper()] = proto.strip().upper()
    return out


def endpoints_for(listeners: Iterable[tuple[str, str, int]], protocol_map: Mapping[str, str]) -> tuple[EndPoint, ...]:
    """EndPoints of ``(listener name, host, port)`` triples; a listener named after a protocol needs no
    map entry, as in Kafka."""
    out = []
    for name, host, port in listeners:
        proto = protocol_map.get(name) or (name if name in SECURITY_PROTOCOLS else None)
        if proto is None:
            raise ValueError(f"No security protocol defined for listener {name} in listener.security.protocol.map")
        out.append(EndPoint(name, host, port, proto))
    return tuple(out)


@dataclass(frozen=True)
class BrokerInfo:
    """The registration of one live broker (Kafka's BrokerInfo / BrokerIdZNode, JSON version 4: what
    brokers from 0.10.0 to 2.6 write; version 5 only adds ``features``, which we do not have)."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    version: int = 4
    timestamp_ms: int | None = None

    def encode(self, timestamp_ms: int | None = None) -> bytes:
        # host/port are the first PLAINTEXT endpoint, for clients older than the endpoints list
        plaintext = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        body: dict[str, Any] = {
            "listener_security_protocol_map": {e.listener_name: e.security_protocol for e in self.endpoints},
            "endpoints": [e.connection_string for e in self.endpoints],
        }
        if self.rack is not None:  # Kafka omits the key when there is no rack
            body["rack"] = self.rack
        body.update({
            "jmx_port": self.jmx_port,
            "host": plaintext.host if plaintext else None,
            "timestamp": str(timestamp_ms if timestamp_ms is not None else (self.timestamp_ms or now_ms())),
            "port": plaintext.port if plaintext else -1,
            "version": self.version,
        })
        return encode_json(body)

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> "BrokerInfo":
        what = f"ZooKeeper registration for broker {broker_id}"
        js = decode_json(data, what)
        try:
            version = int(js["version"])
            if version < 1:
                raise ValueError(f"unsupported version {version}")
            if version == 1:
                endpoints: tuple[EndPoint, ...] = (EndPoint("PLAINTEXT", str(js["host"]), int(js["port"])),)
            else:
                proto_map = {str(k).upper(): str(v).upper() for k, v in (js.get("listener_security_protocol_map") or {}).items()}
                endpoints = tuple(_parse_endpoint(str(e), proto_map) for e in js["endpoints"])
            rack = js.get("rack")
            ts = js.get("timestamp")
            return cls(broker_id, endpoints, rack if isinstance(rack, str) else None, int(js.get("jmx_port", -1)),
                       version, int(ts) if ts is not None else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedZnodeError(f"Failed to parse {what}: {data!r} ({exc})") from None


def _parse_endpoint(text: str, protocol_map: Mapping[str, str]) -> EndPoint:
    name, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise ValueError(f"bad endpoint {text!r}")
    name = name.upper()
    proto = protocol_map.get(name) or (name if name in SECURITY_PROTOCOLS else None)
    if proto is None:
        raise ValueError(f"no security protocol for listener {name}")
    return EndPoint(name, host.strip("[]"), int(port), proto)


# ---- /controller and /controller_epoch -----------------------------------------------------------

def encode_controller(broker_id: int, timestamp_ms: int | None = None) -> bytes:
    ts = timestamp_ms if timestamp_ms is not None else now_ms()
    return encode_json({"version": 1, "brokerid": broker_id, "timestamp": str(ts)})


def decode_controller(data: bytes) -> int:
    try:
        return int(decode_json(data, f"the controller at {CONTROLLER_PATH}")["brokerid"])
    except (KeyError, TypeError, ValueError):
        raise MalformedZnodeError(f"Failed to parse the controller at {CONTROLLER_PATH}: {data!r}") from None


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode())
    except (ValueError, UnicodeDecodeError, AttributeError):
        raise MalformedZnodeError(f"Failed to parse {CONTROLLER_EPOCH_PATH}: {data!r}") from None


# ---- /brokers/topics/<t> -------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplicaAssignment:
    """Replicas of one partition; ``adding``/``removing`` are set while a reassignment runs (KIP-455)."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicAssignment:
    """The replica assignment of a topic and its id (Kafka's TopicZNode, JSON version 3)."""

    partitions: Mapping[int, ReplicaAssignment]
    topic_id: uuid.UUID | None = None

    @classmethod
    def of(cls, replicas: Mapping[int, Iterable[int]], topic_id: uuid.UUID | None = None) -> "TopicAssignment":
        return cls({p: ReplicaAssignment(tuple(r)) for p, r in replicas.items()}, topic_id)

    def replicas(self, partition: int) -> tuple[int, ...]:
        return self.partitions[partition].replicas

    def encode(self) -> bytes:
        parts = sorted(self.partitions.items())
        body: dict[str, Any] = {"partitions": {str(p): list(a.replicas) for p, a in parts}}
        if self.topic_id is not None:
            body["topic_id"] = uuid_to_kafka_str(self.topic_id)
        body["adding_replicas"] = {str(p): list(a.adding_replicas) for p, a in parts if a.adding_replicas}
        body["removing_replicas"] = {str(p): list(a.removing_replicas) for p, a in parts if a.removing_replicas}
        body["version"] = 3
        return encode_json(body)

    @classmethod
    def decode(cls, topic: str, data: bytes) -> "TopicAssignment":
        what = f"the assignment of topic {topic}"
        js = decode_json(data, what)
        try:
            adding = js.get("adding_replicas") or {}
            removing = js.get("removing_replicas") or {}
            partitions = {
                int(p): ReplicaAssignment(tuple(int(r) for r in replicas),
                                          tuple(int(r) for r in adding.get(p, ())),
                                          tuple(int(r) for r in removing.get(p, ())))
                for p, replicas in (js.get("partitions") or {}).items()
            }
            tid = js.get("topic_id")
            return cls(partitions, kafka_str_to_uuid(tid) if tid else None)
        except (TypeError, ValueError, AttributeError) as exc:
            raise MalformedZnodeError(f"Failed to parse {what}: {data!r} ({exc})") from None


# ---- /brokers/topics/<t>/partitions/<p>/state ----------------------------------------------------

@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    """A partition's leader, leader epoch and ISR, and the epoch of the controller that wrote them.
    The znode's version (Kafka's partition epoch) travels beside it: every write is conditional on it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING (KIP-704); written only when not 0

    def encode(self) -> bytes:
        body: dict[str, Any] = {"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
                                "leader_epoch": self.leader_epoch, "isr": list(self.isr)}
        if self.leader_recovery_state != 0:
            body["leader_recovery_state"] = self.leader_recovery_state
        return encode_json(body)

    @classmethod
    def decode(cls, data: bytes, what: str = "a partition state") -> "LeaderIsrAndControllerEpoch":
        js = decode_json(data, what)
        try:
            return cls(int(js["leader"]), int(js["leader_epoch"]), tuple(int(r) for r in js["isr"]),
                       int(js["controller_epoch"]), int(js.get("leader_recovery_state", 0)))
        except (KeyError, TypeError, ValueError):
            raise MalformedZnodeError(f"Failed to parse {what}: {data!r}") from None


# ---- /config/topics/<t> --------------------------------------------------------------------------

def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return encode_json({"version": 1, "config": {k: str(v) for k, v in configs.items()}})


def decode_topic_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    config = decode_json(data, "a topic config").get("config") or {}
    if not isinstance(config, dict):
        raise MalformedZnodeError(f"Failed to parse a topic config: {data!r}")
    return {str(k): str(v) for k, v in config.items()}


# ---- /admin/reassign_partitions ------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionReassignment:
    """The target replicas of each partition being moved (the legacy znode kafka-reassign-partitions.sh
    --zookeeper writes; deleted by the controller when every move is done)."""

    targets: Mapping[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)

    def encode(self) -> bytes:
        return encode_json({"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(self.targets.items())]})

    @classmethod
    def decode(cls, data: bytes) -> "PartitionReassignment":
        js = decode_json(data, REASSIGN_PARTITIONS_PATH)
        try:
            return cls({(str(e["topic"]), int(e["partition"])): tuple(int(r) for r in e["replicas"])
                        for e in js["partitions"]})
        except (KeyError, TypeError, ValueError):
            raise MalformedZnodeError(f"Failed to parse {REASSIGN_PARTITIONS_PATH}: {data!r}") from None
