"""Many partitions caught up from the remote tier at once, beside raw parallel GETs of the same objects.

A topic of ``REMOTE_PARTS_BENCH_PARTITIONS`` partitions (default 32) tiered to an S3 server (SeaweedFS;
``REMOTE_PARTS_BENCH_S3=moto`` for moto), ``REMOTE_PARTS_BENCH_MB`` MiB in all (default 512), every
rolled segment remote only. Then, best of ``REMOTE_PARTS_BENCH_RUNS`` (default 2) interleaved runs:

- raw: the segment objects GET from the same server by as many threads as the broker's remote reader
  pool (``remote.log.reader.threads``, 10 by default), each object whole, with one read;
- kcat: one kcat per partition, all at once, each reading its partition from offset 0 to the end of
  its remote part, through one broker.

Printed: MiB/s of both, the ratio (target >= 0.8), and the broker's CPU per MiB.

``REMOTE_PARTS_BENCH_READ_AHEAD_MB`` (default ``128``, the broker's default) may list several bounds of
the broker's read-ahead memory (``remote.log.reader.read.ahead.max.bytes``), e.g. ``128,1024``: each
run then catches up once under each, set on the running broker in between, and each gets its own line.

    python -m bench bench_remote_partitions
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.bench_tiered import MIB, _env, _kcat, _produce, _wait_tiered, s3_tiered_broker
from bench.proc_cpu import cpu_seconds

READER_THREADS = 10  # the broker's remote.log.reader.threads default


def main() -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
    from s3servers import start_moto, start_seaweedfs

    if shutil.which("kcat") is None:
        raise SystemExit("bench_remote_partitions needs kcat (Debian package kcat; `make bench` installs it)")
    parts = _env("REMOTE_PARTS_BENCH_PARTITIONS", 32)
    total = _env("REMOTE_PARTS_BENCH_MB", 512) * MIB
    segment = max(1, total // parts // 4)  # four segments per partition: three remote, one active
    endpoint = (start_moto if os.environ.get("REMOTE_PARTS_BENCH_S3") == "moto" else start_seaweedfs)()
    root = Path(tempfile.mkdtemp(prefix="bench-remote-partitions-"))
    prefix = f"bench-{uuid.uuid4().hex[:8]}/"
    broker = s3_tiered_broker(endpoint, root, prefix)
    try:
        broker.start()
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("many", parts, 1, config={
            "segment.bytes": str(segment), "retention.ms": "-1", "remote.storage.enable": "true",
            "local.retention.bytes": "1"})])["many"].result(30)
        _produce(bs, ["many"], parts, total, _env("TIERED_BENCH_VALUE", 1024), _env("TIERED_BENCH_BATCH_KB", 16))
        ends = _wait_tiered(bs, root / "data", "many", parts)
        client = endpoint.client()
        objects = [(o["Key"], o["Size"]) for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=endpoint.bucket, Prefix=prefix) for o in page.get("Contents", []) if o["Key"].endswith(".log")]
        raw = sum(size for _, size in objects)

        def cpu() -> float:  # the broker process's CPU seconds (user + system)
            return cpu_seconds(broker.proc.pid)

        def raw_parallel() -> float:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(READER_THREADS) as pool:
                got = sum(pool.map(lambda k: len(client.get_object(Bucket=endpoint.bucket, Key=k)["Body"].read()),
                                   [k for k, _ in objects]))
            assert got == raw, (got, raw)
            return time.perf_counter() - t0

        budgets = [int(b) for b in os.environ.get("REMOTE_PARTS_BENCH_READ_AHEAD_MB", "128").split(",")]

        node = str(next(iter(admin.list_topics(timeout=10).brokers)))

        def read_ahead(mib: int) -> None:
            res = ConfigResource(ConfigResource.Type.BROKER, node, incremental_configs=[ConfigEntry(
                "remote.log.reader.read.ahead.max.bytes", str(mib * MIB),
                incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([res])[res].result(30)

        runs: dict[str, list[tuple[float, float]]] = {"raw": [], **{f"kcat {b}": [] for b in budgets}}
        for _ in range(_env("REMOTE_PARTS_BENCH_RUNS", 2)):
            for name in runs:
                if name != "raw":
                    read_ahead(int(name.split()[1]))
                c0 = cpu()
                t = raw_parallel() if name == "raw" else _kcat(bs, "many", ends)
                runs[name].append((t, cpu() - c0))
        t_raw = min(runs["raw"])[0]
        mb = raw / MIB
        print(f"{parts} partitions, {len(objects)} remote segment objects, {mb:.0f} MiB")
        print(f"raw GETs, {READER_THREADS} threads          : {mb / t_raw:8.1f} MiB/s ({t_raw:6.2f} s)")
        for b in budgets:
            t_kcat, c_kcat = min(runs[f"kcat {b}"])
            print(f"catch-up, a kcat per partition, read-ahead bound {b} MiB: {mb / t_kcat:8.1f} MiB/s "
                  f"({t_kcat:6.2f} s)   broker CPU {c_kcat * 1000 / mb:5.2f} ms/MiB   RATIO to raw {t_raw / t_kcat:5.2f}")
        print("  (all runs, s: " + "; ".join(f"{k} " + " ".join(f"{t:.2f}" for t, _ in v) for k, v in runs.items())
              + ")")
        t_kcat = min(runs[f"kcat {budgets[0]}"])[0]
        print(f"RATIO catch-up/raw parallel GETs: {t_raw / t_kcat:5.2f}   (target >= 0.8; read-ahead bound {budgets[0]} MiB)")
    finally:
        rc = broker.stop()
        if rc not in (0, None):
            print(f"broker exit code {rc}:\n{broker.log_text()[-3000:]}")
        if endpoint._stop is not None:
            endpoint._stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
