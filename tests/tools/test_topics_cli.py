"""`tieredlog topics` against a real broker."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def _topics(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tieredlog.cli", "topics", "--bootstrap-server", broker.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def test_create_list_describe_alter_delete(broker):
    r = _topics(broker, "create", "--topic", "cli-a", "--partitions", "3", "--config", "retention.ms=1000")
    assert r.returncode == 0, r.stderr
    assert "cli-a" in _topics(broker, "list").stdout.split()
    d = _topics(broker, "describe", "--topic", "cli-a")
    assert d.returncode == 0, d.stderr
    assert "PartitionCount: 3" in d.stdout and "retention.ms=1000" in d.stdout
    assert d.stdout.count("\tPartition: ") == 3
    r = _topics(broker, "alter-config", "--topic", "cli-a", "--set", "segment.bytes=1048576", "--delete", "retention.ms")
    assert r.returncode == 0, r.stderr
    d = _topics(broker, "describe", "--topic", "cli-a").stdout
    assert "segment.bytes=1048576" in d and "retention.ms" not in d
    r = _topics(broker, "delete", "--topic", "cli-a")
    assert r.returncode == 0, r.stderr
    assert "cli-a" not in _topics(broker, "list").stdout.split()


def test_errors_exit_non_zero(broker):
    r = _topics(broker, "create", "--topic", "cli-b", "--replication-factor", "2")
    assert r.returncode == 1 and "INVALID_REPLICATION_FACTOR" in r.stderr.upper()
    r = _topics(broker, "alter-config", "--topic", "cli-missing", "--set", "retention.ms=1")
    assert r.returncode == 1
    r = _topics(broker, "delete", "--topic", "cli-missing")
    assert r.returncode == 1 and "UNKNOWN_TOPIC" in r.stderr.upper()
