"""BrokerConfig: Kafka names, defaults, synonyms, validation, and the CLI's start-up failure."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tieredlog.config import BrokerConfig, BrokerConfigError, read_properties


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
     "log.segment.bytes=1", "node.id=1", "remote.fetch.max.wait.ms=-5", "justakey"],
)
def test_invalid_values_raise(override):
    extra = ["broker.id=2"] if override == "node.id=1" else []
    with pytest.raises(BrokerConfigError):
        BrokerConfig.load(None, [override, *extra])


def test_cli_exits_non_zero_with_one_line_on_invalid_config(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "tieredlog.cli", "broker", "--override", "num.partitions=zero",
         "--override", f"log.dirs={tmp_path}"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "num.partitions" in lines[0], r.stderr
