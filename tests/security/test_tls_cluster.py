"""Two brokers on a real ZooKeeper whose inter-broker listener is SSL with mutual TLS required: the
controller's LeaderAndIsr and UpdateMetadata, the follower's fetches and the ISR changes all go over TLS,
each broker presenting its certificate as a client. Clients use the PLAINTEXT listener."""

from __future__ import annotations

from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, consume_all, member, partition_state
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import free_port
from tls_certs import KEY_PASSWORD, Pki, tls_certs  # noqa: F401
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient

pytestmark = pytest.mark.integration


def test_replication_over_an_ssl_inter_broker_listener(broker_factory: Callable[..., BrokerProcess],
                                                       zk_connect: str, tls_certs: Pki) -> None:  # noqa: F811
    tls = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.internal.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_certs.broker_encrypted_pem),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_certs.ca_pem),
    }
    brokers = {i: broker_factory(member(zk_connect, i, tls), extra_listeners={"INTERNAL": free_port()})
               for i in (1, 2)}
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == [1, 2], timeout=30, message="both brokers registered")
        wait_until(lambda: zk.get_controller_id() is not None, timeout=30, message="a controller elected")
        (info,) = [zk.get_broker(1)]
        assert info is not None and {(e.listener_name, e.security_protocol) for e in info.endpoints} == {
            ("PLAINTEXT", "PLAINTEXT"), ("INTERNAL", "SSL")}

    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("tls-rep", 1, 2, config={"min.insync.replicas": "2"})])["tls-rep"].result(30)
    # a leader (the controller reached both brokers over TLS) and a full ISR (the follower fetched over TLS)
    wait_until(lambda: (s := partition_state(brokers[1], "tls-rep")) and s[0][0] in brokers and len(s[0][3]) == 2,
               timeout=30, message="a leader and a full ISR")
    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all", "linger.ms": 2})
    for i in range(300):
        p.produce("tls-rep", value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    ((leader, _, _, isr),) = partition_state(brokers[1], "tls-rep")
    assert isr == [1, 2]
    # the follower has every record: with the leader gone, the new leader serves them all
    brokers[leader].kill9()
    survivor = brokers[3 - leader]
    wait_until(lambda: partition_state(survivor, "tls-rep")[0][0] == 3 - leader, timeout=30,
               message="the follower elected leader")
    got = consume_all(survivor.bootstrap, "tls-rep", 300)
    assert [m.value() for m in got] == [b"v%d" % i for i in range(300)]
    for b in brokers.values():
        assert "Failed authentication" not in b.log_text(), b.log_text()
        assert KEY_PASSWORD not in b.log_text()
