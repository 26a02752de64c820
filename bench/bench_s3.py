"""S3 backend throughput against the same server's raw boto3 throughput, and the chunked plugin's
read cost. Servers: moto (server mode) and SeaweedFS on loopback, started and stopped here.

    python -m bench s3            # or: python -m bench.bench_s3

Figures: MiB/s for a segment copy (RSM) vs raw PUTs of the same bytes, a whole-segment remote read
vs a raw GET, 1 MiB ranged reads vs raw ranged GETs, the CPU of one small ranged GET through the RSM
vs botocore's GetObject, and for the chunked plugin the bytes fetched
from the backend per byte served for small and 1 MiB ranged reads, with and without the cache.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from s3servers import S3Endpoint, start_moto, start_seaweedfs  # noqa: E402

from tieredlog.rsm.registry import load_remote_storage_manager  # noqa: E402
from tieredlog.rsm.s3 import MIB, S3RemoteStorageManager  # noqa: E402
from tieredlog.rsm.testing import make_segment, read_all  # noqa: E402

SEGMENT = 32 * MIB
PART = 8 * MIB
RANGED_READS = 24


def _rate(nbytes: int, seconds: float) -> float:
    return nbytes / MIB / seconds if seconds > 0 else float("inf")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def raw_put(client, bucket: str, key: str, path: Path) -> None:
    """A plain sequential multipart upload with the RSM's part size (the RSM uploads parts in parallel)."""
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    with path.open("rb") as f:
        number = 1
        while chunk := f.read(PART):
            etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=chunk)["ETag"]
            parts.append({"PartNumber": number, "ETag": etag})
            number += 1
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts})


def bench_server(endpoint: S3Endpoint, workdir: Path) -> None:
    client = endpoint.client()
    seg = make_segment(workdir / endpoint.name, size=SEGMENT, seed=1)
    rsm = S3RemoteStorageManager()
    rsm.configure(endpoint.rsm_configs(prefix=f"bench-{endpoint.name}/",
                                       **{"storage.s3.multipart.upload.part.size": str(PART)}))
    raw_key = f"raw-{endpoint.name}/segment.log"

    t_raw_put = _timed(lambda: raw_put(client, endpoint.bucket, raw_key, seg.data.log_segment))
    t_copy = _timed(lambda: rsm.copy_log_segment_data(seg.metadata, seg.data))
    t_raw_get = _timed(lambda: client.get_object(Bucket=endpoint.bucket, Key=raw_key)["Body"].read())
    t_fetch = _timed(lambda: read_all(rsm.fetch_log_segment(seg.metadata, 0)))

    rng = random.Random(2)
    starts = [rng.randrange(SEGMENT - MIB) for _ in range(RANGED_READS)]
    t_raw_ranges = _timed(lambda: [client.get_object(Bucket=endpoint.bucket, Key=raw_key,
                                                     Range=f"bytes={s}-{s + MIB - 1}")["Body"].read() for s in starts])
    t_rsm_ranges = _timed(lambda: [read_all(rsm.fetch_log_segment(seg.metadata, s, s + MIB - 1)) for s in starts])
    assert read_all(rsm.fetch_log_segment(seg.metadata, starts[0], starts[0] + 9)) == seg.log[starts[0]:starts[0] + 10]

    name = endpoint.name
    print(f"[{name}] copy of a {SEGMENT // MIB} MiB segment (+5 index objects, manifest): "
          f"{_rate(SEGMENT, t_copy):7.1f} MiB/s   raw multipart PUT {_rate(SEGMENT, t_raw_put):7.1f} MiB/s   "
          f"ratio {t_raw_put / t_copy:4.2f}")
    print(f"[{name}] whole-segment remote read:                      "
          f"{_rate(SEGMENT, t_fetch):7.1f} MiB/s   raw GET           {_rate(SEGMENT, t_raw_get):7.1f} MiB/s   "
          f"ratio {t_raw_get / t_fetch:4.2f}")
    print(f"[{name}] {RANGED_READS} x 1 MiB ranged reads:                         "
          f"{_rate(RANGED_READS * MIB, t_rsm_ranges):7.1f} MiB/s   raw ranged GET    "
          f"{_rate(RANGED_READS * MIB, t_raw_ranges):7.1f} MiB/s   ratio {t_raw_ranges / t_rsm_ranges:4.2f}")
    small_get_cpu(rsm, seg, endpoint.bucket, raw_key, name)
    rsm.delete_log_segment_data(seg.metadata)
    client.delete_object(Bucket=endpoint.bucket, Key=raw_key)
    rsm.close()


def small_get_cpu(rsm: S3RemoteStorageManager, seg, bucket: str, raw_key: str, name: str, n: int = 200) -> None:
    """The fixed CPU of one GET (1 KiB ranges, so the body costs nothing): the RSM's path (a presigned
    URL over a keep-alive pool) beside botocore's GetObject through the RSM's own client, interleaved."""
    rng = random.Random(5)
    starts = [rng.randrange(SEGMENT - 1024) for _ in range(n)]
    cpu = {"rsm": 0.0, "botocore": 0.0}
    for i, s in enumerate(starts):
        t0 = time.thread_time()
        if i % 2:
            read_all(rsm.fetch_log_segment(seg.metadata, s, s + 1023))
            cpu["rsm"] += time.thread_time() - t0
        else:
            rsm.client.get_object(Bucket=bucket, Key=raw_key, Range=f"bytes={s}-{s + 1023}")["Body"].read()
            cpu["botocore"] += time.thread_time() - t0
    ms = {k: v * 1000 / (n // 2) for k, v in cpu.items()}
    print(f"[{name}] CPU of one small ranged GET: RSM (presigned, keep-alive pool) {ms['rsm']:5.2f} ms   "
          f"botocore GetObject {ms['botocore']:5.2f} ms   ratio {ms['rsm'] / ms['botocore']:4.2f}")


def sequential(rsm, seg, label: str, server: str) -> None:
    """A consumer catching up: 1 MiB reads one after the other, starting mid-chunk."""
    before_f, before_s = rsm.stats.bytes_fetched, rsm.stats.bytes_served
    position, t0 = 1000, time.perf_counter()
    while position < SEGMENT:
        read_all(rsm.fetch_log_segment(seg.metadata, position, position + MIB - 1))
        position += MIB
    t = time.perf_counter() - t0
    fetched, served = rsm.stats.bytes_fetched - before_f, rsm.stats.bytes_served - before_s
    print(f"[chunked over {server}, 1 MiB chunks, {label}] sequential 1 MiB reads: "
          f"{_rate(served, t):7.1f} MiB/s, {fetched / served:5.2f} bytes fetched per byte served")


def bench_chunked(endpoint: S3Endpoint, workdir: Path) -> None:
    backend = {f"chunked.backend.config.{k}": v for k, v in endpoint.rsm_configs(
        prefix="bench-chunked/", **{"storage.s3.multipart.upload.part.size": str(PART)}).items()}
    seg = make_segment(workdir / "chunked", size=SEGMENT, seed=3)
    for label, extra in (("no cache", {}),
                         ("disk cache + 8 MiB prefetch", {"fetch.chunk.cache.path": str(workdir / "cache"),
                                                          "fetch.chunk.cache.prefetch.max.size": str(8 * MIB)})):
        rsm = load_remote_storage_manager("chunked", None, {
            "chunked.backend": "s3", **backend, "chunk.size": str(1 * MIB), **extra})
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        sequential(rsm, seg, label, endpoint.name)
        rng = random.Random(4)
        for size in (100, MIB):
            before_f, before_s = rsm.stats.bytes_fetched, rsm.stats.bytes_served
            t = _timed(lambda rsm=rsm, size=size, rng=rng: [read_all(rsm.fetch_log_segment(seg.metadata, s, s + size - 1))
                                for s in (rng.randrange(SEGMENT - size) for _ in range(RANGED_READS))])
            fetched, served = rsm.stats.bytes_fetched - before_f, rsm.stats.bytes_served - before_s
            warm = ", warm after the sequential pass" if extra else ""
            print(f"[chunked over {endpoint.name}, 1 MiB chunks, {label}{warm}] {RANGED_READS} random reads of "
                  f"{size:>7} B: {fetched / served:8.2f} bytes fetched per byte served, {t * 1000 / RANGED_READS:6.1f} ms/read")
        rsm.delete_log_segment_data(seg.metadata)
        rsm.close()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as tmp:
        workdir = Path(tmp)
        for start in (start_moto, start_seaweedfs):
            endpoint = start()
            try:
                bench_server(endpoint, workdir)
                if endpoint.name == "moto":
                    bench_chunked(endpoint, workdir)
            finally:
                if endpoint._stop is not None:
                    endpoint._stop()


if __name__ == "__main__":
    main()
