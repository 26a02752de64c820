"""`tieredlog consumer-groups` against a real broker and a confluent-kafka consumer group: describe with
lag, members and state, resets refused while the group is active, resets to a time and to the
earliest offset that the next consumer resumes from, dry runs, offset and group deletion."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for

from tieredlog.tools import consumer_groups

REPO = Path(__file__).resolve().parents[2]
TOPIC = "cg"
GROUP = "g1"
PER_PARTITION = 50
OLD = 20  # records per partition written an hour before the others
DEADLINE_S = 60.0


def run(bootstrap: str, *args: str) -> tuple[int, str, str]:
    a = consumer_groups.parser().parse_args(["--bootstrap-server", bootstrap, *args])
    out, err = io.StringIO(), io.StringIO()
    with consumer_groups.GroupsAdmin(bootstrap, timeout_s=10) as admin:
        rc = consumer_groups.execute(admin, a, out, err)
    return rc, out.getvalue(), err.getvalue()


def table(text: str) -> list[list[str]]:
    """The rows under the header (cells split on whitespace)."""
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    return lines[1:]


def consumer(bootstrap: str, client_id: str = "cg-client") -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": client_id,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    c.subscribe([TOPIC])
    return c


def consume(c: Consumer, want: int) -> dict[int, list[int]]:
    """Offsets read per partition, until ``want`` records."""
    seen: dict[int, list[int]] = {}
    deadline = time.monotonic() + DEADLINE_S  # a guard against hangs, not a threshold
    while sum(map(len, seen.values())) < want:
        assert time.monotonic() < deadline, f"consumed {seen} of {want}"
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        seen.setdefault(m.partition(), []).append(m.offset())
    return seen


def test_consumer_groups_tool(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory({"remote.log.storage.system.enable": "false", "group.initial.rebalance.delay.ms": "0"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    now = int(time.time() * 1000)
    old_ts, new_ts = now - 3_600_000, now - 60_000
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for part in (0, 1):
        for i in range(PER_PARTITION):
            p.produce(TOPIC, value=b"v%d" % i, partition=part, timestamp=old_ts if i < OLD else new_ts)
    assert p.flush(30) == 0

    c = consumer(b.bootstrap)
    got = consume(c, 60)
    c.commit(offsets=[TopicPartition(TOPIC, part, max(offs) + 1) for part, offs in got.items()], asynchronous=False)
    committed = {part: max(offs) + 1 for part, offs in got.items()}

    # the group is listed (through the console script's module path, as users run it)
    listed = subprocess.run([sys.executable, "-m", "tieredlog.cli", "consumer-groups", "--bootstrap-server",
                             b.bootstrap, "--list"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert GROUP in listed.stdout.split()

    # describe: per partition the committed offset, the log end, the lag and the member that owns it
    rc, out, err = run(b.bootstrap, "--describe", "--group", GROUP)
    assert rc == 0, err
    assert out.splitlines()[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                           "CONSUMER-ID", "HOST", "CLIENT-ID"]
    rows = table(out)
    assert [r[:6] for r in rows] == [
        [GROUP, TOPIC, str(part), str(committed.get(part, "-")), str(PER_PARTITION),
         str(PER_PARTITION - committed[part]) if part in committed else "-"] for part in (0, 1)]
    assert all(r[6] != "-" and r[8] == "cg-client" for r in rows)

    rc, out, _ = run(b.bootstrap, "--describe", "--group", GROUP, "--members")
    assert rc == 0 and table(out)[0][3:] == ["cg-client", "2"]
    rc, out, _ = run(b.bootstrap, "--describe", "--group", GROUP, "--state")
    assert rc == 0
    state_row = table(out)[0]
    assert state_row[0] == GROUP and state_row[-2:] == ["Stable", "1"]

    # an active group's offsets are not reset
    rc, out, err = run(b.bootstrap, "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest",
                       "--execute")
    assert rc == 1
    assert f"Error: Assignments can only be reset if the group '{GROUP}' is inactive, but the current state is " \
           "Stable." in err
    c.close()
    wait_for(lambda: run(b.bootstrap, "--describe", "--group", GROUP, "--state")[1].split()[-2] == "Empty",
             "the group empty")
    rc, _, err = run(b.bootstrap, "--describe", "--group", GROUP)
    assert f"Consumer group '{GROUP}' has no active members." in err

    # to a time between the old and the new records: the first new record of each partition
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((old_ts + new_ts) / 2000)) + ".000Z"
    rc, out, err = run(b.bootstrap, "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-datetime", stamp,
                       "--execute")
    assert rc == 0, err
    assert table(out) == [[GROUP, TOPIC, "0", str(OLD)], [GROUP, TOPIC, "1", str(OLD)]]
    c = consumer(b.bootstrap)
    resumed = consume(c, 2 * (PER_PARTITION - OLD))
    assert {part: min(offs) for part, offs in resumed.items()} == {0: OLD, 1: OLD}
    c.close()

    # a dry run shows without committing; without --execute or --dry-run Kafka's warning and a dry run
    rc, out, err = run(b.bootstrap, "--reset-offsets", "--group", GROUP, "--all-topics", "--shift-by", "-5",
                       "--dry-run")
    assert rc == 0 and table(out) == [[GROUP, TOPIC, "0", str(OLD - 5)], [GROUP, TOPIC, "1", str(OLD - 5)]]
    rc, out, err = run(b.bootstrap, "--reset-offsets", "--group", GROUP, "--topic", f"{TOPIC}:1", "--to-offset",
                       "1000")
    assert "WARN: No action will be performed as the --execute option is missing" in err
    assert table(out) == [[GROUP, TOPIC, "1", str(PER_PARTITION)]]  # clamped to the log end
    rc, out, _ = run(b.bootstrap, "--describe", "--group", GROUP)
    assert [r[3] for r in table(out)] == [str(OLD), str(OLD)]

    # to the earliest offset, and a consumer reads everything again
    rc, out, err = run(b.bootstrap, "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest",
                       "--execute")
    assert rc == 0 and table(out) == [[GROUP, TOPIC, "0", "0"], [GROUP, TOPIC, "1", "0"]]
    c = consumer(b.bootstrap)
    again = consume(c, 2 * PER_PARTITION)
    assert {part: sorted(offs) for part, offs in again.items()} == {0: list(range(PER_PARTITION)),
                                                                      1: list(range(PER_PARTITION))}
    c.close()
    wait_for(lambda: run(b.bootstrap, "--describe", "--group", GROUP, "--state")[1].split()[-2] == "Empty",
             "the group empty again")

    # offsets of a topic deleted, then the group itself
    rc, out, err = run(b.bootstrap, "--delete-offsets", "--group", GROUP, "--topic", TOPIC)
    assert rc == 0, err
    assert f"Request succeed for deleting offsets with topic {TOPIC} group {GROUP}" in out
    assert table(out.split("\n", 1)[1]) == [[TOPIC, "0", "Successful"], [TOPIC, "1", "Successful"]]
    rc, out, err = run(b.bootstrap, "--delete", "--group", GROUP)
    assert rc == 0, err
    assert out.strip() == f"Deletion of requested consumer groups ('{GROUP}') was successful."
    rc, out, _ = run(b.bootstrap, "--list")
    assert GROUP not in out.split()


def test_describe_a_kip848_consumer_group(broker_factory: Callable[..., BrokerProcess]) -> None:
    """A group of the new consumer protocol is described through ConsumerGroupDescribe, with its
    members' assignments, and its offsets are reset once it is empty."""
    b = broker_factory({"remote.log.storage.system.enable": "false"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("cg848", 2, 1)])["cg848"].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(20):
        p.produce("cg848", value=b"v", partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g848", "group.protocol": "consumer",
                  "client.id": "new-proto", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["cg848"])
    read = 0
    deadline = time.monotonic() + DEADLINE_S  # a guard against hangs, not a threshold
    while read < 20:
        assert time.monotonic() < deadline, read
        m = c.poll(0.5)
        if m is not None and not m.error():
            read += 1
    c.commit(asynchronous=False)
    try:
        rc, out, err = run(b.bootstrap, "--describe", "--group", "g848")
        assert rc == 0, err
        rows = table(out)
        assert [r[1:6] for r in rows] == [["cg848", "0", "10", "10", "0"], ["cg848", "1", "10", "10", "0"]]
        assert all(r[6] != "-" and r[8] == "new-proto" for r in rows)
    finally:
        c.close()
    wait_for(lambda: run(b.bootstrap, "--describe", "--group", "g848", "--state")[1].split()[-2] == "Empty",
             "the group empty")
    rc, out, err = run(b.bootstrap, "--reset-offsets", "--group", "g848", "--all-topics", "--to-offset", "3",
                       "--execute")
    assert rc == 0, err
    assert table(out) == [["g848", "cg848", "0", "3"], ["g848", "cg848", "1", "3"]]
