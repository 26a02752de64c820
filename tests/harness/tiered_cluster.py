"""Helpers of the tiered-cluster tests: broker processes on one ZooKeeper sharing a remote tier (a
folder every broker's LocalTieredStorage writes, as they would share a bucket, or one S3 bucket and
key prefix), and small probes of what each broker holds: remote segment manifests, leader-epoch
checkpoints, local segment files, metrics."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable

from broker_harness import BrokerProcess
from cluster_harness import member, partition_state
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from s3servers import ACCESS_KEY, REGION, SECRET_KEY
from zk_harness import wait_until

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import TopicAssignment
from tieredlog.protocol.api import LIST_OFFSETS, METADATA
from tieredlog.records.record import build_batch, iter_batches_records
from tieredlog.rsm.api import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate
from tieredlog.rsm.keys import uuid_to_base64
from tieredlog.tools.remote import iter_metadata_records

EARLIEST = -2
LATEST = -1
EARLIEST_LOCAL = -4
LATEST_TIERED = -5

VALUE_SIZE = 100
# one record per batch, always the same size: the segments roll at offsets the tests choose
BATCH_SIZE = len(build_batch([(None, b"v" * VALUE_SIZE)]))


def tiered_member(connect: str, broker_id: int, remote_dir: Path, overrides: dict[str, str] | None = None) -> dict[str, str]:
    return member(connect, broker_id, {
        "remote.log.storage.system.enable": "true",
        "rsm.config.dir": str(remote_dir),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "2",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
        **(overrides or {}),
    })


def segment_bytes_for(records_per_segment: int) -> int:
    """segment.bytes that rolls after exactly ``records_per_segment`` one-record batches."""
    return records_per_segment * BATCH_SIZE + BATCH_SIZE // 2


def create_topic_in_zk(connect: str, name: str, replicas: list[int], configs: dict[str, str]) -> uuid.UUID:
    """A one-partition topic written to ZooKeeper as Kafka's old tools did, so its assignment may name
    a broker that has never started yet (a brand-new replica)."""
    topic_id = uuid.uuid4()
    with ZkClient(connect) as zk:
        zk.set_topic_config(name, configs)
        zk.create_topic_assignment(name, TopicAssignment.of({0: replicas}, topic_id))
    return topic_id


def produce_values(servers: str, topic: str, values: list[bytes], acks: str = "all") -> None:
    """One record per batch, acks=all unless told, each acknowledged before the next is sent."""
    p = Producer({"bootstrap.servers": servers, "acks": acks, "linger.ms": 0, "enable.idempotence": False,
                  "compression.type": "none", "message.timeout.ms": 60000})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
        p.flush(60)
    assert not errors, errors


def value(offset: int, tag: str = "m") -> bytes:
    return f"{tag}{offset}".encode().ljust(VALUE_SIZE, b".")


def list_offset(b: BrokerProcess, topic: str, timestamp: int) -> tuple[int, int, int]:
    """(error, offset, leader epoch) of ListOffsets at ``timestamp`` (-1, -2, -4, -5) on broker ``b``."""
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": timestamp}]}]}, version=9)
    (p,) = r.topics[0].partitions
    return int(p.error_code), p.offset, p.leader_epoch


def remote_segments(remote_dir: Path, topic: str) -> list[dict[str, Any]]:
    """The committed remote segments of partition 0 (their manifests), by start offset then upload."""
    out = []
    for path in remote_dir.glob(f"{topic}-*/0/*.manifest"):
        try:
            out.append(json.loads(path.read_bytes()))
        except FileNotFoundError:
            continue  # deleted by retention between the listing and the read: polled while it runs

    return sorted(out, key=lambda m: (m["start_offset"], m["event_timestamp_ms"]))


def segment_ranges(remote_dir: Path, topic: str) -> list[tuple[int, int, dict[int, int]]]:
    return [(m["start_offset"], m["end_offset"], {e: o for e, o in m["segment_leader_epochs"]})
            for m in remote_segments(remote_dir, topic)]


def epoch_checkpoint(b: BrokerProcess, topic: str) -> list[tuple[int, int]]:
    path = b.data_dir / f"{topic}-0" / "leader-epoch-checkpoint"
    lines = path.read_text().split("\n")
    return [tuple(map(int, line.split())) for line in lines[2:] if line.strip()]  # type: ignore[misc]


def local_base_offsets(b: BrokerProcess, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (b.data_dir / f"{topic}-0").glob("*.log"))


def local_records(b: BrokerProcess, topic: str) -> list[tuple[int, bytes, int]]:
    """(offset, value, leader epoch) of every record in the broker's local segments of partition 0."""
    out = []
    for base in local_base_offsets(b, topic):
        data = (b.data_dir / f"{topic}-0" / f"{base:020d}.log").read_bytes()
        for header, records in iter_batches_records(data, stop_at_partial=True):
            out += [(r.offset, r.value or b"", header.partition_leader_epoch) for r in records]
    return out


def wait_tiered_up_to(leader: BrokerProcess, topic: str, offset: int, timeout: float = 30) -> None:
    wait_until(lambda: list_offset(leader, topic, LATEST_TIERED)[1] >= offset, timeout=timeout,
               message=f"offsets up to {offset} tiered")


def leader_of(brokers: dict[int, BrokerProcess], state: Callable[[BrokerProcess], Any]) -> Any:
    for b in brokers.values():
        if b.alive():
            return state(b)
    raise AssertionError("no broker alive")


METADATA_TOPIC = "__remote_log_metadata"
METADATA_PARTITIONS = 2


def create_metadata_topic(servers: str, replication_factor: int) -> None:
    """Create __remote_log_metadata ahead of the brokers (they create it with as many replicas as
    brokers are registered when they first need it)."""
    addresses = servers.split(",")

    def cluster_known() -> bool:
        # the admin client sends CreateTopics to the controller its broker names: right after start-up
        # a broker may not know it, nor the other brokers the replicas go to, yet
        for address in addresses:
            with KafkaClient(address, timeout=10) as c:
                r = c.request(METADATA, {"topics": [], "allow_auto_topic_creation": False})
            if r.controller_id < 0 or len(r.brokers) < len(addresses):
                return False
        return True

    wait_until(cluster_known, timeout=30, message="every broker knows the others and the controller")
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(METADATA_TOPIC, METADATA_PARTITIONS, replication_factor)])[METADATA_TOPIC].result(30)


def wait_metadata_isr(b: BrokerProcess, isr: list[int], timeout: float = 40) -> None:
    """Every partition of __remote_log_metadata has a leader and exactly ``isr`` in sync."""
    wait_until(lambda: (s := partition_state(b, METADATA_TOPIC)) and len(s) == METADATA_PARTITIONS
               and all(p[0] >= 0 and p[3] == sorted(isr) for p in s), timeout=timeout,
               message=f"{METADATA_TOPIC} in sync on {isr}")


def s3_tiered_member(connect: str, broker_id: int, s3_url: str, bucket: str, prefix: str,
                     overrides: dict[str, str] | None = None) -> dict[str, str]:
    """A cluster member tiering into an S3 bucket at ``s3_url`` (a server, or a proxy in front of it)
    under ``prefix``; every member given the same bucket and prefix shares one remote tier."""
    return member(connect, broker_id, {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "s3",
        "rsm.config.storage.s3.bucket.name": bucket,
        "rsm.config.storage.s3.endpoint.url": s3_url,
        "rsm.config.storage.s3.region": REGION,
        "rsm.config.storage.s3.path.style.access.enabled": "true",
        "rsm.config.storage.aws.access.key.id": ACCESS_KEY,
        "rsm.config.storage.aws.secret.access.key": SECRET_KEY,
        "rsm.config.key.prefix": prefix,
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": str(METADATA_PARTITIONS),
        **(overrides or {}),
    })


def metric_value(metrics_port: int, sample: str) -> float:
    """One sample (``name`` or ``name{labels}``) of a broker's /metrics; 0 before it first counts."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split(" ")[1])
    return 0.0


def local_log_bytes(b: BrokerProcess, topic: str) -> int:
    """Bytes of partition 0's local segment files on broker ``b`` (0 when it holds no replica)."""
    return sum(p.stat().st_size for p in (b.data_dir / f"{topic}-0").glob("*.log"))


def metadata_events(b: BrokerProcess, topic: str) -> dict[str, list[tuple[str, int]]]:
    """Partition 0's remote segments as broker ``b``'s replicas of __remote_log_metadata recorded them:
    segment id (as in the object names) -> [(state, broker id)] in the order written."""
    out: dict[str, list[tuple[str, int]]] = {}
    for _p, _offset, event in sorted(iter_metadata_records(b.data_dir), key=lambda r: (r[0], r[1])):
        if isinstance(event, (RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate)):
            tip = event.remote_log_segment_id.topic_id_partition
            if tip.topic == topic and tip.partition == 0:
                out.setdefault(uuid_to_base64(event.remote_log_segment_id.id), []).append(
                    (event.state.name, event.broker_id))
    return out


def remote_objects(remote_dir: Path, topic: str) -> dict[str, set[str]]:
    """Every object of partition 0 in the remote tier, committed or not: segment id -> suffixes."""
    out: dict[str, set[str]] = {}
    for path in remote_dir.glob(f"{topic}-*/0/*-*.*"):
        stem, _, suffix = path.name.partition(".")
        out.setdefault(stem.split("-", 1)[1], set()).add(suffix)
    return out
