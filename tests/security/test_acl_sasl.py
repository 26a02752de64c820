"""ACLs naming real users: SASL/PLAIN users on a SASL_PLAINTEXT listener, a super user that manages the
ACLs with confluent-kafka's admin client, a user allowed a prefix of topics and a group, and users and
User:ANONYMOUS (the PLAINTEXT listener) refused."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, KafkaError, Producer
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
from helpers import free_port

pytestmark = pytest.mark.integration

PLAIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'username="admin" password="admin-pw" user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";')


def conf(address: str, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-pw"}


def produce(config: dict[str, Any], topic: str) -> KafkaError | None:
    p = Producer({**config, "linger.ms": 0, "message.timeout.ms": 10000})
    errors: list[KafkaError | None] = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors, "no delivery report"
    return errors[0]


def test_acls_for_sasl_users(broker_factory: Callable[..., BrokerProcess]) -> None:
    sasl_port = free_port()
    b = broker_factory(start=False)
    b.overrides = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},PLAINTEXT://127.0.0.1:{b.port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "remote.log.storage.system.enable": "false", "num.partitions": "1", "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    b.start()
    sasl = f"127.0.0.1:{sasl_port}"
    admin = AdminClient(conf(sasl, "admin"))
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("alice-orders", "shared")]).values():
        f.result(15)
    acls = [AclBinding(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*", op,
                       AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
    acls.append(AclBinding(ResourceType.GROUP, "alice-group", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW))
    for f in admin.create_acls(acls).values():
        f.result(15)
    alices = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice",
                                                  None, AclOperation.ANY, AclPermissionType.ANY)).result(15)
    assert len(alices) == 3

    alice = conf(sasl, "alice")
    assert produce(alice, "alice-orders") is None
    c = Consumer({**alice, "group.id": "alice-group", "auto.offset.reset": "earliest"})
    c.subscribe(["alice-orders"])
    try:
        got = None
        for _ in range(40):
            got = c.poll(0.5)
            if got is not None:
                break
        assert got is not None and got.error() is None and got.value() == b"v"
    finally:
        c.close()
    # alice sees her topics only; bob and User:ANONYMOUS are refused
    md = AdminClient(alice).list_topics(timeout=15)
    assert sorted(md.topics) == ["alice-orders"]
    for refused, topic in ((alice, "shared"), (conf(sasl, "bob"), "alice-orders"),
                           ({"bootstrap.servers": b.bootstrap}, "alice-orders")):
        err = produce(refused, topic)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (refused, err)
