"""Helpers of the RLM unit tests: the ``tiered_log`` fixture (a partition whose rolled segments are all
remote, with an RLM over it) and ``catch_up``, reading the remote part through the RLM in chunks."""

from __future__ import annotations

import uuid

import pytest
from helpers import Logs

from tieredlog.records.batch import iter_headers
from tieredlog.records.record import build_batch
from tieredlog.rsm.local import LocalTieredStorage


@pytest.fixture
def tiered_log(tmp_path, request):
    """A partition whose rolled segments are all remote (LocalTieredStorage), with an RLM over it;
    a test's ``rlm_config`` marker gives the RLM's config fields."""
    from tieredlog.log.config import LogConfig
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.rlm.config import RemoteLogManagerConfig
    from tieredlog.rlm.manager import RemoteLogManager
    from tieredlog.rlm.partition_state import PartitionState
    from tieredlog.rlm.pool import TaskContext
    from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager

    cfg = LogConfig(segment_bytes=24 * 1024, index_interval_bytes=256, remote_storage_enable=True, retention_ms=-1,
                    local_retention_bytes=1, file_delete_delay_ms=0, message_timestamp_after_max_ms=1 << 62,
                    message_timestamp_before_max_ms=1 << 62)
    plog = UnifiedLog(tmp_path / "logs" / "t-0", cfg, topic_id=uuid.uuid4())
    for i in range(300):
        off = plog.log_end_offset
        n = 40 if i == 77 else 1 + i % 4  # batch 77 is far larger than the fetch size used below
        recs = [(b"k%d" % (off + j), b"value-%d-" % (off + j) * 8, [], 1_000_000 + off + j) for j in range(n)]
        plog.append_as_leader(build_batch(recs), 0)
    plog.update_high_watermark(plog.log_end_offset)
    originals = {s.base_offset: s.log_path.read_bytes() for s in plog.segments}
    rsm = LocalTieredStorage(tmp_path / "remote")
    rsm.configure({"broker.id": 0})
    events: list = []
    rsm.add_listener(events.append)
    marker = request.node.get_closest_marker("rlm_config")
    cfg = RemoteLogManagerConfig(log_dirs=(str(tmp_path / "logs"),), reader_threads=2, reader_max_pending_tasks=16,
                                 **(marker.kwargs if marker else {}))
    rlm = RemoteLogManager(cfg, Logs(plog), rsm, InMemoryRemoteLogMetadataManager())
    rlm.start()
    rlm.copy_task(PartitionState(plog.topic_partition, rlm._tip(plog.topic_partition, plog))).run(TaskContext())
    plog.delete_old_segments()
    start = plog.local_log_start_offset
    remote_bytes = b"".join(v for k, v in sorted(originals.items()) if k < start)
    assert len([k for k in originals if k < start]) >= 3  # the tests need several remote segments
    try:
        yield plog, rlm, events, remote_bytes
    finally:
        rlm.shutdown()


def catch_up(rlm, plog, max_bytes: int, check=None) -> bytes:
    out = bytearray()
    offset = 0
    while offset < plog.local_log_start_offset:
        chunk = rlm.read(plog.topic_partition, offset, max_bytes, timeout=10)
        hdrs = [h for _, h in iter_headers(chunk)]
        assert hdrs and sum(h.size for h in hdrs) == len(chunk)  # whole batches only
        assert hdrs[0].base_offset <= offset <= hdrs[0].last_offset or hdrs[0].base_offset >= offset
        assert len(chunk) <= max_bytes or len(hdrs) == 1  # max_bytes, or one (larger) batch
        if check:
            check()
        out += chunk
        offset = hdrs[-1].next_offset
    return bytes(out)
