"""Dynamic broker configs this broker does not act on, answered as Kafka's ZooKeeper-mode broker answers
them, on one broker of a real ZooKeeper cluster through confluent-kafka's AdminClient:

- a Kafka dynamic config not implemented here (``sasl.kerberos.min.time.before.relogin``) and a custom
  name (a plugin's) are accepted, stored in ``/config/brokers/<entity>``, described with their source
  (the custom one hidden, as Kafka hides a config of unknown type), kept over a restart, and named
  once in the log;
- what Kafka refuses stays refused: a known config that is not dynamic, a key store without a
  listener prefix, a per-broker SASL config at the cluster-wide default.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import start_cluster
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from dynamic_config_harness import alter_cluster_default, describe_synonyms
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient

pytestmark = pytest.mark.integration

KERBEROS = "sasl.kerberos.min.time.before.relogin"
PLUGIN = "acme.audit.sink.url"
LISTENER_KERBEROS = "listener.name.plaintext.sasl.kerberos.service.name"


def _set(admin: AdminClient, broker: str, configs: dict[str, str]) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    (future,) = admin.incremental_alter_configs([ConfigResource("BROKER", broker, incremental_configs=entries)]).values()
    future.result(30)


def _describe(admin: AdminClient, broker: str) -> dict[str, Any]:
    (future,) = admin.describe_configs([ConfigResource("BROKER", broker)]).values()
    return future.result(30)


def _stored(connect: str, entity: str) -> dict[str, str]:
    with ZkClient(connect) as zk:
        got = zk.get_data(f"/config/brokers/{entity}")
    return json.loads(got[0])["config"] if got else {}


def test_configs_kafka_stores_without_acting_on_them_are_stored_described_and_kept(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    b = start_cluster(broker_factory, zk_connect, n=1)[1]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})

    _set(admin, "1", {KERBEROS: "120000", PLUGIN: "https://audit", LISTENER_KERBEROS: "kafka"})
    assert alter_cluster_default(b.bootstrap, acme_audit_level=("SET", "full")) == ("none", None)
    assert _stored(zk_connect, "1") == {KERBEROS: "120000", PLUGIN: "https://audit", LISTENER_KERBEROS: "kafka"}
    assert _stored(zk_connect, "<default>") == {"acme.audit.level": "full"}

    def described() -> None:
        cfg = _describe(admin, "1")
        kerberos, plugin, level = cfg[KERBEROS], cfg[PLUGIN], cfg["acme.audit.level"]
        assert (kerberos.value, kerberos.source, kerberos.is_sensitive, kerberos.is_read_only) == \
            ("120000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False, False)
        # a name of no known type: Kafka never shows its value
        assert (plugin.value, plugin.source, plugin.is_sensitive, plugin.is_read_only) == \
            (None, ConfigSource.DYNAMIC_BROKER_CONFIG.value, True, True)
        assert (level.value, level.source) == (None, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert cfg[LISTENER_KERBEROS].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert describe_synonyms(b.bootstrap, 4, "1", KERBEROS) == [(KERBEROS, "120000", 2)]
        assert describe_synonyms(b.bootstrap, 4, "", "acme.audit.level") == [("acme.audit.level", None, 3)]

    described()
    # changed again: the warning is not repeated
    _set(admin, "1", {KERBEROS: "90000", PLUGIN: "https://audit", LISTENER_KERBEROS: "kafka"})
    assert _describe(admin, "1")[KERBEROS].value == "90000"
    _set(admin, "1", {KERBEROS: "120000", PLUGIN: "https://audit", LISTENER_KERBEROS: "kafka"})
    log = b.log_text()
    for name in (KERBEROS, PLUGIN, LISTENER_KERBEROS, "acme.audit.level"):
        assert log.count(f"dynamic broker config {name} is stored but not used") == 1, name

    # what Kafka refuses stays refused, and changes nothing: a known broker config that is not dynamic
    assert alter_cluster_default(b.bootstrap, name="1", inter_broker_protocol_version=("SET", "3.9")) == (
        "invalid_request", "Cannot update these configs dynamically: Set(inter.broker.protocol.version)")
    # key stores change per listener only
    code, message = alter_cluster_default(b.bootstrap, name="1", ssl_keystore_location=("SET", "/tmp/ks.p12"))
    assert code == "invalid_request" and "only per-listener using the listener prefix" in (message or "")
    # the listeners' SASL configs are per broker
    assert alter_cluster_default(b.bootstrap, sasl_kerberos_min_time_before_relogin=("SET", "1")) == (
        "invalid_request", "Cannot update these configs at default cluster level, broker id must be specified: "
        f"Set({KERBEROS})")
    assert _stored(zk_connect, "1") == {KERBEROS: "120000", PLUGIN: "https://audit", LISTENER_KERBEROS: "kafka"}
    assert _stored(zk_connect, "<default>") == {"acme.audit.level": "full"}

    b.restart()
    wait_until(lambda: KERBEROS in _describe(admin, "1"), timeout=30, message="the broker serves again")
    described()
