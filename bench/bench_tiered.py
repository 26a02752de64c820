"""Tiered storage throughput, in one run.

1. Catch-up consumer through a real broker (``tieredlog broker`` subprocess, default
   LocalTieredStorage under ``<log dir>/remote-storage``): a confluent-kafka consumer reads from
   offset 0 the same records from a topic whose rolled segments are all remote and from a topic
   that is only local; beside them plain file reads of the same remote objects and of the local
   segment files. Printed: MiB/s of each and the ratios remote/local and remote/raw.
2. In-process: the RLM read path alone (``RemoteLogManager.read`` in a loop, no broker) vs
   ``UnifiedLog.read``, and the RLM copy task vs a plain file copy.

    TIERED_BENCH_MB=1024 python -m bench.bench_tiered

``TIERED_BENCH_MB`` (default 1024, the 1 GiB catch-up the issue asks for) is the data per topic; ``TIERED_BENCH_PARTITIONS`` (default 1),
``TIERED_BENCH_VALUE`` (bytes per record, default 1024), ``TIERED_BENCH_BATCH_KB`` (producer
batch.size, default 16), ``TIERED_BENCH_SEGMENT_MB`` (segment.bytes, default 32);
``TIERED_BENCH_SKIP`` = comma list of ``broker``, ``inproc``, ``s3``.
3. Catch-up consumers from an S3 server (SeaweedFS by default, ``TIERED_BENCH_S3=moto``; data
   ``TIERED_BENCH_S3_MB``, default 512) vs raw boto3 GETs of the same objects (one stream, whole
   objects in offset order, as a consumer reads them), best of ``TIERED_BENCH_RUNS`` (default 3)
   interleaved runs each. Two consumers, each also on a local-only topic holding the same
   records: kcat (librdkafka in C: the broker's rate, the target ratio >= 0.85 is taken on it)
   and confluent-kafka's Python consumer (its per-record Python loop is the ceiling, as the
   local-topic figure shows).
The consumers use librdkafka's defaults (max.partition.fetch.bytes 1 MiB, fetch.max.bytes 50 MiB,
fetch.wait.max.ms 500).
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.proc_cpu import cpu_seconds, live_children

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "tests" / "harness"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

MIB = 1 << 20
FETCH = 1 << 20


def _env(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


def _mibs(nbytes: int, secs: float) -> float:
    return nbytes / MIB / secs if secs > 0 else float("inf")


def _rate(nbytes: int, secs: float) -> str:
    return f"{_mibs(nbytes, secs):8.1f} MiB/s ({secs:6.2f} s)"


def _read_files(paths: list[Path]) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(FETCH):
                n += len(chunk)
    return n, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# 1. through the broker
# ---------------------------------------------------------------------------------------------
def _list_offset(bootstrap: str, topic: str, partition: int, ts: int) -> int:
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import LIST_OFFSETS

    with KafkaClient(bootstrap) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": ts,
                                            "current_leader_epoch": -1}]}]})
        return r.topics[0].partitions[0].offset


def _produce(bootstrap: str, topics: list[str], partitions: int, total: int, value_size: int, batch_kb: int) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": batch_kb * 1024,
                  "queue.buffering.max.kbytes": 512 * 1024, "compression.type": "none", "acks": 1})
    values = [os.urandom(value_size) for _ in range(64)]
    n = total // (value_size + 8)
    for i in range(n):
        for t in topics:
            while True:
                try:
                    p.produce(t, values[i & 63], b"k%07d" % i, partition=i % partitions)
                    break
                except BufferError:
                    p.poll(0.05)
        if i & 1023 == 0:
            p.poll(0)
    assert p.flush(300) == 0, "producer did not flush"
    return n


def _consume(bootstrap: str, topic: str, ends: dict[int, int]) -> tuple[int, int, float]:
    """Read every partition from offset 0 up to ``ends[p]`` (exclusive); (records, bytes, seconds)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.error.backoff.ms": 10})
    c.list_topics(topic, timeout=10)  # connected before the clock starts
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    left = {p: e for p, e in ends.items() if e > 0}
    records = nbytes = 0
    t0 = time.perf_counter()
    deadline = t0 + 600
    try:
        while left and time.perf_counter() < deadline:
            for m in c.consume(2000, 0.02):  # a short timeout: the end is never waited for
                if m.error() is not None:
                    continue
                p = m.partition()
                if p not in left:
                    continue
                records += 1
                nbytes += len(m) + len(m.key())
                if m.offset() + 1 >= left[p]:
                    del left[p]
        t = time.perf_counter() - t0
    finally:
        c.close()
    assert not left, f"consumer of {topic} did not reach the end: {left}"
    return records, nbytes, t


def bench_broker() -> None:
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, NewTopic

    total = _env("TIERED_BENCH_MB", 1024) * MIB
    parts = _env("TIERED_BENCH_PARTITIONS", 1)
    value_size = _env("TIERED_BENCH_VALUE", 1024)
    batch_kb = _env("TIERED_BENCH_BATCH_KB", 16)
    segment = _env("TIERED_BENCH_SEGMENT_MB", 32) * MIB
    root = Path(tempfile.mkdtemp(prefix="bench-tiered-broker-"))
    broker = BrokerProcess(root / "data", overrides={
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
    })
    try:
        broker.start()
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        common = {"segment.bytes": str(segment), "retention.ms": "-1", "retention.bytes": "-1"}
        futs = admin.create_topics([
            NewTopic("remote", parts, 1, config={**common, "remote.storage.enable": "true", "local.retention.bytes": "1"}),
            NewTopic("local", parts, 1, config={**common, "remote.storage.enable": "false"}),
        ])
        for f in futs.values():
            f.result(30)
        t0 = time.perf_counter()
        n = _produce(bs, ["remote", "local"], parts, total, value_size, batch_kb)
        print(f"produced {n} records of {value_size} B to each topic ({parts} partition(s), batch.size "
              f"{batch_kb} KiB) in {time.perf_counter() - t0:.1f} s")

        # wait until every rolled segment of "remote" is in the remote tier and gone locally
        data = root / "data"
        deadline = time.monotonic() + 300
        ends: dict[int, int] = {}
        while time.monotonic() < deadline:
            ends = {}
            for p in range(parts):
                tiered = _list_offset(bs, "remote", p, -5)
                local_start = _list_offset(bs, "remote", p, -4)
                if tiered < 0 or local_start != tiered + 1:
                    break
                if len(list((data / f"remote-{p}").glob("*.log"))) != 1:
                    break
                ends[p] = local_start
            if len(ends) == parts:
                break
            time.sleep(0.2)
        else:
            raise SystemExit(f"remote tier did not catch up: {ends}")
        remote_objs = sorted((data / "remote-storage").rglob("remote-*/*/*.log"))
        remote_bytes = sum(p.stat().st_size for p in remote_objs)
        # the local topic's segments holding the same offsets (whole files: a slight overcount)
        local_files = []
        for p in range(parts):
            for f in sorted((data / f"local-{p}").glob("*.log")):
                if int(f.name[:20]) < ends[p]:
                    local_files.append(f)
        print(f"remote tier: {len(remote_objs)} segment objects, {remote_bytes / MIB:.0f} MiB, "
              f"offsets below {ends}")

        raw_remote, t_raw_remote = _read_files(remote_objs)
        raw_local, t_raw_local = _read_files(local_files)
        _read_files(remote_objs)  # both tiers equally warm in the page cache

        def cpu() -> float:  # the broker process's CPU seconds (user + system)
            return cpu_seconds(broker.proc.pid)

        runs: dict[str, list[tuple[float, float]]] = {"local": [], "remote": []}
        counts = set()
        for _ in range(_env("TIERED_BENCH_RUNS", 3)):  # interleaved, best of: the host is shared
            for topic in ("local", "remote"):
                c0 = cpu()
                rec, b, t = _consume(bs, topic, ends)
                runs[topic].append((t, cpu() - c0))
                counts.add((rec, b))
        assert len(counts) == 1, f"local and remote reads differ: {counts}"
        (rec_l, b_l), = counts
        t_l, cpu_l = min(runs["local"])
        t_r, cpu_r = min(runs["remote"])
        # MiB/s counted on the segment bytes holding those records (what each path moves)
        r_local = _mibs(remote_bytes, t_l)
        r_remote = _mibs(remote_bytes, t_r)
        r_raw = _mibs(raw_remote, t_raw_remote)
        print(f"raw file reads, remote objects  : {_rate(raw_remote, t_raw_remote)}")
        print(f"raw file reads, local segments  : {_rate(raw_local, t_raw_local)}")
        mb = remote_bytes / MIB
        print(f"catch-up consumer, local topic  : {r_local:8.1f} MiB/s ({t_l:6.2f} s)   broker CPU "
              f"{cpu_l * 1000 / mb:5.2f} ms/MiB   {rec_l} records, {b_l / MIB:.0f} MiB of keys+values")
        print(f"catch-up consumer, remote tier  : {r_remote:8.1f} MiB/s ({t_r:6.2f} s)   broker CPU "
              f"{cpu_r * 1000 / mb:5.2f} ms/MiB")
        print("  (all runs, s: local " + " ".join(f"{t:.2f}" for t, _ in runs["local"])
              + "; remote " + " ".join(f"{t:.2f}" for t, _ in runs["remote"]) + ")")
        print(f"RATIO remote/local consumer     : {r_remote / r_local:5.2f}")
        print(f"RATIO remote consumer/raw reads : {r_remote / r_raw:5.2f}")
    finally:
        rc = broker.stop()
        if rc not in (0, None):
            print(f"broker exit code {rc}:\n{broker.log_text()[-3000:]}")
        shutil.rmtree(root, ignore_errors=True)


def _wait_tiered(bs: str, data: Path, topic: str, parts: int, timeout: float = 300) -> dict[int, int]:
    """Offsets below which every partition of ``topic`` is remote only (local log start)."""
    deadline = time.monotonic() + timeout
    ends: dict[int, int] = {}
    while time.monotonic() < deadline:
        ends = {}
        for p in range(parts):
            tiered = _list_offset(bs, topic, p, -5)
            local_start = _list_offset(bs, topic, p, -4)
            if tiered < 0 or local_start != tiered + 1 or len(list((data / f"{topic}-{p}").glob("*.log"))) != 1:
                break
            ends[p] = local_start
        if len(ends) == parts:
            return ends
        time.sleep(0.2)
    raise SystemExit(f"remote tier did not catch up: {ends}")


def _kcat(bootstrap: str, topic: str, ends: dict[int, int]) -> float:
    """Seconds for Debian's kcat (librdkafka's C consumer, no per-record Python) to read every
    partition from offset 0 up to ``ends[p]``; process start and metadata included (a slight
    undercount of the rate). Checks that the last offset printed is ``ends[p] - 1``."""
    import subprocess

    t0 = time.perf_counter()
    procs = {p: subprocess.Popen(
        ["kcat", "-C", "-q", "-b", bootstrap, "-t", topic, "-p", str(p), "-o", "0", "-c", str(end), "-e",
         "-f", "%o\\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p, end in ends.items() if end > 0}
    outs = {p: proc.communicate(timeout=600) for p, proc in procs.items()}
    t = time.perf_counter() - t0
    for p, (out, err) in outs.items():
        last = out.rsplit(b"\n", 2)[-2] if out.count(b"\n") else b""
        if procs[p].returncode != 0 or last != str(ends[p] - 1).encode():
            raise SystemExit(f"kcat on {topic}-{p} ended at {last!r} (rc {procs[p].returncode}): {err[-500:]!r}")
    return t


def s3_tiered_broker(endpoint, root: Path, prefix: str):  # type: ignore[no-untyped-def]
    """A broker (not started) tiering to ``endpoint``'s bucket under ``prefix``, with fast tiering checks."""
    from broker_harness import BrokerProcess

    rsm = {f"rsm.config.{k}": str(v) for k, v in endpoint.rsm_configs(prefix=prefix).items()}
    return BrokerProcess(root / "data", overrides={
        "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.storage.manager.class.name": "s3", **rsm})


def bench_s3() -> None:
    """Catch-up consumers from an S3 server (SeaweedFS, or moto with TIERED_BENCH_S3=moto) vs raw
    boto3 GETs of the same segment objects from the same server, and vs the same records in a
    topic that is only local."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from s3servers import start_moto, start_seaweedfs


    if shutil.which("kcat") is None:
        raise SystemExit("bench_tiered's S3 part needs kcat (Debian package kcat; `make bench` installs it)")
    which = os.environ.get("TIERED_BENCH_S3", "seaweedfs")
    total = _env("TIERED_BENCH_S3_MB", 512) * MIB
    segment = _env("TIERED_BENCH_SEGMENT_MB", 32) * MIB
    endpoint = (start_moto if which == "moto" else start_seaweedfs)()
    root = Path(tempfile.mkdtemp(prefix="bench-tiered-s3-"))
    prefix = f"bench-{uuid.uuid4().hex[:8]}/"
    broker = s3_tiered_broker(endpoint, root, prefix)
    try:
        broker.start()
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})  # kept alive until the result arrives
        common = {"segment.bytes": str(segment), "retention.ms": "-1"}
        for f in admin.create_topics([
            NewTopic("remote", 1, 1, config={**common, "remote.storage.enable": "true", "local.retention.bytes": "1"}),
            NewTopic("local", 1, 1, config={**common, "remote.storage.enable": "false"}),
        ]).values():
            f.result(30)
        del admin  # closed now: a client left connected logs its disconnection when the broker stops
        _produce(bs, ["remote", "local"], 1, total, _env("TIERED_BENCH_VALUE", 1024), _env("TIERED_BENCH_BATCH_KB", 16))
        ends = _wait_tiered(bs, root / "data", "remote", 1)
        client = endpoint.client()
        objects = sorted((o["Key"], o["Size"]) for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=endpoint.bucket, Prefix=prefix) for o in page.get("Contents", []) if o["Key"].endswith(".log"))
        raw = sum(size for _, size in objects)

        def cpu() -> float:  # the broker process's CPU seconds (user + system)
            return cpu_seconds(broker.proc.pid)

        def others() -> float:
            """CPU seconds of every other process of the run: this one (the raw GETs' client), the kcats
            it has waited for, and its live children but the broker (the S3 server)."""
            done = resource.getrusage(resource.RUSAGE_CHILDREN)
            total = time.process_time() + done.ru_utime + done.ru_stime
            for pid in live_children():
                if pid != broker.proc.pid:
                    total += cpu_seconds(pid)
            return total

        all_cpu: dict[str, list[float]] = {k: [] for k in ("raw", "kcat remote", "kcat local",
                                                             "python remote", "python local")}

        def timed(run, name: str) -> tuple[float, float]:
            c0, o0 = cpu(), others()
            t = run()
            c = cpu() - c0
            all_cpu[name].append(c + others() - o0)
            return t, c

        # The baseline is what a reader of these objects straight from the server gets: one stream,
        # the same objects in offset order, each a whole-object GET read with one read() (boto3's
        # fastest path). Runs interleave, best of each: the host is shared.
        def raw_get() -> float:
            t0 = time.perf_counter()
            got = sum(len(client.get_object(Bucket=endpoint.bucket, Key=k)["Body"].read()) for k, _ in objects)
            t = time.perf_counter() - t0
            assert got == raw, (got, raw)
            return t

        paths = {
            "raw": raw_get,
            "kcat remote": lambda: _kcat(bs, "remote", ends),
            "kcat local": lambda: _kcat(bs, "local", ends),
            "python remote": lambda: _consume(bs, "remote", ends)[2],
            "python local": lambda: _consume(bs, "local", ends)[2],
        }
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in paths}
        for _ in range(_env("TIERED_BENCH_RUNS", 3)):
            for name, run in paths.items():
                runs[name].append(timed(run, name))
        best = {k: min(v) for k, v in runs.items()}
        # every process's CPU in each path's best run, and the cores it kept busy meanwhile
        best_all = {k: all_cpu[k][runs[k].index(best[k])] for k in runs}
        mb = raw / MIB
        rate = {k: mb / t for k, (t, _) in best.items()}
        tag = f"[{endpoint.name}]"
        print(f"{tag} {len(objects)} segment objects, {mb:.0f} MiB; the same records in a local-only topic")
        labels = {
            "raw": "raw boto3 GET of the segment objects     ",
            "kcat remote": "catch-up kcat (librdkafka), S3 tier      ",
            "kcat local": "catch-up kcat (librdkafka), local topic  ",
            "python remote": "catch-up confluent-kafka Python, S3 tier ",
            "python local": "catch-up confluent-kafka Python, local   ",
        }
        for k, label in labels.items():
            t, c = best[k]
            extra = "" if k == "raw" else f"   broker CPU {c * 1000 / mb:5.2f} ms/MiB"
            print(f"{tag} {label}: {rate[k]:8.1f} MiB/s ({t:6.2f} s){extra}")
        print(f"{tag}   (all runs, s: " + "; ".join(
            f"{k} " + " ".join(f"{t:.2f}" for t, _ in v) for k, v in runs.items()) + ")")
        print(f"{tag}   (all runs, broker CPU ms/MiB: " + "; ".join(
            f"{k} " + " ".join(f"{c * 1000 / mb:.2f}" for _, c in runs[k]) for k in ("kcat remote", "kcat local")) + ")")
        print(f"{tag} RATIO kcat S3 tier/raw GET              : {rate['kcat remote'] / rate['raw']:5.2f}   (target >= 0.85)")
        print(f"{tag} RATIO kcat S3 tier/local topic          : {rate['kcat remote'] / rate['kcat local']:5.2f}")
        print(f"{tag} RATIO broker CPU/MiB, kcat S3 tier/local: "
              f"{best['kcat remote'][1] / best['kcat local'][1]:5.2f}   (target <= 1.3)")
        print(f"{tag} RATIO Python S3 tier/raw GET            : {rate['python remote'] / rate['raw']:5.2f}")
        for k in ("raw", "kcat remote", "kcat local"):
            print(f"{tag} CPU of every process, {k:<12}: {best_all[k] * 1000 / mb:5.2f} ms/MiB, "
                  f"{best_all[k] / best[k][0]:4.2f} of {os.cpu_count()} cores busy")
        # what the remote catch-up could reach with every core busy, at the CPU per MiB every process
        # spent in it (the S3 server, kcat and the broker share the cores): the ratio cannot pass this
        # on this machine unless some process spends less per byte
        cores = os.cpu_count() or 1
        ceiling = mb / best_all["kcat remote"] * cores
        print(f"{tag} kcat S3 tier with all {cores} cores busy     : {ceiling:8.1f} MiB/s, "
              f"{ceiling / rate['raw']:4.2f} of raw GETs (the ratio's ceiling here)")
        print(f"{tag} RATIO Python S3 tier/local topic        : {rate['python remote'] / rate['python local']:5.2f}")
    finally:
        rc = broker.stop()
        if rc not in (0, None):
            print(f"broker exit code {rc}:\n{broker.log_text()[-3000:]}")
        if endpoint._stop is not None:
            endpoint._stop()
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# 2. in-process: the RLM read path alone, and the copy task
# ---------------------------------------------------------------------------------------------
def bench_inproc() -> None:
    from helpers import Logs

    from tieredlog.log.config import LogConfig
    from tieredlog.log.types import FetchIsolation, TopicPartition
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.records.batch import iter_headers
    from tieredlog.records.record import build_batch
    from tieredlog.rlm.config import RemoteLogManagerConfig
    from tieredlog.rlm.manager import RemoteLogManager
    from tieredlog.rlm.partition_state import PartitionState
    from tieredlog.rlm.pool import TaskContext
    from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager
    from tieredlog.rsm.local import LocalTieredStorage

    total = _env("TIERED_BENCH_MB", 1024) * MIB
    root = Path(tempfile.mkdtemp(prefix="bench-tiered-"))
    try:
        cfg = LogConfig(segment_bytes=64 << 20, remote_storage_enable=True, local_retention_bytes=1, retention_ms=-1,
                        file_delete_delay_ms=0, message_timestamp_after_max_ms=1 << 62,
                        message_timestamp_before_max_ms=1 << 62)
        plog = UnifiedLog(root / "logs" / "bench-0", cfg, topic_id=uuid.uuid4())
        value = os.urandom(1000)
        batch = build_batch([(b"k%d" % i, value, [], None) for i in range(16)])
        while plog.size < total:
            plog.append_as_leader(batch, 0)
        plog.roll()
        plog.update_high_watermark(plog.log_end_offset)
        rolled = plog.segments[:-1]
        nbytes = sum(s.size for s in rolled)
        end = plog.next_segment_base_offset(rolled[-1])
        print(f"in-process: {nbytes / MIB:.0f} MiB in {len(rolled)} segments, batches of {len(batch)} B")

        plain = root / "plain"
        plain.mkdir()
        t0 = time.perf_counter()
        for s in rolled:
            for p in (s.log_path, s.offset_index_path, s.time_index_path):
                shutil.copyfile(p, plain / p.name)
        t_plain = time.perf_counter() - t0

        rsm = LocalTieredStorage(root / "remote")
        rsm.configure({"broker.id": 0})
        cfg = RemoteLogManagerConfig(log_dirs=(str(root / "logs"),))
        rlm = RemoteLogManager(cfg, Logs(plog), rsm, InMemoryRemoteLogMetadataManager())
        rlm.start()
        state = PartitionState(TopicPartition("bench", 0), rlm._tip(plog.topic_partition, plog))
        t0 = time.perf_counter()
        rlm.copy_task(state).run(TaskContext())
        t_copy = time.perf_counter() - t0
        print(f"copy  plain file copy          : {_rate(nbytes, t_plain)}")
        print(f"copy  RLM copy task            : {_rate(nbytes, t_copy)}   {t_plain / t_copy:.2f}x of plain")

        # local: UnifiedLog.read, whole batches only (the partial tail batch is read again next time)
        t0 = time.perf_counter()
        off = got = 0
        while off < end:
            info = plog.read(off, FETCH, FetchIsolation.HIGH_WATERMARK)
            data = info.records.read_bytes() if hasattr(info.records, "read_bytes") else bytes(info.records)
            whole = 0
            for pos, h in iter_headers(data):
                if pos + h.size > len(data):
                    break
                whole, off = pos + h.size, h.next_offset
            got += whole
        t_local = time.perf_counter() - t0

        direct, t_direct = _read_files(sorted((root / "remote").rglob("*.log")))

        plog.delete_old_segments()
        t0 = time.perf_counter()
        off = remote = 0
        while off < end:
            data = rlm.read(TopicPartition("bench", 0), off, FETCH, timeout=60)
            remote += len(data)
            *_, (_, h) = iter_headers(data)
            off = h.next_offset
        t_remote = time.perf_counter() - t0
        rlm.shutdown()
        print(f"read  UnifiedLog.read (local): {_rate(got, t_local)}")
        print(f"read  remote objects as files  : {_rate(direct, t_direct)}")
        print(f"read  RemoteLogManager.read    : {_rate(remote, t_remote)}   "
              f"{t_local / t_remote:.2f}x of local, {t_direct / t_remote:.2f}x of direct file reads")
        assert got == remote == direct == nbytes, (got, remote, direct, nbytes)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    skip = set(filter(None, os.environ.get("TIERED_BENCH_SKIP", "").split(",")))
    if "broker" not in skip:
        bench_broker()
    if "inproc" not in skip:
        bench_inproc()
    if "s3" not in skip:
        bench_s3()


if __name__ == "__main__":
    main()
