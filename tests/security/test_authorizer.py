"""The ACL authorizer's decisions, filters and stores, without a broker (Kafka's AclAuthorizer and
StandardAuthorizer rules: tieredlog/security/authorizer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import kio_sample

from tieredlog.config import BrokerConfig, BrokerConfigError
from tieredlog.security.authorizer import create_authorizer, parse_super_users
from tieredlog.security.authorizer.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from tieredlog.security.authorizer.authorizer import AclAuthorizer, AclError
from tieredlog.security.authorizer.file_store import ACL_FILE, AclFileError, FileAclStore
from tieredlog.security.authorizer.zk_store import decode_acls, decode_change, encode_acls, encode_change, resource_path

Op, Perm, RT, PT = AclOperation, AclPermissionType, ResourceType, PatternType
ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"


def binding(name: str, principal: str = ALICE, op: AclOperation = Op.READ, perm: AclPermissionType = Perm.ALLOW,
            rtype: ResourceType = RT.TOPIC, ptype: PatternType = PT.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, ptype), AccessControlEntry(principal, host, op, perm))


def match_all(rtype: ResourceType = RT.ANY, name: str | None = None, ptype: PatternType = PT.ANY,
              principal: str | None = None) -> AclBindingFilter:
    return AclBindingFilter(ResourcePatternFilter(rtype, name, ptype),
                            AccessControlEntryFilter(principal, None, Op.ANY, Perm.ANY))


def authorizer(tmp_path: Path, *bindings: AclBinding, super_users: tuple[str, ...] = (),
               allow_everyone: bool = False) -> AclAuthorizer:
    a = AclAuthorizer(FileAclStore(tmp_path), super_users, allow_everyone)
    a.start()
    assert a.create_acls(list(bindings)) == [None] * len(bindings)
    return a


def allowed(a: AclAuthorizer, op: AclOperation, name: str, principal: str = ALICE, rtype: ResourceType = RT.TOPIC,
            host: str = HOST) -> bool:
    return a.authorize(principal, host, op, rtype, name)


def test_literal_prefixed_and_wildcard_patterns(tmp_path):
    a = authorizer(tmp_path, binding("orders"), binding("logs-", ptype=PT.PREFIXED, op=Op.WRITE),
                   binding("*", principal=BOB, op=Op.DESCRIBE))
    assert allowed(a, Op.READ, "orders")
    assert not allowed(a, Op.READ, "orders-2")  # a literal is the exact name
    assert not allowed(a, Op.READ, "order")
    assert allowed(a, Op.WRITE, "logs-app") and allowed(a, Op.WRITE, "logs-")
    assert not allowed(a, Op.WRITE, "logs")  # shorter than the prefix
    assert allowed(a, Op.DESCRIBE, "anything", principal=BOB)
    assert not allowed(a, Op.READ, "anything", principal=BOB)
    # the resource type is part of the pattern
    assert not allowed(a, Op.READ, "orders", rtype=RT.GROUP)


def test_deny_wins_and_only_for_its_operation(tmp_path):
    a = authorizer(tmp_path, binding("t", op=Op.ALL), binding("t", op=Op.WRITE, perm=Perm.DENY),
                   binding("secret-", ptype=PT.PREFIXED, op=Op.READ),
                   binding("secret-", ptype=PT.PREFIXED, op=Op.ALL, perm=Perm.DENY, principal="User:*"))
    assert allowed(a, Op.READ, "t") and allowed(a, Op.DESCRIBE, "t")
    assert not allowed(a, Op.WRITE, "t")
    assert not allowed(a, Op.READ, "secret-x")  # a wildcard principal's DENY ALL covers alice's ALLOW


def test_implications_apply_to_allow_only(tmp_path):
    a = authorizer(tmp_path, binding("r", op=Op.READ), binding("w", op=Op.WRITE), binding("d", op=Op.DELETE),
                   binding("a", op=Op.ALTER), binding("c", op=Op.ALTER_CONFIGS), binding("x", op=Op.CREATE),
                   binding("n", op=Op.ALL), binding("n", op=Op.READ, perm=Perm.DENY))
    for name in "rwda":
        assert allowed(a, Op.DESCRIBE, name)
    assert not allowed(a, Op.DESCRIBE, "x")  # CREATE does not imply DESCRIBE
    assert allowed(a, Op.DESCRIBE_CONFIGS, "c") and not allowed(a, Op.DESCRIBE_CONFIGS, "r")
    assert not allowed(a, Op.WRITE, "r")  # READ implies DESCRIBE only
    # a DENY READ does not deny DESCRIBE
    assert allowed(a, Op.DESCRIBE, "n") and not allowed(a, Op.READ, "n")


def test_principal_and_host_matching(tmp_path):
    a = authorizer(tmp_path, binding("t", host=HOST), binding("u", principal="User:*"),
                   binding("v", principal="User:*", op=Op.READ), binding("v", host=OTHER_HOST, perm=Perm.DENY))
    assert allowed(a, Op.READ, "t") and not allowed(a, Op.READ, "t", host=OTHER_HOST)
    assert not allowed(a, Op.READ, "t", principal=BOB)
    assert allowed(a, Op.READ, "u", principal="User:anyone")
    assert allowed(a, Op.READ, "v") and not allowed(a, Op.READ, "v", host=OTHER_HOST)
    assert allowed(a, Op.READ, "v", principal=BOB, host=OTHER_HOST)  # alice's DENY is hers only


def test_no_acl_found_super_users(tmp_path):
    a = authorizer(tmp_path, binding("t"), super_users=("User:admin",))
    assert not allowed(a, Op.READ, "other")
    assert not allowed(a, Op.READ, "t", principal=BOB)  # ACLs exist for t: none matches bob
    assert allowed(a, Op.ALL, "anything", principal="User:admin")
    (tmp_path / "open").mkdir()
    b = authorizer(tmp_path / "open", binding("t"), allow_everyone=True)
    assert allowed(b, Op.WRITE, "other", principal=BOB)  # no ACL applies to it
    assert not allowed(b, Op.READ, "t", principal=BOB)  # one does: it decides


def test_authorize_by_resource_type(tmp_path):
    """KIP-679: WRITE on any topic lets an idempotent producer in."""
    a = authorizer(tmp_path, binding("a", op=Op.WRITE), binding("b-", ptype=PT.PREFIXED, op=Op.WRITE, principal=BOB),
                   binding("b-x", op=Op.WRITE, principal=BOB), binding("b", ptype=PT.PREFIXED, op=Op.WRITE,
                                                                       principal=BOB, perm=Perm.DENY))

    def by_type(principal: str) -> bool:
        return a.authorize_by_resource_type(principal, HOST, Op.WRITE, RT.TOPIC)

    assert by_type(ALICE)
    assert not by_type(BOB)  # every ALLOW of his is under a DENY prefix
    assert not by_type("User:carol")
    a.create_acls([binding("*", op=Op.WRITE, perm=Perm.DENY)])
    assert not by_type(ALICE)


def test_filters_match_as_kafkas(tmp_path):
    a = authorizer(tmp_path, binding("foo"), binding("fo", ptype=PT.PREFIXED), binding("*"),
                   binding("foo", rtype=RT.GROUP, principal=BOB))

    def names(f: AclBindingFilter) -> set[tuple[str, str]]:
        return {(b.pattern.name, b.pattern.pattern_type.name) for b in a.acls(f)}

    assert names(match_all(RT.TOPIC, "foo", PT.MATCH)) == {("foo", "LITERAL"), ("fo", "PREFIXED"), ("*", "LITERAL")}
    assert names(match_all(RT.TOPIC, "foo", PT.ANY)) == {("foo", "LITERAL")}
    assert names(match_all(RT.TOPIC, "fo", PT.PREFIXED)) == {("fo", "PREFIXED")}
    assert names(match_all(RT.TOPIC, None, PT.LITERAL)) == {("foo", "LITERAL"), ("*", "LITERAL")}
    assert names(match_all(principal=BOB)) == {("foo", "LITERAL")}
    assert len(a.acls(match_all())) == 4


def test_create_refuses_what_kafka_refuses(tmp_path):
    a = authorizer(tmp_path)
    bad = [binding("t", op=Op.ANY), binding("t", perm=Perm.ANY), binding("t", ptype=PT.MATCH), binding(""),
           binding("a/b"), binding("other", rtype=RT.CLUSTER), binding("t", principal="alice"),
           binding("t", rtype=RT.ANY), binding("t", op=Op.UNKNOWN)]
    results = a.create_acls(bad + [binding("kafka-cluster", rtype=RT.CLUSTER, op=Op.ALTER)])
    assert all(isinstance(r, AclError) for r in results[:-1]) and results[-1] is None
    assert len(a.acls(match_all())) == 1


def test_delete_filters(tmp_path):
    a = authorizer(tmp_path, binding("t"), binding("t", op=Op.WRITE), binding("t", principal=BOB),
                   binding("p", ptype=PT.PREFIXED))
    out = a.delete_acls([
        AclBindingFilter(ResourcePatternFilter(RT.TOPIC, "t", PT.LITERAL),
                         AccessControlEntryFilter(ALICE, None, Op.ANY, Perm.ANY)),
        match_all(RT.TOPIC),  # what the first took is reported under the first only
        AclBindingFilter(ResourcePatternFilter(RT.UNKNOWN, None, PT.ANY), AccessControlEntryFilter(None, None, Op.ANY, Perm.ANY)),
    ])
    assert isinstance(out[0], list) and isinstance(out[1], list)
    assert {(d.binding.entry.principal, d.binding.entry.operation) for d in out[0]} == {(ALICE, Op.READ), (ALICE, Op.WRITE)}
    assert {(d.binding.pattern.name, d.binding.entry.principal) for d in out[1]} == {("t", BOB), ("p", ALICE)}
    assert isinstance(out[2], AclError)
    assert a.acls(match_all()) == []
    assert not allowed(a, Op.READ, "t")


def test_file_store_survives_a_restart_and_refuses_a_broken_file(tmp_path):
    a = authorizer(tmp_path, binding("t"), binding("p-", ptype=PT.PREFIXED, op=Op.WRITE, perm=Perm.DENY))
    stored = json.loads((tmp_path / ACL_FILE).read_text())
    assert {r["resourceType"] for r in stored["resources"]} == {"Topic"}
    assert {a["permissionType"] for r in stored["resources"] for a in r["acls"]} == {"Allow", "Deny"}
    again = AclAuthorizer(FileAclStore(tmp_path))
    again.start()
    assert set(again.acls(match_all())) == set(a.acls(match_all()))
    (tmp_path / ACL_FILE).write_text("{not json")
    with pytest.raises(AclFileError):
        AclAuthorizer(FileAclStore(tmp_path)).start()


def test_zookeeper_layout_is_kafkas():
    literal = ResourcePattern(RT.TRANSACTIONAL_ID, "tx-1", PT.LITERAL)
    prefixed = ResourcePattern(RT.TOPIC, "logs-", PT.PREFIXED)
    assert resource_path(literal) == "/kafka-acl/TransactionalId/tx-1"
    assert resource_path(prefixed) == "/kafka-acl-extended/prefixed/Topic/logs-"
    entries = frozenset({AccessControlEntry(ALICE, "*", Op.IDEMPOTENT_WRITE, Perm.ALLOW)})
    data = encode_acls(entries)
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": ALICE, "permissionType": "Allow", "operation": "IdempotentWrite", "host": "*"}]}
    assert decode_acls(data) == entries
    assert encode_change(literal) == ("/kafka-acl-changes", b"TRANSACTIONAL_ID:tx-1")
    folder, change = encode_change(prefixed)
    assert folder == "/kafka-acl-extended-changes"
    assert json.loads(change) == {"version": 1, "resourceType": "TOPIC", "name": "logs-", "patternType": "PREFIXED"}
    assert decode_change(folder, change) == prefixed
    assert decode_change("/kafka-acl-changes", b"TRANSACTIONAL_ID:tx-1") == literal
    assert decode_change("/kafka-acl-changes", b"Topic:a:b") == ResourcePattern(RT.TOPIC, "a:b", PT.LITERAL)


def test_configs(tmp_path):
    assert create_authorizer("", None, False, tmp_path) is None
    for name in ("kafka.security.authorizer.AclAuthorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        assert isinstance(create_authorizer(name, "User:a; User:b", True, tmp_path), AclAuthorizer)
    assert parse_super_users("User:a; User:b ;") == {"User:a", "User:b"}
    with pytest.raises(BrokerConfigError, match="authorizer.class.name"):
        BrokerConfig.from_props({"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(BrokerConfigError, match="principal"):
        BrokerConfig.from_props({"super.users": "admin"})
    cfg = BrokerConfig.from_props({})
    assert cfg["authorizer.class.name"] == "" and cfg["allow.everyone.if.no.acl.found"] is False


# ---- the denial responses of REQUEST_RULES -------------------------------------------------------------

def _field_types(classes: list[type]) -> dict[str, list[type]]:
    import dataclasses
    import types
    import typing

    out: dict[str, list[type]] = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            tp = f.type
            if typing.get_origin(tp) in (types.UnionType, typing.Union):
                tp = next(a for a in typing.get_args(tp) if a is not type(None))
            if typing.get_origin(tp) is tuple:
                tp = typing.get_args(tp)[0]
            out.setdefault(f.name, []).append(tp)
    return out


def _unknown_keys(data: Any, classes: list[type], path: str = "") -> list[str]:
    if isinstance(data, list):
        return [k for item in data for k in _unknown_keys(item, classes, path)]
    if not isinstance(data, dict):
        return []
    fields = _field_types(classes)
    bad = [f"{path}.{k}" for k in data if k not in fields]
    for k, v in data.items():
        nested = [t for t in fields.get(k, ()) if isinstance(t, type) and hasattr(t, "__dataclass_fields__")]
        if nested:
            bad += _unknown_keys(v, nested, f"{path}.{k}")
    return bad


def test_every_request_rule_denies_with_its_apis_response_in_every_served_version():
    import dataclasses
    import types

    from kio.schema.errors import ErrorCode

    from tieredlog.protocol import api
    from tieredlog.protocol.codec import encode_response, response_class
    from tieredlog.protocol.schemas import load_request_schema
    from tieredlog.server.authorization import REQUEST_RULES
    from tieredlog.server.context import CLOSE_CONNECTION

    served = {**api.CORE_VERSIONS, **api.GROUP_VERSIONS, **api.TXN_VERSIONS, **api.INTER_BROKER_VERSIONS,
              **api.CLUSTER_ADMIN_VERSIONS, **api.ACL_VERSIONS}
    code = ErrorCode.cluster_authorization_failed
    for key, rule in REQUEST_RULES.items():
        lo, hi = served[key]
        versions = [v for v in range(max(lo, api.PRODUCE_REJECTED_BELOW if key == api.PRODUCE else lo), hi + 1)]
        classes = [response_class(key, v) for v in versions]
        for v in versions:
            body = kio_sample(load_request_schema(key, v))
            if key == api.PRODUCE:
                body = dataclasses.replace(body, acks=1)  # acks=0 closes the connection instead
            denied = rule.deny(types.SimpleNamespace(api_version=v), body, code)
            if denied is CLOSE_CONNECTION:
                continue
            assert _unknown_keys(denied, classes) == [], (api.api_name(key), v)
            assert code in _values(denied), (api.api_name(key), v, denied)
            encode_response(key, v, 1, denied)


def _values(data: Any) -> list[Any]:
    if isinstance(data, dict):
        return [x for v in data.values() for x in _values(v)]
    if isinstance(data, list):
        return [x for v in data for x in _values(v)]
    return [data]
