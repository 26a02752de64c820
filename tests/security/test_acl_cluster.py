"""ACLs in a ZooKeeper cluster: created through one broker, in Kafka's /kafka-acl layout, and applied by
the other once its change notification arrives."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import start_cluster
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import CREATE_ACLS, CREATE_TOPICS, DELETE_ACLS, METADATA
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
from tieredlog.security.authorizer.authorizer import AclAuthorizer
from tieredlog.security.authorizer.zk_store import ZkAclStore

pytestmark = pytest.mark.integration

ANON = "User:ANONYMOUS"
TAF = 29
DENY_DESCRIBE_T = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": ANON,
                   "host": "*", "operation": 8, "permission_type": 2}
ANYTHING = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
                            AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY))


def _topic_error(b: BrokerProcess, topic: str) -> int:
    with KafkaClient(b.bootstrap) as c:
        md = c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, version=12)
        return int(md.topics[0].error_code.value)


def test_an_acl_created_through_one_broker_applies_on_the_other(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    # no ACL on a resource allows it: the brokers' own requests to each other stay allowed
    brokers = start_cluster(broker_factory, zk_connect, n=2, overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "allow.everyone.if.no.acl.found": "true"})
    b1, b2 = brokers[1], brokers[2]
    with KafkaClient(b1.bootstrap) as c:
        ct = c.request(CREATE_TOPICS, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 2,
                                                   "assignments": [], "configs": []}],
                                       "timeout": 15000, "validate_only": False}, version=7)
        assert ct.topics[0].error_code.value == 0
    wait_until(lambda: _topic_error(b2, "t") == 0, timeout=20, message="broker 2 knows topic t")

    with KafkaClient(b1.bootstrap) as c:
        ca = c.request(CREATE_ACLS, {"creations": [DENY_DESCRIBE_T]}, version=3)
        assert ca.results[0].error_code.value == 0
    assert _topic_error(b1, "t") == TAF  # at once on the broker that wrote it
    wait_until(lambda: _topic_error(b2, "t") == TAF, timeout=20, message="broker 2 applies the ACL")

    with ZkClient(zk_connect) as zk:
        got = zk.get_data("/kafka-acl/Topic/t")
        assert got is not None
        assert json.loads(got[0]) == {"version": 1, "acls": [
            {"principal": ANON, "permissionType": "Deny", "operation": "Describe", "host": "*"}]}
        changes = zk.get_children("/kafka-acl-changes")
        assert [zk.get_data(f"/kafka-acl-changes/{n}")[0] for n in changes] == [b"TOPIC:t"]  # type: ignore[index]

    # deleted through the other broker: gone on both, and so is the znode
    with KafkaClient(b2.bootstrap) as c:
        dl = c.request(DELETE_ACLS, {"filters": [{
            "resource_type_filter": 2, "resource_name_filter": "t", "pattern_type_filter": 3,
            "principal_filter": ANON, "host_filter": None, "operation": 1, "permission_type": 1}]}, version=3)
        assert [a.operation for a in dl.filter_results[0].matching_acls] == [8]
    wait_until(lambda: _topic_error(b1, "t") == 0, timeout=20, message="broker 1 drops the ACL")
    with ZkClient(zk_connect) as zk:
        assert zk.get_data("/kafka-acl/Topic/t") is None


def test_two_authorizers_on_one_zookeeper_keep_both_writes_and_see_each_others(zk_connect: str) -> None:  # noqa: F811
    """Versioned writes: ACLs added to one resource at once by two brokers are all kept; each broker's
    cache follows the other's changes through the notifications."""

    def binding(principal: str, ptype: PatternType = PatternType.LITERAL) -> AclBinding:
        return AclBinding(ResourcePattern(ResourceType.GROUP, "g", ptype),
                          AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW))

    with ZkClient(zk_connect) as zk1, ZkClient(zk_connect) as zk2:
        a1, a2 = AclAuthorizer(ZkAclStore(zk1, "1")), AclAuthorizer(ZkAclStore(zk2, "2"))
        a1.start()
        a2.start()
        try:
            with ThreadPoolExecutor(8) as pool:
                results = list(pool.map(lambda i: (a1 if i % 2 else a2).create_acls([binding(f"User:u{i}")]),
                                        range(8)))
            assert results == [[None]] * 8
            a1.create_acls([binding("User:p", PatternType.PREFIXED)])
            for a in (a1, a2):
                wait_until(lambda a=a: len(a.acls(ANYTHING)) == 9, timeout=10, message="both caches have all")
                assert a.authorize("User:u3", "1.2.3.4", AclOperation.DESCRIBE, ResourceType.GROUP, "g")
                assert a.authorize("User:p", "1.2.3.4", AclOperation.READ, ResourceType.GROUP, "g-x")
            got = zk1.get_data("/kafka-acl/Group/g")
            assert got is not None and len(json.loads(got[0])["acls"]) == 8
            assert zk1.get_data("/kafka-acl-extended/prefixed/Group/g") is not None
            # a restarted broker loads everything from ZooKeeper
            a3 = AclAuthorizer(ZkAclStore(zk1, "3"))
            a3.start()
            assert len(a3.acls(ANYTHING)) == 9
            a3.close()
        finally:
            a1.close()
            a2.close()
