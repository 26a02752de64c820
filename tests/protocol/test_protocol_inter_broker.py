"""The ZooKeeper-mode controller APIs (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown):
round trips through the codec, byte layouts assembled by hand from Kafka 3.9's field order, the
length guard on every truncation, and where the schema lookup sends each key."""

from __future__ import annotations

import io
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.serial import entity_reader, entity_writer

from tieredlog.protocol import inter_broker as ib
from tieredlog.protocol.api import (
    CLUSTER_ADMIN_VERSIONS,
    CONTROLLED_SHUTDOWN,
    INTER_BROKER_VERSIONS,
    LEADER_AND_ISR,
    STOP_REPLICA,
    UPDATE_METADATA,
    api_name,
)
from tieredlog.protocol.codec import (
    InvalidRequest,
    UnsupportedVersion,
    build_entity,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tieredlog.protocol.guard import FrameError, entity_checker
from tieredlog.protocol.schemas import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema

T1 = uuid.UUID("0123456789abcdef0123456789abcdef")
T2 = uuid.UUID("fedcba9876543210fedcba9876543210")
CID = 0x01020304
CLIENT = "ctl"

LEADER_AND_ISR_REQ = {
    "controller_id": 3, "controller_epoch": 17, "broker_epoch": 4242, "type_": 2,
    "topic_states": [
        {"topic_name": "orders", "topic_id": T1, "partition_states": [
            {"partition_index": 0, "controller_epoch": 16, "leader": 1, "leader_epoch": 9, "isr": [1, 2],
             "partition_epoch": 33, "replicas": [1, 2, 3], "adding_replicas": [3], "removing_replicas": [4],
             "is_new": True, "leader_recovery_state": 1},
            {"partition_index": 5, "controller_epoch": 17, "leader": 2, "leader_epoch": 1, "isr": [2],
             "partition_epoch": 1, "replicas": [2, 1]},
        ]},
        {"topic_name": "audit", "topic_id": T2, "partition_states": []},
    ],
    "live_leaders": [{"broker_id": 1, "host_name": "b1.local", "port": 9092},
                     {"broker_id": 2, "host_name": "b2.local", "port": 9093}],
}
LEADER_AND_ISR_RESP = {
    "error_code": 0,
    "topics": [{"topic_id": T1, "partition_errors": [{"partition_index": 0, "error_code": 0},
                                                      {"partition_index": 5, "error_code": 6}]}],
}
STOP_REPLICA_REQ = {
    "controller_id": 3, "controller_epoch": 17, "broker_epoch": 4242,
    "topic_states": [{"topic_name": "orders", "partition_states": [
        {"partition_index": 0, "leader_epoch": 9, "delete_partition": True},
        {"partition_index": 5, "delete_partition": False},
    ]}],
}
STOP_REPLICA_RESP = {
    "error_code": 0,
    "partition_errors": [{"topic_name": "orders", "partition_index": 0, "error_code": 0},
                         {"topic_name": "orders", "partition_index": 5, "error_code": 56}],
}
UPDATE_METADATA_REQ = {
    "controller_id": 3, "type_": 1, "controller_epoch": 17, "broker_epoch": 4242,
    "topic_states": [{"topic_name": "orders", "topic_id": T1, "partition_states": [
        {"partition_index": 0, "controller_epoch": 16, "leader": 1, "leader_epoch": 9, "isr": [1, 2],
         "zk_version": 33, "replicas": [1, 2, 3], "offline_replicas": [3]}]}],
    "live_brokers": [
        {"id_": 1, "endpoints": [{"port": 9092, "host": "b1.local", "listener": "PLAINTEXT", "security_protocol": 0},
                                 {"port": 9094, "host": "b1.local", "listener": "SECURE", "security_protocol": 1}],
         "rack": "rack-a"},
        {"id_": 2, "endpoints": [], "rack": None},
    ],
}
UPDATE_METADATA_RESP = {"error_code": 0}
CONTROLLED_SHUTDOWN_REQ = {"broker_id": 2, "broker_epoch": 4242}
CONTROLLED_SHUTDOWN_RESP = {
    "error_code": 0,
    "remaining_partitions": [{"topic_name": "orders", "partition_index": 0},
                             {"topic_name": "audit", "partition_index": 7}],
}

CASES = [
    (LEADER_AND_ISR, 7, LEADER_AND_ISR_REQ, LEADER_AND_ISR_RESP),
    (STOP_REPLICA, 4, STOP_REPLICA_REQ, STOP_REPLICA_RESP),
    (UPDATE_METADATA, 8, UPDATE_METADATA_REQ, UPDATE_METADATA_RESP),
    (CONTROLLED_SHUTDOWN, 3, CONTROLLED_SHUTDOWN_REQ, CONTROLLED_SHUTDOWN_RESP),
]
IDS = [api_name(c[0]) for c in CASES]


# --- Kafka's flexible encoding, written out by hand -------------------------------------------------

def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def boolean(v: bool) -> bytes:
    return b"\x01" if v else b"\x00"


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def carr(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def i32s(values: list[int]) -> bytes:
    return carr([i32(v) for v in values])


NO_TAGS = b"\x00"


def request_frame(api_key: int, version: int, body: bytes) -> bytes:
    """Request header v2: key, version, correlation id, legacy (int16-length) client id, no tags."""
    raw = CLIENT.encode()
    payload = i16(api_key) + i16(version) + i32(CID) + i16(len(raw)) + raw + NO_TAGS + body
    return i32(len(payload)) + payload


def response_frame(body: bytes) -> bytes:
    """Response header v1: correlation id, no tags."""
    payload = i32(CID) + NO_TAGS + body
    return i32(len(payload)) + payload


def _leader_and_isr_partition(p: dict) -> bytes:
    return (i32(p["partition_index"]) + i32(p["controller_epoch"]) + i32(p["leader"]) + i32(p["leader_epoch"])
            + i32s(p["isr"]) + i32(p["partition_epoch"]) + i32s(p["replicas"]) + i32s(p.get("adding_replicas", []))
            + i32s(p.get("removing_replicas", [])) + boolean(p.get("is_new", False))
            + i8(p.get("leader_recovery_state", 0)) + NO_TAGS)


def golden_leader_and_isr_request() -> bytes:
    r = LEADER_AND_ISR_REQ
    topics = [cstr(t["topic_name"]) + t["topic_id"].bytes + carr([_leader_and_isr_partition(p)
                                                                  for p in t["partition_states"]]) + NO_TAGS
              for t in r["topic_states"]]
    leaders = [i32(x["broker_id"]) + cstr(x["host_name"]) + i32(x["port"]) + NO_TAGS for x in r["live_leaders"]]
    return (i32(r["controller_id"]) + boolean(False) + i32(r["controller_epoch"]) + i64(r["broker_epoch"])
            + i8(r["type_"]) + carr(topics) + carr(leaders) + NO_TAGS)


def golden_leader_and_isr_response() -> bytes:
    topics = [t["topic_id"].bytes + carr([i32(p["partition_index"]) + i16(p["error_code"]) + NO_TAGS
                                          for p in t["partition_errors"]]) + NO_TAGS
              for t in LEADER_AND_ISR_RESP["topics"]]
    return i16(0) + carr(topics) + NO_TAGS


def golden_stop_replica_request() -> bytes:
    r = STOP_REPLICA_REQ
    topics = [cstr(t["topic_name"]) + carr([i32(p["partition_index"]) + i32(p.get("leader_epoch", -1))
                                            + boolean(p["delete_partition"]) + NO_TAGS
                                            for p in t["partition_states"]]) + NO_TAGS
              for t in r["topic_states"]]
    return (i32(r["controller_id"]) + boolean(False) + i32(r["controller_epoch"]) + i64(r["broker_epoch"])
            + carr(topics) + NO_TAGS)


def golden_stop_replica_response() -> bytes:
    errors = [cstr(p["topic_name"]) + i32(p["partition_index"]) + i16(p["error_code"]) + NO_TAGS
              for p in STOP_REPLICA_RESP["partition_errors"]]
    return i16(0) + carr(errors) + NO_TAGS


def golden_update_metadata_request() -> bytes:
    r = UPDATE_METADATA_REQ
    partitions = [i32(p["partition_index"]) + i32(p["controller_epoch"]) + i32(p["leader"]) + i32(p["leader_epoch"])
                  + i32s(p["isr"]) + i32(p["zk_version"]) + i32s(p["replicas"]) + i32s(p["offline_replicas"])
                  + NO_TAGS for p in r["topic_states"][0]["partition_states"]]
    topics = [cstr("orders") + T1.bytes + carr(partitions) + NO_TAGS]
    brokers = [i32(b["id_"]) + carr([i32(e["port"]) + cstr(e["host"]) + cstr(e["listener"])
                                     + i16(e["security_protocol"]) + NO_TAGS for e in b["endpoints"]])
               + cstr(b["rack"]) + NO_TAGS for b in r["live_brokers"]]
    # Type is tagged (tag 0): it leaves its declared place for the tagged-field section at the end
    tagged = uvarint(1) + uvarint(0) + uvarint(1) + i8(r["type_"])
    return (i32(r["controller_id"]) + boolean(False) + i32(r["controller_epoch"]) + i64(r["broker_epoch"])
            + carr(topics) + carr(brokers) + tagged)


def golden_controlled_shutdown_request() -> bytes:
    return i32(2) + i64(4242) + NO_TAGS


def golden_controlled_shutdown_response() -> bytes:
    rest = [cstr(p["topic_name"]) + i32(p["partition_index"]) + NO_TAGS
            for p in CONTROLLED_SHUTDOWN_RESP["remaining_partitions"]]
    return i16(0) + carr(rest) + NO_TAGS


GOLDEN = {
    LEADER_AND_ISR: (golden_leader_and_isr_request, golden_leader_and_isr_response),
    STOP_REPLICA: (golden_stop_replica_request, golden_stop_replica_response),
    UPDATE_METADATA: (golden_update_metadata_request, lambda: i16(0) + NO_TAGS),
    CONTROLLED_SHUTDOWN: (golden_controlled_shutdown_request, golden_controlled_shutdown_response),
}


# --- tests ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("api_key,version,req,resp", CASES, ids=IDS)
def test_request_round_trip(api_key, version, req, resp):
    frame = encode_request(api_key, version, CID, CLIENT, req)
    header, body = decode_request(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api_key, version, CID, CLIENT)
    assert body == build_entity(load_request_schema(api_key, version), req)
    assert encode_request(api_key, version, CID, CLIENT, body) == frame


@pytest.mark.parametrize("api_key,version,req,resp", CASES, ids=IDS)
def test_response_round_trip(api_key, version, req, resp):
    frame = encode_response(api_key, version, CID, resp)
    cid, body = decode_response(api_key, version, frame[4:])
    assert cid == CID
    assert body == build_entity(load_response_schema(api_key, version), resp)
    assert encode_response(api_key, version, CID, body) == frame


@pytest.mark.parametrize("api_key,version,req,resp", CASES, ids=IDS)
def test_request_bytes_follow_kafkas_field_order(api_key, version, req, resp):
    assert encode_request(api_key, version, CID, CLIENT, req) == request_frame(api_key, version, GOLDEN[api_key][0]())


@pytest.mark.parametrize("api_key,version,req,resp", CASES, ids=IDS)
def test_response_bytes_follow_kafkas_field_order(api_key, version, req, resp):
    assert encode_response(api_key, version, CID, resp) == response_frame(GOLDEN[api_key][1]())


def test_decoded_values_land_in_the_named_fields():
    _, r = decode_request(request_frame(LEADER_AND_ISR, 7, golden_leader_and_isr_request())[4:])
    assert isinstance(r, ib.LeaderAndIsrRequest)
    assert (r.controller_id, r.controller_epoch, r.broker_epoch, r.type_, r.is_k_raft_controller) == (3, 17, 4242, 2, False)
    p = r.topic_states[0].partition_states[0]
    assert (r.topic_states[0].topic_name, r.topic_states[0].topic_id) == ("orders", T1)
    assert (p.partition_index, p.controller_epoch, p.leader, p.leader_epoch, p.partition_epoch) == (0, 16, 1, 9, 33)
    assert (p.isr, p.replicas, p.adding_replicas, p.removing_replicas) == ((1, 2), (1, 2, 3), (3,), (4,))
    assert (p.is_new, p.leader_recovery_state) == (True, 1)
    assert r.live_leaders[1] == ib.LeaderAndIsrLiveLeader(broker_id=2, host_name="b2.local", port=9093)

    _, u = decode_request(request_frame(UPDATE_METADATA, 8, golden_update_metadata_request())[4:])
    assert (u.type_, u.controller_epoch) == (1, 17)
    assert u.live_brokers[0].endpoints[1].listener == "SECURE"
    assert (u.live_brokers[0].rack, u.live_brokers[1].rack, u.live_brokers[1].id_) == ("rack-a", None, 2)
    assert u.topic_states[0].partition_states[0].offline_replicas == (3,)

    _, resp = decode_response(STOP_REPLICA, 4, response_frame(golden_stop_replica_response())[4:])
    assert resp.partition_errors[1].error_code == ErrorCode.kafka_storage_error


def test_defaults_are_kafkas():
    s = build_entity(ib.StopReplicaPartitionState, {"partition_index": 1, "delete_partition": False})
    assert s.leader_epoch == -1
    assert ib.ControlledShutdownRequest(broker_id=1).broker_epoch == -1
    u = build_entity(ib.UpdateMetadataRequest, {"controller_id": 1, "controller_epoch": 1})
    assert (u.type_, u.broker_epoch, u.is_k_raft_controller) == (0, -1, False)
    # an untyped UpdateMetadata carries no tagged field at all
    frame = encode_request(UPDATE_METADATA, 8, CID, CLIENT, {"controller_id": 1, "controller_epoch": 1})
    assert frame.endswith(carr([]) + carr([]) + NO_TAGS)


@pytest.mark.parametrize("api_key,version,req,resp", CASES, ids=IDS)
def test_the_guard_refuses_every_truncated_request(api_key, version, req, resp):
    payload = encode_request(api_key, version, CID, CLIENT, req)[4:]
    header_len = 2 + 2 + 4 + 2 + len(CLIENT) + 1
    for cut in range(header_len, len(payload)):
        with pytest.raises(InvalidRequest):
            decode_request(payload[:cut])
    decode_request(payload + b"\x00\x00")  # trailing bytes stay tolerated, as Kafka does


@pytest.mark.parametrize("api_key,version,req,resp", CASES, ids=IDS)
def test_the_guard_refuses_every_truncated_response(api_key, version, req, resp):
    cls = load_response_schema(api_key, version)
    body = encode_response(api_key, version, CID, resp)[4 + 5:]
    check = entity_checker(cls)
    assert check(body, 0, len(body)) == len(body)
    for cut in range(len(body)):
        with pytest.raises(FrameError):
            check(body, 0, cut)


def test_the_guard_refuses_a_hostile_array_length():
    body = bytearray(golden_controlled_shutdown_response())
    body[2:3] = uvarint(2**31)  # remaining_partitions claims two billion entries
    with pytest.raises(FrameError, match="remaining_partitions"):
        entity_checker(ib.ControlledShutdownResponse)(bytes(body), 0, len(body))


ALL_CLASSES = [c for pair in zip(ib.REQUESTS.values(), ib.RESPONSES.values()) for c in pair]


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=[c.__name__ for c in ALL_CLASSES])
def test_the_guard_ends_where_kio_ends(cls):
    write, read, check = entity_writer(cls), entity_reader(cls), entity_checker(cls)

    @settings(max_examples=25, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def agree(body) -> None:
        buf = io.BytesIO()
        write(buf, body)
        data = buf.getvalue()
        assert check(data, 0, len(data)) == read(data, 0)[1] == len(data)
        assert read(data, 0)[0] == body

    agree()


def test_schema_lookup_serves_ours_and_defers_to_kio():
    assert load_request_schema(4, 7) is ib.LeaderAndIsrRequest
    assert load_response_schema(5, 4) is ib.StopReplicaResponse
    assert load_request_schema(6, 8) is ib.UpdateMetadataRequest
    assert load_response_schema(7, 3) is ib.ControlledShutdownResponse
    assert load_request_schema(3, 12) is MetadataRequest
    with pytest.raises(UnknownEntity):
        load_request_schema(4, 6)  # only the last version is implemented
    with pytest.raises(UnknownEntity):
        load_response_schema(3, 999)
    with pytest.raises(UnknownAPIKey):
        load_request_schema(9999, 0)
    with pytest.raises(UnsupportedVersion):
        decode_request(request_frame(LEADER_AND_ISR, 6, b"")[4:])


def test_class_metadata_matches_the_lookup_tables():
    for (key, version), cls in {**ib.REQUESTS, **ib.RESPONSES}.items():
        assert (cls.__api_key__, cls.__version__, cls.__flexible__) == (key, version, True)
        assert cls.__type__.name in ("request", "response")
    assert {k: (v, v) for k, v in ib.REQUESTS} == {k: r for k, r in INTER_BROKER_VERSIONS.items() if k in range(4, 8)}


def test_inter_broker_and_admin_versions_all_have_schemas():
    for key, (lo, hi) in {**INTER_BROKER_VERSIONS, **CLUSTER_ADMIN_VERSIONS}.items():
        for v in range(lo, hi + 1):
            assert load_request_schema(key, v).__version__ == v
            assert load_response_schema(key, v).__version__ == v
