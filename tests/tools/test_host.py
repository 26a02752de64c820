"""`tieredlog host`: two brokers of one host started as one service on a real ZooKeeper, both
registered with the host as their rack, a replicated topic served, all stopped by one SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from broker_harness import REPO
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import consecutive_free_ports
from zk_harness import ZooKeeperServer, wait_until, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.tools.cluster_admin import describe_cluster

pytestmark = pytest.mark.integration


def test_host_runs_brokers_on_one_rack_serves_rf2_and_stops_them_all(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:  # noqa: F811
    base_port = consecutive_free_ports(2)
    err_log = open(tmp_path / "host.stderr", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tieredlog.cli", "host", "--brokers", "2", "--first-broker-id", "11",
         "--zookeeper-connect", f"{zookeeper.connect}/host", "--base-port", str(base_port),
         "--dir", str(tmp_path / "host"), "--rack", "host-a", "--listen-host", "127.0.0.1",
         "--advertised-host", "127.0.0.1", "--override", "offsets.topic.replication.factor=2"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=err_log, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(lambda: any("registered" in x for x in lines) or proc.poll() is not None, timeout=120,
                   message="the host's brokers register")
        err_log.seek(0)
        assert proc.poll() is None, f"host exited with {proc.returncode}: {err_log.read()}"
        pids = [int(m.group(1)) for x in lines if (m := re.match(r"broker \d+\s+pid (\d+)", x))]
        assert len(pids) == 2, lines
        bootstrap = f"127.0.0.1:{base_port},127.0.0.1:{base_port + 1}"
        with KafkaClient(f"127.0.0.1:{base_port + 1}", timeout=10) as c:
            view = describe_cluster(c, [])
        assert {i: (n.port, n.rack) for i, n in view.brokers.items()} == {
            11: (base_port, "host-a"), 12: (base_port + 1, "host-a")}

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("h", 2, 2)])["h"].result(60)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        errors: list[object] = []
        for i in range(50):
            p.produce("h", b"v%d" % i, on_delivery=lambda err, _m: errors.append(err) if err else None)
        assert p.flush(60) == 0 and not errors, errors
        with KafkaClient(bootstrap.split(",")[0], timeout=10) as c:
            parts = describe_cluster(c, ["h"]).topics["h"].partitions
        assert len(parts) == 2
        assert all(sorted(part.replicas) == [11, 12] and sorted(part.isr) == [11, 12] for part in parts)

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=180) == 0  # a hang guard: the brokers' orderly shutdowns
        reader.join(10)
        assert lines[-1] == "stopped\n", lines
        wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), timeout=30,
                   message="every broker the host started is gone")
    finally:
        if proc.poll() is None:
            proc.kill()  # its brokers die with it (PR_SET_PDEATHSIG)
            proc.wait()
        err_log.close()
