"""`tieredlog <tool> ... | head`: when the reader of stdout goes away the tools end quietly, as Unix
tools do (no traceback, no misleading error, exit 141 = 128 + SIGPIPE)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tieredlog.records.record import build_batch


def run_with_closed_stdout(*args: str) -> subprocess.CompletedProcess:
    # the read end is closed before the tool starts: its first write to stdout fails with EPIPE
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "tieredlog.cli", *args], stdout=w, stderr=subprocess.PIPE,
                              timeout=120, check=False)
    finally:
        os.close(w)


@pytest.mark.integration
def test_dump_log_into_a_closed_pipe(tmp_path):
    seg = tmp_path / f"{0:020d}.log"
    seg.write_bytes(b"".join(bytes(build_batch([(b"k", b"v" * 50, [], 1_700_000_000_000 + i)])) for i in range(200)))
    res = run_with_closed_stdout("dump-log", "--print-data", str(seg))
    assert res.stderr.decode() == ""
    assert res.returncode == 141


@pytest.mark.integration
def test_remote_dump_metadata_into_a_closed_pipe(tmp_path):
    from rlmm_harness import build

    m, *_ = build(tmp_path)
    m.close()
    res = run_with_closed_stdout("remote", "dump-metadata", "--log-dir", str(tmp_path))
    assert res.stderr.decode() == ""
    assert res.returncode == 141
    res = run_with_closed_stdout("remote", "segments", "--topic", "topic0", "--log-dir", str(tmp_path))
    assert (res.stderr.decode(), res.returncode) == ("", 141)


@pytest.mark.integration
def test_topics_list_into_a_closed_pipe(broker):
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import CREATE_TOPICS

    with KafkaClient(broker.bootstrap) as c:
        c.request(CREATE_TOPICS, {"topics": [{"name": "piped", "num_partitions": 1, "replication_factor": 1}],
                                  "timeout": 10000})
    res = run_with_closed_stdout("topics", "--bootstrap-server", broker.bootstrap, "list")
    assert res.stderr.decode() == ""  # not "cannot reach ...: Broken pipe"
    assert res.returncode == 141
