"""A remote log metadata manager other than the topic-based one, loaded as Kafka loads it
(``remote.log.metadata.manager.class.name`` / ``.class.path``) and configured with what Kafka's
RemoteLogManager hands it: the metadata listener as ``remote.log.metadata.common.client.*``, every
``rlmm.config.*`` property with the prefix stripped, ``broker.id``, ``log.dir``, ``cluster.id``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import member
from helpers import wait_for
from tiered_broker_harness import FAST, consume, create, list_offset, produce
from zk_harness import zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import METADATA

pytestmark = pytest.mark.integration

PLUGINS = Path(__file__).resolve().parents[1] / "harness" / "rsm_plugins"


def test_configured_rlmm_class_is_loaded_configured_and_used_for_tiering(
        broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    record = tmp_path / "rlmm"
    record.mkdir()
    b = broker_factory({**FAST,
                        "remote.log.metadata.manager.class.name": "recording_rlmm:RecordingMetadataManager",
                        "remote.log.metadata.manager.class.path": str(PLUGINS),
                        "rlmm.config.record.dir": str(record),
                        "rlmm.config.remote.log.metadata.common.client.request.timeout.ms": "7000",
                        "rlmm.config.remote.log.metadata.producer.acks": "all",
                        "rlmm.config.remote.log.metadata.consumer.fetch.max.wait.ms": "100"})
    configured = json.loads((record / "configure.json").read_text())
    assert configured.pop("cluster.id")
    assert configured == {
        "remote.log.metadata.common.client.bootstrap.servers": b.bootstrap,
        "remote.log.metadata.common.client.security.protocol": "PLAINTEXT",
        "record.dir": str(record),
        "remote.log.metadata.topic.num.partitions": "3",
        "remote.log.metadata.common.client.request.timeout.ms": "7000",
        "remote.log.metadata.producer.acks": "all",
        "remote.log.metadata.consumer.fetch.max.wait.ms": "100",
        "broker.id": "0",
        "log.dir": str(b.data_dir),
    }, configured

    create(b.bootstrap, "through-plugin")
    produce(b.bootstrap, "through-plugin", 0, 1500)
    local_start = wait_for(lambda: list_offset(b.bootstrap, "through-plugin", -4), what="segments tiered")
    states = (record / "states").read_text().split()
    assert "COPY_SEGMENT_STARTED" in states and "COPY_SEGMENT_FINISHED" in states, states
    got = consume(b.bootstrap, "through-plugin", 0, local_start)
    assert [m.offset() for m in got[:local_start]] == list(range(local_start)), "read back from the remote tier through the plugin"
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(METADATA, {"topics": [{"name": "__remote_log_metadata"}], "allow_auto_topic_creation": False})
    assert r.topics[0].error_code == 3, "the topic-based manager's topic is never created"


def test_cluster_member_runs_the_configured_rlmm(broker_factory: Callable[..., BrokerProcess], tmp_path: Path,
                                                zk_connect: str) -> None:  # noqa: F811
    record = tmp_path / "rlmm"
    record.mkdir()
    b = broker_factory(member(zk_connect, 1, {
        **FAST, "remote.log.storage.system.enable": "true",
        "remote.log.metadata.manager.class.name": "recording_rlmm:RecordingMetadataManager",
        "remote.log.metadata.manager.class.path": str(PLUGINS), "rlmm.config.record.dir": str(record)}))
    configured = json.loads((record / "configure.json").read_text())
    assert configured["broker.id"] == "1" and configured["cluster.id"]
    assert configured["remote.log.metadata.common.client.bootstrap.servers"] == b.bootstrap
    create(b.bootstrap, "clustered")
    produce(b.bootstrap, "clustered", 0, 1500)
    wait_for(lambda: list_offset(b.bootstrap, "clustered", -4), what="segments tiered")
    assert "COPY_SEGMENT_FINISHED" in (record / "states").read_text().split()


def test_unknown_rlmm_class_stops_start_up_with_one_line(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory({"remote.log.metadata.manager.class.name": "no_such_rlmm_module:Manager"}, start=False)
    with pytest.raises(RuntimeError, match="broker exited with 1"):
        b.start()
    log = b.log_text()
    lines = [line for line in log.splitlines() if "no_such_rlmm_module" in line]
    assert len(lines) == 1 and lines[0].endswith(
        "cannot start: cannot load remote log metadata manager 'no_such_rlmm_module:Manager': "
        "ModuleNotFoundError: No module named 'no_such_rlmm_module'"), log
    assert "Traceback" not in log, log
