"""kcat (librdkafka's CLI, from Debian) lists metadata, produces and consumes."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytestmark = pytest.mark.integration


def _kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.fail("kcat is not installed: run `make system-deps` (apt-get install -y kcat)")
    return path


def test_kcat_metadata_produce_consume(broker):
    kcat = _kcat()
    lines = [f"key{i}:value number {i}" for i in range(50)]
    r = subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", "kc", "-K:", "-p", "0", "-z", "snappy"],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([kcat, "-b", broker.bootstrap, "-L", "-t", "kc"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert 'topic "kc" with 1 partitions' in r.stdout
    assert "leader 0" in r.stdout
    r = subprocess.run([kcat, "-b", broker.bootstrap, "-C", "-t", "kc", "-p", "0", "-o", "beginning", "-e",
                        "-f", "%k:%s:%o\n"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"key{i}:value number {i}:{i}" for i in range(50)]
