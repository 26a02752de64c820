"""APIs through our own protocol client against a real broker: offsets, delayed fetch, admin bits."""

from __future__ import annotations

import select
import socket
import struct

import pytest
from confluent_kafka import Producer

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import (
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DESCRIBE_CLUSTER,
    FETCH,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
)
from tieredlog.protocol.codec import decode_response, encode_request

pytestmark = pytest.mark.integration


def _create(c: KafkaClient, name: str, partitions: int = 1) -> None:
    r = c.request(CREATE_TOPICS, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
                                  "timeout": 10000})
    assert r.topics[0].error_code.value == 0, r


def _produce(bootstrap: str, topic: str, n: int, ts0: int = 1_600_000_000_000) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(n):
        p.produce(topic, value=b"x%d" % i, partition=0, timestamp=ts0 + i * 1000)
        p.flush(10)  # one batch per record, so offsets and timestamps map one to one


def _list(c: KafkaClient, topic: str, ts: int, version: int | None = None, isolation: int = 0):
    r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1}]}]},
        version=version)
    return r.topics[0].partitions[0]


def test_list_offsets_special_and_by_timestamp(broker):
    with KafkaClient(broker.bootstrap) as c:
        _create(c, "lo")
        _produce(broker.bootstrap, "lo", 5)
        assert _list(c, "lo", -2).offset == 0
        assert _list(c, "lo", -1).offset == 5
        assert _list(c, "lo", -1, isolation=1).offset == 5
        mx = _list(c, "lo", -3)
        assert (mx.offset, mx.timestamp) == (4, 1_600_000_004_000)
        assert _list(c, "lo", -4).offset == 0  # earliest local: nothing tiered yet
        assert _list(c, "lo", -5).offset == -1  # latest tiered: nothing tiered yet
        at = _list(c, "lo", 1_600_000_002_500)
        assert (at.offset, at.timestamp) == (3, 1_600_000_003_000)
        assert _list(c, "lo", 1_700_000_000_000).offset == -1
        assert _list(c, "nope", -1).error_code.value == 3


def test_delete_records_moves_log_start(broker):
    with KafkaClient(broker.bootstrap) as c:
        _create(c, "dr")
        _produce(broker.bootstrap, "dr", 4)
        r = c.request(DELETE_RECORDS, {"topics": [{"name": "dr", "partitions": [{"partition_index": 0, "offset": 2}]}],
                                       "timeout": 5000})
        p = r.topics[0].partitions[0]
        assert (p.error_code.value, p.low_watermark) == (0, 2)
        assert _list(c, "dr", -2).offset == 2
        r = c.request(DELETE_RECORDS, {"topics": [{"name": "dr", "partitions": [{"partition_index": 0, "offset": 99}]}],
                                       "timeout": 5000})
        assert r.topics[0].partitions[0].error_code.value == 1  # OFFSET_OUT_OF_RANGE
        # fetching below the new log start offset is out of range
        f = _fetch(c, "dr", 0, max_wait=0)
        assert f.responses[0].partitions[0].error_code.value == 1


def _fetch(c: KafkaClient, topic: str, offset: int, max_wait: int = 0, min_bytes: int = 1, version: int = 12):
    return c.request(FETCH, _fetch_body(topic, offset, max_wait, min_bytes), version=version)


def _fetch_body(topic: str, offset: int, max_wait: int, min_bytes: int) -> dict:
    return {"replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                        "partition_max_bytes": 1 << 20}]}]}


def test_parked_fetch_is_woken_by_append_and_responses_stay_in_order(broker):
    """A fetch waiting for min bytes does not hold up the connection's reader, is woken by a produce
    on another connection, and its response still comes before the later request's."""
    with KafkaClient(broker.bootstrap) as c:
        _create(c, "wake")
    s = socket.create_connection((broker.host, broker.port), timeout=60)
    s.sendall(encode_request(FETCH, 12, 1, "w", _fetch_body("wake", 0, max_wait=60_000, min_bytes=1)))
    s.sendall(encode_request(API_VERSIONS, 3, 2, "w", {"client_software_name": "t", "client_software_version": "1"}))
    # the fetch parks: nothing may come back (not even the ApiVersions answer, which must wait its
    # turn behind the fetch) until a produce on another connection wakes it
    # poll(), not select(): the suite's process may hold more than FD_SETSIZE descriptors by now
    poller = select.poll()
    poller.register(s, select.POLLIN)
    assert poller.poll(500) == [], "answered before anything was produced"
    _produce(broker.bootstrap, "wake", 1)

    def frame() -> bytes:
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        size = struct.unpack(">i", head)[0]
        body = b""
        while len(body) < size:
            body += s.recv(size - len(body))
        return body

    cid, fetch = decode_response(FETCH, 12, frame())
    assert cid == 1
    part = fetch.responses[0].partitions[0]
    assert part.error_code.value == 0 and part.high_watermark == 1 and part.records
    cid2, _ = decode_response(API_VERSIONS, 3, frame())
    assert cid2 == 2
    s.close()


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16])
def test_fetch_versions_return_records_and_offsets(broker, version):
    with KafkaClient(broker.bootstrap) as c:
        name = f"fv{version}"
        _create(c, name)
        _produce(broker.bootstrap, name, 3)
        md = c.request(METADATA, {"topics": [{"name": name}]}, version=12)
        tid = md.topics[0].topic_id
        body = _fetch_body(name, 1, 0, 1)
        body["topics"][0]["topic_id"] = tid
        r = c.request(FETCH, body, version=version)
        p = r.responses[0].partitions[0]
        assert (p.error_code.value, p.high_watermark) == (0, 3)
        assert p.records and len(p.records) > 61
        out = _fetch(c, name, 10, version=min(version, 12))
        assert out.responses[0].partitions[0].error_code.value == 1


def test_metadata_topic_ids_internal_and_auto_create(broker):
    with KafkaClient(broker.bootstrap) as c:
        md = c.request(METADATA, {"topics": [{"name": "auto-made"}], "allow_auto_topic_creation": True}, version=12)
        t = md.topics[0]
        assert t.error_code.value == 0 and t.topic_id.int != 0 and len(t.partitions) == 1
        md = c.request(METADATA, {"topics": [{"name": "not-made"}], "allow_auto_topic_creation": False}, version=12)
        assert md.topics[0].error_code.value == 3
        md = c.request(METADATA, {"topics": [{"name": "bad name!"}], "allow_auto_topic_creation": True}, version=12)
        assert md.topics[0].error_code.value == 17
        md2 = c.request(METADATA, {"topics": None}, version=12)
        names = {x.name: x for x in md2.topics}
        assert names["auto-made"].topic_id == t.topic_id
        for name, x in names.items():
            assert x.is_internal == name.startswith("__")


def test_describe_cluster_init_producer_id_and_leader_epoch(broker):
    with KafkaClient(broker.bootstrap) as c:
        dc = c.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False})
        assert dc.brokers[0].port == broker.port and dc.controller_id == 0 and dc.cluster_id
        ids = {c.request(INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60000}).producer_id
               for _ in range(3)}
        assert len(ids) == 3
        _create(c, "ofle")
        _produce(broker.bootstrap, "ofle", 2)
        r = c.request(OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [
            {"topic": "ofle", "partitions": [{"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}]}]})
        p = r.topics[0].partitions[0]
        assert (p.error_code.value, p.leader_epoch, p.end_offset) == (0, 0, 2)


def _produce_raw(c: KafkaClient, topic: str, records: bytes, acks: int = 1):
    from tieredlog.protocol.api import PRODUCE

    r = c.request(PRODUCE, {"transactional_id": None, "acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}, version=9)
    return r.responses[0].partition_responses[0]


def test_produce_errors_corrupt_and_too_large(broker):
    from tieredlog.protocol.api import CREATE_TOPICS
    from tieredlog.records.record import build_batch

    with KafkaClient(broker.bootstrap) as c:
        r = c.request(CREATE_TOPICS, {"topics": [{"name": "perr", "num_partitions": 1, "replication_factor": 1,
                                                  "configs": [{"name": "max.message.bytes", "value": "2000"}]}],
                                      "timeout": 10000})
        assert r.topics[0].error_code.value == 0
        good = build_batch([(b"k", b"v" * 100, [], 1_700_000_000_000)])
        ok = _produce_raw(c, "perr", good)
        assert (ok.error_code.value, ok.base_offset) == (0, 0)
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF  # inside the CRC-covered part
        assert _produce_raw(c, "perr", bytes(corrupt)).error_code.value == 2  # CORRUPT_MESSAGE
        big = build_batch([(b"k", b"v" * 5000, [], 1_700_000_000_000)])
        assert _produce_raw(c, "perr", big).error_code.value == 10  # MESSAGE_TOO_LARGE
        assert _produce_raw(c, "nope-topic", good).error_code.value == 3
        assert _produce_raw(c, "perr", good, acks=2).error_code.value == 21  # INVALID_REQUIRED_ACKS
        # the broker is still fine and the log has just the one good batch
        assert _list(c, "perr", -1).offset == 1


def _create_with(c: KafkaClient, name: str, configs: dict[str, str]):
    r = c.request(CREATE_TOPICS, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                              "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                                  "timeout": 10000})
    return r.topics[0]


def _alter(c: KafkaClient, name: str, configs: dict[str, str]):
    from tieredlog.protocol.api import ALTER_CONFIGS

    r = c.request(ALTER_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": name, "configs": [
        {"name": k, "value": v} for k, v in configs.items()]}], "validate_only": False})
    return r.responses[0]


def _incremental(c: KafkaClient, name: str, configs: dict[str, str]):
    from tieredlog.protocol.api import INCREMENTAL_ALTER_CONFIGS

    r = c.request(INCREMENTAL_ALTER_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": name, "configs": [
        {"name": k, "value": v, "config_operation": 0} for k, v in configs.items()]}], "validate_only": False})
    return r.responses[0]


SYSTEM_OFF = "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."


def test_remote_storage_refused_when_the_broker_tier_is_off(broker_factory):
    b = broker_factory({"remote.log.storage.system.enable": "false"})
    with KafkaClient(b.bootstrap) as c:
        r = _create_with(c, "tiered-off", {"remote.storage.enable": "true"})
        assert (r.error_code.value, r.error_message) == (40, SYSTEM_OFF)
        assert _create_with(c, "plain", {}).error_code.value == 0
        for alter in (_alter, _incremental):
            r = alter(c, "plain", {"remote.storage.enable": "true"})
            assert (r.error_code.value, r.error_message) == (40, SYSTEM_OFF)
        assert _incremental(c, "plain", {"retention.ms": "1000"}).error_code.value == 0


def test_kafka_tiered_topic_config_rules(broker):
    with KafkaClient(broker.bootstrap) as c:
        r = _create_with(c, "lr-ms", {"remote.storage.enable": "true", "local.retention.ms": "-1"})
        assert r.error_code.value == 40
        assert r.error_message == ("Invalid value -1 for configuration local.retention.ms: "
                                   "Value must not be -1 as retention.ms value is set as 604800000.")
        r = _create_with(c, "lr-b", {"remote.storage.enable": "true", "retention.bytes": "1000",
                                     "local.retention.bytes": "-1"})
        assert r.error_code.value == 40 and "Value must not be -1 as retention.bytes value is set as 1000." in r.error_message
        # both unlimited is fine, and so is -1 locally on a topic that is not tiered
        assert _create_with(c, "lr-ok", {"remote.storage.enable": "true", "retention.bytes": "-1",
                                         "local.retention.bytes": "-1"}).error_code.value == 0
        assert _create_with(c, "lr-plain", {"local.retention.ms": "-1"}).error_code.value == 0
        # KIP-950: with copying disabled only the total retention may delete
        r = _create_with(c, "cd", {"remote.storage.enable": "true", "remote.log.copy.disable": "true",
                                   "local.retention.ms": "1000"})
        assert r.error_code.value == 40 and r.error_message.startswith(
            "When `remote.log.copy.disable` is set to true, the `local.retention.ms` and `retention.ms` must be")
        assert _create_with(c, "cd", {"remote.storage.enable": "true", "remote.log.copy.disable": "true",
                                      "local.retention.ms": "604800000"}).error_code.value == 0
        r = _incremental(c, "cd", {"local.retention.bytes": "10"})
        assert r.error_code.value == 40 and "`local.retention.bytes` and `retention.bytes`" in r.error_message
        # KIP-950: turning tiering off needs remote.log.delete.on.disable=true
        for alter in (_alter, _incremental):
            r = alter(c, "cd", {"remote.storage.enable": "false"})
            assert r.error_code.value == 40
            assert r.error_message.startswith("It is invalid to disable remote storage without deleting remote data.")
        assert _incremental(c, "cd", {"remote.storage.enable": "false",
                                      "remote.log.delete.on.disable": "true"}).error_code.value == 0
        # and it may be turned on again
        assert _incremental(c, "cd", {"remote.storage.enable": "true"}).error_code.value == 0


def test_stored_tiered_topic_on_a_broker_with_the_tier_off_uses_total_retention(tmp_path):
    """A topic tiered while the remote tier was on keeps running as a local-only topic when the broker
    restarts with remote.log.storage.system.enable=false: retention.bytes deletes local segments."""
    import asyncio
    import uuid

    from tieredlog.config import BrokerConfig
    from tieredlog.log.types import TopicPartition
    from tieredlog.records.record import build_batch
    from tieredlog.server.broker import Broker
    from tieredlog.server.topic_store import TopicMetadata, TopicStore

    TopicStore(tmp_path).save({"old": TopicMetadata("old", uuid.uuid4(), 1, {
        "remote.storage.enable": "true", "segment.bytes": "1024", "retention.bytes": "2048",
        "local.retention.bytes": "1", "file.delete.delay.ms": "0"})})
    b = Broker(BrokerConfig.load(None, [f"log.dir={tmp_path}", "remote.log.storage.system.enable=false", "metrics.port=-1",
                                        "offsets.topic.num.partitions=1"]))

    async def run():
        await b.start()
        try:
            plog = b.get_partition_log("old", 0)
            assert plog.config.remote_storage_enable is False
            assert b.topics["old"].configs["remote.storage.enable"] == "true"  # the topic's setting is kept
            for i in range(40):
                plog.append_as_leader(build_batch([(b"k", b"v" * 200, [], 1_700_000_000_000 + i)]), 0)
            plog.update_high_watermark(plog.log_end_offset)
            assert len(plog.segments) > 4
            assert plog.delete_old_segments() > 0
            assert plog.size <= 2048 + 1024
            assert plog.log_start_offset == plog.local_log_start_offset == plog.segments[0].base_offset > 0
            assert b.log_manager.get_log(TopicPartition("old", 0)) is plog
        finally:
            await b.shutdown()

    asyncio.run(run())


# Kafka's bit fields (bit index = AclOperation code) of every operation a resource type supports.
TOPIC_OPERATIONS = 3576  # READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
CLUSTER_OPERATIONS = 8096  # CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
OMITTED = -(2**31)


def test_authorized_operation_bit_fields_match_kafkas():
    from tieredlog.server.authorized_operations import ResourceType, authorized_operations

    assert authorized_operations(ResourceType.TOPIC, True) == TOPIC_OPERATIONS
    assert authorized_operations(ResourceType.CLUSTER, True) == CLUSTER_OPERATIONS
    assert authorized_operations(ResourceType.GROUP, True) == 328  # READ, DELETE, DESCRIBE
    assert authorized_operations(ResourceType.GROUP, False) == OMITTED


@pytest.mark.parametrize("v", range(8, 13))
def test_metadata_authorized_operations_per_version(broker, v):
    with KafkaClient(broker.bootstrap) as c:
        _create(c, f"authz-{v}")
        for asked in (True, False):
            request = {"topics": [{"name": f"authz-{v}"}, {"name": "authz-missing"}], "allow_auto_topic_creation": False,
                       "include_topic_authorized_operations": asked, "include_cluster_authorized_operations": asked}
            md = c.request(METADATA, request, version=v)
            expected = TOPIC_OPERATIONS if asked else OMITTED
            # Kafka sets it on every topic of the answer, the unknown one too
            assert [(t.error_code.value, t.topic_authorized_operations) for t in md.topics] == [
                (0, expected), (3, expected)]
            if v <= 10:  # the cluster's field went away in v11 (DescribeCluster has it)
                assert md.cluster_authorized_operations == (CLUSTER_OPERATIONS if asked else OMITTED)
        for dv in (0, 1):
            dc = c.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True}, version=dv)
            assert dc.cluster_authorized_operations == CLUSTER_OPERATIONS
