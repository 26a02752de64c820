"""The RLM copy task beside a plain copy of the same files, in one run.

A partition log of ``REMOTE_COPY_BENCH_MB`` MiB (default 512) in rolled segments of
``REMOTE_COPY_BENCH_SEGMENT_MB`` MiB (default 64), each with its offset and time indexes and producer
snapshot, is tiered by the real copy task (``RemoteLogManager.copy_task(...).run``: RLMM
COPY_SEGMENT_STARTED, the RSM's upload of the segment and its indexes, the manifest, FINISHED) and,
beside it, the same files are copied plainly:

- local: ``LocalTieredStorage`` vs ``shutil.copyfile`` of the same files (copy_file_range/sendfile in
  the kernel), and vs that copy followed by an fsync of each file (the local backend fsyncs every
  object: a remote tier must survive a crash);
- S3 (SeaweedFS on loopback, ``REMOTE_COPY_BENCH_S3=moto`` for moto): ``S3RemoteStorageManager`` with
  its defaults vs raw boto3 uploads of the same files: boto3's managed ``upload_file`` (s3transfer's
  defaults: multipart above 8 MiB, 8 MiB parts, 10 threads) and a plain sequential multipart upload
  (8 MiB parts, one after the other).

Best of ``REMOTE_COPY_BENCH_RUNS`` (default 3) interleaved runs each (the host is shared). Printed: MiB/s,
the CPU seconds per MiB of this process (every thread: boto3 and the copy run here), and the
ratios (targets: RLM copy >= 0.9x a plain copy, >= 1x raw multipart PUTs).

- producer: a real broker (local backend) holds the same amount in a tiered topic whose copies are
  disabled (``remote.log.copy.disable``); a prober sends one small acks=1 Produce at a time to a
  topic of its own, first with nothing else running, then while the copies, enabled, tier the backlog.
  Printed: the prober's p50 / p99 / max in both phases, and the copy's MiB/s in the broker.

``REMOTE_COPY_BENCH_SKIP`` = comma list of ``local``, ``s3``, ``producer``.

    python -m bench bench_remote_copy
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
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "tests" / "harness"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

MIB = 1 << 20
RAW_PART = 8 * MIB  # s3transfer's default part size, used by both raw uploads


def _env(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(prepare: Callable[[], Callable[[], None]]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one run; ``prepare`` (untimed: a broker configures
    its RSM once, not per copy) returns the run."""
    run = prepare()
    c0, t0 = _cpu(), time.perf_counter()
    run()
    return time.perf_counter() - t0, _cpu() - c0


class Source:
    """A partition log with rolled segments, and what the copy task would upload of each."""

    def __init__(self, root: Path, total: int, segment_bytes: int) -> None:
        from tieredlog.log.config import LogConfig
        from tieredlog.log.unified_log import UnifiedLog
        from tieredlog.records.record import build_batch

        cfg = LogConfig(segment_bytes=segment_bytes, remote_storage_enable=True, local_retention_bytes=-2,
                        retention_ms=-1, file_delete_delay_ms=0, message_timestamp_after_max_ms=1 << 62,
                        message_timestamp_before_max_ms=1 << 62)
        self.log = UnifiedLog(root / "logs" / "bench-0", cfg, topic_id=uuid.uuid4())
        value = os.urandom(1000)
        batch = build_batch([(b"k%d" % i, value, [], None) for i in range(16)])
        while self.log.size < total:
            self.log.append_as_leader(batch, 0)
        self.log.roll()
        self.log.update_high_watermark(self.log.log_end_offset)
        self.rolled = self.log.segments[:-1]
        self.files: list[Path] = []
        for s in self.rolled:
            snapshot = self.log.producer_snapshot_for(s)
            self.files += [Path(s.log_path), Path(s.offset_index_path), Path(s.time_index_path)]
            if snapshot is not None:
                self.files.append(Path(snapshot))
        self.nbytes = sum(f.stat().st_size for f in self.files)
        self.log_bytes = sum(s.size for s in self.rolled)


def rlm_copier(source: Source, rsm: Any) -> Callable[[], None]:
    """A started RLM over ``source`` and a fresh RLMM (its copy task copies every segment again);
    the returned run tiers every rolled segment with the real copy task into ``rsm``."""
    from helpers import Logs

    from tieredlog.log.types import TopicPartition
    from tieredlog.rlm.config import RemoteLogManagerConfig
    from tieredlog.rlm.manager import RemoteLogManager
    from tieredlog.rlm.partition_state import PartitionState
    from tieredlog.rlm.pool import TaskContext
    from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager

    plog = source.log
    cfg = RemoteLogManagerConfig(log_dirs=(str(plog.dir.parent),))
    rlm = RemoteLogManager(cfg, Logs(plog), rsm, InMemoryRemoteLogMetadataManager())
    rlm.start()
    state = PartitionState(TopicPartition("bench", 0), rlm._tip(plog.topic_partition, plog))

    def run() -> None:
        try:
            rlm.copy_task(state).run(TaskContext())
        finally:
            rlm.shutdown()
        last = plog.next_segment_base_offset(source.rolled[-1]) - 1
        assert state.copied_offset == last, (state.copied_offset, last)

    return run


def _report(tag: str, mb: float, runs: dict[str, list[tuple[float, float]]], labels: dict[str, str]) -> dict[str, float]:
    best = {k: min(v) for k, v in runs.items()}
    rate = {k: mb / t for k, (t, _) in best.items()}
    width = max(len(v) for v in labels.values())
    for k, label in labels.items():
        t, c = best[k]
        print(f"[{tag}] {label:<{width}}: {rate[k]:8.1f} MiB/s ({t:6.2f} s)   CPU {c * 1000 / mb:6.2f} ms/MiB")
    print(f"[{tag}]   (all runs, s: " + "; ".join(
        f"{k} " + " ".join(f"{t:.2f}" for t, _ in v) for k, v in runs.items()) + ")")
    return rate


def bench_local(source: Source, root: Path, runs_n: int) -> None:
    from tieredlog.rsm.local import LocalTieredStorage

    def fresh(name: str) -> Path:
        d = root / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    def plain(sync: bool) -> Callable[[], Callable[[], None]]:
        def prepare() -> Callable[[], None]:
            dest = fresh("plain")
            return lambda: run(dest)

        def run(dest: Path) -> None:
            for f in source.files:
                shutil.copyfile(f, dest / f.name)
                if sync:
                    fd = os.open(dest / f.name, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
        return prepare

    def copy() -> Callable[[], None]:
        rsm = LocalTieredStorage(fresh("remote"))
        rsm.configure({"broker.id": 0})
        return rlm_copier(source, rsm)

    paths = {"plain": plain(False), "plain+fsync": plain(True), "rlm": copy}
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in paths}
    for _ in range(runs_n):
        for name, run in paths.items():
            runs[name].append(_timed(run))
    mb = source.nbytes / MIB
    rate = _report("local", mb, runs, {
        "plain": "shutil.copyfile of the files",
        "plain+fsync": "shutil.copyfile + fsync each",
        "rlm": "RLM copy task, LocalTieredStorage",
    })
    print(f"[local] RATIO RLM copy/plain copy         : {rate['rlm'] / rate['plain']:5.2f}   (target >= 0.9)")
    print(f"[local] RATIO RLM copy/plain copy + fsync : {rate['rlm'] / rate['plain+fsync']:5.2f}")


def bench_s3(source: Source, runs_n: int) -> None:
    from boto3.s3.transfer import TransferConfig
    from s3servers import start_moto, start_seaweedfs

    from tieredlog.rsm.s3 import S3RemoteStorageManager

    which = os.environ.get("REMOTE_COPY_BENCH_S3", "seaweedfs")
    endpoint = (start_moto if which == "moto" else start_seaweedfs)()
    try:
        client = endpoint.client(max_pool_connections=32)
        bucket = endpoint.bucket
        managed = TransferConfig(multipart_threshold=RAW_PART, multipart_chunksize=RAW_PART, max_concurrency=10)

        def sequential(key: str, path: Path) -> None:
            if path.stat().st_size <= RAW_PART:
                client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
                return
            upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
            parts = []
            with path.open("rb") as f:
                while chunk := f.read(RAW_PART):
                    n = len(parts) + 1
                    etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=n, Body=chunk)["ETag"]
                    parts.append({"PartNumber": n, "ETag": etag})
            client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts})

        def raw(put: Callable[[str, Path], None]) -> Callable[[], Callable[[], None]]:
            def run() -> None:
                prefix = f"raw-{uuid.uuid4().hex[:8]}/"
                for f in source.files:
                    put(prefix + f.name, f)
            return lambda: run

        def copy() -> Callable[[], None]:
            # configured before the clock starts, as a broker does once (the RLM's shutdown closes it)
            rsm = S3RemoteStorageManager()
            rsm.configure(endpoint.rsm_configs(prefix=f"rlm-{uuid.uuid4().hex[:8]}/"))
            return rlm_copier(source, rsm)

        paths = {
            "managed": raw(lambda k, p: client.upload_file(str(p), bucket, k, Config=managed)),
            "sequential": raw(sequential),
            "rlm": copy,
        }
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in paths}
        for _ in range(runs_n):
            for name, run in paths.items():
                runs[name].append(_timed(run))
        mb = source.nbytes / MIB
        tag = endpoint.name
        rate = _report(tag, mb, runs, {
            "managed": "raw boto3 upload_file (8 MiB parts, 10 threads)",
            "sequential": "raw boto3 multipart, sequential 8 MiB parts",
            "rlm": "RLM copy task, S3RemoteStorageManager",
        })
        best_raw = max(rate["managed"], rate["sequential"])
        print(f"[{tag}] RATIO RLM copy/best raw multipart PUT : {rate['rlm'] / best_raw:5.2f}   (target >= 1)")
        print(f"[{tag}] RATIO RLM copy/raw sequential PUT     : {rate['rlm'] / rate['sequential']:5.2f}")
    finally:
        if endpoint._stop is not None:
            endpoint._stop()


def bench_producer(total: int, segment: int) -> None:
    import threading

    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    from bench.bench_tiered import _list_offset, _produce
    from bench.latency_probe import p50_p99_max, probe

    with tempfile.TemporaryDirectory(prefix="bench-remote-copy-broker-") as d:
        b = BrokerProcess(Path(d) / "data", {"remote.log.manager.task.interval.ms": "200",
                                             "rlmm.config.remote.log.metadata.topic.num.partitions": "1"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            for f in admin.create_topics([NewTopic("quiet", 1, 1), NewTopic("backlog", 1, 1, config={
                    "segment.bytes": str(segment), "retention.ms": "-1", "remote.storage.enable": "true",
                    "remote.log.copy.disable": "true"})]).values():
                f.result(30)
            _produce(b.bootstrap, ["backlog"], 1, total, 1024, 16)
            end = _list_offset(b.bootstrap, "backlog", 0, -1)

            def probed(until: Callable[[], bool]) -> tuple[list[float], float]:
                lat: list[float] = []
                stop = threading.Event()
                prober = threading.Thread(target=probe, args=(b.bootstrap, "quiet", stop, lat), daemon=True)
                prober.start()
                t0 = time.perf_counter()
                while not until():
                    time.sleep(0.05)
                t = time.perf_counter() - t0
                stop.set()
                prober.join(30)
                return lat[5:], t  # the first round trips open the connection

            idle_until = time.perf_counter() + 5
            idle, _ = probed(lambda: time.perf_counter() > idle_until)
            res = ConfigResource("topic", "backlog", incremental_configs=[ConfigEntry(
                "remote.log.copy.disable", "false", incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([res])[res].result(30)
            rolled = sum(f.stat().st_size for f in sorted((Path(d) / "data" / "backlog-0").glob("*.log"))[:-1])
            last_rolled = int(sorted((Path(d) / "data" / "backlog-0").glob("*.log"))[-1].name[:20]) - 1
            busy, t_copy = probed(lambda: _list_offset(b.bootstrap, "backlog", 0, -5) >= last_rolled)
            print(f"[producer] tiered {rolled / MIB:.0f} MiB of {end} records in the broker: "
                  f"{rolled / MIB / t_copy:8.1f} MiB/s ({t_copy:.2f} s, task interval 200 ms)")
            print(f"[producer] {'quiet partition produce':<26}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'probes':>8}")
            for label, lat in (("nothing else running", idle), ("while copying", busy)):
                p50, p99, mx = p50_p99_max(lat)
                print(f"[producer] {label:<26}{p50:9.1f}{p99:9.1f}{mx:9.1f}{len(lat):8d}")
            (i50, i99, _), (b50, b99, _) = p50_p99_max(idle), p50_p99_max(busy)
            print(f"[producer] RATIO while copying/idle: p50 {b50 / i50:.2f}x, p99 {b99 / i99:.2f}x")
        finally:
            b.stop()


def main() -> None:
    skip = set(filter(None, os.environ.get("REMOTE_COPY_BENCH_SKIP", "").split(",")))
    total = _env("REMOTE_COPY_BENCH_MB", 512) * MIB
    segment = _env("REMOTE_COPY_BENCH_SEGMENT_MB", 64) * MIB
    runs_n = _env("REMOTE_COPY_BENCH_RUNS", 3)
    root = Path(tempfile.mkdtemp(prefix="bench-remote-copy-"))
    try:
        if not {"local", "s3"} <= skip:
            source = Source(root, total, segment)
            print(f"{len(source.rolled)} rolled segments, {source.log_bytes / MIB:.0f} MiB of records; "
                  f"{len(source.files)} files, {source.nbytes / MIB:.0f} MiB with indexes and snapshots")
        if "local" not in skip:
            bench_local(source, root, runs_n)
        if "s3" not in skip:
            bench_s3(source, runs_n)
        if "producer" not in skip:
            bench_producer(total, segment)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
