"""A Fetch's file regions sent over loopback: sendfile beside read + write, in one run.

    python -m bench bench_loopback_send     # LOOPBACK_BENCH_MB (default 512), LOOPBACK_BENCH_RUNS (default 3)

The broker's own send path (``Connection._send_raw`` on its event loop, uvloop where installed) sends
LOOPBACK_BENCH_MB of a segment file that is in the page cache, one response per region, to a receiver
in another process on 127.0.0.1 that asks for each one once it has read the one before, as a consumer
of one partition does (one fetch in flight). Two settings of the same
connection, alternated, best of LOOPBACK_BENCH_RUNS each:

- sendfile: what a connection from another host gets (regions over 64 KiB probed, then sendfile);
- read + write: what a loopback peer gets (a region up to 1 MiB read with one RWF_NOWAIT preadv, then
  written).

Printed for 1 MiB and 512 KiB regions, with a receiver reading 16 KiB at most at a time (as data
arrives) and one reading up to a whole response at a time: the sender's and the receiver's CPU per
MiB, the rate, and read + write over sendfile. Which of the two costs the sender less depends on how
the receiver reads; the broker's choice was measured with librdkafka consumers against the broker
(docs/operations.md).

Then the same for bytes read from the remote tier, which are in memory already: written from memory
(what the broker does: a view of the read-ahead in a vectored write) beside the same bytes in a
memfd sent with sendfile (what a remote path that fetched into a memfd, or into a chunk file, would
do). The fetch costs one copy either way (the object store's socket into memory, or into the memfd's
pages); the send is what differs, and over loopback sendfile still copies.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tieredlog.server import event_loop  # noqa: E402
from tieredlog.server.file_regions import LOOPBACK_REGION, SMALL_REGION, OpenRegion  # noqa: E402
from tieredlog.server.network import Connection, RawResponse  # noqa: E402

MIB = 1024 * 1024
FILE_MB = 64

# A consumer of one partition: one request in flight, the next sent once the whole response is in,
# read CHUNK bytes at most at a time.
RECEIVER = """
import json, resource, socket, sys
port, size, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
CHUNK = int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", port))
buf = memoryview(bytearray(size))
got = 0
r0 = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(count):
    s.sendall(b"f")
    have = 0
    while have < size:
        n = s.recv_into(buf[have:have + CHUNK])
        if not n:
            break
        have += n
    got += have
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"bytes": got, "cpu": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime}))
"""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _send(path: Path | bytes, region: int, chunk: int, total: int, in_memory: int) -> dict[str, float]:
    """``path`` a file: its regions (the local log); bytes: views of them (remote read-ahead)."""
    accepted: asyncio.Future = asyncio.get_running_loop().create_future()

    async def on_accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result((reader, writer))

    server = await asyncio.start_server(on_accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    count = total // region
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port), str(region + 8), str(count), str(chunk)],
                                stdout=subprocess.PIPE, text=True)
    reader, writer = await accepted
    with ThreadPoolExecutor(4, thread_name_prefix="cold-read") as pool:
        stub = SimpleNamespace(broker=SimpleNamespace(config={"queued.max.requests": 16}), cold_reads=pool)
        conn = Connection(stub, reader, writer)  # type: ignore[arg-type]
        conn.in_memory_region = in_memory
        memory = memoryview(path) if isinstance(path, bytes) else None
        slots = (len(path) if isinstance(path, bytes) else os.path.getsize(path)) // region
        c0, t0 = _cpu(), time.perf_counter()
        for i in range(count):
            await reader.readexactly(1)  # the next request
            at = (i % slots) * region
            body = memory[at:at + region] if memory is not None else OpenRegion(open(path, "rb"), at, region)
            await conn._send_raw(RawResponse([b"head", body, b"tail"], region + 8))
        out, _ = await asyncio.get_running_loop().run_in_executor(None, receiver.communicate)
        seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    writer.close()
    server.close()
    got = json.loads(out)
    if got["bytes"] != count * (region + 8):
        raise RuntimeError(f"the receiver got {got['bytes']} of {count * (region + 8)} bytes")
    mib = count * region / MIB
    return {"sender": cpu * 1000 / mib, "receiver": got["cpu"] * 1000 / mib, "rate": mib / seconds}


def _memfd(data: bytes) -> Path:
    """A memfd holding ``data``, by a path that opens it again (each region opens its own file)."""
    fd = os.memfd_create("remote-chunk")
    os.write(fd, data)
    return Path(f"/proc/self/fd/{fd}")


def _compare(title: str, modes: list[tuple[str, Path | bytes, int]], total: int, runs: int) -> None:
    """Each mode ``(name, source, in_memory)`` per region size and receiver, best of ``runs``, and the
    second mode over the first."""
    print(title)
    for region, chunk in ((MIB, 16 * 1024), (MIB // 2, 16 * 1024), (MIB, MIB), (MIB // 2, MIB)):
        best: dict[str, dict[str, float]] = {}
        for _ in range(runs):
            for name, source, in_memory in modes:
                r = event_loop.run(_send(source, region, chunk, total, in_memory))
                if name not in best or r["sender"] < best[name]["sender"]:
                    best[name] = r
        what = f"{region // 1024:5d} KiB regions, receiver reads {chunk // 1024:4d} KiB at most"
        for name, r in best.items():
            print(f"  {what}, {name:<20} sender {r['sender']:.2f} ms/MiB, receiver {r['receiver']:.2f} ms/MiB, "
                  f"{r['rate']:5.0f} MiB/s")
        (first, a), (second, b) = best.items()
        print(f"  {what}, {second} / {first}: sender CPU x{b['sender'] / a['sender']:.2f}, "
              f"receiver CPU x{b['receiver'] / a['receiver']:.2f}, rate x{b['rate'] / a['rate']:.2f}")


def main() -> None:
    total = int(os.environ.get("LOOPBACK_BENCH_MB", "512")) * MIB
    runs = int(os.environ.get("LOOPBACK_BENCH_RUNS", "3"))
    with tempfile.TemporaryDirectory(prefix="bench-loopback-") as tmp:
        path = Path(tmp) / "00000000000000000000.log"
        data = os.urandom(FILE_MB * MIB)
        path.write_bytes(data)  # just written: in the page cache
        print(f"{total // MIB} MiB per run over 127.0.0.1, best of {runs} (lowest sender CPU)")
        _compare("local segment file regions:", [("sendfile", path, SMALL_REGION),
                                                  ("read + write", path, LOOPBACK_REGION)], total, runs)
        memfd = _memfd(data)
        _compare("remote-tier bytes in memory:", [("write from memory", data, SMALL_REGION),
                                                  ("memfd + sendfile", memfd, SMALL_REGION)], total, runs)


if __name__ == "__main__":
    main()
