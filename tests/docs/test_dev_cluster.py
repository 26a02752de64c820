"""README's failover walkthrough, done as a user does it: `tieredlog dev-cluster` as a subprocess, its
control commands as subprocesses, the cluster tools, and kcat reading a tiered RF 3 topic from offset 0
after the leader was killed, after its restart and a preferred election, and after a reassignment to a
broker that never held the partition. Then the same failover with `--remote s3`, and the cluster run
again on the same dir."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest
from broker_harness import REPO
from helpers import free_port, wait_for

from tieredlog import cli
from tieredlog.tools import dev_cluster_s3

pytestmark = pytest.mark.integration

TOPIC = "demo"
RECORDS = 1500
# one segment per ~5 kcat batches of 100 records: the first segments roll, tier and go locally
SEGMENT_BYTES = 10240
FAST = ["--override", "remote.log.manager.task.interval.ms=300", "--override", "log.retention.check.interval.ms=300",
        "--override", "rlmm.config.remote.log.metadata.topic.num.partitions=2",
        # the preferred election below is the tool's, not the controller's periodic one
        "--override", "auto.leader.rebalance.enable=false"]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_run(n: int) -> int:
    """The first of ``n`` consecutive free ports, below the kernel's ephemeral range: the cluster binds
    them seconds later, and a port from that range can meanwhile be given to any outgoing connection
    (seen in parallel runs: a broker's port taken before it bound)."""
    top = _ephemeral_low() - n
    for _ in range(200):
        base = random.randrange(max(top - 12000, 1024), top)
        if all(_bindable(base + i) for i in range(n)):
            return base
    raise AssertionError(f"no {n} consecutive free ports")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class DevClusterProcess:
    """`tieredlog dev-cluster` started as a user starts it, and its control commands."""

    def __init__(self, tmp_path: Path, brokers: int, *extra: str) -> None:
        self.dir = tmp_path / "cluster"
        self.n = brokers
        self.base_port = _free_run(brokers)
        self.args = ["--brokers", str(brokers), "--dir", str(self.dir), "--base-port", str(self.base_port),
                     "--zookeeper-port", str(_free_run(1)), "--metrics-port", str(_free_run(brokers)), *FAST, *extra]
        self.stderr = open(tmp_path / "dev-cluster.stderr", "w+")
        self.seen: list[str] = []  # every line that may name a pid: the processes to wait for at the end
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tieredlog.cli", "dev-cluster", *self.args], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")),  # type: ignore[union-attr]
                         daemon=True).start()

    def stop(self) -> list[str]:
        """SIGTERM, as Ctrl-C: the exit code must be 0; the lines it printed."""
        self.seen += self.lines
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=120) == 0
        wait_for(lambda: self.lines and self.lines[-1] == "stopped\n", "dev-cluster's last line", timeout_s=10)
        return self.lines

    def wait_ready(self) -> None:
        wait_for(lambda: any(x.startswith("bootstrap.servers=") for x in self.lines) or self.proc.poll() is not None,
                 "dev-cluster prints its bootstrap servers", timeout_s=120, interval_s=0.2)
        self.stderr.seek(0)
        assert self.proc.poll() is None, f"dev-cluster exited with {self.proc.returncode}: {self.stderr.read()}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + i}" for i in range(self.n))

    def control(self, *args: str) -> str:
        """`tieredlog dev-cluster ARGS --dir DIR` as its own process; its stdout (exit code 0 asserted)."""
        r = subprocess.run([sys.executable, "-m", "tieredlog.cli", "dev-cluster", *args, "--dir", str(self.dir)],
                           cwd=REPO, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        self.seen.append(r.stdout)
        return r.stdout

    def pids(self) -> list[int]:
        return [int(m.group(1)) for x in self.seen + self.lines if (m := re.search(r"pid (\d+)", x))]

    def close(self) -> None:
        # SIGKILL: every process it started dies with it (PR_SET_PDEATHSIG); the orderly SIGTERM stop
        # is test_cluster_tools' test
        pids = self.pids()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), "the cluster's processes are gone",
                 timeout_s=30, interval_s=0.1)
        self.stderr.close()


@pytest.fixture
def dev_cluster_factory(tmp_path: Path) -> Iterator[list[DevClusterProcess]]:
    started: list[DevClusterProcess] = []
    yield started
    for c in started:
        c.close()


def tool(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    capsys.readouterr()
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    assert rc == 0, (argv, out.out, out.err)
    return out.out.splitlines()


def partition(capsys: pytest.CaptureFixture[str], bootstrap: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) of demo-0 as `tieredlog topics describe` prints them."""
    line = next(x for x in tool(capsys, "topics", "--bootstrap-server", bootstrap, "describe", "--topic", TOPIC)
                if "Partition: 0" in x)
    fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
    leader = -1 if fields["Leader"] == "none" else int(fields["Leader"])
    return leader, [int(x) for x in fields["Replicas"].split(",")], [int(x) for x in fields["Isr"].split(",") if x]


def produce(bootstrap: str) -> list[str]:
    values = [f"record-{i}" for i in range(RECORDS)]
    # idempotent, so a batch retried after a retriable error (a new topic's leader not ready yet) keeps its place
    r = subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", TOPIC, "-p", "0", "-X", "acks=all",
                        "-X", "enable.idempotence=true", "-X", "batch.num.messages=100"], input="\n".join(values) + "\n", capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "failed" not in r.stderr, r.stderr
    return values


def end_offset(bootstrap: str) -> int:
    """demo-0's high watermark (ListOffsets latest) through kcat's query mode; -1 while it has no answer."""
    r = subprocess.run(["kcat", "-Q", "-b", bootstrap, "-t", f"{TOPIC}:0:-1"], capture_output=True, text=True,
                       timeout=60)
    m = re.search(r"offset (-?\d+)", r.stdout)
    return int(m.group(1)) if r.returncode == 0 and m else -1


def read_from_zero(bootstrap: str) -> list[str]:
    """Every record from offset 0 to the end, through kcat; a read that never completes fails the test.
    A leader that has just taken over knows the high watermark only after its followers' next fetches (as
    in Kafka), and until then `-e` ends the read early: the read starts once it is at the end."""
    wait_for(lambda: end_offset(bootstrap) == RECORDS, "the leader's high watermark at the last record",
             timeout_s=60, interval_s=0.3)
    r = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", TOPIC, "-p", "0", "-o", "beginning", "-e", "-q",
                        "-f", "%o %s\\n"], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [int(x.split(" ", 1)[0]) for x in lines] == list(range(len(lines))), "offsets not 0, 1, 2, ..."
    return [x.split(" ", 1)[1] for x in lines]


def offset_zero_only_remote(dev: DevClusterProcess, replicas: list[int], remote_has_zero) -> bool:  # type: ignore[no-untyped-def]
    """Offset 0's segment is in the remote tier and no replica keeps it locally any more."""
    local = [dev.dir / f"broker-{b}" / "data" / f"{TOPIC}-0" / "00000000000000000000.log" for b in replicas]
    return remote_has_zero() and not any(p.exists() for p in local)


def create_tiered_topic(capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
    tool(capsys, "topics", "--bootstrap-server", bootstrap, "create", "--topic", TOPIC, "--partitions", "1",
         "--replication-factor", "3", "--config", "remote.storage.enable=true",
         "--config", f"segment.bytes={SEGMENT_BYTES}", "--config", "local.retention.ms=1000")


def test_readme_failover_walkthrough(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     dev_cluster_factory: list[DevClusterProcess]) -> None:
    dev = DevClusterProcess(tmp_path, 4)
    dev_cluster_factory.append(dev)
    dev.wait_ready()
    assert sum(x.startswith("broker ") and "running  pid" in x for x in dev.control("status").splitlines()) == 4
    boot = dev.bootstrap
    remote = dev.dir / "remote-storage"

    create_tiered_topic(capsys, boot)
    values = produce(boot)
    leader, replicas, _ = partition(capsys, boot)
    wait_for(lambda: offset_zero_only_remote(
        dev, replicas, lambda: any(json.loads(p.read_text())["start_offset"] == 0
                                   for p in remote.glob(f"{TOPIC}-*/0/*.manifest"))),
        "offset 0's segment tiered and deleted locally", timeout_s=60, interval_s=0.2)

    # kill -9 the leader; the new leader reads offset 0 from the tier its predecessor wrote
    assert dev.control("kill", "--broker", str(leader)).startswith(f"broker {leader} killed")
    assert f"broker {leader}   stopped  (exit code -9)" in dev.control("status", "--broker", str(leader))
    assert read_from_zero(boot) == values
    # the tools, as Kafka's, go on to the next bootstrap server when the first is down
    killed_first = f"127.0.0.1:{dev.base_port + leader - 1},{boot}"
    wait_for(lambda: (lambda p: p[0] not in (leader, -1) and leader not in p[2])(partition(capsys, killed_first)),
             "every broker's metadata: a new leader, the killed one out of the ISR", timeout_s=30, interval_s=0.3)

    # restart it, wait for it to rejoin the ISR, give it its leadership back
    assert "started" in dev.control("start", "--broker", str(leader))
    wait_for(lambda: sorted(partition(capsys, boot)[2]) == sorted(replicas), "the restarted broker in the ISR",
             timeout_s=60, interval_s=0.5)
    assert tool(capsys, "leader-election", "--bootstrap-server", boot, "--election-type", "PREFERRED",
                "--topic", TOPIC, "--partition", "0") == [f"Successfully completed leader election (PREFERRED) for partitions {TOPIC}-0"]
    wait_for(lambda: partition(capsys, boot)[0] == replicas[0], "the preferred leader leads", timeout_s=30, interval_s=0.3)
    assert read_from_zero(boot) == values

    # move the partition off its leader to the broker that never held it: it leads, with no local history
    spare = next(b for b in range(1, 5) if b not in replicas)
    target = [spare, *replicas[1:]]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": target}]}))
    tool(capsys, "reassign", "--bootstrap-server", boot, "--execute", "--reassignment-json-file", str(plan))
    wait_for(lambda: f"Reassignment of partition {TOPIC}-0 is completed." in tool(
        capsys, "reassign", "--bootstrap-server", boot, "--verify", "--reassignment-json-file", str(plan)),
        "the reassignment completes", timeout_s=60, interval_s=0.5)
    wait_for(lambda: partition(capsys, boot)[:2] == (spare, target), "the new replicas and leader in the metadata",
             timeout_s=30, interval_s=0.3)
    assert not (dev.dir / f"broker-{spare}" / "data" / f"{TOPIC}-0" / "00000000000000000000.log").exists()
    assert read_from_zero(boot) == values

    # restart (controlled shutdown, then start) while the others serve; then kill -9 and start at once:
    # `start` waits for the dead broker's ZooKeeper registration to expire
    assert "started" in dev.control("restart", "--broker", str(target[1]))
    dev.control("kill", "--broker", str(target[2]))
    assert "started" in dev.control("start", "--broker", str(target[2]))
    assert read_from_zero(boot) == values



def test_remote_s3_failover_reads_offset_zero_from_the_bucket(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              dev_cluster_factory: list[DevClusterProcess]) -> None:
    kind = dev_cluster_s3.available_kind("auto")  # what `make cluster CLUSTER_ARGS='--remote s3'` picks
    s3_port = _free_run(1)
    dev = DevClusterProcess(tmp_path, 3, "--remote", "s3", "--s3-port", str(s3_port))
    dev_cluster_factory.append(dev)
    dev.wait_ready()
    assert f"remote tier: S3 bucket {dev_cluster_s3.BUCKET} at http://127.0.0.1:{s3_port}" in "".join(dev.lines)
    assert f"({'SeaweedFS' if kind == 'seaweedfs' else 'moto'} pid " in "".join(dev.lines)
    assert not (dev.dir / "remote-storage").exists()
    bucket = dev_cluster_s3.LocalS3Server(kind, dev.dir / "s3", s3_port)._client()

    def bucket_has_zero() -> bool:
        keys = [o["Key"] for o in bucket.list_objects_v2(Bucket=dev_cluster_s3.BUCKET).get("Contents", [])]
        return any(k.endswith(".manifest") and "/0/00000000000000000000-" in k for k in keys)

    boot = dev.bootstrap
    create_tiered_topic(capsys, boot)
    values = produce(boot)
    leader, replicas, _ = partition(capsys, boot)
    wait_for(lambda: offset_zero_only_remote(dev, replicas, bucket_has_zero),
             "offset 0's segment in the bucket and deleted locally", timeout_s=60, interval_s=0.2)
    dev.control("kill", "--broker", str(leader))
    assert read_from_zero(boot) == values
    wait_for(lambda: partition(capsys, boot)[0] not in (leader, -1), "a new leader in the metadata", timeout_s=30,
             interval_s=0.3)
    if kind != "seaweedfs":
        return  # moto keeps the objects in memory: a second run starts with an empty bucket

    # Ctrl-C, then the same command again: the same cluster, its history read back from the bucket
    dev.stop()
    assert not (dev.dir / "dev-cluster.control").exists()
    dev.start()
    dev.wait_ready()
    assert read_from_zero(boot) == values


def test_control_commands_without_a_cluster_or_a_broker_say_so_in_one_line(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tieredlog.cli", "dev-cluster", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=60)

    r = run("--dir", str(tmp_path), "kill", "--broker", "2")  # options in any order
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == f"tieredlog dev-cluster kill: no dev-cluster is running on {tmp_path} " \
                       f"(no {tmp_path / 'dev-cluster.control'})\n"
    r = run("stop", "--dir", str(tmp_path))
    assert r.returncode == 2 and "--broker" in r.stderr
    (tmp_path / "dev-cluster.json").write_text('{"remote": "folder"}')
    r = run("--dir", str(tmp_path), "--remote", "s3")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--remote folder" in r.stderr, r.stderr


def test_stale_control_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "dev-cluster.control").write_text(json.dumps({"pid": 2 ** 22 + 1, "port": free_port(), "token": "x"}))
    r = subprocess.run([sys.executable, "-m", "tieredlog.cli", "dev-cluster", "status", "--dir", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "is left from an earlier run" in r.stderr and r.stderr.count("\n") == 1, r.stderr
