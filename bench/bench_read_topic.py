"""``spark_readers.read_topic`` (Arrow, no JVM) beside raw reads of the same objects, in one run.

    python -m bench read_topic        # READ_BENCH_MB (default 256), READ_BENCH_RUNS (default 2)

One partition of READ_BENCH_MB of 1 KiB records (uncompressed batches of 100, values 4x compressible) in
32 MiB segments, written by tieredlog's LogSegment (with its offset and time indexes) and copied by
three RSMs: LocalTieredStorage (a folder), the S3 backend and the chunked plugin (zstd + AES-GCM, 4 MiB
chunks) over the S3 backend, both into SeaweedFS on loopback. Then, best of READ_BENCH_RUNS each, one
after another on one core:

- read_topic over the folder (``path=file://...``) beside plain reads of the same ``.log`` files;
- read_topic over SeaweedFS (``path=s3://...``) beside raw boto3 GETs of the same ``.log`` objects;
- read_topic over the chunked plugin (configured with the broker's ``rsm.config.*``) beside the plain
  S3 backend.

read_topic includes decoding every record to Arrow columns (the rows are counted); the raw reads only
move bytes. Ratios are read_topic's rate over the raw rate (1.0 = as fast as moving the bytes).

Then, on a machine of two cores or more (``READ_BENCH_PINNED=0`` skips it), the S3 pair again with the
S3 server's threads pinned to core 0 and this process's to the others: the store then has a core of
its own, as it has machines of its own in production, and the client no longer takes CPU from it.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from s3servers import S3Endpoint, start_seaweedfs  # noqa: E402

from bench.proc_cpu import cpu_seconds, live_children, pin  # noqa: E402
from spark_readers import read_topic  # noqa: E402
from tieredlog.formats.checkpoints import encode_leader_epoch_checkpoint  # noqa: E402
from tieredlog.log.producer_state import encode_snapshot  # noqa: E402
from tieredlog.log.segment import LogSegment  # noqa: E402
from tieredlog.records.batch import iter_headers  # noqa: E402
from tieredlog.records.record import build_batch  # noqa: E402
from tieredlog.rsm.api import (  # noqa: E402
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
    TopicIdPartition,
)
from tieredlog.rsm.local import LocalTieredStorage  # noqa: E402
from tieredlog.rsm.registry import load_remote_storage_manager  # noqa: E402

MIB = 1024 * 1024
TOPIC = "bench-read"
SEGMENT_BYTES = 32 * MIB
PER_BATCH = 100
KEY = base64.b64encode(bytes(range(32))).decode()


def write_segments(workdir: Path, total: int) -> list[tuple[RemoteLogSegmentMetadata, LogSegmentData]]:
    """Segments of one partition. One batch is built and re-stamped with each base offset (the CRC
    does not cover it), so writing costs little beside the reads measured."""
    rng = random.Random(1)
    records = [(b"k%d" % i, rng.randbytes(256) * 4, [], 1_700_000_000_000 + i) for i in range(PER_BATCH)]
    template = bytes(build_batch(records, base_offset=0))
    tp = TopicIdPartition(uuid.uuid4(), TOPIC, 0)
    out = []
    offset = 0
    written = 0
    n = 0
    while written < total:
        folder = workdir / f"seg-{n}"
        seg = LogSegment(folder, offset, active=True)
        start = offset
        while seg.size + len(template) <= SEGMENT_BYTES and written < total:
            stamped = bytearray(template)
            struct.pack_into(">q", stamped, 0, offset)
            batch = bytes(stamped)
            seg.append(batch, [h for _, h in iter_headers(batch)])
            offset += PER_BATCH
            written += len(template)
        seg.close()
        snapshot = folder / "empty.snapshot"
        snapshot.write_bytes(encode_snapshot([]))
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, offset - 1,
                                      1_700_000_000_000 + PER_BATCH, 0, 1_700_000_000_000 + n, seg.size, {0: start})
        out.append((md, LogSegmentData(seg.log_path, seg.offset_index_path, seg.time_index_path, None, snapshot,
                                       encode_leader_epoch_checkpoint([(0, 0)]))))
        n += 1
    return out


def _children_cpu() -> float:
    """CPU seconds of this process's child processes still running (the S3 server)."""
    return sum(cpu_seconds(pid) for pid in live_children())


# CPU seconds of the best run of the last call of best(): (this process, the S3 server)
LAST_CPU: list[tuple[float, float]] = []


def best(fn: Callable[[], int], runs: int) -> tuple[float, int]:
    """(best seconds, what fn returned); the best run's CPU seconds go to LAST_CPU."""
    times, result = [], 0
    for _ in range(runs):
        c0, s0, t0 = time.process_time(), _children_cpu(), time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0, time.process_time() - c0, _children_cpu() - s0))
    LAST_CPU[:] = [min(times)[1:]]
    return min(times)[0], result


def rows_of(options: dict[str, str]) -> Callable[[], int]:
    def run() -> int:
        return sum(batch.num_rows for batch in read_topic(TOPIC, options))
    return run


def line(what: str, nbytes: int, seconds: float, against: float | None = None) -> float:
    rate = nbytes / MIB / seconds
    ratio = f"   x{rate / against:.2f}" if against else "      "
    me, server = LAST_CPU[0]
    cpu = f"   CPU ms/MiB: reader {me * 1000 * MIB / nbytes:5.2f}, S3 server {server * 1000 * MIB / nbytes:5.2f}"
    print(f"  {what:<46} {seconds:7.2f} s {rate:8.1f} MiB/s{ratio}{cpu}", flush=True)
    return rate


def s3_options(endpoint: S3Endpoint, prefix: str) -> dict[str, str]:
    return {"storage.s3.endpoint.url": endpoint.url, "storage.s3.region": endpoint.region,
            "storage.s3.path.style.access.enabled": "true", "storage.aws.access.key.id": endpoint.access_key,
            "storage.aws.secret.access.key": endpoint.secret_key, "path": f"s3://{endpoint.bucket}/{prefix}"}


def chunked_properties(endpoint: S3Endpoint, prefix: str) -> dict[str, str]:
    """The broker's properties for the chunked plugin over S3, as the reader takes them."""
    backend = {f"rsm.config.chunked.backend.config.{k}": str(v)
               for k, v in endpoint.rsm_configs(prefix=prefix).items()}
    return {"remote.log.storage.manager.class.name": "chunked", "rsm.config.chunked.backend": "s3", **backend,
            "rsm.config.chunk.size": str(4 * MIB), "rsm.config.compression.enabled": "true",
            "rsm.config.encryption.enabled": "true", "rsm.config.encryption.key.id": "k1",
            "rsm.config.encryption.keys.k1": KEY}


def copy_all(rsm: RemoteStorageManager, segments: list[tuple[RemoteLogSegmentMetadata, LogSegmentData]]) -> None:
    try:
        for md, data in segments:
            rsm.copy_log_segment_data(md, data)
    finally:
        rsm.close()


def pinned_to_own_cores(endpoint: S3Endpoint, prefix: str, raw_gets: Callable[[], int], size: int, records: int,
                        runs: int) -> None:
    """Raw GETs and read_topic over S3 with the S3 server on core 0 and this process on the others."""
    everything = os.sched_getaffinity(0)
    others = everything - {0}
    servers = live_children()
    print(f"SeaweedFS on core 0, this process on cores {','.join(map(str, sorted(others)))}:")
    try:
        for pid in servers:
            pin(pid, {0})
        pin(os.getpid(), others)
        t_raw, n = best(raw_gets, runs)
        raw = line("raw boto3 GETs of the .log objects", n, t_raw)
        t, rows = best(rows_of(s3_options(endpoint, prefix)), runs)
        assert rows == records, (rows, records)
        line("read_topic, S3 backend", size, t, raw)
    finally:
        for pid in [os.getpid(), *servers]:
            pin(pid, everything)


def main() -> None:
    total = int(os.environ.get("READ_BENCH_MB", "256")) * MIB
    runs = int(os.environ.get("READ_BENCH_RUNS", "2"))
    workdir = Path(tempfile.mkdtemp(prefix="bench-read-topic-"))
    endpoint = start_seaweedfs()
    try:
        segments = write_segments(workdir / "local", total)
        size = sum(md.segment_size_in_bytes for md, _ in segments)
        records = segments[-1][0].end_offset + 1
        print(f"{size / MIB:.0f} MiB, {records} records of 1 KiB in {len(segments)} segments; best of {runs}")
        folder = workdir / "remote"
        copy_all(LocalTieredStorage(folder), segments)
        plain_prefix, chunked_prefix = f"plain-{uuid.uuid4().hex[:6]}/", f"chunked-{uuid.uuid4().hex[:6]}/"
        copy_all(load_remote_storage_manager("s3", None, endpoint.rsm_configs(prefix=plain_prefix)), segments)
        chunked = chunked_properties(endpoint, chunked_prefix)
        copy_all(load_remote_storage_manager("chunked", None, {k.removeprefix("rsm.config."): v
                                                                for k, v in chunked.items()
                                                                if k.startswith("rsm.config.")}), segments)

        log_files = sorted(folder.rglob("*.log"))

        def plain_files() -> int:
            return sum(len(p.read_bytes()) for p in log_files)

        client = endpoint.client()
        keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=endpoint.bucket, Prefix=plain_prefix)["Contents"]
                      if o["Key"].endswith(".log"))

        def raw_gets() -> int:
            return sum(len(client.get_object(Bucket=endpoint.bucket, Key=k)["Body"].read()) for k in keys)

        print("local folder:")
        t_raw, n = best(plain_files, runs)
        raw = line("plain reads of the .log files", n, t_raw)
        t, rows = best(rows_of({"path": folder.as_uri()}), runs)
        assert rows == records, (rows, records)
        line("read_topic (fetch + decode to Arrow)", size, t, raw)
        print("SeaweedFS:")
        t_raw, n = best(raw_gets, runs)
        raw = line("raw boto3 GETs of the .log objects", n, t_raw)
        raw_cpu = sum(LAST_CPU[0]) / n
        t, rows = best(rows_of(s3_options(endpoint, plain_prefix)), runs)
        assert rows == records, (rows, records)
        s3_rate = line("read_topic, S3 backend", size, t, raw)
        read_cpu = sum(LAST_CPU[0]) / size
        # With every core busy, rates go as the inverse of the CPU each byte costs, client and server
        # together: the ratio read_topic can reach on this machine whatever its overlap of fetch and decode.
        print(f"  CPU per byte, GETs + server / read_topic + server: {raw_cpu / read_cpu:.2f} "
              f"(the ratio's ceiling when the {os.cpu_count()} cores are the limit)", flush=True)
        t, rows = best(rows_of(chunked), runs)
        assert rows == records, (rows, records)
        line("read_topic, chunked+zstd+AES-GCM over S3 (vs S3)", size, t, s3_rate)
        if (os.cpu_count() or 1) >= 2 and os.environ.get("READ_BENCH_PINNED", "1") != "0":
            pinned_to_own_cores(endpoint, plain_prefix, raw_gets, size, records, runs)
    finally:
        if endpoint._stop is not None:
            endpoint._stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
