"""Authorization with real broker processes: ACLs created, described and deleted with confluent-kafka's
admin client, and producers, consumers and raw requests refused with Kafka's errors. Every client
here is User:ANONYMOUS (PLAINTEXT), which ACLs name like any other principal."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import (
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_TOPICS,
    DESCRIBE_ACLS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    DESCRIBE_LOG_DIRS,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LIST_GROUPS,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FETCH,
)
from tieredlog.security.authorizer import acl
from tieredlog.security.authorizer.file_store import FileAclStore

pytestmark = pytest.mark.integration

ANON = "User:ANONYMOUS"
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "num.partitions": "1",
              "remote.log.storage.system.enable": "false", "group.initial.rebalance.delay.ms": "0"}
TAF, GAF, CAF, TXN_AF = 29, 30, 31, 53
OMITTED = -(2**31)


def allow(restype: ResourceType, name: str, op: AclOperation, pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          principal: str = ANON, permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", op, permission)


def deny(restype: ResourceType, name: str, op: AclOperation,
         pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return allow(restype, name, op, pattern, permission=AclPermissionType.DENY)


def create(admin: AdminClient, *bindings: AclBinding) -> None:
    for f in admin.create_acls(list(bindings)).values():
        f.result(15)


def produce(bootstrap: str, topic: str, **config: Any) -> KafkaError | None:
    """The delivery error of one record (None: delivered)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 10000, **config})
    errors: list[KafkaError | None] = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors, "no delivery report"
    return errors[0]


def consume_error(bootstrap: str, topic: str, group: str) -> KafkaError | None:
    """The first error a subscribed consumer of ``group`` gets (None when it reads a record)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            return m.error()
        raise AssertionError(f"consumer of {group} got neither a record nor an error")
    finally:
        c.close()


def test_acls_through_the_admin_client_decide_what_producers_and_consumers_may_do(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    # no ACL on a resource: allowed, so the cluster stays open to this admin client
    b = broker_factory({**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("orders", "logs-app", "logsx")]).values():
        f.result(15)
    assert produce(b.bootstrap, "orders") is None
    create(admin,
           allow(ResourceType.TOPIC, "orders", AclOperation.ALL),
           deny(ResourceType.TOPIC, "orders", AclOperation.WRITE),  # DENY wins over the ALLOW ALL
           deny(ResourceType.TOPIC, "logs-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
           allow(ResourceType.GROUP, "bad-group", AclOperation.DESCRIBE),
           deny(ResourceType.GROUP, "bad-group", AclOperation.READ))

    err = produce(b.bootstrap, "orders")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    err = produce(b.bootstrap, "logs-app")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    assert produce(b.bootstrap, "logsx") is None  # not under the prefix
    # READ on orders is still allowed; READ on the group is denied: JoinGroup says so
    err = consume_error(b.bootstrap, "orders", "bad-group")
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    assert consume_error(b.bootstrap, "orders", "good-group") is None

    def described(f: AclBindingFilter) -> set[tuple[str, str, str]]:
        return {(a.name, a.resource_pattern_type.name, a.permission_type.name)
                for a in admin.describe_acls(f).result(15)}

    anything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                AclPermissionType.ANY)
    assert len(admin.describe_acls(anything).result(15)) == 5
    # MATCH: what applies to a topic named logs-app
    assert described(AclBindingFilter(ResourceType.TOPIC, "logs-app", ResourcePatternType.MATCH, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)) == {("logs-", "PREFIXED", "DENY")}
    assert described(AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.LITERAL, None, None,
                                      AclOperation.ANY, AclPermissionType.DENY)) == {("orders", "LITERAL", "DENY")}

    # deleting the DENY lets the producer in again
    denies = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, ANON, None, AclOperation.WRITE,
                              AclPermissionType.DENY)
    deleted = admin.delete_acls([denies])[denies].result(15)
    assert {(a.name, a.resource_pattern_type.name) for a in deleted} == {("orders", "LITERAL"), ("logs-", "PREFIXED")}
    assert produce(b.bootstrap, "orders") is None
    assert produce(b.bootstrap, "logs-app") is None


def test_without_an_acl_nothing_is_allowed_super_users_are_and_acls_survive_a_restart(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory({**AUTHORIZER, "super.users": f"User:admin;{ANON}"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("visible", "hidden", "w-1")]).values():
        f.result(15)
    create(admin,
           allow(ResourceType.TOPIC, "visible", AclOperation.DESCRIBE),
           allow(ResourceType.TOPIC, "w-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
           allow(ResourceType.TOPIC, "w-", AclOperation.READ, ResourcePatternType.PREFIXED),
           allow(ResourceType.GROUP, "readers", AclOperation.READ))
    assert produce(b.bootstrap, "hidden") is None  # a super user needs no ACL

    b.overrides.pop("super.users")
    b.restart()
    # the ACLs were kept (tieredlog-acls.json in the log dir); User:ANONYMOUS is no super user now
    with KafkaClient(b.bootstrap) as c:
        md = c.request(METADATA, {"topics": None}, version=12)
        assert sorted(t.name for t in md.topics) == ["visible", "w-1"]  # WRITE implies DESCRIBE
        md = c.request(METADATA, {"topics": [{"name": "hidden"}, {"name": "nope"}, {"name": "visible"}],
                                  "allow_auto_topic_creation": True}, version=12)
        # neither a refused topic nor a missing one is disclosed, and nothing is auto-created
        assert [(t.name, t.error_code.value) for t in md.topics] == [("visible", 0), ("hidden", TAF), ("nope", TAF)]
        assert b.data_dir.joinpath("nope-0").exists() is False
    err = produce(b.bootstrap, "visible")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    # an idempotent producer may start: WRITE on some topic stands for IDEMPOTENT_WRITE (KIP-679)
    assert produce(b.bootstrap, "w-1", **{"enable.idempotence": True}) is None
    assert consume_error(b.bootstrap, "w-1", "readers") is None
    err = consume_error(b.bootstrap, "w-1", "strangers")
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    # no ACL on the cluster: creating ACLs is refused (librdkafka drops DescribeAcls' error code, so the
    # refusal to describe them is checked with a raw request below)
    with pytest.raises(KafkaException) as exc_info:
        create(admin, allow(ResourceType.TOPIC, "hidden", AclOperation.READ))
    assert exc_info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def _seed(data_dir: Path, *bindings: acl.AclBinding) -> None:
    """ACLs written where the broker will read them at start (its first log dir)."""
    data_dir.mkdir(parents=True)
    store = FileAclStore(data_dir)
    by_pattern: dict[acl.ResourcePattern, set[acl.AccessControlEntry]] = {}
    for bd in bindings:
        by_pattern.setdefault(bd.pattern, set()).add(bd.entry)
    store.update({p: (lambda cur, es=frozenset(es): cur | es) for p, es in by_pattern.items()}, {})


def _anon(rtype: acl.ResourceType, name: str, op: acl.AclOperation,
          ptype: acl.PatternType = acl.PatternType.LITERAL) -> acl.AclBinding:
    return acl.AclBinding(acl.ResourcePattern(rtype, name, ptype),
                          acl.AccessControlEntry(ANON, "*", op, acl.AclPermissionType.ALLOW))


def test_every_api_answers_kafkas_authorization_errors(broker_factory: Callable[..., BrokerProcess],
                                                      tmp_path: Path) -> None:
    T, G, C = acl.ResourceType.TOPIC, acl.ResourceType.GROUP, acl.ResourceType.CLUSTER
    Op = acl.AclOperation
    _seed(tmp_path / "authz", _anon(C, acl.CLUSTER_NAME, Op.CREATE), _anon(T, "seen", Op.DESCRIBE),
          _anon(G, "g-ok", Op.READ))
    b = broker_factory(AUTHORIZER, data_dir=tmp_path / "authz")
    with KafkaClient(b.bootstrap) as c:
        # CREATE on the cluster creates any topic; without DESCRIBE_CONFIGS the answer hides the configs
        ct = c.request(CREATE_TOPICS, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1,
                                                   "assignments": [], "configs": []} for n in ("seen", "hidden")],
                                       "timeout": 15000, "validate_only": False}, version=7)
        assert [(t.error_code.value, t.topic_config_error_code, t.num_partitions) for t in ct.topics] == [
            (0, TAF, -1), (0, TAF, -1)]
        md = c.request(METADATA, {"topics": [{"name": "seen"}], "include_topic_authorized_operations": True,
                                  "include_cluster_authorized_operations": True,
                                  "allow_auto_topic_creation": False}, version=8)
        assert md.topics[0].topic_authorized_operations == 1 << Op.DESCRIBE
        assert md.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
        dc = c.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True}, version=1)
        assert dc.cluster_authorized_operations == 0
        lo = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": n, "partitions": [{"partition_index": 0, "timestamp": -1}]} for n in ("seen", "hidden")]},
            version=7)
        assert [t.partitions[0].error_code.value for t in lo.topics] == [0, TAF]
        dt = c.request(DELETE_TOPICS, {"topic_names": ["seen"], "timeout": 15000}, version=5)
        assert dt.responses[0].error_code.value == TAF
        cp = c.request(CREATE_PARTITIONS, {"topics": [{"name": "seen", "count": 2, "assignments": None}],
                                           "timeout": 15000, "validate_only": False}, version=3)
        assert cp.results[0].error_code.value == TAF
        dcf = c.request(DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": "seen", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "", "configuration_keys": None}]}, version=4)
        assert [r.error_code.value for r in dcf.results] == [TAF, CAF]
        # groups
        fc = c.request(FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["g-ok", "g-no"]}, version=4)
        assert [x.error_code.value for x in fc.coordinators] == [0, GAF]
        jg = c.request(JOIN_GROUP, {"group_id": "g-no", "session_timeout": 6000, "rebalance_timeout": 6000,
                                    "member_id": "", "protocol_type": "consumer",
                                    "protocols": [{"name": "range", "metadata": b""}]}, version=7)
        assert (jg.error_code.value, jg.generation_id, jg.protocol_name) == (GAF, -1, None)
        dg = c.request(DESCRIBE_GROUPS, {"groups": ["g-ok", "g-no"], "include_authorized_operations": True},
                       version=5)
        assert [(g.error_code.value, g.authorized_operations) for g in dg.groups] == [
            (0, (1 << Op.READ) | (1 << Op.DESCRIBE)), (GAF, OMITTED)]
        of = c.request(OFFSET_FETCH, {"group_id": "g-no", "topics": None}, version=7)
        assert of.error_code.value == GAF
        assert c.request(LIST_GROUPS, {}, version=4).error_code.value == 0
        # transactions and idempotence
        ip = c.request(INIT_PRODUCER_ID, {"transactional_id": "tx", "transaction_timeout": 60000}, version=4)
        assert ip.error_code.value == TXN_AF
        ip = c.request(INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60000}, version=4)
        assert ip.error_code.value == CAF  # neither IDEMPOTENT_WRITE nor WRITE on any topic
        et = c.request(END_TXN, {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0,
                                 "committed": True}, version=3)
        assert et.error_code.value == TXN_AF
        # the cluster's own
        assert c.request(DESCRIBE_LOG_DIRS, {"topics": None}, version=4).error_code.value == CAF
        da = c.request(DESCRIBE_ACLS, {"resource_type_filter": 1, "resource_name_filter": None,
                                       "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                       "operation": 1, "permission_type": 1}, version=3)
        assert da.error_code.value == CAF
        ca = c.request(CREATE_ACLS, {"creations": [{"resource_type": 2, "resource_name": "x",
                                                    "resource_pattern_type": 3, "principal": ANON, "host": "*",
                                                    "operation": 3, "permission_type": 3}]}, version=3)
        assert ca.results[0].error_code.value == CAF


def test_acl_apis_without_an_authorizer_say_security_disabled(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory({"remote.log.storage.system.enable": "false"})
    with KafkaClient(b.bootstrap) as c:
        any_filter = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                      "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
        assert c.request(DESCRIBE_ACLS, any_filter, version=3).error_code.value == 54
        ca = c.request(CREATE_ACLS, {"creations": [{"resource_type": 2, "resource_name": "x",
                                                    "resource_pattern_type": 3, "principal": ANON, "host": "*",
                                                    "operation": 3, "permission_type": 3}]}, version=1)
        assert ca.results[0].error_code.value == 54
        dl = c.request(DELETE_ACLS, {"filters": [any_filter]}, version=2)
        assert dl.filter_results[0].error_code.value == 54
