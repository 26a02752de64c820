"""The ZooKeeper test harness itself: a real server that answers, restarts, and is gone when stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from kazoo.client import KazooClient
from zk_harness import ZooKeeperNotAvailable, ZooKeeperServer, four_letter_word, zookeeper_classpath, zookeeper_factory  # noqa: F401

pytestmark = pytest.mark.integration


def test_server_answers_restarts_and_stops(zookeeper_factory: Callable[[], ZooKeeperServer]) -> None:
    server = zookeeper_factory()
    client = KazooClient(hosts=server.connect, timeout=5.0)
    client.start(timeout=10)
    try:
        client.create("/kept", b"x")
    finally:
        client.stop()
        client.close()

    server.restart()
    client = KazooClient(hosts=server.connect, timeout=5.0)
    client.start(timeout=10)
    try:
        assert client.get("/kept")[0] == b"x", "a restart keeps the data dir"
    finally:
        client.stop()
        client.close()

    server.restart(wipe=True)
    client = KazooClient(hosts=server.connect, timeout=5.0)
    client.start(timeout=10)
    try:
        assert client.exists("/kept") is None, "a wiped restart starts empty"
    finally:
        client.stop()
        client.close()

    proc = server.proc
    server.stop()
    assert proc is not None and proc.poll() is not None, "stop() leaves no JVM behind"
    assert four_letter_word(server.host, server.port, "ruok", timeout=0.5) == ""


def test_missing_jar_fails_with_a_clear_message(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperNotAvailable, match="ZooKeeper is not installed: .*zookeeper.jar is missing; install it"):
        zookeeper_classpath(tmp_path / "zookeeper.jar")
