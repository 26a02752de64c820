"""BrokerConfig: Kafka names, defaults, synonyms, validation, and the CLI's start-up failure."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tieredlog.config import BROKER_CONFIG_DEFS, BrokerConfig, BrokerConfigError, read_properties


def test_defaults_without_any_config():
    c = BrokerConfig.load()
    assert c.node_id == 0
    assert [(l.name, l.host, l.port) for l in c.listeners] == [("PLAINTEXT", "127.0.0.1", 9092)]
    assert [str(p) for p in c.log_dirs] == ["data"]
    assert c["remote.log.storage.system.enable"] is True
    assert c["remote.fetch.max.wait.ms"] == 500
    assert c["remote.log.reader.threads"] == 10
    assert c["remote.log.reader.max.pending.tasks"] == 100
    assert c["remote.log.manager.task.interval.ms"] == 30000
    assert c["remote.log.metadata.custom.metadata.max.bytes"] == 128
    assert c["remote.log.index.file.cache.total.size.bytes"] == 1073741824
    assert c["socket.request.max.bytes"] == 104857600


def test_properties_file_and_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("# comment\nbroker.id=7\nlog.dirs=/a,/b\nnum.partitions : 4\nlog.segment.bytes=2048\n")
    c = BrokerConfig.load(str(f), ["num.partitions=6", "advertised.listeners=PLAINTEXT://example:19092"])
    assert c.node_id == 7
    assert [str(p) for p in c.log_dirs] == ["/a", "/b"]
    assert c["num.partitions"] == 6
    assert c.advertised_listeners[0].host == "example" and c.advertised_listeners[0].port == 19092
    assert c.default_log_config().segment_bytes == 2048
    assert read_properties(f)["num.partitions"] == "4"


def test_broker_synonyms_produce_default_log_config():
    c = BrokerConfig.load(None, ["log.retention.hours=2", "log.flush.interval.messages=1", "message.max.bytes=5000",
                                 "log.roll.ms=60000", "log.local.retention.ms=1000"])
    lc = c.default_log_config()
    assert lc.retention_ms == 2 * 3_600_000
    assert lc.flush_messages == 1
    assert lc.max_message_bytes == 5000
    assert lc.segment_ms == 60000
    assert lc.local_retention_ms == 1000
    value, explicit = c.broker_value_for_topic_config("max.message.bytes")
    assert (value, explicit) == (5000, True)
    assert c.broker_value_for_topic_config("cleanup.policy") == ("delete", False)


def test_passthrough_prefixes_and_unknown_keys(caplog):
    c = BrokerConfig.load(None, ["rsm.config.dir=/tmp/x", "rlmm.config.a.b=1", "not.a.kafka.key=1"])
    assert c.plugin_configs("rsm.config.") == {"dir": "/tmp/x"}
    assert c.plugin_configs("rlmm.config.") == {"a.b": "1"}
    assert c.unknown == ("not.a.kafka.key",)
    assert "not.a.kafka.key" in caplog.text


@pytest.mark.parametrize(
    "override",
    ["num.partitions=0", "num.partitions=x", "auto.create.topics.enable=maybe", "listeners=nonsense",
     "log.segment.bytes=1", "node.id=1", "remote.fetch.max.wait.ms=-5", "remote.log.reader.read.ahead.max.bytes=-1",
     "justakey"],
)
def test_invalid_values_raise(override):
    extra = ["broker.id=2"] if override == "node.id=1" else []
    with pytest.raises(BrokerConfigError):
        BrokerConfig.load(None, [override, *extra])


@pytest.mark.integration
def test_cli_exits_non_zero_with_one_line_on_invalid_config(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "tieredlog.cli", "broker", "--override", "num.partitions=zero",
         "--override", f"log.dirs={tmp_path}"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "num.partitions" in lines[0], r.stderr


def test_recovery_threads_reach_the_log_manager(tmp_path):
    from tieredlog.server.broker import Broker

    c = BrokerConfig.load(None, [f"log.dir={tmp_path}", "num.recovery.threads.per.data.dir=3"])
    lm = Broker(c)._make_log_manager()
    try:
        assert lm.num_recovery_threads_per_data_dir == 3
    finally:
        lm.shutdown()


def test_group_coordinator_keys_are_known_with_kafka_defaults(caplog):
    from tieredlog.coordinator import GroupConfig

    c = BrokerConfig.load()
    assert (c["group.max.size"], c["offset.metadata.max.bytes"], c["offsets.topic.segment.bytes"]) == (
        2**31 - 1, 4096, 104857600)
    c = BrokerConfig.load(None, ["group.max.size=1", "offset.metadata.max.bytes=10", "offsets.topic.segment.bytes=2048"])
    assert c.unknown == () and "unknown broker config" not in caplog.text
    g = GroupConfig.from_properties(c)
    assert (g.max_size, g.offset_metadata_max_bytes, g.offsets_topic_segment_bytes) == (1, 10, 2048)
    with pytest.raises(BrokerConfigError, match="group.max.size"):
        BrokerConfig.load(None, ["group.max.size=0"])


def test_group_max_size_and_offset_metadata_limit_apply_on_a_real_broker(broker_factory):
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import CREATE_TOPICS, JOIN_GROUP, OFFSET_COMMIT

    b = broker_factory({"group.max.size": "1", "offset.metadata.max.bytes": "5",
                        "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"})
    with KafkaClient(b.bootstrap) as c:
        r = c.request(CREATE_TOPICS, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1}],
                                      "timeout": 10000}, version=4)
        assert r.topics[0].error_code.value == 0
        join = {"group_id": "g", "session_timeout": 6000, "rebalance_timeout": 6000, "member_id": "",
                "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
        first = c.request(JOIN_GROUP, join, version=1)
        assert first.error_code.value == 0
        second = c.request(JOIN_GROUP, join, version=1)
        assert second.error_code.value == 81  # GROUP_MAX_SIZE_REACHED
        commit = {"group_id": "standalone", "generation_id_or_member_epoch": -1, "member_id": "",
                  "topics": [{"name": "t", "partitions": [
                      {"partition_index": 0, "committed_offset": 0, "committed_metadata": "123456"}]}]}
        r = c.request(OFFSET_COMMIT, commit, version=2)
        assert r.topics[0].partitions[0].error_code.value == 12  # OFFSET_METADATA_TOO_LARGE


def test_the_rlm_config_defaults_are_the_registrys():
    from dataclasses import fields

    from tieredlog.rlm.config import _FIELDS, RemoteLogManagerConfig

    # the RLM does not import the registry, so its field defaults are written out: they must not drift
    defaults = {f.name: f.default for f in fields(RemoteLogManagerConfig)}
    assert {attr: defaults[attr] for attr in _FIELDS.values()} == \
        {attr: BROKER_CONFIG_DEFS[name].default for name, attr in _FIELDS.items()}
    # and a default broker config builds the same snapshot as no broker config at all
    cfg = BrokerConfig.from_props({})
    assert RemoteLogManagerConfig.from_broker_config(cfg) == RemoteLogManagerConfig(
        broker_id=cfg.node_id, log_dirs=tuple(str(d) for d in cfg.log_dirs))


def test_the_read_ahead_budget_reaches_the_rlm_config(tmp_path):
    from tieredlog.rlm.config import RemoteLogManagerConfig

    c = BrokerConfig.load(None, [f"log.dir={tmp_path}", "remote.log.reader.read.ahead.max.bytes=1073741824"])
    assert not c.unknown
    assert RemoteLogManagerConfig.from_broker_config(c).read_ahead_max_bytes == 1 << 30


def test_custom_plugin_prefixes_reach_rsm_and_rlmm(tmp_path, caplog):
    from tieredlog.rlm.config import RemoteLogManagerConfig
    from tieredlog.server.remote_tier import build_rsm

    c = BrokerConfig.load(None, [
        f"log.dir={tmp_path}", "remote.log.storage.manager.impl.prefix=my.rsm.",
        "remote.log.metadata.manager.impl.prefix=my.rlmm.", f"my.rsm.dir={tmp_path / 'tier'}",
        "my.rlmm.remote.log.metadata.topic.num.partitions=3", "rsm.config.dir=/not/used",
    ])
    assert "my.rsm.dir" not in c.unknown and "my.rlmm.remote.log.metadata.topic.num.partitions" not in c.unknown
    assert "unknown broker config my." not in caplog.text
    # the default prefix is no longer the RSM's: such a key is unknown, as in Kafka
    assert c.unknown == ("rsm.config.dir",)
    rcfg = RemoteLogManagerConfig.from_broker_config(c)
    assert rcfg.rsm_configs == {"dir": str(tmp_path / "tier")}
    assert rcfg.rlmm_configs == {"remote.log.metadata.topic.num.partitions": "3"}
    rsm = build_rsm(rcfg)
    assert rsm.root == tmp_path / "tier"
