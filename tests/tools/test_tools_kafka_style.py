"""The tools a Kafka user knows, run as a user runs them (the `tieredlog` command in a subprocess)
against one broker: topics with kafka-topics.sh's flags, console producer and consumer (cross-checked
with kcat and confluent-kafka), configs, log-dirs, get-offsets, and `topics describe`'s tier columns
for a topic whose segments went to the remote tier."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from helpers import wait_for

from tieredlog import cli

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FAST = {
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
}


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("tools") / "data", overrides=FAST).start()
    try:
        yield broker
    finally:
        broker.stop()


def _subprocess(args: tuple[str, ...], stdin: bytes | None) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "tieredlog.cli", *args], input=stdin, capture_output=True,
                       cwd=REPO, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def _in_process(args: tuple[str, ...]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(list(args))
        except SystemExit as exc:  # argparse's usage errors and --version
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def run(args: tuple[str, ...], stdin: bytes | None) -> tuple[int, str, str]:
    """The console tools read stdin's file descriptor and write stdout's bytes: a process of their own;
    the others run in this one (a process each would add seconds to the module)."""
    return _subprocess(args, stdin) if args[0].startswith("console-") or stdin is not None else _in_process(args)


def tool(*args: str, stdin: bytes | None = None, rc: int = 0) -> str:
    code, out, err = run(args, stdin)
    assert code == rc, f"{args}: rc {code}\nstdout: {out}\nstderr: {err}"
    return out


def tool_err(*args: str, rc: int) -> str:
    """A command refused before it reads or writes anything: in this process, whatever the tool."""
    code, out, err = _in_process(args)
    assert code == rc, f"{args}: rc {code}\nstdout: {out}\nstderr: {err}"
    return err


def test_topics_kafka_flags_in_any_order(b: BrokerProcess) -> None:
    assert tool("topics", "--create", "--topic", "kt", "--partitions", "2", "--config", "retention.ms=86400000",
                "--bootstrap-server", b.bootstrap) == "Created topic kt.\n"
    # the subcommand form, --bootstrap-server after the subcommand
    assert tool("topics", "create", "--topic", "kt2", "--bootstrap-server", b.bootstrap) == "Created topic kt2.\n"
    tool("topics", "--bootstrap-server", b.bootstrap, "--create", "--if-not-exists", "--topic", "kt")
    tool("topics", "--create", "--topic", "kt", "--bootstrap-server", b.bootstrap, rc=1)
    assert {"kt", "kt2", "__consumer_offsets"} <= set(tool("topics", "--list", "--bootstrap-server", b.bootstrap).split())
    assert "__consumer_offsets" not in tool("topics", "--bootstrap-server", b.bootstrap, "--list", "--exclude-internal")
    tool("topics", "--alter", "--topic", "kt", "--partitions", "3", "--bootstrap-server", b.bootstrap)
    out = tool("topics", "--topic", "kt", "--describe", "--bootstrap-server", b.bootstrap)
    head, *parts = out.splitlines()
    assert re.fullmatch(r"Topic: kt\tTopicId: \S+\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=86400000",
                        head), head
    assert parts == [f"\tTopic: kt\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(3)]
    assert tool("topics", "describe", "--bootstrap-server", b.bootstrap, "--topic", "kt") == out
    tool("topics", "--delete", "--topic", "kt2", "--bootstrap-server", b.bootstrap)
    tool("topics", "--delete", "--if-exists", "--topic", "kt2", "--bootstrap-server", b.bootstrap)
    assert "kt2" not in tool("topics", "--list", "--bootstrap-server", b.bootstrap).split()
    assert "needs --topic" in tool_err("topics", "--create", "--bootstrap-server", b.bootstrap, rc=2)


def test_console_producer_and_consumer(b: BrokerProcess) -> None:
    tool("topics", "--create", "--topic", "lines", "--partitions", "2", "--bootstrap-server", b.bootstrap)
    lines = [f"k{i}:v{i}" for i in range(50)]
    tool("console-producer", "--bootstrap-server", b.bootstrap, "--topic", "lines", "--property", "parse.key=true",
         "--property", "key.separator=:", stdin="\n".join(lines).encode() + b"\n")
    out = tool("console-consumer", "--bootstrap-server", b.bootstrap, "--topic", "lines", "--from-beginning",
               "--max-messages", "50", "--property", "print.key=true", "--property", "print.partition=true",
               "--property", "print.offset=true", "--property", "key.separator=|")
    got = [line.split("|") for line in out.splitlines()]
    assert sorted(f"{k}:{v}" for _, _, k, v in got) == sorted(lines)
    by_partition: dict[str, list[int]] = {}
    for partition, offset, _, _ in got:
        by_partition.setdefault(partition, []).append(int(offset.removeprefix("Offset:")))
    assert len(by_partition) == 2 and all(offsets == sorted(offsets) for offsets in by_partition.values())
    # the same records as kcat and confluent-kafka read them, key and partition included
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is not installed: run `make system-deps`"
    k = subprocess.run([kcat, "-b", b.bootstrap, "-C", "-t", "lines", "-e", "-q", "-f", "Partition:%p|%k|%s\n"],
                       capture_output=True, timeout=60, check=True)
    assert sorted(k.stdout.decode().splitlines()) == sorted(f"{p}|{key}|{v}" for p, _, key, v in got)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "x", "enable.auto.commit": False})
    c.assign([CkTopicPartition("lines", p, 0) for p in range(2)])
    seen = []
    try:
        wait_for(lambda: seen.extend(m for m in c.consume(50, 0.5) if m.error() is None) or len(seen) >= 50,
                 what="confluent-kafka reads the 50 records")
    finally:
        c.close()
    assert sorted(f"{m.key().decode()}:{m.value().decode()}" for m in seen) == sorted(lines)
    # a keyed record goes where Kafka's Java producer sends it (librdkafka's murmur2 partitioner is the same)
    assert {m.key().decode(): m.partition() for m in seen} == {
        k: partition for k, partition in _murmur2_partitions(b, [k for _, _, k, _ in got]).items()}


def _murmur2_partitions(b: BrokerProcess, keys: list[str]) -> dict[str, int]:
    tool("topics", "--create", "--topic", "lines-murmur2", "--partitions", "2", "--bootstrap-server", b.bootstrap)
    chosen: dict[str, int] = {}
    p = Producer({"bootstrap.servers": b.bootstrap, "partitioner": "murmur2"})
    for k in keys:
        p.produce("lines-murmur2", key=k.encode(), value=b"",
                  on_delivery=lambda err, m: chosen.__setitem__(m.key().decode(), m.partition()))
    assert p.flush(30) == 0
    return chosen


def test_console_consumer_group_partition_offset(b: BrokerProcess) -> None:
    tool("topics", "--create", "--topic", "grp", "--bootstrap-server", b.bootstrap)
    tool("console-producer", "--bootstrap-server", b.bootstrap, "--topic", "grp", "--request-required-acks", "1",
         stdin=b"".join(b"m%d\n" % i for i in range(10)))
    assert tool("console-consumer", "--bootstrap-server", b.bootstrap, "--topic", "grp", "--group", "g1",
                "--from-beginning", "--max-messages", "4").split() == ["m0", "m1", "m2", "m3"]
    # the group committed 4: the next run goes on from there, and stops when nothing comes
    assert tool("console-consumer", "--bootstrap-server", b.bootstrap, "--topic", "grp", "--group", "g1",
                "--timeout-ms", "1000").split() == [f"m{i}" for i in range(4, 10)]
    out = tool("console-consumer", "--bootstrap-server", b.bootstrap, "--topic", "grp", "--partition", "0",
               "--offset", "7", "--timeout-ms", "1000", "--property", "print.timestamp=true")
    assert re.fullmatch(r"CreateTime:\d+\tm7\nCreateTime:\d+\tm8\nCreateTime:\d+\tm9\n", out), out


def test_configs_round_trip(b: BrokerProcess, tmp_path: Path) -> None:
    tool("topics", "--create", "--topic", "cfg", "--bootstrap-server", b.bootstrap)
    assert tool("configs", "--bootstrap-server", b.bootstrap, "--entity-type", "topics", "--entity-name", "cfg",
                "--alter", "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]") \
        == "Completed updating config for topic cfg.\n"
    assert tool("configs", "--bootstrap-server", b.bootstrap, "--topic", "cfg", "--describe").splitlines() == [
        "Dynamic configs for topic cfg are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        # Kafka's log.retention.ms has no default (the 7 days are log.retention.hours'), so no broker synonym
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}"]
    tool("configs", "--bootstrap-server", b.bootstrap, "--topic", "cfg", "--alter", "--delete-config", "cleanup.policy")
    described = tool("configs", "--bootstrap-server", b.bootstrap, "--topic", "cfg", "--describe", "--all")
    assert "  cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}" in described
    # a broker's dynamic config, asked of that broker; the cluster-wide default
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=PLAINTEXT\n")
    tool("configs", "--bootstrap-server", b.bootstrap, "--command-config", str(props), "--entity-type", "brokers",
         "--entity-name", "0", "--alter", "--add-config", "log.cleaner.backoff.ms=20000")
    assert "  log.cleaner.backoff.ms=20000 sensitive=false" in tool("configs", "--bootstrap-server", b.bootstrap,
                                                                    "--broker", "0", "--describe")
    assert tool("configs", "--bootstrap-server", b.bootstrap, "--entity-type", "brokers", "--entity-default", "--alter",
                "--add-config", "log.cleaner.backoff.ms=30000") \
        == "Completed updating default config for brokers in the cluster.\n"
    assert "log.cleaner.backoff.ms=30000" in tool("configs", "--bootstrap-server", b.bootstrap, "--broker-defaults",
                                                  "--describe")
    # users: SCRAM credentials, as `tieredlog users` handles them
    tool("configs", "--bootstrap-server", b.bootstrap, "--entity-type", "users", "--entity-name", "alice", "--alter",
         "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]")
    assert tool("configs", "--bootstrap-server", b.bootstrap, "--user", "alice", "--describe") \
        == "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192\n"
    assert tool("configs", "--bootstrap-server", b.bootstrap, "--topic", "absent", "--describe") \
        == "The topic 'absent' doesn't exist and doesn't have dynamic config.\n"
    every_broker = tool("configs", "--bootstrap-server", b.bootstrap, "--entity-type", "brokers", "--describe")
    assert [line for line in every_broker.splitlines() if not line.startswith("  ")] == [
        "Dynamic configs for broker 0 are:", "Default configs for brokers in the cluster are:"]


def test_log_dirs_and_get_offsets(b: BrokerProcess) -> None:
    tool("topics", "--create", "--topic", "offs", "--partitions", "2", "--bootstrap-server", b.bootstrap)
    tool("console-producer", "--bootstrap-server", b.bootstrap, "--topic", "offs", "--batch-size", "100",
         stdin=b"".join(b"record-%03d\n" % i for i in range(40)))
    latest = tool("get-offsets", "--bootstrap-server", b.bootstrap, "--topic", "offs").splitlines()
    assert [line.rsplit(":", 1)[0] for line in latest] == ["offs:0", "offs:1"]
    assert sum(int(line.rsplit(":", 1)[1]) for line in latest) == 40
    assert tool("get-offsets", "--bootstrap-server", b.bootstrap, "--topic", "off.", "--partitions", "1", "--time",
                "-2") == "offs:1:0\n"
    assert tool("get-offsets", "--bootstrap-server", b.bootstrap, "--topic-partitions", "offs:0-1,offs:1",
                "--time", "earliest") == "offs:0:0\noffs:1:0\n"
    # no record that recent: the partition is left out, as Kafka's tool leaves it out
    assert tool("get-offsets", "--bootstrap-server", b.bootstrap, "--topic-partitions", "offs:1-", "--time",
                "99999999999999") == ""
    out = tool("log-dirs", "--bootstrap-server", b.bootstrap, "--describe", "--topic-list", "offs").splitlines()
    assert out[:2] == ["Querying brokers for log directories information",
                       "Received log directory information from brokers 0"]
    (broker,) = json.loads(out[2])["brokers"]
    (log_dir,) = broker["logDirs"]
    assert broker["broker"] == 0 and log_dir["error"] is None and log_dir["logDir"] == str(b.data_dir)
    assert [p["partition"] for p in log_dir["partitions"]] == ["offs-0", "offs-1"]
    assert all(p["size"] > 0 and p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])


def test_topics_describe_shows_tiers(b: BrokerProcess) -> None:
    tool("topics", "--bootstrap-server", b.bootstrap, "--create", "--topic", "tiered", "--config",
         "remote.storage.enable=true", "--config", "segment.bytes=4096", "--config", "local.retention.bytes=1")
    tool("console-producer", "--bootstrap-server", b.bootstrap, "--topic", "tiered", "--batch-size", "1000",
         stdin=b"".join(b"value-%05d\n" % i for i in range(3000)))
    pattern = re.compile(r"\tTopic: tiered\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\tRemoteOffsets: 0-(\d+)"
                         r"\tRemoteSize: (\d+)\tLocalOffsets: (\d+)-2999\tLocalSize: (\d+)")

    def settled() -> re.Match[str] | None:
        """Every rolled segment copied and deleted locally: the local range starts right after the remote one,
        and only the active segment (under segment.bytes) is left locally."""
        line = tool("topics", "--describe", "--topic", "tiered", "--bootstrap-server", b.bootstrap).splitlines()[1]
        m = pattern.fullmatch(line)
        return m if m and int(m.group(3)) == int(m.group(1)) + 1 and int(m.group(4)) <= 4096 else None

    m = wait_for(settled, what="the rolled segments tiered and deleted locally", interval_s=0.5)
    remote_end, remote_size, local_start, local_size = map(int, m.groups())
    assert remote_end > 0 and local_size > 0
    assert tool("get-offsets", "--bootstrap-server", b.bootstrap, "--topic", "tiered", "--time", "-4") \
        == f"tiered:0:{local_start}\n"
    # the remote size read over the protocol is what the offline reader of the log dir finds
    segments = tool("remote", "segments", "--topic", "tiered", "--log-dir", str(b.data_dir)).splitlines()[1:]
    finished = [row.split() for row in segments if "COPY_SEGMENT_FINISHED" in row]
    assert int(finished[-1][2]) == remote_end
    assert remote_size == sum(int(row[4]) for row in finished)
    # the console consumer reads the history back through the remote tier
    out = tool("console-consumer", "--bootstrap-server", b.bootstrap, "--topic", "tiered", "--from-beginning",
               "--max-messages", "3000")
    assert out.splitlines() == ["value-%05d" % i for i in range(3000)]


def test_console_consumer_read_committed_leaves_aborted_records_out(b: BrokerProcess) -> None:
    tool("topics", "--create", "--topic", "txn", "--bootstrap-server", b.bootstrap)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "console-txn"})
    p.init_transactions(30)
    for values, commit in ((["a1", "a2"], False), (["c1", "c2"], True), (["a3"], False), (["c3"], True)):
        p.begin_transaction()
        for v in values:
            p.produce("txn", value=v.encode())
        assert p.flush(30) == 0  # in the log before the abort (librdkafka drops what is unsent)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    common = ("console-consumer", "--bootstrap-server", b.bootstrap, "--topic", "txn", "--from-beginning")
    assert tool(*common, "--isolation-level", "read_committed", "--max-messages", "3").split() == ["c1", "c2", "c3"]
    assert tool(*common, "--max-messages", "6").split() == ["a1", "a2", "c1", "c2", "a3", "c3"]


def test_version_and_command_config(tmp_path: Path) -> None:
    version = metadata.version("tieredlog")
    for args in (["--version"], ["topics", "--version"], ["console-consumer", "--version"], ["configs", "--version"],
                 ["transactions", "--version"]):
        assert tool(*args).strip() == version
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=CARRIER_PIGEON\n")
    for name in ("get-offsets", "log-dirs --describe", "console-consumer --topic t", "console-producer --topic t",
                 "configs --describe --topic t", "topics --list"):
        err = tool_err(*name.split(), "--bootstrap-server", "127.0.0.1:1", "--command-config", str(bad), rc=2)
        assert "Invalid security.protocol CARRIER_PIGEON" in err, (name, err)
