"""DescribeLogDirs (35), answered as a Kafka broker does.

One result per configured log dir, with the partitions this broker keeps there: local bytes (the
remote tier is not counted; Kafka's schema has no field for it, see docs/tiered-storage.md),
offset lag and ``is_future_key`` (always false: there is no AlterReplicaLogDirs). From v4 the
volume's total and usable bytes, read with ``statvfs`` on a worker thread since it can wait on the
disk. Kafka 4 removed v0 (KIP-896) and kio has no schema for it, so the range starts at v1.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from kio.schema.errors import ErrorCode

from tieredlog.protocol.api import DESCRIBE_LOG_DIRS
from tieredlog.server.context import Handler, RequestContext

if TYPE_CHECKING:
    from tieredlog.log.log_manager import LogManager
    from tieredlog.server.admin_requests import KioDescribeLogDirsRequest


class LogDirServer(Protocol):
    """What DescribeLogDirs needs of the broker."""

    @property
    def log_dirs(self) -> Sequence[Path]: ...

    @property
    def log_manager(self) -> LogManager | None: ...


def _volume_bytes(log_dirs: list[Path]) -> dict[Path, tuple[int, int] | None]:
    out: dict[Path, tuple[int, int] | None] = {}
    for d in log_dirs:
        try:
            st = os.statvfs(d)
        except OSError:
            out[d] = None  # an unreadable dir is reported offline, as Kafka does
            continue
        out[d] = (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)
    return out


def _partition_index(p: dict[str, Any]) -> int:
    return int(p["partition_index"])


def _requested(req: KioDescribeLogDirsRequest) -> dict[str, set[int]] | None:
    if req.topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for t in req.topics:
        wanted.setdefault(t.topic, set()).update(t.partitions)
    return wanted


async def handle_describe_log_dirs(ctx: RequestContext[LogDirServer], req: KioDescribeLogDirsRequest) -> dict:
    broker = ctx.broker
    log_dirs = list(broker.log_dirs)
    # the volume figures are only sent from v4, but statvfs is also how a dir is found unreadable
    volumes = await asyncio.to_thread(_volume_bytes, log_dirs)
    wanted = _requested(req)
    by_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {d: {} for d in log_dirs}
    for plog in broker.log_manager.all_logs() if broker.log_manager is not None else ():
        tp = plog.topic_partition
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        topics = by_dir.get(plog.dir.parent)
        if topics is None:
            continue
        # Kafka's lag of the current log: how far its end is behind the high watermark it knows
        # (a leader's end is never behind; a follower's may be, by what it has yet to fetch)
        lag = max(plog.high_watermark - plog.log_end_offset, 0)
        topics.setdefault(tp.topic, []).append({
            "partition_index": tp.partition,
            "partition_size": plog.size,
            "offset_lag": lag,
            "is_future_key": False,
        })
    results: list[dict[str, Any]] = []
    for d in log_dirs:
        vol = volumes.get(d)
        if vol is None:
            results.append({"error_code": ErrorCode.kafka_storage_error, "log_dir": os.path.abspath(d), "topics": []})
            continue
        results.append({
            "error_code": ErrorCode.none,
            "log_dir": os.path.abspath(d),
            "topics": [{"name": name, "partitions": sorted(parts, key=_partition_index)}
                       for name, parts in sorted(by_dir[d].items())],
            "total_bytes": vol[0],
            "usable_bytes": vol[1],
        })
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": results}


def handlers() -> dict[int, Handler[LogDirServer]]:
    return {DESCRIBE_LOG_DIRS: handle_describe_log_dirs}
